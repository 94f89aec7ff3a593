// Tag matching (stack/engine/tag_matching.cc) between two engines on the in-memory link: an
// RC sender, a receiver on a tag-matching SRQ. Eager messages into the buffer their tag
// matches, in the order buffers were added; unexpected ones to a plain receive, matching off
// until software syncs; NO_TAG; rendezvous (the receiver READs the data, completes, sends FIN);
// the list operations and their errors; a message longer than the multi-packet boundary.
#include <gtest/gtest.h>

#include <endian.h>
#include <infiniband/tm_types.h>

#include <cstring>

#include "harness.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

struct TmPair {
  TmPair() {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 64;
    sa.attr.max_sge = 2;
    ibv_tm_cap cap{8, 16};
    srq = p.b.engine->create_srq(p.b.pd, &sa, nullptr, p.b.cq, &cap);
    EXPECT_NE(srq, nullptr);
    QpOptions ob;
    ob.srq = srq;
    ob.max_send_wr = 0;  // as MPI libraries make them: the device's own work needs no room
    auto q = p.rc_pair({}, ob);
    qa = q.first;
    qb = q.second;
    tx.resize(64 * 1024);
    rx.resize(64 * 1024);
    plain.resize(8 * 4096);
    txmr = p.a.reg(tx, kAll);
    rxmr = p.b.reg(rx, kAll);
    plainmr = p.b.reg(plain, kAll);
    for (uint64_t i = 0; i < 8; ++i) {
      ibv_sge s{reinterpret_cast<uint64_t>(plain.data() + i * 4096), 4096, plainmr->key};
      ibv_recv_wr w{};
      w.wr_id = 100 + i;
      w.sg_list = &s;
      w.num_sge = 1;
      EXPECT_EQ(p.b.engine->post_srq_recv(srq, &w, nullptr), 0);
    }
  }
  /// Adds a tagged buffer at rx[off, off + len): returns its handle (0 on failure).
  uint32_t add(uint64_t tag, uint64_t mask, uint64_t recv_wr_id, size_t off, uint32_t len,
               uint32_t unexpected = 0) {
    ibv_sge s{reinterpret_cast<uint64_t>(rx.data() + off), len, rxmr->key};
    ibv_ops_wr op{};
    op.wr_id = 7000 + recv_wr_id;
    op.opcode = IBV_WR_TAG_ADD;
    op.flags = IBV_OPS_SIGNALED;
    op.tm.unexpected_cnt = unexpected;
    op.tm.add.recv_wr_id = recv_wr_id;
    op.tm.add.sg_list = &s;
    op.tm.add.num_sge = 1;
    op.tm.add.tag = tag;
    op.tm.add.mask = mask;
    if (p.b.engine->post_srq_ops(srq, &op, nullptr) != 0) return 0;
    return op.tm.handle;
  }
  int sync(uint32_t count) {
    ibv_ops_wr op{};
    op.wr_id = 9999;
    op.opcode = IBV_WR_TAG_SYNC;
    op.flags = IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC;
    op.tm.unexpected_cnt = count;
    return p.b.engine->post_srq_ops(srq, &op, nullptr);
  }
  /// Sends a message from tx[0, len) whose first 16 bytes are a TM header (`op`, `tag`) and,
  /// for RNDV, the rendezvous header naming tx[4096, 4096 + rndv_len).
  void send(uint8_t op, uint64_t tag, uint32_t len, uint32_t rndv_len = 0) {
    for (uint32_t i = 0; i < len; ++i) tx[i] = static_cast<uint8_t>(i * 3 + tag);
    std::memset(tx.data(), 0, 16);
    tx[0] = op;
    const uint64_t be = htobe64(tag);
    std::memcpy(tx.data() + 8, &be, 8);
    if (op == IBV_TMH_RNDV) {
      const uint64_t va = htobe64(reinterpret_cast<uint64_t>(tx.data() + 4096));
      const uint32_t rkey = htobe32(txmr->key), l = htobe32(rndv_len);
      std::memcpy(tx.data() + 16, &va, 8);
      std::memcpy(tx.data() + 24, &rkey, 4);
      std::memcpy(tx.data() + 28, &l, 4);
      for (uint32_t i = 0; i < rndv_len; ++i) tx[4096 + i] = static_cast<uint8_t>(i * 7 + 1);
    }
    ibv_sge s{reinterpret_cast<uint64_t>(tx.data()), len, txmr->key};
    ibv_send_wr w{};
    w.wr_id = tag;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  }
  /// Runs until B has `n` completions (and A's work is done); returns B's, with their tags.
  std::vector<std::pair<ibv_wc, uint64_t>> run(size_t n) {
    std::vector<std::pair<ibv_wc, uint64_t>> got;
    EXPECT_TRUE(p.run_until([&] {
      ibv_wc wc;
      while (p.b.engine->poll_cq(p.b.cq, 1, &wc) == 1) got.push_back({wc, p.b.cq->polled_tag});
      for (auto& x : drain(p.a)) a_done.push_back(x);
      return got.size() >= n;
    }));
    p.run_until([] { return false; }, 1'000'000);  // whatever else would come: nothing must
    ibv_wc wc;
    while (p.b.engine->poll_cq(p.b.cq, 1, &wc) == 1) got.push_back({wc, p.b.cq->polled_tag});
    for (auto& x : drain(p.a)) a_done.push_back(x);
    EXPECT_EQ(got.size(), n);
    return got;
  }
  Pair p;
  Srq* srq = nullptr;
  Qp* qa = nullptr;
  Qp* qb = nullptr;
  std::vector<uint8_t> tx, rx, plain;
  mem::Mr *txmr = nullptr, *rxmr = nullptr, *plainmr = nullptr;
  std::vector<ibv_wc> a_done;
};

TEST(TagMatching, EagerMessagesLandBehindTheirHeaderInTheOldestMatchingBuffer) {
  TmPair t;
  ASSERT_NE(t.add(5, 0xFFFF, 1, 0, 8192), 0u);
  ASSERT_NE(t.add(0x10005, 0xFFFF, 2, 8192, 8192), 0u);  // the same tag under the mask, later
  auto adds = t.run(2);
  EXPECT_EQ(adds[0].first.opcode, IBV_WC_TM_ADD);
  EXPECT_EQ(adds[0].first.wr_id, 7001u);
  // 3000 bytes: three packets at MTU 1024; the header is in the first.
  t.send(IBV_TMH_EAGER, 0x20005, 3000);
  auto got = t.run(1);
  const ibv_wc& wc = got[0].first;
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.wr_id, 1u);  // the buffer added first
  EXPECT_EQ(wc.wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID),
            unsigned{IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID});
  EXPECT_EQ(got[0].second, 0x20005u);
  EXPECT_EQ(wc.byte_len, 3000u - 16);
  EXPECT_EQ(0, std::memcmp(t.rx.data(), t.tx.data() + 16, 3000 - 16));
  // The next one with that tag finds the second buffer; the first is used up.
  t.send(IBV_TMH_EAGER, 5, 100);
  got = t.run(1);
  EXPECT_EQ(got[0].first.wr_id, 2u);
  EXPECT_EQ(0, std::memcmp(t.rx.data() + 8192, t.tx.data() + 16, 100 - 16));
  EXPECT_EQ(t.p.b.engine->counters()[Counter::tm_matched], 2u);
}

TEST(TagMatching, AnUnexpectedMessageGoesWholeToAPlainReceiveAndMatchingWaitsForTheSync) {
  TmPair t;
  ASSERT_NE(t.add(1, ~0ull, 1, 0, 4096), 0u);
  t.run(1);
  t.send(IBV_TMH_EAGER, 2, 200);  // no buffer for tag 2
  auto got = t.run(1);
  EXPECT_EQ(got[0].first.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(got[0].first.wr_id, 100u);  // the first plain receive
  EXPECT_EQ(got[0].first.wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), 0u);
  EXPECT_EQ(got[0].first.byte_len, 200u);
  EXPECT_EQ(0, std::memcmp(t.plain.data(), t.tx.data(), 200));  // header and all
  // Tag 1 has a buffer, but software has not seen the unexpected one yet: plain receive too.
  t.send(IBV_TMH_EAGER, 1, 64);
  got = t.run(1);
  EXPECT_EQ(got[0].first.wr_id, 101u);
  EXPECT_EQ(t.p.b.engine->counters()[Counter::tm_unexpected], 2u);
  // A buffer added now is told that matching waits for a sync.
  ASSERT_NE(t.add(3, ~0ull, 3, 4096, 64), 0u);
  got = t.run(1);
  EXPECT_EQ(got[0].first.opcode, IBV_WC_TM_ADD);
  EXPECT_TRUE(got[0].first.wc_flags & IBV_WC_TM_SYNC_REQ);
  // Software catches up with both: tag 1 matches its buffer again.
  ASSERT_EQ(t.sync(2), 0);
  got = t.run(1);
  EXPECT_EQ(got[0].first.opcode, IBV_WC_TM_SYNC);
  EXPECT_EQ(got[0].first.wr_id, 9999u);
  t.send(IBV_TMH_EAGER, 1, 64);
  got = t.run(1);
  EXPECT_EQ(got[0].first.wr_id, 1u);
  EXPECT_TRUE(got[0].first.wc_flags & IBV_WC_TM_MATCH);
  // NO_TAG: a plain receive, whole, and not unexpected.
  t.send(IBV_TMH_NO_TAG, 0, 80);
  got = t.run(1);
  EXPECT_EQ(got[0].first.opcode, IBV_WC_TM_NO_TAG);
  EXPECT_EQ(got[0].first.byte_len, 80u);
  EXPECT_EQ(t.p.b.engine->counters()[Counter::tm_unexpected], 2u);
}

TEST(TagMatching, RendezvousReadsTheSendersDataThenCompletesAndSendsFin) {
  TmPair t;
  // A's receive for the FIN.
  std::vector<uint8_t> fin(64, 0xEE);
  auto* finmr = t.p.a.reg(fin, kAll);
  ibv_sge fs{reinterpret_cast<uint64_t>(fin.data()), 64, finmr->key};
  ibv_recv_wr fw{};
  fw.wr_id = 555;
  fw.sg_list = &fs;
  fw.num_sge = 1;
  ASSERT_EQ(t.p.a.engine->post_recv(t.qa, &fw, nullptr), 0);
  ASSERT_NE(t.add(42, ~0ull, 3, 0, 20000), 0u);
  t.run(1);
  t.send(IBV_TMH_RNDV, 42, 64, 12345);  // 12345 bytes to READ (13 response packets)
  auto got = t.run(2);
  EXPECT_EQ(got[0].first.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(got[0].first.wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), unsigned{IBV_WC_TM_MATCH});
  EXPECT_EQ(got[0].second, 42u);
  EXPECT_EQ(got[1].first.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(got[1].first.status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[1].first.wr_id, 3u);
  EXPECT_EQ(got[1].first.wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), unsigned{IBV_WC_TM_DATA_VALID});
  EXPECT_EQ(got[1].first.byte_len, 12345u);
  EXPECT_EQ(0, std::memcmp(t.rx.data(), t.tx.data() + 4096, 12345));
  // A: its SEND, and the FIN in its receive (a TM header with opcode FIN and the tag).
  ASSERT_EQ(t.a_done.size(), 2u);
  const ibv_wc& r = t.a_done[0].opcode == IBV_WC_RECV ? t.a_done[0] : t.a_done[1];
  EXPECT_EQ(r.opcode, IBV_WC_RECV);
  EXPECT_EQ(r.wr_id, 555u);
  EXPECT_EQ(r.byte_len, 16u);
  EXPECT_EQ(fin[0], IBV_TMH_FIN);
  uint64_t be;
  std::memcpy(&be, fin.data() + 8, 8);
  EXPECT_EQ(be64toh(be), 42u);
  // The device's own READ and FIN took no room the application was given (max_send_wr 0)
  // and left no completion on B's send side.
  EXPECT_TRUE(t.qb->sq.empty());
}

TEST(TagMatching, ListOperationsRefuseWhatTheyCannotDo) {
  TmPair t;
  std::vector<uint32_t> handles;
  for (uint64_t i = 0; i < 8; ++i) handles.push_back(t.add(i, ~0ull, i, i * 1024, 1024));
  for (uint32_t h : handles) EXPECT_NE(h, 0u);
  EXPECT_EQ(t.add(99, ~0ull, 99, 0, 16), 0u);  // max_num_tags (8) in the list: ENOMEM
  ibv_ops_wr del{};
  del.wr_id = 1;
  del.opcode = IBV_WR_TAG_DEL;
  del.flags = IBV_OPS_SIGNALED;
  del.tm.handle = handles[3];
  ASSERT_EQ(t.p.b.engine->post_srq_ops(t.srq, &del, nullptr), 0);
  // Deleted already: the operation completes in error (IBV_WC_TM_ERR), as for a buffer a
  // message consumed.
  ASSERT_EQ(t.p.b.engine->post_srq_ops(t.srq, &del, nullptr), 0);
  ibv_ops_wr* bad = nullptr;
  const uint32_t stale = handles[3];
  del.tm.handle = 0;  // no buffer ever had it
  EXPECT_EQ(t.p.b.engine->post_srq_ops(t.srq, &del, &bad), EINVAL);
  EXPECT_EQ(bad, &del);
  const uint32_t again = t.add(99, ~0ull, 99, 0, 16);  // room again: the same slot
  EXPECT_NE(again, 0u);
  EXPECT_NE(again, stale);
  del.tm.handle = stale;  // the slot's earlier buffer: refused, the new one stays
  EXPECT_EQ(t.p.b.engine->post_srq_ops(t.srq, &del, nullptr), EINVAL);
  ibv_sge three[3] = {};
  ibv_ops_wr add{};
  add.opcode = IBV_WR_TAG_ADD;
  add.tm.add.sg_list = three;
  add.tm.add.num_sge = 3;  // the SRQ takes 2
  EXPECT_EQ(t.p.b.engine->post_srq_ops(t.srq, &add, nullptr), EINVAL);
  // A plain SRQ has no list.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  Srq* basic = t.p.b.engine->create_srq(t.p.b.pd, &sa);
  ASSERT_NE(basic, nullptr);
  EXPECT_EQ(t.p.b.engine->post_srq_ops(basic, &del, nullptr), EINVAL);
  // The new buffer (tag 99) is the one a message finds; a DEL of it afterwards: TM_ERR.
  t.send(IBV_TMH_EAGER, 99, 40);
  // 8 ADDs, a DEL, a DEL in error, an ADD, the message: their completions, in order.
  auto got = t.run(12);
  EXPECT_EQ(got[8].first.opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(got[8].first.status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[9].first.opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(got[9].first.status, IBV_WC_TM_ERR);
  EXPECT_EQ(got[10].first.opcode, IBV_WC_TM_ADD);
  EXPECT_EQ(got[11].first.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(got[11].first.wr_id, 99u);
  del.tm.handle = again;
  ASSERT_EQ(t.p.b.engine->post_srq_ops(t.srq, &del, nullptr), 0);
  got = t.run(1);
  EXPECT_EQ(got[0].first.status, IBV_WC_TM_ERR);  // the message consumed it
}

}  // namespace
}  // namespace uroce::test

// End to end between two engines over a clean in-memory link: each RC operation once.
#include <gtest/gtest.h>

#include <numeric>

#include "harness.h"

namespace uroce::test {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

TEST(RcBasic, SendOfFourPacketsArrivesWhole) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  auto src = pattern(4000, 1);
  std::vector<uint8_t> dst(4096, 0xEE);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  ibv_sge rs{reinterpret_cast<uint64_t>(dst.data()), 4096, dmr->key};
  ibv_recv_wr rwr{};
  rwr.wr_id = 77;
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ASSERT_EQ(p.b.engine->post_recv(qb, &rwr, nullptr), 0);
  ibv_sge ss{reinterpret_cast<uint64_t>(src.data()), 4000, smr->key};
  ibv_send_wr swr{};
  swr.wr_id = 5;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND_WITH_IMM;
  swr.imm_data = 0x12345678;
  swr.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(p.a.engine->post_send(qa, &swr, nullptr), 0);

  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& w : drain(p.a)) wa.push_back(w);
    for (auto& w : drain(p.b)) wb.push_back(w);
    return wa.size() == 1 && wb.size() == 1;
  }));
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wa[0].wr_id, 5u);
  EXPECT_EQ(wa[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].wr_id, 77u);
  EXPECT_EQ(wb[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(wb[0].byte_len, 4000u);
  EXPECT_TRUE(wb[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wb[0].imm_data, 0x12345678u);
  EXPECT_EQ(wb[0].src_qp, qa->qpn);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin()));
  EXPECT_EQ(dst[4000], 0xEE);  // nothing written past the message
  EXPECT_EQ(p.a.engine->counters()[Counter::retransmitted_pkts], 0u);
}

TEST(RcBasic, WriteReadAndAtomics) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  auto local = pattern(10000, 3);
  std::vector<uint8_t> remote(10000, 0);
  std::vector<uint8_t> back(10000, 0);
  std::vector<uint8_t> atom(16, 0);
  auto* lmr = p.a.reg(local, kAll);
  auto* bmr = p.a.reg(back, kAll);
  auto* amr = p.a.reg(atom, kAll);
  auto* rmr = p.b.reg(remote, kAll);
  uint64_t target = 0;
  std::vector<uint8_t> tbuf(8);
  auto* tmr = p.b.engine->reg_mr(p.b.pd, &target, 8, kAll);
  ASSERT_NE(tmr, nullptr);

  ibv_sge s1{reinterpret_cast<uint64_t>(local.data()), 10000, lmr->key};
  ibv_send_wr w1{};
  w1.wr_id = 1;
  w1.sg_list = &s1;
  w1.num_sge = 1;
  w1.opcode = IBV_WR_RDMA_WRITE;
  w1.send_flags = IBV_SEND_SIGNALED;
  w1.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote.data());
  w1.wr.rdma.rkey = rmr->key;

  ibv_sge s2{reinterpret_cast<uint64_t>(back.data()), 10000, bmr->key};
  ibv_send_wr w2{};
  w2.wr_id = 2;
  w2.sg_list = &s2;
  w2.num_sge = 1;
  w2.opcode = IBV_WR_RDMA_READ;
  w2.send_flags = IBV_SEND_SIGNALED;
  w2.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(remote.data());
  w2.wr.rdma.rkey = rmr->key;
  w1.next = &w2;

  ibv_sge s3{reinterpret_cast<uint64_t>(atom.data()), 8, amr->key};
  ibv_send_wr w3{};
  w3.wr_id = 3;
  w3.sg_list = &s3;
  w3.num_sge = 1;
  w3.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  w3.send_flags = IBV_SEND_SIGNALED;
  w3.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(&target);
  w3.wr.atomic.rkey = tmr->key;
  w3.wr.atomic.compare_add = 5;
  w2.next = &w3;

  ibv_sge s4{reinterpret_cast<uint64_t>(atom.data() + 8), 8, amr->key};
  ibv_send_wr w4{};
  w4.wr_id = 4;
  w4.sg_list = &s4;
  w4.num_sge = 1;
  w4.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  w4.send_flags = IBV_SEND_SIGNALED;
  w4.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(&target);
  w4.wr.atomic.rkey = tmr->key;
  w4.wr.atomic.compare_add = 5;
  w4.wr.atomic.swap = 42;
  w3.next = &w4;

  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  std::vector<ibv_wc> wa;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& w : drain(p.a)) wa.push_back(w);
    return wa.size() == 4;
  }));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wa[i].status, IBV_WC_SUCCESS) << i;
    EXPECT_EQ(wa[i].wr_id, i + 1);
  }
  EXPECT_EQ(wa[1].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wa[2].opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(wa[3].opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(remote, local);
  EXPECT_EQ(back, local);
  uint64_t fadd_orig, cas_orig;
  std::memcpy(&fadd_orig, atom.data(), 8);
  std::memcpy(&cas_orig, atom.data() + 8, 8);
  EXPECT_EQ(fadd_orig, 0u);
  EXPECT_EQ(cas_orig, 5u);
  EXPECT_EQ(target, 42u);
  EXPECT_EQ(p.b.engine->counters()[Counter::dup_requests], 0u);
}

TEST(RcBasic, SendWithInvalidateNeverTouchesAPlainMr) {
  // Issue 11, finding 2: SEND with invalidate used to destroy whatever ibv_reg_mr MR its key
  // named. Only memory windows and fast-registration MRs may be invalidated; uroce has none,
  // so the request is invalid: NAK (the sender sees REM_INV_REQ_ERR), the receive completes
  // in error, and the named MR keeps working and is the application's to deregister.
  Pair p;
  auto [qa, qb] = p.rc_pair();
  std::vector<uint8_t> src(100, 3), dst(100, 0), victim(64, 0);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  auto* vmr = p.b.reg(victim, kAll);
  const uint32_t vkey = vmr->key;
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 100, dmr->key};
  ibv_recv_wr rw{};
  rw.wr_id = 1;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 100, smr->key};
  ibv_send_wr w{};
  w.wr_id = 7;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND_WITH_INV;
  w.invalidate_rkey = vkey;
  w.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return !wa.empty() && !wb.empty();
  }));
  EXPECT_EQ(wa[0].wr_id, 7u);
  EXPECT_EQ(wa[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(wb[0].wr_id, 1u);
  EXPECT_NE(wb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.b.engine->counters()[Counter::inv_rkey_refused], 1u);
  // The MR is untouched: its key still grants access, and the application deregisters it.
  uint8_t* host = nullptr;
  EXPECT_EQ(p.b.engine->mr_table().check(vkey, p.b.pd,
                                         reinterpret_cast<uint64_t>(victim.data()), 64,
                                         IBV_ACCESS_REMOTE_WRITE, &host),
            mem::AccessError::kOk);
  EXPECT_EQ(host, victim.data());
  // And a new registration does not get its slot or key.
  auto* next = p.b.reg(src, kAll);
  ASSERT_NE(next, nullptr);
  EXPECT_NE(next->key, vkey);
  EXPECT_NE(next, vmr);
  EXPECT_EQ(p.b.engine->dereg_mr(vmr), 0);
  EXPECT_EQ(p.b.engine->dereg_mr(next), 0);
}

TEST(RcBasic, AtomicWriteStoresEightBytes) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  uint64_t value = 0x1122334455667788ull;
  uint64_t target = 0;
  auto* smr = p.a.engine->reg_mr(p.a.pd, &value, 8, kAll);
  auto* tmr = p.b.engine->reg_mr(p.b.pd, &target, 8, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(&value), 8, smr->key};
  ibv_send_wr w{};
  w.wr_id = 11;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_ATOMIC_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(&target);
  w.wr.rdma.rkey = tmr->key;
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  std::vector<ibv_wc> wa;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    return !wa.empty();
  }));
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wa[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(target, value);
}

/// A FLUSH posted as ibv_wr_flush posts it.
int post_flush(Engine& e, Qp* qp, uint64_t wr_id, uint64_t va, uint32_t rkey, uint32_t len,
               uint8_t type, uint8_t level) {
  return e.post_flush(qp, {wr_id, va, rkey, len, type, level});
}

TEST(RcBasic, FlushAfterAWriteCompletesAsAFlushOnTheRequester) {
  // The requester sends RC FLUSH (FETH + RETH, no payload), one PSN, from a READ/atomic
  // credit; the READ RESPONSE ONLY without data completes it as IBV_WC_FLUSH.
  Pair p;
  QpOptions ob;
  ob.access |= UROCE_ACCESS_FLUSH_GLOBAL;
  auto [qa, qb] = p.rc_pair({}, ob);
  std::vector<uint8_t> src(256, 0x3C), dst(4096, 0);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll | UROCE_ACCESS_FLUSH_GLOBAL);
  ASSERT_TRUE(smr && dmr);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 256, smr->key};
  ibv_send_wr w{};
  w.wr_id = 1;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data());
  w.wr.rdma.rkey = dmr->key;
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  ASSERT_EQ(post_flush(*p.a.engine, qa, 2, reinterpret_cast<uint64_t>(dst.data()), dmr->key, 256,
                       UROCE_FLUSH_GLOBAL, UROCE_FLUSH_RANGE),
            0);
  // Not one ibv_post_send can ask for: its ibv_send_wr has no placement type.
  w.opcode = static_cast<ibv_wr_opcode>(UROCE_WR_FLUSH);
  w.num_sge = 0;
  EXPECT_EQ(p.a.engine->post_send(qa, &w, nullptr), EINVAL);
  std::vector<ibv_wc> wa;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    return !wa.empty();
  }));
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 2u);
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(static_cast<int>(wa[0].opcode), UROCE_WC_FLUSH);
  EXPECT_EQ(dst[255], 0x3C);
  EXPECT_EQ(p.b.engine->counters()[Counter::flushes], 1u);
  // The QP at the other end lacks the right to a persistence FLUSH: an invalid request.
  ASSERT_EQ(post_flush(*p.a.engine, qa, 3, reinterpret_cast<uint64_t>(dst.data()), dmr->key, 256,
                       UROCE_FLUSH_PERSISTENT, UROCE_FLUSH_RANGE),
            0);
  wa.clear();
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    return !wa.empty();
  }));
  EXPECT_EQ(wa[0].wr_id, 3u);
  EXPECT_EQ(wa[0].status, IBV_WC_REM_INV_REQ_ERR);
}

}  // namespace
}  // namespace uroce::test

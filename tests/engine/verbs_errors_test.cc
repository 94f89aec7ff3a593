// Verbs error paths and control-path behaviour: what ibv_post_send(3), ibv_post_recv(3),
// ibv_dealloc_pd(3), ibv_destroy_cq(3), ibv_create_srq(3) and ibv_modify_srq(3) refuse, and
// the asynchronous events (CQ overrun, SRQ limit, SQ drained) and completion signalling
// rules a verbs program relies on. End-to-end cases run two engines over the in-memory link.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <vector>

#include "harness.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

ibv_send_wr send_wr(uint64_t id, ibv_sge* sge, int nsge = 1,
                    unsigned flags = IBV_SEND_SIGNALED) {
  ibv_send_wr w{};
  w.wr_id = id;
  w.sg_list = sge;
  w.num_sge = nsge;
  w.opcode = IBV_WR_SEND;
  w.send_flags = flags;
  return w;
}

ibv_recv_wr recv_wr(uint64_t id, ibv_sge* sge, int nsge = 1) {
  ibv_recv_wr w{};
  w.wr_id = id;
  w.sg_list = sge;
  w.num_sge = nsge;
  return w;
}

std::vector<AsyncEvent> events(Engine& e) {
  std::vector<AsyncEvent> out;
  AsyncEvent ev{};
  while (e.pop_async_event(&ev)) out.push_back(ev);
  return out;
}

/// A QP with its own CQs / SRQ (make_qp uses the side's shared CQ).
Qp* qp_with(Side& s, ibv_qp_type type, Cq* scq, Cq* rcq, Srq* srq = nullptr,
            ibv_qp_cap cap = {16, 16, 4, 4, 64}, int sig_all = 0) {
  ibv_qp_init_attr ia{};
  ia.send_cq = &scq->ibv;
  ia.recv_cq = &rcq->ibv;
  ia.srq = srq != nullptr ? &srq->ibv : nullptr;
  ia.qp_type = type;
  ia.cap = cap;
  ia.sq_sig_all = sig_all;
  return s.engine->create_qp(s.pd, &ia);
}

int to_state(Engine& e, Qp* qp, ibv_qp_state s) {
  ibv_qp_attr a{};
  a.qp_state = s;
  return e.modify_qp(qp, &a, IBV_QP_STATE);
}

/// Source and destination buffers, registered on A and B.
struct Buffers {
  Buffers(Pair& p, size_t n) : src(n), dst(n * 8, 0) {
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 31 + 7);
    smr = p.a.reg(src, kAll);
    dmr = p.b.reg(dst, kAll);
  }
  ibv_sge s(uint32_t off, uint32_t len) {
    return {reinterpret_cast<uint64_t>(src.data()) + off, len, smr->key};
  }
  ibv_sge d(size_t slot, uint32_t len) {
    return {reinterpret_cast<uint64_t>(dst.data() + slot * src.size()), len, dmr->key};
  }
  std::vector<uint8_t> src, dst;
  mem::Mr* smr = nullptr;
  mem::Mr* dmr = nullptr;
};

/// Posts `n` receives of `len` bytes on qb (slots 0..n-1 of the destination buffer).
void post_recvs(Pair& p, Qp* qb, Buffers& b, int n, uint32_t len) {
  for (int i = 0; i < n; ++i) {
    ibv_sge r = b.d(static_cast<size_t>(i), len);
    ibv_recv_wr w = recv_wr(100 + static_cast<uint64_t>(i), &r);
    ASSERT_EQ(p.b.engine->post_recv(qb, &w, nullptr), 0);
  }
}

/// Runs the pair for `ns` of simulated time collecting completions on both sides.
void run_for(Pair& p, uint64_t ns, std::vector<ibv_wc>* wa, std::vector<ibv_wc>* wb) {
  p.run_until(
      [&] {
        for (auto& w : drain(p.a)) wa->push_back(w);
        for (auto& w : drain(p.b)) wb->push_back(w);
        return false;
      },
      ns);
}

// ---- post_send -----------------------------------------------------------------------------

TEST(PostSend, BeforeRtsIsEinvalAndNamesTheFirstWr) {
  Pair p;
  Buffers b(p, 64);
  Qp* qa = make_qp(p.a, {});
  ibv_sge s = b.s(0, 64);
  ibv_send_wr w1 = send_wr(1, &s), w2 = send_wr(2, &s);
  w1.next = &w2;
  // RESET, then INIT, then RTR: the send queue does not accept work yet.
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    const ibv_send_wr* bad = nullptr;
    EXPECT_EQ(p.a.engine->post_send(qa, &w1, &bad), EINVAL);
    EXPECT_EQ(bad, &w1);
    ibv_qp_attr a{};
    if (step == 0) {
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      ASSERT_EQ(p.a.engine->modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                  IBV_QP_ACCESS_FLAGS),
                0);
    } else if (step == 1) {
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = 0x20;
      a.ah_attr.is_global = 1;
      a.ah_attr.port_num = 1;
      a.ah_attr.grh.sgid_index = 1;
      const wire::Gid g = wire::ipv4_mapped_gid(kIpB);
      std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 1;
      ASSERT_EQ(p.a.engine->modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                                  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                                  IBV_QP_MAX_DEST_RD_ATOMIC |
                                                  IBV_QP_MIN_RNR_TIMER),
                0);
    }
  }
  p.a.engine->poll(p.now);
  EXPECT_TRUE(drain(p.a).empty());
  EXPECT_EQ(p.a.engine->counters()[Counter::tx_frames], 0u);
}

TEST(PostSend, AFailingWrInAChainLeavesTheEarlierOnesPostedAndSent) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  Buffers b(p, 512);
  post_recvs(p, qb, b, 4, 512);
  p.a.engine->poll(p.now);  // let the new QPs go idle: nothing is pending on them
  p.b.engine->poll(p.now);
  ASSERT_FALSE(p.a.engine->has_tx_work());
  ibv_sge s[5] = {b.s(0, 100), b.s(100, 100), b.s(200, 100), b.s(300, 100), b.s(400, 100)};
  ibv_send_wr w1 = send_wr(1, &s[0]), w2 = send_wr(2, &s[1]);
  ibv_send_wr w3 = send_wr(3, &s[0], 5);  // 5 SGEs, the QP allows 4
  ibv_send_wr w4 = send_wr(4, &s[3]);
  w1.next = &w2;
  w2.next = &w3;
  w3.next = &w4;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, &bad), EINVAL);
  EXPECT_EQ(bad, &w3);
  // The two WRs ahead of the bad one were posted: they are sent and complete, on their own
  // (nothing else is posted that would wake the QP up).
  std::vector<ibv_wc> wa, wb;
  EXPECT_TRUE(p.run_until(
      [&] {
        for (auto& w : drain(p.a)) wa.push_back(w);
        for (auto& w : drain(p.b)) wb.push_back(w);
        return wa.size() >= 2 && wb.size() >= 2;
      },
      100'000'000));
  run_for(p, 20'000'000, &wa, &wb);
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].wr_id, 1u);
  EXPECT_EQ(wa[1].wr_id, 2u);
  ASSERT_EQ(wb.size(), 2u);  // w3 and w4 were not posted
  EXPECT_EQ(wb[0].byte_len, 100u);
  EXPECT_EQ(0, std::memcmp(b.dst.data() + 512, b.src.data() + 100, 100));
}

TEST(PostSend, TooManySgesIsEinval) {
  Pair p;
  auto [qa, qb] = p.rc_pair();  // max_send_sge 4
  Buffers b(p, 64);
  ibv_sge s[5] = {b.s(0, 8), b.s(8, 8), b.s(16, 8), b.s(24, 8), b.s(32, 8)};
  ibv_send_wr w = send_wr(1, s, 5);
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(p.a.engine->post_send(qa, &w, &bad), EINVAL);
  EXPECT_EQ(bad, &w);
  w.num_sge = -1;
  EXPECT_EQ(p.a.engine->post_send(qa, &w, &bad), EINVAL);
  w.num_sge = 4;
  EXPECT_EQ(p.a.engine->post_send(qa, &w, &bad), 0);
  (void)qb;
}

TEST(PostSend, FullSendQueueIsEnomem) {
  Pair p;
  QpOptions o;
  o.max_send_wr = 3;  // not a power of two: exactly 3 fit
  auto [qa, qb] = p.rc_pair(o, {});
  Buffers b(p, 64);
  post_recvs(p, qb, b, 8, 64);
  ibv_sge s = b.s(0, 64);
  std::vector<ibv_send_wr> w(5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = send_wr(i + 1, &s);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(p.a.engine->post_send(qa, &w[i], nullptr), 0);
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(p.a.engine->post_send(qa, &w[3], &bad), ENOMEM);
  EXPECT_EQ(bad, &w[3]);
  // Once completions retire WQEs there is room again.
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    return wa.size() == 3;
  }));
  w[3].next = &w[4];
  EXPECT_EQ(p.a.engine->post_send(qa, &w[3], &bad), 0);
}

TEST(PostSend, InlineDataLimitAndCopySemantics) {
  Pair p;
  // The harness asks for max_inline_data 64; the device grants its whole kMaxInline.
  auto [qa, qb] = p.rc_pair();
  EXPECT_EQ(qa->cap.max_inline_data, kMaxInline);
  constexpr uint32_t n = kMaxInline;
  Buffers b(p, 2 * n);
  post_recvs(p, qb, b, 2, 2 * n);
  std::vector<uint8_t> data(n + 1, 0x5A);
  // The L_Key of inline data is not checked (ibv_post_send(3)): pass 0.
  ibv_sge s[2] = {{reinterpret_cast<uint64_t>(data.data()), 40, 0},
                  {reinterpret_cast<uint64_t>(data.data() + 40), n + 1 - 40, 0}};
  ibv_send_wr w = send_wr(1, s, 2, IBV_SEND_SIGNALED | IBV_SEND_INLINE);  // one byte too many
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(p.a.engine->post_send(qa, &w, &bad), EINVAL);
  EXPECT_EQ(bad, &w);
  s[1].length = n - 40;  // exactly max_inline_data: fits
  ASSERT_EQ(p.a.engine->post_send(qa, &w, &bad), 0);
  // "if the IBV_SEND_INLINE flag was set, the buffer can be reused immediately".
  std::fill(data.begin(), data.end(), 0xEE);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 1 && wb.size() == 1;
  }));
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].byte_len, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.dst[i], 0x5A) << i;
}

TEST(PostSend, OpcodesNotAllowedForTheQpType) {
  Pair p;
  Buffers b(p, 64);
  ibv_sge s = b.s(0, 8);
  const ibv_send_wr* bad = nullptr;
  QpOptions uc;
  uc.type = IBV_QPT_UC;
  auto [qa, qb] = p.rc_pair(uc, uc);
  (void)qb;
  for (ibv_wr_opcode op : {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
                           IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ibv_send_wr w = send_wr(1, &s);
    w.opcode = op;
    EXPECT_EQ(p.a.engine->post_send(qa, &w, &bad), EINVAL) << "UC op " << op;
    EXPECT_EQ(bad, &w);
  }
  QpOptions ud;
  ud.type = IBV_QPT_UD;
  Qp* u = make_qp(p.a, ud);
  ASSERT_EQ(connect_qp(p.a, u, 0, kIpB, ud), 0);
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.sgid_index = 1;
  const wire::Gid g = wire::ipv4_mapped_gid(kIpB);
  std::memcpy(ah.grh.dgid.raw, g.data(), 16);
  Ah* to_b = p.a.engine->create_ah(p.a.pd, &ah);
  ASSERT_NE(to_b, nullptr);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
                           IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ibv_send_wr w = send_wr(1, &s);
    w.opcode = op;
    w.wr.ud.ah = &to_b->ibv;
    w.wr.ud.remote_qpn = 0x11;
    EXPECT_EQ(p.a.engine->post_send(u, &w, &bad), EINVAL) << "UD op " << op;
  }
  ibv_send_wr ok = send_wr(1, &s);
  ok.wr.ud.ah = &to_b->ibv;
  ok.wr.ud.remote_qpn = 0x11;
  EXPECT_EQ(p.a.engine->post_send(u, &ok, &bad), 0);
}

TEST(PostSend, AtomicsMoveExactlyEightBytes) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  (void)qb;
  Buffers b(p, 64);
  const ibv_send_wr* bad = nullptr;
  for (ibv_wr_opcode op : {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    for (uint32_t len : {0u, 4u, 7u, 9u, 16u}) {
      ibv_sge s = b.s(0, len);
      ibv_send_wr w = send_wr(1, &s);
      w.opcode = op;
      w.wr.atomic.remote_addr = 0x1000;
      w.wr.atomic.rkey = 1;
      EXPECT_EQ(p.a.engine->post_send(qa, &w, &bad), EINVAL) << op << " len " << len;
    }
    ibv_send_wr none = send_wr(1, nullptr, 0);
    none.opcode = op;
    EXPECT_EQ(p.a.engine->post_send(qa, &none, &bad), EINVAL) << "no SGE";
    ibv_sge s = b.s(0, 8);
    ibv_send_wr w = send_wr(1, &s);
    w.opcode = op;
    EXPECT_EQ(p.a.engine->post_send(qa, &w, &bad), 0);
  }
}

struct UdSetup {
  Pair p;
  Qp* qa = nullptr;
  Qp* qb = nullptr;
  Ah* to_b = nullptr;
  UdSetup() {
    QpOptions o;
    o.type = IBV_QPT_UD;
    qa = make_qp(p.a, o);
    qb = make_qp(p.b, o);
    EXPECT_EQ(connect_qp(p.a, qa, 0, kIpB, o), 0);
    EXPECT_EQ(connect_qp(p.b, qb, 0, kIpA, o), 0);
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.sgid_index = 1;
    const wire::Gid g = wire::ipv4_mapped_gid(kIpB);
    std::memcpy(ah.grh.dgid.raw, g.data(), 16);
    to_b = p.a.engine->create_ah(p.a.pd, &ah);
    EXPECT_NE(to_b, nullptr);
  }
};

TEST(PostSend, UdNeedsAnAddressHandle) {
  UdSetup u;
  std::vector<uint8_t> buf(64);
  auto* mr = u.p.a.reg(buf, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), 64, mr->key};
  ibv_send_wr w = send_wr(1, &s);
  w.wr.ud.remote_qpn = u.qb->qpn;
  w.wr.ud.remote_qkey = 0x11111111;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(u.p.a.engine->post_send(u.qa, &w, &bad), EINVAL);
  EXPECT_EQ(bad, &w);
}

TEST(PostSend, UdMessagesUpToTheActiveMtu) {
  // A UD message is one packet: it may be as large as the port's active MTU (4096 on this
  // 9018-byte link), not larger.
  UdSetup u;
  ibv_port_attr pa{};
  ASSERT_EQ(u.p.a.engine->query_port(1, &pa), 0);
  ASSERT_EQ(pa.active_mtu, IBV_MTU_4096);
  std::vector<uint8_t> src(4097), dst(4096 + 40, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 3);
  auto* smr = u.p.a.reg(src, kAll);
  auto* dmr = u.p.b.reg(dst, kAll);
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), static_cast<uint32_t>(dst.size()), dmr->key};
  ibv_recv_wr rw = recv_wr(7, &r);
  ASSERT_EQ(u.p.b.engine->post_recv(u.qb, &rw, nullptr), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 4097, smr->key};
  ibv_send_wr w = send_wr(1, &s);
  w.wr.ud.ah = &u.to_b->ibv;
  w.wr.ud.remote_qpn = u.qb->qpn;
  w.wr.ud.remote_qkey = 0x11111111;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(u.p.a.engine->post_send(u.qa, &w, &bad), EINVAL);
  s.length = 4096;
  ASSERT_EQ(u.p.a.engine->post_send(u.qa, &w, &bad), 0);
  std::vector<ibv_wc> wb;
  ASSERT_TRUE(u.p.run_until([&] {
    for (auto& x : drain(u.p.b)) wb.push_back(x);
    return wb.size() == 1;
  }));
  EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].byte_len, 4096u + 40u);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 4096, dst.begin() + 40));
}

// ---- post_recv -------------------------------------------------------------------------------

TEST(PostRecv, ResetSrqFullAndTooManySges) {
  Pair p;
  Buffers b(p, 64);
  ibv_sge r = b.d(0, 64);
  ibv_recv_wr w = recv_wr(1, &r);
  const ibv_recv_wr* bad = nullptr;
  QpOptions o;
  o.max_recv_wr = 3;
  Qp* qb = make_qp(p.b, o);
  EXPECT_EQ(p.b.engine->post_recv(qb, &w, &bad), EINVAL);  // RESET
  EXPECT_EQ(bad, &w);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(p.b.engine->modify_qp(qb, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                              IBV_QP_ACCESS_FLAGS),
            0);
  // INIT accepts receives. Chain of four into a queue of three: the fourth is refused.
  std::vector<ibv_recv_wr> chain(4);
  for (size_t i = 0; i < 4; ++i) {
    chain[i] = recv_wr(10 + i, &r);
    if (i > 0) chain[i - 1].next = &chain[i];
  }
  EXPECT_EQ(p.b.engine->post_recv(qb, chain.data(), &bad), ENOMEM);
  EXPECT_EQ(bad, &chain[3]);
  ibv_sge five[5] = {r, r, r, r, r};
  ibv_recv_wr big = recv_wr(20, five, 5);  // max_recv_sge is 4
  EXPECT_EQ(p.b.engine->post_recv(qb, &big, &bad), EINVAL);
  EXPECT_EQ(bad, &big);
  // Exactly the first three are queued: moving to ERR flushes three, in order.
  ASSERT_EQ(to_state(*p.b.engine, qb, IBV_QPS_ERR), 0);
  p.b.engine->poll(p.now);
  auto wc = drain(p.b);
  ASSERT_EQ(wc.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wc[i].wr_id, 10 + i);
    EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
  }

  // A QP with an SRQ takes receives only through the SRQ.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  Srq* srq = p.b.engine->create_srq(p.b.pd, &sa);
  ASSERT_NE(srq, nullptr);
  o.srq = srq;
  Qp* qs = make_qp(p.b, o);
  ASSERT_NE(qs, nullptr);
  ASSERT_EQ(p.b.engine->modify_qp(qs, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                              IBV_QP_ACCESS_FLAGS),
            0);
  EXPECT_EQ(p.b.engine->post_recv(qs, &w, &bad), EINVAL);
  EXPECT_EQ(bad, &w);
  EXPECT_EQ(p.b.engine->post_srq_recv(srq, &w, &bad), 0);
  ibv_recv_wr two = recv_wr(21, five, 2);  // SRQ max_sge 1
  EXPECT_EQ(p.b.engine->post_srq_recv(srq, &two, &bad), EINVAL);
  EXPECT_EQ(bad, &two);
}

// ---- Destroying objects that are still in use ----------------------------------------------

TEST(Resources, DeallocPdInUseIsEbusy) {
  Pair p;
  mem::Pd* pd = p.a.engine->alloc_pd();
  ASSERT_NE(pd, nullptr);
  std::vector<uint8_t> buf(64);
  mem::Mr* mr = p.a.engine->reg_mr(pd, buf.data(), buf.size(), kAll);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(p.a.engine->dealloc_pd(pd), EBUSY);
  ASSERT_EQ(p.a.engine->dereg_mr(mr), 0);

  ibv_qp_init_attr ia{};
  ia.send_cq = &p.a.cq->ibv;
  ia.recv_cq = &p.a.cq->ibv;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  Qp* qp = p.a.engine->create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(p.a.engine->dealloc_pd(pd), EBUSY);
  ASSERT_EQ(p.a.engine->destroy_qp(qp), 0);

  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  Srq* srq = p.a.engine->create_srq(pd, &sa);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(p.a.engine->dealloc_pd(pd), EBUSY);
  ASSERT_EQ(p.a.engine->destroy_srq(srq), 0);

  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.sgid_index = 1;
  const wire::Gid g = wire::ipv4_mapped_gid(kIpB);
  std::memcpy(ah.grh.dgid.raw, g.data(), 16);
  Ah* a = p.a.engine->create_ah(pd, &ah);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(p.a.engine->dealloc_pd(pd), EBUSY);
  ASSERT_EQ(p.a.engine->destroy_ah(a), 0);

  EXPECT_EQ(p.a.engine->dealloc_pd(pd), 0);
  EXPECT_EQ(p.a.engine->dealloc_pd(pd), EINVAL);  // already gone
}

TEST(Resources, DestroyCqOrSrqWithAQpAttachedIsEbusy) {
  Pair p;
  Cq* scq = p.a.engine->create_cq(8);
  Cq* rcq = p.a.engine->create_cq(8);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  Srq* srq = p.a.engine->create_srq(p.a.pd, &sa);
  ASSERT_NE(srq, nullptr);
  Qp* qp = qp_with(p.a, IBV_QPT_RC, scq, rcq, srq);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(p.a.engine->destroy_cq(scq), EBUSY);
  EXPECT_EQ(p.a.engine->destroy_cq(rcq), EBUSY);
  EXPECT_EQ(p.a.engine->destroy_srq(srq), EBUSY);
  ASSERT_EQ(p.a.engine->destroy_qp(qp), 0);
  EXPECT_EQ(p.a.engine->destroy_cq(scq), 0);
  EXPECT_EQ(p.a.engine->destroy_cq(rcq), 0);
  EXPECT_EQ(p.a.engine->destroy_srq(srq), 0);
  EXPECT_EQ(p.a.engine->destroy_cq(scq), EINVAL);
}

TEST(Resources, CreateCqSizes) {
  Pair p;
  ibv_device_attr da{};
  p.a.engine->query_device(&da);
  errno = 0;
  EXPECT_EQ(p.a.engine->create_cq(0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(p.a.engine->create_cq(da.max_cqe + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  Cq* cq = p.a.engine->create_cq(5);
  ASSERT_NE(cq, nullptr);
  // ibv_create_cq(3): the CQ has at least `cqe` entries, and ibv_cq.cqe says how many.
  EXPECT_GE(cq->ibv.cqe, 5);
}

TEST(Resources, DestroyingAnObjectDropsItsPendingEvents) {
  // ibv_get_async_event(3): an application never gets an event for an object that has
  // already been destroyed. Two QPs with an SQ_DRAINED event each, and a CQ with CQ_ERR.
  Pair p;
  auto [q1, r1] = p.rc_pair();
  auto [q2, r2] = p.rc_pair();
  (void)r1;
  (void)r2;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(p.a.engine->modify_qp(q1, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  ASSERT_EQ(p.a.engine->modify_qp(q2, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  Cq* small = p.a.engine->create_cq(1);
  Qp* qx = qp_with(p.a, IBV_QPT_RC, p.a.cq, small, nullptr, {1, 2, 1, 1, 0});
  ASSERT_NE(qx, nullptr);
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  ASSERT_EQ(p.a.engine->modify_qp(qx, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                 IBV_QP_ACCESS_FLAGS),
            0);
  std::vector<uint8_t> buf(8);
  mem::Mr* mr = p.a.reg(buf, kAll);
  ibv_sge r{reinterpret_cast<uint64_t>(buf.data()), 8, mr->key};
  for (uint64_t i = 0; i < 2; ++i) {
    ibv_recv_wr w = recv_wr(i, &r);
    ASSERT_EQ(p.a.engine->post_recv(qx, &w, nullptr), 0);
  }
  ASSERT_EQ(to_state(*p.a.engine, qx, IBV_QPS_ERR), 0);  // 2 flushes into a 1-entry CQ
  p.a.engine->poll(p.now);
  // Three events are queued now (two SQ_DRAINED, one CQ_ERR); destroy two of their objects.
  ASSERT_EQ(p.a.engine->destroy_qp(q1), 0);
  ASSERT_EQ(p.a.engine->destroy_qp(qx), 0);
  ASSERT_EQ(p.a.engine->destroy_cq(small), 0);
  auto ev = events(*p.a.engine);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(ev[0].qp, q2);
}

TEST(Resources, ResetDiscardsPostedWorkWithoutCompletions) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  Buffers b(p, 64);
  ibv_sge s = b.s(0, 64);
  ibv_sge r{reinterpret_cast<uint64_t>(b.src.data()), 64, b.smr->key};
  for (uint64_t i = 0; i < 3; ++i) {
    ibv_send_wr w = send_wr(i, &s);
    ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
    ibv_recv_wr rw = recv_wr(10 + i, &r);
    ASSERT_EQ(p.a.engine->post_recv(qa, &rw, nullptr), 0);
  }
  ASSERT_EQ(to_state(*p.a.engine, qa, IBV_QPS_RESET), 0);  // before anything was sent
  std::vector<ibv_wc> wa, wb;
  run_for(p, 50'000'000, &wa, &wb);
  EXPECT_TRUE(wa.empty());
  EXPECT_TRUE(wb.empty());
  EXPECT_EQ(p.a.engine->counters()[Counter::tx_frames], 0u);
  // The QP comes back up with empty queues and works.
  QpOptions o;
  ASSERT_EQ(connect_qp(p.a, qa, qb->qpn, kIpB, o), 0);
  post_recvs(p, qb, b, 1, 64);
  ibv_send_wr w = send_wr(42, &s);
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 1 && wb.size() == 1;
  }));
  EXPECT_EQ(wa[0].wr_id, 42u);
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
}

// ---- CQ overrun ------------------------------------------------------------------------------

TEST(CqOverrun, FlushIntoAFullCqRaisesCqErrOnce) {
  Pair p;
  Cq* small = p.b.engine->create_cq(4);
  ASSERT_NE(small, nullptr);
  const int n = small->ibv.cqe;
  ASSERT_GE(n, 4);
  Qp* qb = qp_with(p.b, IBV_QPT_RC, p.b.cq, small, nullptr,
                   {4, static_cast<uint32_t>(n + 1), 1, 1, 0});
  ASSERT_NE(qb, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(p.b.engine->modify_qp(qb, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                              IBV_QP_ACCESS_FLAGS),
            0);
  Buffers b(p, 16);
  ibv_sge r = b.d(0, 16);
  for (int i = 0; i <= n; ++i) {  // N + 1 receives: N + 1 flush completions
    ibv_recv_wr w = recv_wr(static_cast<uint64_t>(i), &r);
    ASSERT_EQ(p.b.engine->post_recv(qb, &w, nullptr), 0);
  }
  EXPECT_TRUE(events(*p.b.engine).empty());
  ASSERT_EQ(to_state(*p.b.engine, qb, IBV_QPS_ERR), 0);
  p.b.engine->poll(p.now);
  p.b.engine->poll(p.now + 1000);
  auto ev = events(*p.b.engine);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev[0].cq, small);
  EXPECT_EQ(p.b.engine->counters()[Counter::cq_overflows], 1u);
}

TEST(CqOverrun, SendCompletionsIntoAFullCqRaiseCqErrAndQpFatal) {
  Pair p;
  Cq* small = p.a.engine->create_cq(4);
  ASSERT_NE(small, nullptr);
  const int n = small->ibv.cqe;
  ASSERT_GE(n, 4);
  Qp* qa = qp_with(p.a, IBV_QPT_RC, small, p.a.cq);
  Qp* qb = make_qp(p.b, {});
  ASSERT_NE(qa, nullptr);
  QpOptions o;
  ASSERT_EQ(connect_qp(p.a, qa, qb->qpn, kIpB, o), 0);
  ASSERT_EQ(connect_qp(p.b, qb, qa->qpn, kIpA, o), 0);
  Buffers b(p, 32);
  post_recvs(p, qb, b, n + 1, 32);
  ibv_sge s = b.s(0, 32);
  for (int i = 0; i <= n; ++i) {
    ibv_send_wr w = send_wr(static_cast<uint64_t>(i), &s);
    ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  }
  std::vector<AsyncEvent> ev;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& e : events(*p.a.engine)) ev.push_back(e);
    return !ev.empty();
  }));
  // The CQ is in error, and the QP that lost its completion is out of action (once: the
  // flush completions that follow are lost too, but the QP is already in error).
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev[0].cq, small);
  EXPECT_EQ(ev[1].type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev[1].qp, qa);
  EXPECT_EQ(qa->state, IBV_QPS_ERR);
  p.run_until([] { return false; }, 100'000'000);
  EXPECT_TRUE(events(*p.a.engine).empty());
  EXPECT_GE(p.a.engine->counters()[Counter::cq_overflows], 1u);
}

// ---- SRQ -------------------------------------------------------------------------------------

TEST(Srq, CreateWithBadAttributesIsEinval) {
  Pair p;
  ibv_device_attr da{};
  p.a.engine->query_device(&da);
  auto fails = [&](mem::Pd* pd, uint32_t max_wr, uint32_t max_sge) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = max_wr;
    sa.attr.max_sge = max_sge;
    errno = 0;
    Srq* s = p.a.engine->create_srq(pd, &sa);
    EXPECT_EQ(s, nullptr);
    return errno;
  };
  EXPECT_EQ(fails(p.a.pd, 0, 1), EINVAL);
  EXPECT_EQ(fails(p.a.pd, static_cast<uint32_t>(da.max_srq_wr) + 1, 1), EINVAL);
  EXPECT_EQ(fails(p.a.pd, 16, static_cast<uint32_t>(da.max_srq_sge) + 1), EINVAL);
  EXPECT_EQ(fails(nullptr, 16, 1), EINVAL);
  errno = 0;
  EXPECT_EQ(p.a.engine->create_srq(p.a.pd, nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = static_cast<uint32_t>(da.max_srq_wr);
  sa.attr.max_sge = static_cast<uint32_t>(da.max_srq_sge);
  Srq* s = p.a.engine->create_srq(p.a.pd, &sa);
  ASSERT_NE(s, nullptr);
  ibv_srq_attr q{};
  ASSERT_EQ(p.a.engine->query_srq(s, &q), 0);
  EXPECT_GE(q.max_wr, sa.attr.max_wr);
  EXPECT_GE(q.max_sge, sa.attr.max_sge);
}

TEST(Srq, ModifySrq) {
  Pair p;
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  Srq* srq = p.b.engine->create_srq(p.b.pd, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_srq_attr a{};
  a.srq_limit = 9;  // above max_wr
  EXPECT_EQ(p.b.engine->modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL);
  ibv_srq_attr q{};
  ASSERT_EQ(p.b.engine->query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);
  EXPECT_EQ(p.b.engine->modify_srq(srq, &a, 1 << 5), EINVAL);  // not a modify_srq bit
  a.srq_limit = 3;
  ASSERT_EQ(p.b.engine->modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(p.b.engine->query_srq(srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 3u);
  EXPECT_EQ(q.max_wr, 8u);
}

TEST(Srq, ResizeIsSupportedAsTheDeviceAdvertises) {
  Pair p;
  ibv_device_attr da{};
  p.b.engine->query_device(&da);
  if (!(da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE)) GTEST_SKIP() << "no SRQ resize";
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  Srq* srq = p.b.engine->create_srq(p.b.pd, &sa);
  ASSERT_NE(srq, nullptr);
  Buffers b(p, 8);
  ibv_sge r = b.d(0, 8);
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_recv_wr w = recv_wr(i, &r);
    ASSERT_EQ(p.b.engine->post_srq_recv(srq, &w, nullptr), 0);
  }
  ibv_recv_wr extra = recv_wr(4, &r);
  EXPECT_EQ(p.b.engine->post_srq_recv(srq, &extra, nullptr), ENOMEM);
  ibv_srq_attr a{};
  a.max_wr = 3;  // fewer than the 4 posted
  EXPECT_EQ(p.b.engine->modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
  a.max_wr = static_cast<uint32_t>(da.max_srq_wr) + 1;
  EXPECT_EQ(p.b.engine->modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
  // Growing and arming the limit at once; a limit above the new size refuses both.
  a.max_wr = 16;
  a.srq_limit = 17;
  EXPECT_EQ(p.b.engine->modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
  ibv_srq_attr q{};
  ASSERT_EQ(p.b.engine->query_srq(srq, &q), 0);
  EXPECT_EQ(q.max_wr, 4u);
  a.srq_limit = 2;
  ASSERT_EQ(p.b.engine->modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(p.b.engine->query_srq(srq, &q), 0);
  EXPECT_GE(q.max_wr, 16u);
  EXPECT_EQ(q.srq_limit, 2u);
  EXPECT_EQ(p.b.engine->post_srq_recv(srq, &extra, nullptr), 0);  // room now
  // The WQEs posted before the resize are still there, in order: a QP in ERR does not flush
  // SRQ WQEs, so consume them with SENDs.
  auto [qa, qb] = [&] {
    QpOptions ob;
    ob.srq = srq;
    return p.rc_pair({}, ob);
  }();
  ibv_sge s = b.s(0, 8);
  for (uint64_t i = 0; i < 5; ++i) {
    ibv_send_wr w = send_wr(i, &s);
    ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  }
  std::vector<ibv_wc> wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wb.size() == 5;
  }));
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(wb[i].wr_id, i);
    EXPECT_EQ(wb[i].qp_num, qb->qpn);
  }
}

/// An RC pair whose receiving side (B) takes its receives from an SRQ.
struct SrqPair {
  Pair p;
  Srq* srq = nullptr;
  Qp* qa = nullptr;
  Qp* qb = nullptr;
  Buffers b{p, 256};
  explicit SrqPair(uint32_t max_wr) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = max_wr;
    sa.attr.max_sge = 1;
    srq = p.b.engine->create_srq(p.b.pd, &sa);
    EXPECT_NE(srq, nullptr);
    QpOptions ob;
    ob.srq = srq;
    std::tie(qa, qb) = p.rc_pair({}, ob);
  }
  void post_srq(uint64_t id, size_t slot) {
    ibv_sge r = b.d(slot, 256);
    ibv_recv_wr w = recv_wr(id, &r);
    ASSERT_EQ(p.b.engine->post_srq_recv(srq, &w, nullptr), 0);
  }
  /// Sends one message from A and waits until B has received it.
  ibv_wc send_one(uint64_t id, uint32_t len) {
    ibv_sge s = b.s(0, len);
    ibv_send_wr w = send_wr(id, &s);
    EXPECT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
    std::vector<ibv_wc> wb;
    EXPECT_TRUE(p.run_until([&] {
      for (auto& x : drain(p.b)) wb.push_back(x);
      return !wb.empty();
    }));
    drain(p.a);
    return wb.empty() ? ibv_wc{} : wb[0];
  }
};

TEST(Srq, RcQpDeliversSendsThroughTheSrq) {
  SrqPair s(16);
  for (uint64_t i = 0; i < 4; ++i) s.post_srq(500 + i, static_cast<size_t>(i));
  for (uint64_t i = 0; i < 4; ++i) {
    const ibv_wc wc = s.send_one(i, static_cast<uint32_t>(50 + i));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 500 + i);  // SRQ WQEs are used in posting order
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.byte_len, 50 + i);
    EXPECT_EQ(wc.qp_num, s.qb->qpn);
    EXPECT_EQ(0, std::memcmp(s.b.dst.data() + i * 256, s.b.src.data(), 50 + i));
  }
}

TEST(Srq, TwoQpsShareOneSrq) {
  SrqPair s(16);
  Qp* qa2 = make_qp(s.p.a, {});
  QpOptions ob;
  ob.srq = s.srq;
  Qp* qb2 = make_qp(s.p.b, ob);
  ASSERT_EQ(connect_qp(s.p.a, qa2, qb2->qpn, kIpB, {}), 0);
  ASSERT_EQ(connect_qp(s.p.b, qb2, qa2->qpn, kIpA, {}), 0);
  EXPECT_EQ(s.srq->users, 2u);
  for (uint64_t i = 0; i < 2; ++i) s.post_srq(700 + i, static_cast<size_t>(i));
  ibv_sge sg = s.b.s(0, 10);
  ibv_send_wr w1 = send_wr(1, &sg), w2 = send_wr(2, &sg);
  ASSERT_EQ(s.p.a.engine->post_send(s.qa, &w1, nullptr), 0);
  ASSERT_EQ(s.p.a.engine->post_send(qa2, &w2, nullptr), 0);
  std::vector<ibv_wc> wb;
  ASSERT_TRUE(s.p.run_until([&] {
    for (auto& x : drain(s.p.b)) wb.push_back(x);
    return wb.size() == 2;
  }));
  std::vector<uint32_t> qpns = {wb[0].qp_num, wb[1].qp_num};
  std::sort(qpns.begin(), qpns.end());
  std::vector<uint32_t> want = {s.qb->qpn, qb2->qpn};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(qpns, want);
  EXPECT_NE(wb[0].wr_id, wb[1].wr_id);
}

TEST(Srq, LimitEventFiresOnceBelowTheLimitAndMustBeReArmed) {
  SrqPair s(8);
  for (uint64_t i = 0; i < 8; ++i) s.post_srq(i, static_cast<size_t>(i));
  ibv_srq_attr a{};
  a.srq_limit = 5;
  ASSERT_EQ(s.p.b.engine->modify_srq(s.srq, &a, IBV_SRQ_LIMIT), 0);
  // 8 -> 7 -> 6 -> 5 WQEs: not below 5 yet.
  for (uint64_t i = 0; i < 3; ++i) s.send_one(i, 16);
  EXPECT_TRUE(events(*s.p.b.engine).empty());
  // 5 -> 4: below the limit. One event.
  s.send_one(3, 16);
  auto ev = events(*s.p.b.engine);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev[0].srq, s.srq);
  ibv_srq_attr q{};
  ASSERT_EQ(s.p.b.engine->query_srq(s.srq, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);  // disarmed
  // 4 -> 3: still below, but the event is not armed any more.
  s.send_one(4, 16);
  EXPECT_TRUE(events(*s.p.b.engine).empty());
  // Re-armed with 3 WQEs left: the next one taken (3 -> 2) goes below 3 and fires again.
  a.srq_limit = 3;
  ASSERT_EQ(s.p.b.engine->modify_srq(s.srq, &a, IBV_SRQ_LIMIT), 0);
  s.send_one(5, 16);
  ev = events(*s.p.b.engine);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  s.send_one(6, 16);
  EXPECT_TRUE(events(*s.p.b.engine).empty());
}

// ---- SQD ----------------------------------------------------------------------------------

TEST(Sqd, DrainedEventAfterTheOutstandingWqesAreAckedThenResume) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  Buffers b(p, 3000);
  post_recvs(p, qb, b, 3, 3000);
  ibv_sge s = b.s(0, 3000);  // three packets each
  ibv_send_wr w1 = send_wr(1, &s), w2 = send_wr(2, &s);
  w1.next = &w2;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  p.a.engine->poll(p.now);  // both messages on the wire, nothing acknowledged yet
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(p.a.engine->modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  // Posting in SQD is allowed; the WR waits.
  ibv_send_wr w3 = send_wr(3, &s);
  ASSERT_EQ(p.a.engine->post_send(qa, &w3, nullptr), 0);
  p.a.engine->poll(p.now);
  EXPECT_TRUE(events(*p.a.engine).empty());
  ibv_qp_attr q{};
  ASSERT_EQ(p.a.engine->query_qp(qa, &q, IBV_QP_STATE, nullptr), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_SQD);
  EXPECT_EQ(q.sq_draining, 1);

  std::vector<ibv_wc> wa, wb;
  std::vector<AsyncEvent> ev;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    for (auto& e : events(*p.a.engine)) ev.push_back(e);
    return !ev.empty();
  }));
  run_for(p, 20'000'000, &wa, &wb);
  for (auto& e : events(*p.a.engine)) ev.push_back(e);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(ev[0].qp, qa);
  ASSERT_EQ(wa.size(), 2u);  // the two outstanding WQEs, acknowledged
  EXPECT_EQ(wa[0].wr_id, 1u);
  EXPECT_EQ(wa[1].wr_id, 2u);
  EXPECT_EQ(wb.size(), 2u);  // the third was not sent
  ASSERT_EQ(p.a.engine->query_qp(qa, &q, IBV_QP_STATE, nullptr), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_SQD);
  EXPECT_EQ(q.sq_draining, 0);

  // SQD -> RTS: the waiting WR goes out.
  ASSERT_EQ(to_state(*p.a.engine, qa, IBV_QPS_RTS), 0);
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 3 && wb.size() == 3;
  }));
  EXPECT_EQ(wa[2].wr_id, 3u);
  EXPECT_EQ(wa[2].status, IBV_WC_SUCCESS);
  EXPECT_EQ(0, std::memcmp(b.dst.data() + 2 * 3000, b.src.data(), 3000));
  EXPECT_TRUE(events(*p.a.engine).empty());
}

TEST(Sqd, IdleQpIsDrainedAtOnce) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  (void)qb;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(p.a.engine->modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  p.a.engine->poll(p.now);
  auto ev = events(*p.a.engine);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, IBV_EVENT_SQ_DRAINED);
  p.a.engine->poll(p.now + 1000);
  EXPECT_TRUE(events(*p.a.engine).empty());
}

// ---- Completion signalling --------------------------------------------------------------------

TEST(Signalling, OnlySignaledWqesComplete) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  Buffers b(p, 64);
  post_recvs(p, qb, b, 3, 64);
  ibv_sge s = b.s(0, 64);
  ibv_send_wr w1 = send_wr(1, &s, 1, 0), w2 = send_wr(2, &s), w3 = send_wr(3, &s, 1, 0);
  w1.next = &w2;
  w2.next = &w3;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wb.size() == 3;
  }));
  run_for(p, 20'000'000, &wa, &wb);
  ASSERT_EQ(wa.size(), 1u);
  EXPECT_EQ(wa[0].wr_id, 2u);
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb.size(), 3u);  // the receiver completes every message
}

TEST(Signalling, AnUnsignaledWqeThatFailsStillCompletes) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  Buffers b(p, 64);
  post_recvs(p, qb, b, 2, 64);
  ibv_sge good = b.s(0, 64);
  ibv_sge badkey = b.s(0, 64);
  badkey.lkey ^= 0x5;  // not a key A issued
  ibv_send_wr w1 = send_wr(1, &badkey, 1, 0), w2 = send_wr(2, &good, 1, 0);
  w1.next = &w2;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    return wa.size() >= 2;
  }));
  run_for(p, 20'000'000, &wa, &wb);
  // Neither was signaled, but errors always complete: w1 with its own error, w2 flushed.
  ASSERT_EQ(wa.size(), 2u);
  EXPECT_EQ(wa[0].wr_id, 1u);
  EXPECT_EQ(wa[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(wa[1].wr_id, 2u);
  EXPECT_EQ(wa[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(wb.empty());
  ibv_qp_attr q{};
  ASSERT_EQ(p.a.engine->query_qp(qa, &q, IBV_QP_STATE, nullptr), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_ERR);
}

TEST(Signalling, SqSigAllCompletesEveryWqe) {
  Pair p;
  Qp* qa = qp_with(p.a, IBV_QPT_RC, p.a.cq, p.a.cq, nullptr, {16, 16, 4, 4, 64}, 1);
  Qp* qb = make_qp(p.b, {});
  ASSERT_NE(qa, nullptr);
  ASSERT_EQ(connect_qp(p.a, qa, qb->qpn, kIpB, {}), 0);
  ASSERT_EQ(connect_qp(p.b, qb, qa->qpn, kIpA, {}), 0);
  ibv_qp_init_attr init{};
  ibv_qp_attr q{};
  ASSERT_EQ(p.a.engine->query_qp(qa, &q, 0, &init), 0);
  EXPECT_EQ(init.sq_sig_all, 1);
  Buffers b(p, 64);
  post_recvs(p, qb, b, 3, 64);
  ibv_sge s = b.s(0, 64);
  ibv_send_wr w1 = send_wr(1, &s, 1, 0), w2 = send_wr(2, &s, 1, 0), w3 = send_wr(3, &s, 1, 0);
  w1.next = &w2;
  w2.next = &w3;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    return wa.size() == 3;
  }));
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wa[i].wr_id, i + 1);
    EXPECT_EQ(wa[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wa[i].opcode, IBV_WC_SEND);
  }
}

TEST(Signalling, PostingInErrorFlushesEvenUnsignaledWqes) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  (void)qb;
  ASSERT_EQ(to_state(*p.a.engine, qa, IBV_QPS_ERR), 0);
  Buffers b(p, 64);
  ibv_sge s = b.s(0, 64);
  ibv_send_wr w1 = send_wr(1, &s, 1, 0), w2 = send_wr(2, &s);
  w1.next = &w2;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  p.a.engine->poll(p.now);
  auto wc = drain(p.a);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(p.a.engine->counters()[Counter::tx_frames], 0u);
}

// ---- Address handles ----------------------------------------------------------------------

TEST(AddressHandle, Errors) {
  Pair p;
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.sgid_index = 1;
  const wire::Gid g = wire::ipv4_mapped_gid({10, 7, 7, 7});  // nobody we know
  std::memcpy(ah.grh.dgid.raw, g.data(), 16);
  errno = 0;
  EXPECT_EQ(p.a.engine->create_ah(p.a.pd, &ah), nullptr);
  EXPECT_EQ(errno, EHOSTUNREACH);
  ah.port_num = 2;
  errno = 0;
  EXPECT_EQ(p.a.engine->create_ah(p.a.pd, &ah), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ah.port_num = 1;
  ah.is_global = 0;
  errno = 0;
  EXPECT_EQ(p.a.engine->create_ah(p.a.pd, &ah), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ah.is_global = 1;
  ah.grh.sgid_index = 7;  // beyond the GID table
  errno = 0;
  EXPECT_EQ(p.a.engine->create_ah(p.a.pd, &ah), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(p.a.pd->users, 0u);
}

}  // namespace
}  // namespace uroce::test

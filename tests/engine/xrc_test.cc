// XRC end to end between two engines: an initiator (XRC_SEND) on A, a target (XRC_RECV) on B
// whose domain has two SRQs, each with its own PD and CQ. Every message goes to the SRQ its
// work request names: the receive completes on that SRQ's CQ, and that SRQ's PD checks the
// keys of WRITE, READ and atomics. A request naming no SRQ of the domain is a remote access
// error. Plus the verbs rules of XRC objects.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "xrc_fixture.h"

namespace uroce::test {
namespace {

using namespace xrc;

TEST(Xrc, EachSendLandsInTheSrqItNamesAndCompletesOnThatSrqsCq) {
  XrcFixture x;
  std::vector<uint8_t> b1(4096, 0), b2(4096, 0);
  auto* m1 = x.p.b.engine->reg_mr(x.p.b.pd, b1.data(), b1.size(), kAll);
  auto* m2 = x.p.b.engine->reg_mr(x.pd2, b2.data(), b2.size(), kAll);
  x.post_srq_recv(x.srq1, 101, b1, m1);
  x.post_srq_recv(x.srq2, 202, b2, m2);
  auto src = pattern(3000, 7);  // three packets at MTU 1024: FIRST, MIDDLE, LAST
  auto* sm = x.p.a.reg(src, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 3000, sm->key};
  ibv_send_wr w{};
  w.wr_id = 1;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND_WITH_IMM;
  w.imm_data = 0x01020304;
  EXPECT_EQ(x.run_one(w, x.srq2->handle).status, IBV_WC_SUCCESS);
  w.wr_id = 2;
  w.opcode = IBV_WR_SEND;
  s.length = 100;
  EXPECT_EQ(x.run_one(w, x.srq1->handle).status, IBV_WC_SUCCESS);

  const auto c1 = drain_cq(*x.p.b.engine, x.cq1), c2 = drain_cq(*x.p.b.engine, x.cq2);
  ASSERT_EQ(c1.size(), 1u);
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0].wr_id, 202u);
  EXPECT_EQ(c2[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(c2[0].byte_len, 3000u);
  EXPECT_EQ(c2[0].qp_num, x.tgt->qpn);  // the target QP, as RNICs report it
  EXPECT_EQ(c2[0].src_qp, x.ini->qpn);
  EXPECT_TRUE(c2[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), b2.begin()));
  EXPECT_EQ(c1[0].wr_id, 101u);
  EXPECT_EQ(c1[0].byte_len, 100u);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 100, b1.begin()));
  EXPECT_EQ(b1[100], 0);
  EXPECT_TRUE(drain(x.p.b).empty());  // B's own CQ: nothing
}

TEST(Xrc, ReceivesDeliveredStayOnTheSrqsCqWhenTheTargetGoes) {
  // A target has no CQ of its own: destroying it (a peer that sent and disconnected, its CM
  // handler destroying the QP before the SRQ's CQ was polled) must not take the completions
  // of what it delivered.
  XrcFixture x;
  std::vector<uint8_t> b2(4096, 0);
  auto* m2 = x.p.b.engine->reg_mr(x.pd2, b2.data(), b2.size(), kAll);
  x.post_srq_recv(x.srq2, 7, b2, m2);
  x.post_srq_recv(x.srq2, 8, b2, m2);
  EXPECT_EQ(x.send_small(x.srq2->handle).status, IBV_WC_SUCCESS);
  EXPECT_EQ(x.send_small(x.srq2->handle).status, IBV_WC_SUCCESS);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(x.p.b.engine->modify_qp(x.tgt, &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(x.p.b.engine->destroy_qp(x.tgt), 0);
  const auto c2 = drain_cq(*x.p.b.engine, x.cq2);
  ASSERT_EQ(c2.size(), 2u);
  EXPECT_EQ(c2[0].wr_id, 7u);
  EXPECT_EQ(c2[1].wr_id, 8u);
}

TEST(Xrc, WriteReadAndAtomicsCheckKeysInTheNamedSrqsPd) {
  XrcFixture x;
  std::vector<uint8_t> target(8192, 0);
  auto* tm = x.p.b.engine->reg_mr(x.pd2, target.data(), target.size(), kAll);  // SRQ 2's PD
  auto src = pattern(5000, 3);
  std::vector<uint8_t> back(5000, 0);
  auto* sm = x.p.a.reg(src, kAll);
  auto* bm = x.p.a.reg(back, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 5000, sm->key};
  ibv_send_wr w{};
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma = {reinterpret_cast<uint64_t>(target.data()), tm->key};
  EXPECT_EQ(x.run_one(w, x.srq2->handle).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), target.begin()));

  ibv_sge r{reinterpret_cast<uint64_t>(back.data()), 5000, bm->key};
  w.sg_list = &r;
  w.opcode = IBV_WR_RDMA_READ;
  EXPECT_EQ(x.run_one(w, x.srq2->handle).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), back.begin()));

  uint64_t old = 0;
  std::vector<uint8_t> res(8, 0);
  auto* rm = x.p.a.reg(res, kAll);
  ibv_sge a{reinterpret_cast<uint64_t>(res.data()), 8, rm->key};
  std::memcpy(&old, target.data() + 4096, 8);
  w.sg_list = &a;
  w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  w.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(target.data() + 4096);
  w.wr.atomic.rkey = tm->key;
  w.wr.atomic.compare_add = 5;
  EXPECT_EQ(x.run_one(w, x.srq2->handle).status, IBV_WC_SUCCESS);
  uint64_t got, now;
  std::memcpy(&got, res.data(), 8);
  std::memcpy(&now, target.data() + 4096, 8);
  EXPECT_EQ(got, old);
  EXPECT_EQ(now, old + 5);

  // The same key through SRQ 1, whose PD is another: a remote access error, nothing written.
  std::fill(target.begin(), target.end(), 0x33);
  w.sg_list = &s;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.wr.rdma = {reinterpret_cast<uint64_t>(target.data()), tm->key};
  EXPECT_EQ(x.run_one(w, x.srq1->handle).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](uint8_t v) { return v == 0x33; }));
}

TEST(Xrc, AnSrqNumberOutsideTheDomainIsARemoteAccessError) {
  XrcFixture x;
  // An SRQ of B that is not in the domain (a basic one), and a number nobody has.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  Srq* basic = x.p.b.engine->create_srq(x.p.b.pd, &sa);
  ASSERT_NE(basic, nullptr);
  EXPECT_EQ(x.send_small(basic->handle).status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(x.p.b.engine->counters()[Counter::xrc_bad_srqn], 1u);
  EXPECT_EQ(x.tgt->state, IBV_QPS_ERR);
}

TEST(Xrc, VerbsRules) {
  XrcFixture x;
  Engine& b = *x.p.b.engine;
  // A target needs its domain; an initiator a PD and a send CQ (no receive CQ).
  ibv_qp_init_attr ta{};
  ta.qp_type = IBV_QPT_XRC_RECV;
  errno = 0;
  EXPECT_EQ(b.create_qp(nullptr, &ta, nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_qp_init_attr ia{};
  ia.qp_type = IBV_QPT_XRC_SEND;
  EXPECT_EQ(b.create_qp(x.p.b.pd, &ia), nullptr);  // no send CQ
  // A target neither sends nor takes receives; an initiator takes no receives.
  ibv_send_wr w{};
  w.opcode = IBV_WR_SEND;
  EXPECT_EQ(b.post_send(x.tgt, &w, nullptr), EINVAL);
  ibv_recv_wr r{};
  EXPECT_EQ(b.post_recv(x.tgt, &r, nullptr), EINVAL);
  EXPECT_EQ(x.p.a.engine->post_recv(x.ini, &r, nullptr), EINVAL);
  // XRC has no ATOMIC WRITE.
  std::vector<uint8_t> eight(8, 0);
  auto* m = x.p.a.reg(eight, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(eight.data()), 8, m->key};
  w.opcode = IBV_WR_ATOMIC_WRITE;
  w.sg_list = &s;
  w.num_sge = 1;
  EXPECT_EQ(x.p.a.engine->post_send(x.ini, &w, nullptr), EINVAL);
  // The domain stays while its SRQs and target QPs do.
  EXPECT_EQ(b.destroy_xrcd(x.xrcd), EBUSY);
  EXPECT_EQ(b.destroy_qp(x.tgt), 0);
  EXPECT_EQ(b.destroy_xrcd(x.xrcd), EBUSY);
  EXPECT_EQ(b.destroy_cq(x.cq1), EBUSY);  // SRQ 1 completes on it
  EXPECT_EQ(b.destroy_srq(x.srq1), 0);
  EXPECT_EQ(b.destroy_srq(x.srq2), 0);
  EXPECT_EQ(b.destroy_cq(x.cq1), 0);
  EXPECT_EQ(b.destroy_xrcd(x.xrcd), 0);
}

TEST(Xrc, ModifyMasksFollowEachEnd) {
  Pair p;
  Xrcd* xrcd = p.b.engine->create_xrcd();
  ibv_qp_init_attr ta{};
  ta.qp_type = IBV_QPT_XRC_RECV;
  Qp* tgt = p.b.engine->create_qp(nullptr, &ta, xrcd);
  ibv_qp_init_attr ia{};
  ia.qp_type = IBV_QPT_XRC_SEND;
  ia.send_cq = as_ibv(p.a.cq);
  ia.cap.max_send_wr = 4;
  Qp* ini = p.a.engine->create_qp(p.a.pd, &ia);
  ASSERT_NE(tgt, nullptr);
  ASSERT_NE(ini, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  ASSERT_EQ(p.a.engine->modify_qp(ini, &a, init), 0);
  ASSERT_EQ(p.b.engine->modify_qp(tgt, &a, init), 0);
  ibv_qp_attr r = rtr_attr(tgt->qpn, kIpB);
  const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  // An initiator receives nothing: no responder attributes.
  EXPECT_EQ(p.a.engine->modify_qp(ini, &r, rtr | IBV_QP_MAX_DEST_RD_ATOMIC), EINVAL);
  EXPECT_EQ(p.a.engine->modify_qp(ini, &r, rtr), 0);
  // A target needs them, as an RC responder does.
  r = rtr_attr(ini->qpn, kIpA);
  EXPECT_EQ(p.b.engine->modify_qp(tgt, &r, rtr), EINVAL);
  EXPECT_EQ(p.b.engine->modify_qp(tgt, &r, rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  // A target sends nothing of its own: RTS takes only the timeout and its PSN.
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.timeout = 14;
  s.retry_cnt = 7;
  EXPECT_EQ(p.b.engine->modify_qp(tgt, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN |
                                               IBV_QP_RETRY_CNT),
            EINVAL);
  EXPECT_EQ(p.b.engine->modify_qp(tgt, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN), 0);
}

}  // namespace
}  // namespace uroce::test

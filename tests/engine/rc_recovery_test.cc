// RC recovery paths end to end: a dead peer (retry exhaustion), RNR waits with and without
// infinite retry, PSN wrap-around, remote errors completing with the matching status, and
// flushing on the way to the error state.
#include <gtest/gtest.h>

#include "harness.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

ibv_send_wr write_wr(uint64_t id, ibv_sge* sge, uint64_t raddr, uint32_t rkey) {
  ibv_send_wr w{};
  w.wr_id = id;
  w.sg_list = sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = raddr;
  w.wr.rdma.rkey = rkey;
  return w;
}

TEST(RcRecovery, DeadPeerExhaustsRetriesThenFlushes) {
  Pair p;
  QpOptions o;
  o.timeout = 8;  // 4.096 us * 2^8 = ~1 ms
  o.retry_cnt = 3;
  auto [qa, qb] = p.rc_pair(o, o);
  // Kill the peer: its QP goes to RESET, so everything it receives is dropped.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(p.b.engine->modify_qp(qb, &a, IBV_QP_STATE), 0);

  std::vector<uint8_t> buf(64, 1);
  auto* mr = p.a.reg(buf, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), 64, mr->key};
  ibv_send_wr w1 = write_wr(1, &s, 0x1000, 0x2000);
  ibv_send_wr w2 = write_wr(2, &s, 0x1000, 0x2000);
  w1.next = &w2;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  const uint64_t start = p.now;
  std::vector<ibv_wc> wc;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& w : drain(p.a)) wc.push_back(w);
    return wc.size() == 2;
  }));
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(qa->state, IBV_QPS_ERR);
  // 1 original + 3 retries, each after one timeout: at least 4 timeouts' worth of time.
  EXPECT_EQ(p.a.engine->counters()[Counter::retransmit_timeouts], 4u);
  EXPECT_GE(p.now - start, 4 * (uint64_t{4096} << 8));
  EXPECT_LT(p.now - start, 6 * (uint64_t{4096} << 8));
}

TEST(RcRecovery, ATimeoutShrinksTheWindowSoGoBackNDoesNotResendEverything) {
  // 200 packets go out at once (the window is tx_window = 512); the peer answers nothing.
  // After each retransmission timeout only kMinCwnd packets are re-sent, each batch asking
  // for an ACK on its last packet, not the whole 200 again.
  const drivers::FaultConfig none{};
  Pair p(1, &none);  // a fault injector that does nothing but count what A sends
  QpOptions o;
  o.timeout = 8;
  o.retry_cnt = 3;
  auto [qa, qb] = p.rc_pair(o, o);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(p.b.engine->modify_qp(qb, &a, IBV_QP_STATE), 0);
  std::vector<uint8_t> buf(200 * 1024, 1);
  auto* mr = p.a.reg(buf, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), static_cast<uint32_t>(buf.size()), mr->key};
  ibv_send_wr w = write_wr(1, &s, 0x1000, 0x2000);
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  std::vector<ibv_wc> wc;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wc.push_back(x);
    return !wc.empty();
  }));
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(p.a.engine->counters()[Counter::retransmit_timeouts], 4u);
  EXPECT_EQ(p.fa->tx_counters().sent, 200u + 3 * kMinCwnd);
}

TEST(RcRecovery, RnrRetryExhaustedWithoutReceives) {
  Pair p;
  QpOptions o;
  o.rnr_retry = 2;
  o.min_rnr_timer = 14;  // 1.28 ms
  auto [qa, qb] = p.rc_pair(o, o);
  std::vector<uint8_t> buf(64, 1);
  auto* mr = p.a.reg(buf, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), 64, mr->key};
  ibv_send_wr w{};
  w.wr_id = 7;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  const uint64_t start = p.now;
  std::vector<ibv_wc> wc;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wc.push_back(x);
    return !wc.empty();
  }));
  EXPECT_EQ(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(p.b.engine->counters()[Counter::rnr_naks_sent], 3u);  // first try + 2 retries
  EXPECT_GE(p.now - start, 2 * wire::rnr_timer_ns(14));
}

TEST(RcRecovery, ProgressRefillsTheRnrRetries) {
  // The RNR retry count bounds the RNR NAKs of one message, not of the connection (IBA
  // C9-135's counter is reset by forward progress; rxe resets it too): with rnr_retry 1, three
  // messages that each meet one RNR NAK all complete. (A request-response program whose
  // reply overtakes the peer's post_recv meets one per message: rdma-core's
  // test_rdmacm_async_traffic_external_qp failed with RNR retry exceeded that way.)
  Pair p;
  QpOptions o;
  o.rnr_retry = 1;
  o.min_rnr_timer = 1;
  auto [qa, qb] = p.rc_pair(o, o);
  std::vector<uint8_t> src(64, 9), dst(64, 0);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  for (int m = 0; m < 3; ++m) {
    ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 64, smr->key};
    ibv_send_wr w{};
    w.wr_id = static_cast<uint64_t>(m);
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
    const uint64_t naks = p.b.engine->counters()[Counter::rnr_naks_sent];
    ASSERT_TRUE(p.run_until([&] { return p.b.engine->counters()[Counter::rnr_naks_sent] > naks; }));
    ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 64, dmr->key};
    ibv_recv_wr rw{};
    rw.sg_list = &r;
    rw.num_sge = 1;
    ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
    std::vector<ibv_wc> wa, wb;
    ASSERT_TRUE(p.run_until([&] {
      for (auto& x : drain(p.a)) wa.push_back(x);
      for (auto& x : drain(p.b)) wb.push_back(x);
      return wa.size() == 1 && wb.size() == 1;
    }));
    EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS) << "message " << m;
    EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS) << "message " << m;
  }
}

TEST(RcRecovery, InfiniteRnrRetryWaitsUntilAReceiveIsPosted) {
  Pair p;
  QpOptions o;
  o.rnr_retry = 7;  // infinite
  o.min_rnr_timer = 1;
  auto [qa, qb] = p.rc_pair(o, o);
  std::vector<uint8_t> src(3000, 9), dst(3000, 0);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 3000, smr->key};
  ibv_send_wr w{};
  w.wr_id = 7;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  // Let it bounce off RNR NAKs for a good while (far more than 7 retries).
  p.run_until([] { return false; }, 50'000'000);
  EXPECT_GT(p.b.engine->counters()[Counter::rnr_naks_sent], 20u);
  EXPECT_TRUE(drain(p.a).empty());
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 3000, dmr->key};
  ibv_recv_wr rw{};
  rw.wr_id = 8;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 1 && wb.size() == 1;
  }));
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].byte_len, 3000u);
  EXPECT_EQ(dst, src);
}

TEST(RcRecovery, PsnWrapsFrom0xFFFFFFTo0) {
  Pair p;
  QpOptions o;
  o.sq_psn = 0xFFFFFD;  // a 10-packet message crosses the wrap
  auto [qa, qb] = p.rc_pair(o, o);
  std::vector<uint8_t> src(10 * 1024), dst(10 * 1024, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i ^ (i >> 9));
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), static_cast<uint32_t>(src.size()), smr->key};
  for (int round = 0; round < 3; ++round) {
    ibv_send_wr w = write_wr(static_cast<uint64_t>(round), &s,
                             reinterpret_cast<uint64_t>(dst.data()), dmr->key);
    ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
    std::vector<ibv_wc> wc;
    ASSERT_TRUE(p.run_until([&] {
      for (auto& x : drain(p.a)) wc.push_back(x);
      return !wc.empty();
    }));
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(dst, src);
  EXPECT_EQ(qa->req.psn.value(), (0xFFFFFDu + 30) & 0xFFFFFF);
  EXPECT_EQ(qb->resp.epsn.value(), (0xFFFFFDu + 30) & 0xFFFFFF);
  EXPECT_EQ(p.a.engine->counters()[Counter::retransmitted_pkts], 0u);
}

TEST(RcRecovery, RemoteAccessErrorCompletesWithRemAccessErrAndFlushesTheRest) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  std::vector<uint8_t> src(100, 1), dst(100, 0);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, IBV_ACCESS_LOCAL_WRITE);  // no remote write
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 100, smr->key};
  ibv_send_wr w1 = write_wr(1, &s, reinterpret_cast<uint64_t>(dst.data()), dmr->key);
  ibv_send_wr w2 = write_wr(2, &s, reinterpret_cast<uint64_t>(dst.data()), dmr->key);
  w1.next = &w2;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  std::vector<ibv_wc> wc;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wc.push_back(x);
    return wc.size() == 2;
  }));
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(qa->state, IBV_QPS_ERR);
  EXPECT_EQ(qb->state, IBV_QPS_ERR);
  EXPECT_EQ(dst, std::vector<uint8_t>(100, 0));
}

TEST(RcRecovery, BadLocalKeyCompletesWithLocProtErr) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  std::vector<uint8_t> src(100, 1), dst(100, 0);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 100, smr->key + 1};
  ibv_send_wr w = write_wr(1, &s, reinterpret_cast<uint64_t>(dst.data()), dmr->key);
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  std::vector<ibv_wc> wc;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wc.push_back(x);
    return !wc.empty();
  }));
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(qa->state, IBV_QPS_ERR);
}

TEST(RcRecovery, ModifyToErrorFlushesPostedReceives) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  std::vector<uint8_t> dst(64);
  auto* dmr = p.b.reg(dst, kAll);
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 64, dmr->key};
  for (uint64_t id = 1; id <= 3; ++id) {
    ibv_recv_wr rw{};
    rw.wr_id = id;
    rw.sg_list = &r;
    rw.num_sge = 1;
    ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(p.b.engine->modify_qp(qb, &a, IBV_QP_STATE), 0);
  p.run_until([] { return false; }, 10'000);
  auto wc = drain(p.b);
  ASSERT_EQ(wc.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wc[i].wr_id, i + 1);
    EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc[i].opcode, IBV_WC_RECV);
  }
}

// The interface's MTU lowered under a running QP whose path MTU no longer fits: its long
// frames are lost at the port as on a wire (counted), short ones still pass, and the QP
// fails with RETRY_EXC_ERR after its retries instead of sending frames the link cannot carry.
// The port's active MTU follows, counting the headers (a 4096-byte IB MTU does not fit an
// interface MTU of 4096).
TEST(RcRecovery, FramesLongerThanALoweredMtuAreLostThenRetriesRunOut) {
  Pair p;
  QpOptions o;
  o.mtu = IBV_MTU_4096;
  o.timeout = 8;
  o.retry_cnt = 2;
  auto [qa, qb] = p.rc_pair(o, o);
  std::vector<uint8_t> src(8192, 7), dst(8192, 0);
  auto* ms = p.a.reg(src, kAll);
  auto* md = p.b.reg(dst, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 64, ms->key};
  // A short WRITE fits any MTU: it goes through before and after.
  ibv_send_wr w = write_wr(1, &s, reinterpret_cast<uint64_t>(dst.data()), md->key);
  p.a.engine->set_netdev_mtu(9000);
  ibv_port_attr pa;
  ASSERT_EQ(p.a.engine->query_port(1, &pa), 0);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_4096);
  p.a.engine->set_netdev_mtu(4096);
  ASSERT_EQ(p.a.engine->query_port(1, &pa), 0);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_2048);
  p.a.engine->set_netdev_mtu(1500);
  ASSERT_EQ(p.a.engine->query_port(1, &pa), 0);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  std::vector<ibv_wc> wc;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& c : drain(p.a)) wc.push_back(c);
    return wc.size() == 1;
  }));
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(dst[0], 7);
  EXPECT_EQ(p.a.engine->counters()[Counter::tx_drop_mtu], 0u);
  // 8 KiB in two 4096-byte packets: neither fits 1500.
  s.length = 8192;
  w.wr_id = 2;
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  wc.clear();
  ASSERT_TRUE(p.run_until([&] {
    for (auto& c : drain(p.a)) wc.push_back(c);
    return wc.size() == 1;
  }));
  EXPECT_EQ(wc[0].wr_id, 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(dst[4096], 0);  // nothing of it arrived
  // 1 + 2 retries, each of both packets (an ACK-requesting retry may send fewer).
  EXPECT_GE(p.a.engine->counters()[Counter::tx_drop_mtu], 3u);
  EXPECT_EQ(p.a.engine->counters()[Counter::retransmit_timeouts], 3u);
}

}  // namespace
}  // namespace uroce::test

// The engine reports the verbs side to a VerbsTracer (what UROCE_PCAP's .verbs file holds):
// QP state changes, each WR posted, each completion, and the transport's timers, in order.
#include <gtest/gtest.h>

#include "harness.h"

namespace uroce::test {
namespace {

using K = VerbsEvent::Kind;

struct Recorder final : VerbsTracer {
  void event(const VerbsEvent& e) override { events.push_back(e); }
  std::vector<VerbsEvent> of(K k) const {
    std::vector<VerbsEvent> out;
    for (const auto& e : events)
      if (e.kind == k) out.push_back(e);
    return out;
  }
  size_t index_of(K k, uint64_t wr_id) const {
    for (size_t i = 0; i < events.size(); ++i)
      if (events[i].kind == k && events[i].wr_id == wr_id) return i;
    return events.size();
  }
  std::vector<VerbsEvent> events;
};

TEST(VerbsTrace, StatesPostsAndCompletionsInOrder) {
  Pair p;
  Recorder ra, rb;
  p.a.engine->set_verbs_tracer(&ra);
  p.b.engine->set_verbs_tracer(&rb);
  auto [qa, qb] = p.rc_pair();
  // Both QPs went RESET -> INIT -> RTR -> RTS, and said so.
  for (const Recorder* r : {&ra, &rb}) {
    std::vector<int> states;
    for (const auto& e : r->of(K::kQpState)) states.push_back(e.status);
    EXPECT_EQ(states, (std::vector<int>{IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}));
  }
  EXPECT_EQ(ra.of(K::kQpState)[0].qpn, qa->qpn);

  std::vector<uint8_t> src(3000, 7), dst(4096, 0);
  auto* ms = p.a.reg(src, IBV_ACCESS_LOCAL_WRITE);
  auto* md = p.b.reg(dst, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge rs{reinterpret_cast<uint64_t>(dst.data()), 4096, md->key};
  ibv_recv_wr rw{};
  rw.wr_id = 41;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
  ibv_sge ss{reinterpret_cast<uint64_t>(src.data()), 3000, ms->key};
  ibv_send_wr sw{};
  sw.wr_id = 42;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(p.a.engine->post_send(qa, &sw, nullptr), 0);
  ASSERT_TRUE(p.run_until([&] { return !ra.of(K::kCompletion).empty() && !rb.of(K::kCompletion).empty(); }));

  const auto posts = ra.of(K::kPostSend);
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].qpn, qa->qpn);
  EXPECT_EQ(posts[0].wr_id, 42u);
  EXPECT_EQ(posts[0].opcode, IBV_WR_SEND);
  EXPECT_EQ(posts[0].length, 3000u);
  const auto sent = ra.of(K::kCompletion);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 42u);
  EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_LT(ra.index_of(K::kPostSend, 42), ra.index_of(K::kCompletion, 42));

  const auto recvs = rb.of(K::kPostRecv);
  ASSERT_EQ(recvs.size(), 1u);
  EXPECT_EQ(recvs[0].wr_id, 41u);
  EXPECT_EQ(recvs[0].length, 4096u);  // what the scatter list can take
  const auto got = rb.of(K::kCompletion);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].qpn, qb->qpn);
  EXPECT_EQ(got[0].wr_id, 41u);
  EXPECT_EQ(got[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(got[0].length, 3000u);  // what arrived
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
}

TEST(VerbsTrace, EachRateLimitTheApplicationSetsIsReported) {
  // ibv_modify_qp_rate_limit and IBV_QP_RATE_LIMIT: the limit (kbit/s) and the burst.
  Pair p;
  Recorder ra;
  p.a.engine->set_verbs_tracer(&ra);
  auto [qa, qb] = p.rc_pair();
  (void)qb;
  ibv_qp_rate_limit_attr rl{};
  rl.rate_limit = 5000;
  rl.max_burst_sz = 8192;
  ASSERT_EQ(p.a.engine->modify_rate_limit(qa, rl), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.rate_limit = 0;  // lifted
  ASSERT_EQ(p.a.engine->modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_RATE_LIMIT), 0);
  const auto limits = ra.of(K::kRateLimit);
  ASSERT_EQ(limits.size(), 2u);
  EXPECT_EQ(limits[0].qpn, qa->qpn);
  EXPECT_EQ(limits[0].length, 5000u);
  EXPECT_EQ(limits[0].status, 8192);
  EXPECT_EQ(limits[1].length, 0u);
  EXPECT_EQ(limits[1].status, 0);
}

TEST(VerbsTrace, TimeoutsAndTheErrorStateOfADeadPeer) {
  Pair p;
  Recorder ra;
  QpOptions o;
  o.timeout = 8;
  o.retry_cnt = 3;
  auto [qa, qb] = p.rc_pair(o, o);
  p.a.engine->set_verbs_tracer(&ra);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(p.b.engine->modify_qp(qb, &a, IBV_QP_STATE), 0);
  std::vector<uint8_t> buf(64, 1);
  auto* mr = p.a.reg(buf, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), 64, mr->key};
  ibv_send_wr w{};
  w.wr_id = 9;
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = 0x1000;
  w.wr.rdma.rkey = 0x2000;
  const uint32_t first_psn = qa->req.psn.value();
  ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
  ASSERT_TRUE(p.run_until([&] { return !ra.of(K::kCompletion).empty(); }));
  // One event per timeout the counter counts, each going back to the unacknowledged PSN.
  const auto timeouts = ra.of(K::kRetransmitTimeout);
  EXPECT_EQ(timeouts.size(), p.a.engine->counters()[Counter::retransmit_timeouts] - 1);
  ASSERT_FALSE(timeouts.empty());
  for (const auto& e : timeouts) EXPECT_EQ(e.psn, first_psn);
  const auto done = ra.of(K::kCompletion);
  EXPECT_EQ(done[0].status, IBV_WC_RETRY_EXC_ERR);
  const auto states = ra.of(K::kQpState);
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].status, IBV_QPS_ERR);
  EXPECT_LT(ra.index_of(K::kRetransmitTimeout, 0), ra.index_of(K::kCompletion, 9));
}

}  // namespace
}  // namespace uroce::test

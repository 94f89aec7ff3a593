// The connection manager end to end: two engines on an in-memory link, each with its own
// ConnectionManager, driven by an injected clock. Each side's transmissions pass a tap that
// records them, drops chosen ones (lost MADs) and injects others (replayed, forged or
// malformed MADs, as an attacker on the link would send them).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cm/cm.h"
#include "cm/rendezvous.h"
#include "../engine/harness.h"
#include "wire/icrc.h"

namespace uroce::test {
namespace {

using cm::ConnectionManager;
using cm::Endpoint;
using cm::Event;

// A CM MAD in an untagged IPv4 frame: Ethernet 14, IPv4 20, UDP 8, BTH 12, DETH 8, then the
// 256-byte MAD (its 24-byte header, then the CM data) and the ICRC.
constexpr size_t kMadOff = 14 + 20 + 8 + 12 + 8;
constexpr size_t kCmOff = kMadOff + wire::MadHeader::kLen;
constexpr size_t kQkeyOff = 14 + 20 + 8 + 12;

/// What a side puts on the link, recorded; `drop` loses frames, `inject` sends extra ones.
class TapPort final : public Port {
 public:
  explicit TapPort(Port& inner) : inner_(inner) {}
  uint16_t rx_burst(uint64_t now, std::span<Frame*> out) override {
    return inner_.rx_burst(now, out);
  }
  uint16_t tx_burst(uint64_t now, std::span<Frame* const> frames) override {
    for (Frame* f : frames) {
      std::vector<uint8_t> bytes(f->data, f->data + f->len);
      if (drop && drop(bytes)) {
        inner_.free_frame(f);
        ++dropped;
      } else {
        inner_.tx_burst(now, {&f, 1});
      }
      sent.push_back(std::move(bytes));
    }
    return static_cast<uint16_t>(frames.size());
  }
  Frame* alloc_frame() override { return inner_.alloc_frame(); }
  void free_frame(Frame* f) override { inner_.free_frame(f); }
  uint32_t max_frame_len() const override { return inner_.max_frame_len(); }
  std::array<uint8_t, 6> mac() const override { return inner_.mac(); }

  /// Puts `bytes` on the link as if this side had sent them.
  void inject(const std::vector<uint8_t>& bytes) {
    Frame* f = inner_.alloc_frame();
    ASSERT_NE(f, nullptr);
    std::memcpy(f->data, bytes.data(), bytes.size());
    f->len = static_cast<uint32_t>(bytes.size());
    inner_.tx_burst(0, {&f, 1});
  }

  std::function<bool(const std::vector<uint8_t>&)> drop;
  std::vector<std::vector<uint8_t>> sent;
  int dropped = 0;

 private:
  Port& inner_;
};

bool is_mad(const std::vector<uint8_t>& f) {
  return f.size() == kMadOff + wire::kMadLen + 4 && f[14 + 20 + 8 + 4] == 0 &&
         f[14 + 20 + 8 + 5] == 0 && f[14 + 20 + 8 + 6] == 0 && f[14 + 20 + 8 + 7] == 1;
}
uint16_t mad_attr(const std::vector<uint8_t>& f) {
  return static_cast<uint16_t>(f[kMadOff + 16] << 8 | f[kMadOff + 17]);
}
/// The first frame in `frames` carrying CM message `attr`.
std::vector<uint8_t> find_mad(const std::vector<std::vector<uint8_t>>& frames, uint16_t attr) {
  for (const auto& f : frames)
    if (is_mad(f) && mad_attr(f) == attr) return f;
  ADD_FAILURE() << "no MAD with attribute " << attr;
  return {};
}
/// Recomputes the ICRC after a test edits a frame (the edit must reach the CM, not die there).
void reseal(std::vector<uint8_t>& f) {
  const size_t l3 = f.size() - 14 - 4;
  wire::store_icrc(&f[f.size() - 4], wire::icrc_compute({&f[14], l3}, false, 20));
}
/// Drops the first `n` MADs with attribute `attr`.
std::function<bool(const std::vector<uint8_t>&)> lose(uint16_t attr, int n = 1) {
  auto left = std::make_shared<int>(n);
  return [attr, left](const std::vector<uint8_t>& f) {
    if (!is_mad(f) || mad_attr(f) != attr || *left == 0) return false;
    --*left;
    return true;
  };
}

constexpr uint16_t kPort = 7471;
constexpr uint64_t kListen = 100;  // B's listener
constexpr uint64_t kActive = 200;  // A's id

struct CmFixture : ::testing::Test {
  CmFixture() : CmFixture(kIpA, kIpB) {}
  CmFixture(const wire::Ipv4Addr& ipa, const wire::Ipv4Addr& ipb)
      : ip_a(ipa), ip_b(ipb), ta(link.a()), tb(link.b()), a(ta, ipa, 11), b(tb, ipb, 12) {
    a.engine->set_neighbor(wire::ipv4_mapped_gid(ip_b), link.b().mac());
    b.engine->set_neighbor(wire::ipv4_mapped_gid(ip_a), link.a().mac());
    timing.cm_response_timeout = 8;  // 4.096 us * 2^8 = 1.05 ms between resends
    timing.max_cm_retries = 3;
    timing.timewait_ns = 5'000'000;
  }
  void start_cms(bool with_b = true) {
    cma = std::make_unique<ConnectionManager>(
        *a.engine, [this](const Event& e) { ev_a.push_back(e); },
        [this] { return next_a++; }, 21, timing);
    if (with_b)
      cmb = std::make_unique<ConnectionManager>(
          *b.engine, [this](const Event& e) { ev_b.push_back(e); },
          [this] { return next_b++; }, 22, timing);
  }
  Endpoint ep(const wire::Ipv4Addr& ip, uint16_t port) {
    return {wire::ipv4_mapped_gid(ip), port};
  }
  /// Polls engines and CMs, jumping over idle time to the next timer.
  bool run(const std::function<bool()>& done, uint64_t max_ns = 1'000'000'000) {
    const uint64_t end = now + max_ns;
    while (now < end) {
      if (done()) return true;
      a.engine->poll(now);
      b.engine->poll(now);
      if (cma) cma->poll();
      if (cmb) cmb->poll();
      if (done()) return true;  // the application acts on an event before time moves on
      if (link.in_flight() == 0 && !a.engine->has_tx_work() && !b.engine->has_tx_work()) {
        uint64_t next = std::min(a.engine->next_deadline(), b.engine->next_deadline());
        if (cma) next = std::min(next, cma->next_deadline());
        if (cmb) next = std::min(next, cmb->next_deadline());
        if (next == TimerWheel::kNever) return done();
        now = std::max(now + 1000, next);
      } else {
        now += 1000;
      }
    }
    return done();
  }
  static const Event* last(const std::vector<Event>& v, int type) {
    for (auto it = v.rbegin(); it != v.rend(); ++it)
      if (it->type == type) return &*it;
    return nullptr;
  }
  bool has(const std::vector<Event>& v, int type) const { return last(v, type) != nullptr; }
  /// Moves `qp` to `state` with the attributes the CM gives for id `h`.
  void move(ConnectionManager& m, Side& s, Qp* qp, uint64_t h, ibv_qp_state state) {
    ibv_qp_attr at{};
    at.qp_state = state;
    int mask = 0;
    ASSERT_EQ(m.init_qp_attr(h, &at, &mask), 0);
    ASSERT_EQ(s.engine->modify_qp(qp, &at, mask), 0) << "to state " << state;
  }
  /// A's id resolved to `dst` (address, route) and its QP in INIT: ready to connect.
  void resolve_active(const Endpoint& dst) {
    ASSERT_EQ(cma->create(kActive, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
    ASSERT_EQ(cma->resolve_addr(kActive, ep(ip_a, 40000), dst, 2000), 0);
    ASSERT_TRUE(run([&] { return has(ev_a, cm::kAddrResolved); }));
    ASSERT_EQ(cma->resolve_route(kActive), 0);
    qa = make_qp(a, {});
    move(*cma, a, qa, kActive, IBV_QPS_INIT);
  }
  /// B listens on kPort; A resolves B and sends its REQ.
  void listen_and_connect(uint16_t to_port = kPort, ibv_qp_type type = IBV_QPT_RC,
                          uint16_t ps = wire::kRdmaPsTcp) {
    ASSERT_EQ(cmb->create(kListen, ps, type), 0);
    ASSERT_EQ(cmb->bind(kListen, ep(ip_b, kPort)), 0);
    ASSERT_EQ(cmb->listen(kListen, 8), 0);
    ASSERT_EQ(cma->create(kActive, ps, type), 0);
    ASSERT_EQ(cma->resolve_addr(kActive, ep(ip_a, 40000), ep(ip_b, to_port), 2000), 0);
    ASSERT_TRUE(run([&] { return has(ev_a, cm::kAddrResolved); }));
    ASSERT_EQ(cma->resolve_route(kActive), 0);
    ASSERT_TRUE(has(ev_a, cm::kRouteResolved));
    QpOptions o;
    o.type = type;
    qa = make_qp(a, o);
    move(*cma, a, qa, kActive, IBV_QPS_INIT);
    cm::ConnParam p;
    p.qp_num = qa->qpn;
    p.responder_resources = 4;
    p.initiator_depth = 4;
    p.retry_count = active_retry;
    p.rnr_retry_count = active_retry;
    const uint8_t hello[] = {'h', 'i'};
    ASSERT_EQ(cma->connect(kActive, p, hello, sizeof hello), 0);
  }
  /// The passive side's new id, once its CONNECT_REQUEST came.
  uint64_t accept_request() {
    EXPECT_TRUE(run([&] { return has(ev_b, cm::kConnectRequest); }));
    const Event* req = last(ev_b, cm::kConnectRequest);
    if (req == nullptr) return 0;
    EXPECT_EQ(req->listen_handle, kListen);
    const uint64_t h = req->handle;
    qb = make_qp(b, {});
    move(*cmb, b, qb, h, IBV_QPS_INIT);
    move(*cmb, b, qb, h, IBV_QPS_RTR);
    move(*cmb, b, qb, h, IBV_QPS_RTS);
    cm::ConnParam p;
    p.qp_num = qb->qpn;
    p.responder_resources = 4;
    p.initiator_depth = 4;
    p.rnr_retry_count = passive_rnr_retry;
    EXPECT_EQ(cmb->accept(h, p, nullptr, 0), 0);
    return h;
  }
  /// A: CONNECT_RESPONSE, QP to RTS, RTU out.
  void establish_active() {
    ASSERT_TRUE(run([&] { return has(ev_a, cm::kConnectResponse); }));
    move(*cma, a, qa, kActive, IBV_QPS_RTR);
    move(*cma, a, qa, kActive, IBV_QPS_RTS);
    ASSERT_EQ(cma->establish(kActive), 0);
  }
  uint8_t active_retry = 7, passive_rnr_retry = 7;  // the ConnParam counts each side passes
  /// A full connection: returns B's id.
  uint64_t connect_all() {
    listen_and_connect();
    const uint64_t hb = accept_request();
    establish_active();
    EXPECT_TRUE(run([&] { return has(ev_b, cm::kEstablished); }));
    return hb;
  }
  /// A SEND from `from` to `to` arrives intact (so the QPs agree on PSNs and addresses).
  void send_through(Side& from, Qp* qf, Side& to, Qp* qt, uint8_t fill) {
    std::vector<uint8_t> src(3000, fill), dst(4096, 0);
    mem::Mr* smr = from.reg(src, IBV_ACCESS_LOCAL_WRITE);
    mem::Mr* dmr = to.reg(dst, IBV_ACCESS_LOCAL_WRITE);
    ibv_sge rs{reinterpret_cast<uint64_t>(dst.data()), 4096, dmr->key};
    ibv_recv_wr rwr{};
    rwr.wr_id = 1;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    ASSERT_EQ(to.engine->post_recv(qt, &rwr, nullptr), 0);
    ibv_sge ss{reinterpret_cast<uint64_t>(src.data()), 3000, smr->key};
    ibv_send_wr swr{};
    swr.wr_id = 2;
    swr.sg_list = &ss;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(from.engine->post_send(qf, &swr, nullptr), 0);
    std::vector<ibv_wc> wf, wt;
    ASSERT_TRUE(run([&] {
      for (auto& w : drain(from)) wf.push_back(w);
      for (auto& w : drain(to)) wt.push_back(w);
      return !wf.empty() && !wt.empty();
    }));
    EXPECT_EQ(wf[0].status, IBV_WC_SUCCESS);
    ASSERT_EQ(wt[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wt[0].byte_len, 3000u);
    EXPECT_EQ(dst[0], fill);
    EXPECT_EQ(dst[2999], fill);
  }
  uint64_t counter(Side& s, Counter c) { return s.engine->counters().get(c); }

  wire::Ipv4Addr ip_a, ip_b;  // the sides' addresses (kIpA, kIpB unless given)
  drivers::MemLink link;
  TapPort ta, tb;
  Side a, b;
  ConnectionManager::Timing timing;
  std::unique_ptr<ConnectionManager> cma, cmb;
  std::vector<Event> ev_a, ev_b;
  uint64_t next_a = 2000, next_b = 1000;
  uint64_t now = 1'000'000;
  Qp* qa = nullptr;
  Qp* qb = nullptr;
};

TEST_F(CmFixture, ConnectsAndCarriesDataBothWays) {
  start_cms();
  const uint64_t hb = connect_all();
  EXPECT_EQ(cma->state(kActive), cm::State::kEstablished);
  EXPECT_EQ(cmb->state(hb), cm::State::kEstablished);
  // The private data reached the passive side behind rdma_cm's IP header.
  const Event* req = last(ev_b, cm::kConnectRequest);
  ASSERT_EQ(req->pdata_len, wire::CmReq::kPrivateLen - wire::CmaIpHeader::kLen);
  EXPECT_EQ(req->pdata[0], 'h');
  EXPECT_EQ(req->pdata[1], 'i');
  EXPECT_EQ(req->param.qp_num, qa->qpn);
  EXPECT_EQ(last(ev_a, cm::kConnectResponse)->param.qp_num, qb->qpn);
  // A starting PSN is what its sender expects to receive: the REQ's is A's receive PSN and
  // B's send PSN, the REP's the other way round (as the kernel's ib_cm reads them).
  wire::CmReq wreq;
  ASSERT_EQ(wire::CmReq::parse({&find_mad(ta.sent, wire::cm_attr::kReq)[kCmOff],
                                wire::kCmDataLen}, wreq), wire::ParseError::kOk);
  wire::CmRep wrep;
  ASSERT_EQ(wire::CmRep::parse({&find_mad(tb.sent, wire::cm_attr::kRep)[kCmOff],
                                wire::kCmDataLen}, wrep), wire::ParseError::kOk);
  // The path as the kernel's rdma_cm gives it over RoCE: hop limit 64, the port's current
  // rate (no static rate limit for the passive side's QP), the GIDs of both addresses.
  EXPECT_EQ(wreq.primary.hop_limit, 64);
  EXPECT_EQ(wreq.primary.packet_rate, 0);
  EXPECT_EQ(wreq.primary.local_gid, wire::ipv4_mapped_gid(kIpA));
  EXPECT_EQ(wreq.primary.remote_gid, wire::ipv4_mapped_gid(kIpB));
  ibv_qp_attr at{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(a.engine->query_qp(qa, &at, IBV_QP_RQ_PSN | IBV_QP_SQ_PSN, &ia), 0);
  EXPECT_EQ(at.rq_psn, wreq.starting_psn);
  EXPECT_EQ(at.sq_psn, wrep.starting_psn);
  ASSERT_EQ(b.engine->query_qp(qb, &at, IBV_QP_RQ_PSN | IBV_QP_SQ_PSN, &ia), 0);
  EXPECT_EQ(at.rq_psn, wrep.starting_psn);
  EXPECT_EQ(at.sq_psn, wreq.starting_psn);
  send_through(a, qa, b, qb, 0xA5);
  send_through(b, qb, a, qa, 0x5A);
  EXPECT_EQ(cma->stats().mads_tx, 2u);  // REQ, RTU
  EXPECT_EQ(cmb->stats().mads_tx, 1u);  // REP
  EXPECT_EQ(cma->stats().resent + cmb->stats().resent, 0u);
}

TEST_F(CmFixture, RetryCountsOverSevenAreTakenAsSevenAsTheKernelCapsThem) {
  // libfabric asks for 15 (its "infinite"); the fields are 3 bits, and the kernel's rdma_cm
  // takes anything larger as 7, on both sides. The QPs reach RTS with 7 (15 would be EINVAL).
  active_retry = 15;
  passive_rnr_retry = 200;
  start_cms();
  connect_all();
  wire::CmReq req;
  ASSERT_EQ(wire::CmReq::parse({&find_mad(ta.sent, wire::cm_attr::kReq)[kCmOff],
                               wire::kCmDataLen}, req), wire::ParseError::kOk);
  EXPECT_EQ(req.retry_count, 7);
  EXPECT_EQ(req.rnr_retry_count, 7);
  wire::CmRep rep;
  ASSERT_EQ(wire::CmRep::parse({&find_mad(tb.sent, wire::cm_attr::kRep)[kCmOff],
                               wire::kCmDataLen}, rep), wire::ParseError::kOk);
  EXPECT_EQ(rep.rnr_retry_count, 7);
  ibv_qp_attr at{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(a.engine->query_qp(qa, &at, IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY, &ia), 0);
  EXPECT_EQ(at.retry_cnt, 7);
  EXPECT_EQ(at.rnr_retry, 7);
  EXPECT_EQ(a.engine->query_qp(qa, &at, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(at.qp_state, IBV_QPS_RTS);
  ASSERT_EQ(b.engine->query_qp(qb, &at, IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY, &ia), 0);
  EXPECT_EQ(at.retry_cnt, 7);
  EXPECT_EQ(at.rnr_retry, 7);
}

TEST_F(CmFixture, RtrGivesTheKernelsMinRnrTimerOf655Ms) {
  // The kernel's CM (cm_init_qp_rtr_attr) gives an RC QP min_rnr_timer 0, the longest code
  // (655.36 ms): a program whose receive comes a little late (rdma-core's own
  // test_rdmacm_async_traffic_external_qp posts it after its SEND completes) is waited for,
  // not failed with RNR retry exceeded after a few 0.64 ms waits on a slow machine.
  start_cms();
  connect_all();
  ibv_qp_attr at{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(a.engine->query_qp(qa, &at, IBV_QP_MIN_RNR_TIMER, &ia), 0);
  EXPECT_EQ(at.min_rnr_timer, 0);
  at.min_rnr_timer = 99;
  ASSERT_EQ(b.engine->query_qp(qb, &at, IBV_QP_MIN_RNR_TIMER, &ia), 0);
  EXPECT_EQ(at.min_rnr_timer, 0);
}

TEST_F(CmFixture, AConnectWithTooMuchPrivateDataIsRefusedAndLeavesTheIdAsItWas) {
  // An RC REQ has 92 bytes of private data, 36 of them rdma_cm's IP header: 57 bytes are
  // EINVAL before anything is sent or registered, and the same id then connects.
  start_cms();
  ASSERT_EQ(cmb->create(kListen, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cmb->bind(kListen, ep(kIpB, kPort)), 0);
  ASSERT_EQ(cmb->listen(kListen, 8), 0);
  resolve_active(ep(kIpB, kPort));
  cm::ConnParam p;
  p.qp_num = qa->qpn;
  const uint8_t room = wire::CmReq::kPrivateLen - wire::CmaIpHeader::kLen;
  std::vector<uint8_t> big(room + 1, 0x42);
  EXPECT_EQ(cma->connect(kActive, p, big.data(), static_cast<uint8_t>(big.size())), EINVAL);
  EXPECT_EQ(cma->state(kActive), cm::State::kRouteResolved);
  EXPECT_EQ(cma->stats().mads_tx, 0u);
  ASSERT_EQ(cma->connect(kActive, p, big.data(), room), 0);
  const uint64_t hb = accept_request();
  establish_active();
  ASSERT_TRUE(run([&] { return has(ev_b, cm::kEstablished); }));
  EXPECT_EQ(last(ev_b, cm::kConnectRequest)->pdata_len, room);
  EXPECT_EQ(cmb->state(hb), cm::State::kEstablished);
  EXPECT_EQ(cma->stats().mads_tx, 2u);  // one REQ, one RTU
}

TEST_F(CmFixture, LostReqIsSentAgainAfterTheResponseTimeout) {
  start_cms();
  ta.drop = lose(wire::cm_attr::kReq);
  listen_and_connect();
  const uint64_t t0 = now;
  accept_request();
  EXPECT_GE(now - t0, wire::cm_timeout_ns(timing.cm_response_timeout));
  establish_active();
  ASSERT_TRUE(run([&] { return has(ev_b, cm::kEstablished); }));
  EXPECT_EQ(ta.dropped, 1);
  EXPECT_EQ(cma->stats().resent, 1u);
  send_through(a, qa, b, qb, 1);
}

TEST_F(CmFixture, LostRepBringsTheReqAgainWhichIsAnsweredWithTheSameRep) {
  start_cms();
  tb.drop = lose(wire::cm_attr::kRep);
  listen_and_connect();
  accept_request();
  establish_active();
  ASSERT_TRUE(run([&] { return has(ev_b, cm::kEstablished); }));
  // One connection request only: the second REQ was recognised as the first one again.
  int requests = 0;
  for (const Event& e : ev_b) requests += e.type == cm::kConnectRequest;
  EXPECT_EQ(requests, 1);
  EXPECT_GE(cmb->stats().drop_duplicate, 1u);
  EXPECT_EQ(tb.dropped, 1);
  send_through(b, qb, a, qa, 2);
}

TEST_F(CmFixture, LostRtuBringsTheRepAgainWhichIsAnsweredWithTheRtu) {
  start_cms();
  ta.drop = lose(wire::cm_attr::kRtu);
  const uint64_t hb = connect_all();
  EXPECT_EQ(cmb->state(hb), cm::State::kEstablished);
  EXPECT_EQ(cmb->stats().resent, 1u);          // the REP
  EXPECT_GE(cma->stats().drop_duplicate, 1u);  // which A answered with its RTU again
  send_through(a, qa, b, qb, 3);
}

TEST_F(CmFixture, ConnectingToAPortNobodyHoldsIsRejectedAsInvalidServiceId) {
  start_cms();
  cmb->set_unowned([](uint16_t, uint16_t port, const wire::Gid&) { return port == 9999; });
  listen_and_connect(9999);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kRejected); }));
  EXPECT_EQ(last(ev_a, cm::kRejected)->status, 8);  // IBA's "invalid service ID"
  EXPECT_FALSE(has(ev_b, cm::kConnectRequest));
  EXPECT_EQ(cmb->stats().rejects_sent, 1u);
  EXPECT_EQ(cma->state(kActive), cm::State::kClosed);
}

TEST_F(CmFixture, AMadToOurOwnAddressAlsoGoesOutForAnotherProcessOnTheInterface) {
  // A client connecting to a server on its own host: the server may be another process on
  // this interface, with its own connection manager, which only hears what goes out (the
  // kernel shows each packet socket the frames the others send). Our CM gets the REQ too
  // and leaves it (a service another process may hold).
  start_cms(false);  // no unowned callback: the port may belong to another process
  a.engine->set_neighbor(wire::ipv4_mapped_gid(kIpA), link.a().mac());
  resolve_active(ep(kIpA, kPort));
  cm::ConnParam p;
  p.qp_num = qa->qpn;
  ASSERT_EQ(cma->connect(kActive, p, nullptr, 0), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kUnreachable); }));  // nobody answered
  const auto mac = link.a().mac();
  size_t reqs_out = 0;
  for (const auto& f : ta.sent)
    if (is_mad(f) && mad_attr(f) == wire::cm_attr::kReq) {
      EXPECT_TRUE(std::equal(mac.begin(), mac.end(), f.begin())) << "to our own MAC";
      ++reqs_out;
    }
  EXPECT_EQ(reqs_out, 1u + timing.max_cm_retries);  // the REQ and each resend, on the wire
  EXPECT_EQ(counter(a, Counter::tx_gsi_copies), reqs_out);
  EXPECT_GE(counter(a, Counter::tx_loopback), reqs_out);  // and each to us
  EXPECT_EQ(cma->stats().drop_not_ours, reqs_out);  // ours took each and left it alone
  EXPECT_EQ(cma->stats().rejects_sent, 0u);
}

TEST_F(CmFixture, ALoopbackAddressBindsAndListensButNoRequestFromTheWireMatchesIt) {
  // libfabric binds "localhost" to ask which device it is on (none, as with the kernel); an
  // address of no device stays refused.
  start_cms();
  ASSERT_EQ(cmb->create(300, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  EXPECT_EQ(cmb->bind(300, ep({10, 9, 9, 9}, 9999)), EADDRNOTAVAIL);
  ASSERT_EQ(cmb->bind(300, ep({127, 0, 0, 1}, 9999)), 0);
  ASSERT_EQ(cmb->listen(300, 8), 0);
  ASSERT_EQ(cmb->create(301, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  Endpoint v6{};
  v6.ip[15] = 1;  // ::1
  v6.port = kPort;
  EXPECT_EQ(cmb->bind(301, v6), 0);
  // A request for B's own address on port 9999 does not reach the loopback listener there:
  // rejected, as for a port nobody holds (a loopback listener is no wildcard).
  cmb->set_unowned([](uint16_t, uint16_t port, const wire::Gid&) { return port == 9999; });
  listen_and_connect(9999);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kRejected); }));
  EXPECT_FALSE(has(ev_b, cm::kConnectRequest));
}

// The udp port on loopback: each process has a 127.0.0.x of its own, and programs listen on
// 127.0.0.1 (docs/udp.md).
struct LoopbackCm : CmFixture {
  LoopbackCm() : CmFixture({127, 0, 0, 5}, {127, 0, 0, 6}) {}
};

TEST_F(LoopbackCm, AClientOf127001WaitsForTheRendezvousAndReachesTheListenerThere) {
  start_cms();
  // The rendezvous knows nobody on the port for the first 20 looks (the server has not
  // listened yet), then B.
  int looks = 0;
  cma->set_rendezvous([&](uint16_t ps, uint16_t port) -> std::optional<wire::Gid> {
    EXPECT_EQ(ps, wire::kRdmaPsTcp);
    EXPECT_EQ(port, kPort);
    if (++looks <= 20) return std::nullopt;
    return wire::ipv4_mapped_gid(ip_b);
  });
  ASSERT_EQ(cmb->create(kListen, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cmb->bind(kListen, ep({127, 0, 0, 1}, kPort)), 0);
  ASSERT_EQ(cmb->listen(kListen, 8), 0);
  resolve_active(ep({127, 0, 0, 1}, kPort));
  EXPECT_GT(looks, 20);
  EXPECT_EQ(last(ev_a, cm::kAddrResolved)->dst.ip, wire::ipv4_mapped_gid(ip_b));
  cm::ConnParam p;
  p.qp_num = qa->qpn;
  p.responder_resources = 4;
  p.initiator_depth = 4;
  ASSERT_EQ(cma->connect(kActive, p, nullptr, 0), 0);
  ASSERT_NE(accept_request(), 0u);
  establish_active();
  ASSERT_TRUE(run([&] { return has(ev_b, cm::kEstablished); }));
  send_through(a, qa, b, qb, 0x5A);
  send_through(b, qb, a, qa, 0xA5);
}

TEST_F(LoopbackCm, WithNobodyListeningTheResolutionEndsAtItsTimeoutAsRefused) {
  start_cms();
  int looks = 0;
  cma->set_rendezvous([&](uint16_t, uint16_t) -> std::optional<wire::Gid> {
    ++looks;
    return std::nullopt;
  });
  ASSERT_EQ(cma->create(kActive, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  const uint64_t t0 = a.engine->now();  // the CM's clock
  ASSERT_EQ(cma->resolve_addr(kActive, ep(ip_a, 40000), ep({127, 0, 0, 1}, kPort), 50), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kAddrError); }));
  EXPECT_EQ(last(ev_a, cm::kAddrError)->status, -ECONNREFUSED);
  EXPECT_GE(a.engine->now() - t0, 50'000'000u);  // asked until the timeout it was given
  EXPECT_GE(looks, 40);             // about once a millisecond
  EXPECT_EQ(cma->state(kActive), cm::State::kIdle);
  // A loopback address of its own is no question for the rendezvous.
  const int before = looks;
  ASSERT_EQ(cma->resolve_addr(kActive, ep(ip_a, 40000), ep(ip_a, kPort), 50), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kAddrResolved); }));
  EXPECT_EQ(looks, before);
}

TEST_F(LoopbackCm, AnExactListenerGoesFirstAndAnIpv6LoopbackOneTakesNoIpv4Request) {
  start_cms();
  ASSERT_EQ(cmb->create(300, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cmb->bind(300, ep({127, 0, 0, 1}, kPort)), 0);
  ASSERT_EQ(cmb->listen(300, 8), 0);
  listen_and_connect();  // kListen, bound to B's own 127.0.0.6, takes the request
  EXPECT_NE(accept_request(), 0u);  // (it checks the request came to kListen)
  // Port 9999: only a listener on ::1 waits there; a request to B's IPv4 address is not its.
  ASSERT_EQ(cmb->create(301, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  Endpoint v6{};
  v6.ip[15] = 1;  // ::1
  v6.port = 9999;
  ASSERT_EQ(cmb->bind(301, v6), 0);
  ASSERT_EQ(cmb->listen(301, 8), 0);
  cmb->set_unowned([](uint16_t, uint16_t port, const wire::Gid&) { return port == 9999; });
  ASSERT_EQ(cma->create(400, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cma->resolve_addr(400, ep(ip_a, 40001), ep(ip_b, 9999), 2000), 0);
  ASSERT_TRUE(run([&] { return cma->state(400) == cm::State::kAddrResolved; }));
  ASSERT_EQ(cma->resolve_route(400), 0);
  Qp* q = make_qp(a, {});
  move(*cma, a, q, 400, IBV_QPS_INIT);
  cm::ConnParam p;
  p.qp_num = q->qpn;
  const size_t seen = ev_b.size();
  ASSERT_EQ(cma->connect(400, p, nullptr, 0), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kRejected); }));
  EXPECT_EQ(last(ev_a, cm::kRejected)->status, 8);  // invalid service ID: nobody's
  for (size_t i = seen; i < ev_b.size(); ++i) EXPECT_NE(ev_b[i].type, cm::kConnectRequest);
}

TEST(Rendezvous, NamesAListenerAndFindsItInProcNetUnix) {
  const std::string name = cm::rendezvous_name(wire::kRdmaPsTcp, 18515, {127, 0, 0, 5});
  EXPECT_EQ(name, "uroce-cm:106:18515:127.0.0.5");
  // /proc/net/unix as the kernel writes it: the abstract namespace's NUL shown as '@'.
  const std::string text =
      "Num       RefCount Protocol Flags    Type St Inode Path\n"
      "0000000000000000: 00000002 00000000 00000000 0002 01 1001 @uroce-qpn-lo-0\n"
      "0000000000000000: 00000002 00000000 00000000 0002 01 1002 @uroce-cm:106:7471:127.0.0.9\n"
      "0000000000000000: 00000002 00000000 00010000 0001 01 1003 /run/systemd/notify\n"
      "0000000000000000: 00000002 00000000 00000000 0002 01 1004 @uroce-cm:111:18515:127.0.0.7\n"
      "0000000000000000: 00000002 00000000 00000000 0002 01 1005 @" + name + "\n"
      "0000000000000000: 00000002 00000000 00000000 0002 01 1006 @uroce-cm:106:18515:127.0.0.8";
  const auto tcp = cm::rendezvous_find(text, wire::kRdmaPsTcp, 18515);
  ASSERT_TRUE(tcp.has_value());
  EXPECT_EQ(*tcp, (wire::Ipv4Addr{127, 0, 0, 5}));  // the first one named on that port
  const auto udp = cm::rendezvous_find(text, wire::kRdmaPsUdp, 18515);
  ASSERT_TRUE(udp.has_value());
  EXPECT_EQ(*udp, (wire::Ipv4Addr{127, 0, 0, 7}));  // port spaces apart
  EXPECT_FALSE(cm::rendezvous_find(text, wire::kRdmaPsTcp, 1851).has_value());  // no prefix match
  EXPECT_FALSE(cm::rendezvous_find(text, wire::kRdmaPsTcp, 7472).has_value());
  EXPECT_FALSE(cm::rendezvous_find("", wire::kRdmaPsTcp, 7471).has_value());
  // Damaged or foreign names are passed over.
  EXPECT_FALSE(cm::rendezvous_find("x 1 @uroce-cm:106:7471:127.0.0\n"
                                   "x 1 @uroce-cm:106:7471:\n"
                                   "x 1 @uroce-cm:106:7471:127.0.0.1.2.3.4.5\n"
                                   "@uroce-cm:106:7471:127.0.0.3",
                                   wire::kRdmaPsTcp, 7471)
                   .has_value());
}

TEST_F(CmFixture, AServiceAnotherProcessMayHoldIsLeftAloneAndTheClientTimesOut) {
  start_cms();  // no unowned callback: the port may belong to another process
  listen_and_connect(9999);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kUnreachable); }));
  EXPECT_EQ(last(ev_a, cm::kUnreachable)->status, -ETIMEDOUT);
  EXPECT_EQ(cma->stats().resent, timing.max_cm_retries);
  EXPECT_EQ(cma->stats().timeouts, 1u);
  EXPECT_EQ(cmb->stats().drop_not_ours, 1u + timing.max_cm_retries);
  EXPECT_EQ(cmb->stats().mads_tx, 0u);
}

TEST_F(CmFixture, APeerWithoutAConnectionManagerDropsTheMadsAndTheClientTimesOut) {
  start_cms(false);
  ASSERT_EQ(cma->create(kActive, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cma->resolve_addr(kActive, ep(kIpA, 40000), ep(kIpB, kPort), 2000), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kAddrResolved); }));
  ASSERT_EQ(cma->resolve_route(kActive), 0);
  cm::ConnParam p;
  p.qp_num = 0x123;
  ASSERT_EQ(cma->connect(kActive, p, nullptr, 0), 0);
  const uint64_t t0 = now;
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kUnreachable); }));
  // Every try waited its response timeout.
  EXPECT_GE(now - t0, (1u + timing.max_cm_retries) * wire::cm_timeout_ns(timing.cm_response_timeout));
  EXPECT_EQ(counter(b, Counter::rx_drop_gsi), 1u + timing.max_cm_retries);
  EXPECT_EQ(counter(b, Counter::rx_gsi), 0u);
}

TEST_F(CmFixture, ReplayedForgedAndMalformedMadsAreDroppedAndCounted) {
  start_cms();
  const uint64_t hb = connect_all();
  const auto req = find_mad(ta.sent, wire::cm_attr::kReq);
  const auto rep = find_mad(tb.sent, wire::cm_attr::kRep);
  const size_t events_a = ev_a.size(), events_b = ev_b.size();
  const size_t sent_b = tb.sent.size();

  // Replays: the REQ again is recognised, and B (established) sends nothing for it.
  ta.inject(req);
  run([] { return false; }, 10'000'000);
  EXPECT_EQ(cmb->stats().drop_duplicate, 1u);
  EXPECT_EQ(tb.sent.size(), sent_b);
  // The REP again: A's RTU must have been lost, so A sends it again.
  tb.inject(rep);
  run([] { return false; }, 10'000'000);
  EXPECT_EQ(cma->stats().drop_duplicate, 1u);
  EXPECT_EQ(mad_attr(ta.sent.back()), wire::cm_attr::kRtu);

  // Forged: a REP for a connection A never asked for.
  auto forged = rep;
  forged[kCmOff + 4] ^= 0xFF;  // its remote comm ID
  reseal(forged);
  tb.inject(forged);
  // Malformed: a CM class version 3, an attribute the CM does not have, and a REQ whose
  // service ID is not an IP one.
  auto bad_version = req;
  bad_version[kMadOff + 2] = 3;
  reseal(bad_version);
  ta.inject(bad_version);
  auto bad_attr = req;
  bad_attr[kMadOff + 17] = 0x99;
  reseal(bad_attr);
  ta.inject(bad_attr);
  auto not_ip = req;
  not_ip[kCmOff + 8] = 0x12;  // the service ID's first byte
  not_ip[kCmOff + 0] ^= 0xFF;  // a new comm ID, so it is no duplicate
  reseal(not_ip);
  ta.inject(not_ip);
  // Not a CM MAD at all: QP1 with a Q_Key other than the GSI's.
  auto wrong_qkey = req;
  wrong_qkey[kQkeyOff] ^= 0x01;
  reseal(wrong_qkey);
  ta.inject(wrong_qkey);
  // Damaged on the way: the ICRC no longer matches.
  auto corrupt = req;
  corrupt[kCmOff + 20] ^= 0x40;
  ta.inject(corrupt);
  run([] { return false; }, 10'000'000);

  EXPECT_EQ(cma->stats().drop_unmatched, 1u);
  EXPECT_EQ(cmb->stats().drop_malformed, 2u);
  EXPECT_EQ(cmb->stats().drop_not_ours, 1u);
  EXPECT_EQ(counter(b, Counter::rx_drop_gsi_bad), 1u);
  EXPECT_EQ(b.engine->counters().get(wire::ParseError::kBadIcrc), 1u);
  // None of it made an event or changed a connection.
  EXPECT_EQ(ev_a.size(), events_a);
  EXPECT_EQ(ev_b.size(), events_b);
  EXPECT_EQ(cma->state(kActive), cm::State::kEstablished);
  EXPECT_EQ(cmb->state(hb), cm::State::kEstablished);
  send_through(a, qa, b, qb, 4);
}

TEST_F(CmFixture, RandomlyDamagedMadsAreEachTakenAndJudgedWithoutHarm) {
  // An attacker on the link sends every CM message of a real exchange with random bytes
  // changed (re-sealed, so they reach the CM). Each must be counted, and none may crash the
  // CM or leave it unable to take the next.
  start_cms();
  connect_all();
  std::vector<std::vector<uint8_t>> mads;
  for (const auto& f : ta.sent) if (is_mad(f)) mads.push_back(f);
  for (const auto& f : tb.sent) if (is_mad(f)) mads.push_back(f);
  ASSERT_GE(mads.size(), 3u);
  std::mt19937_64 rng(2026);
  auto rx = [&] { return cmb->stats().mads_rx + cma->stats().mads_rx; };
  auto tx = [&] { return cmb->stats().mads_tx + cma->stats().mads_tx; };
  const uint64_t rx0 = rx(), tx0 = tx();
  constexpr int kRounds = 3000;
  for (int i = 0; i < kRounds; ++i) {
    auto f = mads[rng() % mads.size()];
    const bool from_a = std::equal(f.begin() + 6, f.begin() + 12, link.a().mac().begin());
    for (int flips = 1 + static_cast<int>(rng() % 8); flips > 0; --flips)
      f[kMadOff + rng() % wire::kMadLen] = static_cast<uint8_t>(rng());
    reseal(f);
    (from_a ? ta : tb).inject(f);
    run([] { return false; }, 2'000'000);
  }
  // Every MAD on the link reached a CM: the injected ones and the CMs' answers to them.
  EXPECT_EQ(rx() - rx0, static_cast<uint64_t>(kRounds) + (tx() - tx0));
  EXPECT_GT(tx() - tx0, 0u);  // some were answered (a REQ again, a REJ, ...)
  // Still a working CM: a new connection on another port.
  ev_a.clear();
  ASSERT_EQ(cmb->create(kListen + 1, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cmb->bind(kListen + 1, ep(kIpB, kPort + 1)), 0);
  ASSERT_EQ(cmb->listen(kListen + 1, 8), 0);
  ASSERT_EQ(cma->create(kActive + 1, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cma->resolve_addr(kActive + 1, ep(kIpA, 40001), ep(kIpB, kPort + 1), 2000), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kAddrResolved); }));
  ASSERT_EQ(cma->resolve_route(kActive + 1), 0);
  cm::ConnParam p;
  p.qp_num = 0x777;
  ASSERT_EQ(cma->connect(kActive + 1, p, nullptr, 0), 0);
  ASSERT_TRUE(run([&] {
    for (const Event& e : ev_b)
      if (e.type == cm::kConnectRequest && e.listen_handle == kListen + 1) return true;
    return false;
  }));
}

TEST_F(CmFixture, AFullBacklogDropsRequestsUntilOneIsAnswered) {
  // The listener takes 2; a third REQ (a flood's, say) is dropped without an answer, and its
  // resend gets through once the application has answered one.
  start_cms();
  ASSERT_EQ(cmb->create(kListen, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cmb->bind(kListen, ep(kIpB, kPort)), 0);
  ASSERT_EQ(cmb->listen(kListen, 2), 0);
  for (uint64_t i = 0; i < 3; ++i) {
    const uint64_t h = kActive + i;
    ASSERT_EQ(cma->create(h, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
    ASSERT_EQ(cma->resolve_addr(h, ep(kIpA, static_cast<uint16_t>(40000 + i)), ep(kIpB, kPort),
                                2000), 0);
    ASSERT_TRUE(run([&] { return cma->state(h) == cm::State::kAddrResolved; }));
    ASSERT_EQ(cma->resolve_route(h), 0);
    cm::ConnParam p;
    p.qp_num = static_cast<uint32_t>(0x100 + i);
    ASSERT_EQ(cma->connect(h, p, nullptr, 0), 0);
  }
  auto requests = [&] {
    std::vector<uint64_t> out;
    for (const Event& e : ev_b) if (e.type == cm::kConnectRequest) out.push_back(e.handle);
    return out;
  };
  run([] { return false; }, 100'000);  // less than a resend timeout
  ASSERT_EQ(requests().size(), 2u);
  EXPECT_EQ(cmb->stats().drop_backlog, 1u);
  ASSERT_EQ(cmb->reject(requests()[0], nullptr, 0), 0);
  ASSERT_TRUE(run([&] { return requests().size() == 3; }));
  // The dropped REQ came through on a resend (the unanswered one was resent too).
  EXPECT_GE(cma->stats().resent, 1u);
  EXPECT_EQ(cmb->stats().drop_backlog, 1u);
}

TEST_F(CmFixture, DisconnectWithALostDrepEndsOnBothSides) {
  start_cms();
  const uint64_t hb = connect_all();
  tb.drop = lose(wire::cm_attr::kDrep);
  ASSERT_EQ(cma->disconnect(kActive), 0);
  ASSERT_TRUE(run([&] { return has(ev_b, cm::kDisconnected); }));
  ASSERT_EQ(cmb->disconnect(hb), 0);  // the DREP (lost)
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kDisconnected); }));
  EXPECT_EQ(tb.dropped, 1);
  EXPECT_EQ(cma->stats().resent, 1u);          // the DREQ
  EXPECT_EQ(cmb->stats().drop_duplicate, 1u);  // answered from time wait
  EXPECT_EQ(cma->state(kActive), cm::State::kTimewait);
  // Time wait ends, and then an old DREQ finds nobody.
  const auto dreq = find_mad(ta.sent, wire::cm_attr::kDreq);
  run([] { return false; }, 2 * timing.timewait_ns);
  EXPECT_EQ(cmb->state(hb), cm::State::kClosed);
  ta.inject(dreq);
  run([] { return false; }, 1'000'000);
  EXPECT_EQ(cmb->stats().drop_unmatched, 1u);
}

TEST_F(CmFixture, AProcessThatLeavesTellsEveryPeerOnce) {
  // B has an established connection and an unanswered request when its process goes away:
  // A hears DISCONNECTED for the first and REJECTED for the second, from one MAD each, and
  // B's CM then has nothing left to resend.
  start_cms();
  connect_all();
  ASSERT_EQ(cma->create(kActive + 1, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
  ASSERT_EQ(cma->resolve_addr(kActive + 1, ep(kIpA, 40001), ep(kIpB, kPort), 2000), 0);
  ASSERT_TRUE(run([&] { return cma->state(kActive + 1) == cm::State::kAddrResolved; }));
  ASSERT_EQ(cma->resolve_route(kActive + 1), 0);
  Qp* q2 = make_qp(a, {});
  move(*cma, a, q2, kActive + 1, IBV_QPS_INIT);
  cm::ConnParam p;
  p.qp_num = q2->qpn;
  ASSERT_EQ(cma->connect(kActive + 1, p, nullptr, 0), 0);
  ASSERT_TRUE(run([&] {
    int n = 0;
    for (const Event& e : ev_b) n += e.type == cm::kConnectRequest;
    return n == 2;
  }));
  const uint64_t mads_before = cmb->stats().mads_tx;
  EXPECT_EQ(cmb->shutdown(), 2u);  // the listener is no connection: not counted
  EXPECT_EQ(cmb->stats().mads_tx, mads_before + 2);  // a DREQ and a REJ
  ASSERT_TRUE(run([&] {
    return has(ev_a, cm::kDisconnected) && cma->state(kActive + 1) == cm::State::kClosed;
  }));
  EXPECT_EQ(last(ev_a, cm::kDisconnected)->handle, kActive);
  EXPECT_EQ(last(ev_a, cm::kRejected)->handle, kActive + 1);
  run([] { return false; }, 100'000'000);  // long past every resend timeout
  EXPECT_EQ(cmb->stats().mads_tx, mads_before + 2);
  EXPECT_EQ(cmb->next_deadline(), TimerWheel::kNever);
}

TEST_F(CmFixture, AnApplicationsRejectCarriesItsReasonAndPrivateData) {
  start_cms();
  listen_and_connect();
  ASSERT_TRUE(run([&] { return has(ev_b, cm::kConnectRequest); }));
  const uint8_t why[] = {'n', 'o'};
  ASSERT_EQ(cmb->reject(last(ev_b, cm::kConnectRequest)->handle, why, sizeof why), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kRejected); }));
  const Event* e = last(ev_a, cm::kRejected);
  EXPECT_EQ(e->status, 28);  // consumer reject
  ASSERT_GE(e->pdata_len, 2);
  EXPECT_EQ(e->pdata[0], 'n');
  EXPECT_EQ(e->pdata[1], 'o');
}

TEST_F(CmFixture, AnIdDestroyedFromInsideTheEventSinkIsRejectedOnceTheSinkReturns) {
  // The provider's sink destroys a connection request's new id when its listener is gone
  // (the program destroyed it meanwhile): from inside poll(), while the CM still holds it.
  // The peer must hear a REJ at once, not wait for its REQ to time out.
  timing.cm_response_timeout = 20;  // a resend only after 4.3 s: a REJ is all that ends it
  start_cms(false);
  cmb = std::make_unique<ConnectionManager>(
      *b.engine,
      [this](const Event& e) {
        ev_b.push_back(e);
        if (e.type == cm::kConnectRequest) cmb->destroy(e.handle);
      },
      [this] { return next_b++; }, 22, timing);
  listen_and_connect();
  const uint64_t start = now;
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kRejected); }, 100'000'000));
  EXPECT_LT(now - start, 10'000'000u);  // the round trip, no resend
  EXPECT_EQ(last(ev_a, cm::kRejected)->status, 28);  // consumer reject, as the kernel's
  ASSERT_TRUE(has(ev_b, cm::kConnectRequest));
  EXPECT_EQ(cmb->state(last(ev_b, cm::kConnectRequest)->handle), cm::State::kClosed);
  EXPECT_EQ(cmb->id_count(), 1u);  // the listener
  EXPECT_EQ(cmb->stats().rejects_sent, 1u);
}

TEST_F(CmFixture, ASinkMayDestroyAnyIdEvenWhileTheCmWalksItsIds) {
  // ADDR_RESOLVED comes from the CM's walk over its ids: an id destroyed by the sink right
  // then must not be erased under the walk (each is destroyed once the walk is over).
  cma = std::make_unique<ConnectionManager>(
      *a.engine,
      [this](const Event& e) {
        ev_a.push_back(e);
        if (e.type == cm::kAddrResolved) cma->destroy(e.handle);
      },
      [this] { return next_a++; }, 21, timing);
  for (uint64_t h = 1; h <= 8; ++h) {
    ASSERT_EQ(cma->create(h, wire::kRdmaPsTcp, IBV_QPT_RC), 0);
    ASSERT_EQ(cma->resolve_addr(h, ep(kIpA, static_cast<uint16_t>(40000 + h)), ep(kIpB, kPort),
                                2000),
              0);
  }
  ASSERT_TRUE(run([&] { return ev_a.size() == 8; }));
  for (const Event& e : ev_a) EXPECT_EQ(e.type, cm::kAddrResolved);
  EXPECT_EQ(cma->id_count(), 0u);
}

TEST_F(CmFixture, SidrGivesAUdClientTheServersQpnAndQkey) {
  start_cms();
  listen_and_connect(kPort, IBV_QPT_UD, wire::kRdmaPsUdp);
  ASSERT_TRUE(run([&] { return has(ev_b, cm::kConnectRequest); }));
  cm::ConnParam p;
  p.qp_num = 0x4321;
  p.qkey = 0x1234567;
  ASSERT_EQ(cmb->accept(last(ev_b, cm::kConnectRequest)->handle, p, nullptr, 0), 0);
  ASSERT_TRUE(run([&] { return has(ev_a, cm::kEstablished); }));
  const Event* e = last(ev_a, cm::kEstablished);
  EXPECT_EQ(e->param.qp_num, 0x4321u);
  EXPECT_EQ(e->param.qkey, 0x1234567u);
  EXPECT_EQ(e->ah.is_global, 1);
  EXPECT_EQ(0, std::memcmp(e->ah.grh.dgid.raw, wire::ipv4_mapped_gid(kIpB).data(), 16));
}

}  // namespace
}  // namespace uroce::test

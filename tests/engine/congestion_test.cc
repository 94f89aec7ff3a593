// Congestion control in the engine (stack/engine/congestion.cc): ECN marking, the CNP a
// CE-marked packet earns (the notification point), the cut and the pacer a CNP brings (the
// reaction point), and DCQCN on an incast through a simulated switch (MemSwitch) whose
// egress is the bottleneck.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <ostream>

#include "memlink/mem_switch.h"
#include "responder_fixture.h"
#include "xrc_fixture.h"

namespace uroce::test {
namespace {

// ---- The notification point ----------------------------------------------------------------

using CongestionNp = Responder;

TEST_F(CongestionNp, CeMarkedRequestIsAnsweredWithACnpAtMostOncePerPeriod) {
  send_ecn = kEcnCe;
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(64, 1), reth(0, 64));
  std::vector<ParsedPacket> out = step();
  ASSERT_EQ(out.size(), 2u);  // the CNP (sent on arrival) and the ACK
  const ParsedPacket* cnp = nullptr;
  size_t cnp_at = 0;
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].hdr.bth.opcode == opcode::kCnp) cnp = &out[i], cnp_at = i;
  ASSERT_NE(cnp, nullptr);
  // Byte for byte what RNICs send: BTH opcode 0x81, BECN, P_Key 0xFFFF, DestQP = the QP that
  // sent the marked packet, PSN 0, then 16 zero bytes and the ICRC (checked by the parser).
  const std::vector<uint8_t>& f = sent[cnp_at];
  ASSERT_EQ(f.size(), 14u + 20 + 8 + 12 + 16 + 4);
  EXPECT_EQ(f[14 + 1], 48 << 2);  // DSCP 48, Not-ECT
  const uint8_t* bth = &f[14 + 20 + 8];
  EXPECT_EQ(bth[0], 0x81);
  EXPECT_EQ(bth[1] & 0xF0, 0x00);  // SE, M, pad 0, TVer 0
  EXPECT_EQ(bth[2], 0xFF);
  EXPECT_EQ(bth[3], 0xFF);
  EXPECT_EQ(bth[4], 0x40);  // BECN, nothing else
  EXPECT_EQ((bth[5] << 16) | (bth[6] << 8) | bth[7], static_cast<int>(kPeerQpn));
  EXPECT_EQ((bth[9] << 16) | (bth[10] << 8) | bth[11], 0);
  EXPECT_EQ(bth[8], 0);  // AckReq 0
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bth[12 + i], 0) << i;
  EXPECT_EQ(engine->counters()[Counter::rx_ce_marked], 1u);
  EXPECT_EQ(engine->counters()[Counter::cnp_sent], 1u);

  // Another marked packet 2 us later: within min_time_between_cnps (50 us), no CNP.
  send(opcode::kRcWriteOnly, kEpsn + 1, std::vector<uint8_t>(64, 2), reth(0, 64));
  out = step();
  for (const ParsedPacket& p : out) EXPECT_NE(p.hdr.bth.opcode, opcode::kCnp);
  EXPECT_EQ(engine->counters()[Counter::cnp_held], 1u);
  // 50 us after the first CNP: the next mark is answered.
  now += 50'000;
  send(opcode::kRcWriteOnly, kEpsn + 2, std::vector<uint8_t>(64, 3), reth(0, 64));
  out = step();
  EXPECT_EQ(std::count_if(out.begin(), out.end(),
                          [](const ParsedPacket& p) { return p.hdr.bth.opcode == opcode::kCnp; }),
            1);
  EXPECT_EQ(engine->counters()[Counter::cnp_sent], 2u);
}

TEST_F(CongestionNp, UnmarkedAndEctPacketsEarnNoCnp) {
  for (uint8_t ecn : {kEcnNotEct, kEcnEct0, kEcnEct1}) {
    send_ecn = ecn;
    send(opcode::kRcWriteOnly, kEpsn + ecn, std::vector<uint8_t>(8, ecn), reth(0, 8));
    for (const ParsedPacket& p : step()) EXPECT_NE(p.hdr.bth.opcode, opcode::kCnp);
  }
  EXPECT_EQ(engine->counters()[Counter::cnp_sent], 0u);
  EXPECT_EQ(engine->counters()[Counter::rx_ce_marked], 0u);
}

// ---- The reaction point --------------------------------------------------------------------

class CongestionRp : public Responder {
 protected:
  void configure(EngineConfig& cfg) override {
    cfg.cc.dcqcn.line_rate_mbps = 1000;
    cfg.cc.ecn = ecn_;
  }
  /// A CNP from the peer's address for `qpn`.
  void cnp(uint32_t qpn) {
    dest_qpn = qpn;
    send(opcode::kCnp, 0, {}, {}, false);
    dest_qpn = 0;
  }
  /// Posts `len` bytes from the MR on `q` as `opcode`; `fill` sets the rest of the WR.
  template <typename Fill>
  void post(Qp* q, ibv_wr_opcode opcode, uint32_t len, Fill fill) {
    ibv_sge s{reinterpret_cast<uint64_t>(mem.data() + 32), len, mr->key};
    ibv_send_wr w{};
    w.wr_id = 7;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = opcode;
    fill(w);
    ASSERT_EQ(engine->post_send(q, &w, nullptr), 0);
  }
  /// Posts an RDMA WRITE of `len` bytes from the QP.
  void post_write(uint32_t len) {
    post(qp, IBV_WR_RDMA_WRITE, len, [](ibv_send_wr& w) {
      w.wr.rdma.remote_addr = 0x1000;
      w.wr.rdma.rkey = 0x1234;
    });
  }
  /// Packets leaving at `at` (frames of `frame_len` bytes) were paced at `mbps`: the pacer
  /// lets the first use up to the 20 us it was late by, then each waits its predecessor's
  /// wire time.
  void expect_paced(const std::vector<uint64_t>& at, size_t frame_len, double mbps) {
    const double wire_ns = static_cast<double>(frame_len) * 8 * 1000 / mbps;
    const double span = static_cast<double>(at.back() - at.front());
    const double gaps = static_cast<double>(at.size() - 1);
    EXPECT_GE(span, gaps * wire_ns - 20'000 - 1);
    EXPECT_LE(span, gaps * wire_ns + 4'000);
    EXPECT_GT(engine->counters()[Counter::cc_paced], 0u);
  }
  /// Times at which the next `n` packets leave, stepping 1 us at a time.
  std::vector<uint64_t> departures(size_t n, size_t* frame_len) {
    std::vector<uint64_t> at;
    for (int i = 0; i < 100000 && at.size() < n; ++i) {
      for (size_t k = step().size(); k > 0; --k) at.push_back(now);
      if (!sent.empty()) *frame_len = sent[0].size();
    }
    return at;
  }
  bool ecn_ = true;
};

TEST_F(CongestionRp, DataLeavesEct0AndACnpFromThePeerCutsTheRate) {
  post_write(64);
  std::vector<ParsedPacket> out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ip4.ecn, kEcnEct0);
  EXPECT_FALSE(qp->cc.dcqcn.limited());

  cnp(qp->qpn);
  step();
  EXPECT_EQ(engine->counters()[Counter::cnp_rcvd], 1u);
  EXPECT_EQ(engine->counters()[Counter::cc_rate_cuts], 1u);
  ASSERT_TRUE(qp->cc.dcqcn.limited());
  EXPECT_DOUBLE_EQ(qp->cc.dcqcn.rate_mbps(), 500);
  CcQpStats st[4];
  ASSERT_EQ(engine->cc_limited_qps(st, 4), 1u);
  EXPECT_EQ(st[0].qpn, qp->qpn);
  EXPECT_EQ(st[0].rate_mbps, 500u);
  EXPECT_EQ(st[0].alpha_1024, 1024u);
}

TEST_F(CongestionRp, CnpsFromStrangersOrForOtherQpsChangeNothing) {
  send_src = {10, 0, 0, 77};  // not the QP's peer
  cnp(qp->qpn);
  step();
  send_src = kIpA;
  cnp(qp->qpn + 1);  // no such QP
  step();
  EXPECT_EQ(engine->counters()[Counter::rx_drop_cnp], 2u);
  EXPECT_EQ(engine->counters()[Counter::cnp_rcvd], 0u);
  EXPECT_FALSE(qp->cc.dcqcn.limited());
}

TEST_F(CongestionRp, ThePacerSpacesPacketsByTheirWireTimeAtTheCutRate) {
  cnp(qp->qpn);
  step();
  ASSERT_DOUBLE_EQ(qp->cc.dcqcn.rate_mbps(), 500);
  post_write(4096);  // 4 packets of 1024 bytes (MTU 1024)
  std::vector<uint64_t> at;
  size_t frame_len = 0;
  for (int i = 0; i < 1000 && at.size() < 4; ++i) {
    for (const ParsedPacket& p : step()) {
      ASSERT_NE(p.hdr.bth.opcode, opcode::kCnp);
      at.push_back(now);
    }
    if (!sent.empty()) frame_len = sent[0].size();
  }
  ASSERT_EQ(at.size(), 4u);
  // At 500 Mb/s a frame of ~1.1 KB takes ~17 us.
  expect_paced(at, frame_len, 500);
  // The rate timer brings it back to line rate: fast recovery halves the distance to the
  // target (the line rate: the first cut was from there) every 300 us, 500 -> 996 Mb/s in
  // seven steps, within the 5 Mb/s AI step of 1000: free again, and the pacer stops.
  for (int i = 0; i < 6; ++i) {
    now += 300'000;
    step();
  }
  EXPECT_TRUE(qp->cc.dcqcn.limited());
  now += 300'000;
  step();
  EXPECT_FALSE(qp->cc.dcqcn.limited());
}

TEST_F(CongestionRp, APassSaysWhenItLeftDataToThePacer) {
  // pacer_held() is what an application's empty poll asks before it gives the CPU away
  // (stack/verbs/datapath.cc): true only after a pass that left a packet waiting for its
  // slot.
  step();
  EXPECT_FALSE(engine->pacer_held());
  cnp(qp->qpn);
  step();
  ASSERT_TRUE(qp->cc.dcqcn.limited());
  post_write(4096);  // 4 packets at 500 Mb/s: ~17 us each, in steps of 1 us
  int held = 0, sending = 0, sent_packets = 0;
  for (int i = 0; i < 1000 && sent_packets < 4; ++i) {
    sent_packets += static_cast<int>(step().size());
    (engine->pacer_held() ? held : sending) += 1;
  }
  ASSERT_EQ(sent_packets, 4);
  // Three wire times (~51 us) less the 20 us of lateness a burst may make up: the passes
  // between held a packet, the last one sent it.
  EXPECT_GE(held, 25);
  EXPECT_GE(sending, 1);
  step();                   // everything sent: nothing waits
  EXPECT_FALSE(engine->pacer_held());
}

TEST_F(CongestionRp, AReadResponseStreamIsPacedAtTheRateItsCnpsCut) {
  // The data of an RDMA READ flows from the responder: the requester, which receives it
  // CE-marked, sends its CNPs to the responder's QP, and that QP's READ responses slow down.
  cnp(qp->qpn);
  step();
  ASSERT_DOUBLE_EQ(qp->cc.dcqcn.rate_mbps(), 500);
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 4096));  // 4 responses of 1024 bytes
  std::vector<uint64_t> at;
  size_t shortest = SIZE_MAX, longest = 0;  // FIRST and LAST carry an AETH, MIDDLE not
  for (int i = 0; i < 1000 && at.size() < 4; ++i) {
    const std::vector<ParsedPacket> out = step();
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k].info->op != Operation::kReadResponse) continue;
      at.push_back(now);
      shortest = std::min(shortest, sent[k].size());
      longest = std::max(longest, sent[k].size());
    }
  }
  ASSERT_EQ(at.size(), 4u);
  // At 500 Mb/s a frame of ~1.1 KB takes ~17 us: the four span three wire times, less the
  // 20 us of lateness the pacer lets a burst make up and a tick of the timer wheel (1 us).
  const auto wire_ns = [](size_t len) { return static_cast<double>(len) * 8 * 1000 / 500; };
  const double span = static_cast<double>(at.back() - at.front());
  EXPECT_GE(span, 3 * wire_ns(shortest) - 20'000 - 1'100);
  EXPECT_LE(span, 3 * wire_ns(longest) + 4'000);
  EXPECT_GT(engine->counters()[Counter::cc_paced], 0u);
}

TEST_F(CongestionRp, ACnpCutsAQpThatOnlyAnswersReadsAnRcQpInRtrOrAnXrcTarget) {
  // Both send READ responses (paced like any data of theirs) without ever reaching RTS
  // (ibv_xsrq_pingpong leaves its targets in RTR), so the CNPs of those responses are theirs.
  QpOptions o;
  o.rq_psn = kEpsn;
  side_qp(o, /*stop_at_rtr=*/true);
  ASSERT_EQ(qp->state, IBV_QPS_RTR);
  cnp(qp->qpn);
  step();
  EXPECT_TRUE(qp->cc.dcqcn.limited());
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 4096));
  for (int i = 0; i < 1000 && engine->counters()[Counter::cc_paced] == 0; ++i) step();
  EXPECT_GT(engine->counters()[Counter::cc_paced], 0u);  // its responses wait for the pacer

  Xrcd* xrcd = engine->create_xrcd();
  ASSERT_NE(xrcd, nullptr);
  ibv_qp_init_attr ta{};
  ta.qp_type = IBV_QPT_XRC_RECV;
  Qp* tgt = engine->create_qp(nullptr, &ta, xrcd);
  ASSERT_NE(tgt, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  ASSERT_EQ(engine->modify_qp(tgt, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                           IBV_QP_ACCESS_FLAGS), 0);
  a = xrc::rtr_attr(kPeerQpn, kIpA);
  ASSERT_EQ(engine->modify_qp(tgt, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                           IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
  cnp(tgt->qpn);
  step();
  EXPECT_TRUE(tgt->cc.dcqcn.limited());
  EXPECT_EQ(engine->counters()[Counter::cnp_rcvd], 2u);
  EXPECT_EQ(engine->counters()[Counter::rx_drop_cnp], 0u);
  send_src = {10, 0, 0, 77};  // still only from its own peer
  cnp(tgt->qpn);
  step();
  send_src = kIpA;
  EXPECT_EQ(engine->counters()[Counter::rx_drop_cnp], 1u);
  ASSERT_EQ(engine->destroy_qp(tgt), 0);
  ASSERT_EQ(engine->destroy_xrcd(xrcd), 0);
}

TEST_F(CongestionRp, AtLineRateAReadIsAnsweredInOnePass) {
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 4096));
  size_t responses = 0;
  for (const ParsedPacket& p : step()) responses += p.info->op == Operation::kReadResponse;
  EXPECT_EQ(responses, 4u);
  EXPECT_EQ(engine->counters()[Counter::cc_paced], 0u);
}

// ---- UD QPs: one rate per QP, whoever its datagrams go to -----------------------------------

class CongestionUd : public CongestionRp {
 protected:
  void SetUp() override {
    CongestionRp::SetUp();
    ud = new_qp(IBV_QPT_UD);
    ASSERT_NE(ud, nullptr);
    QpOptions o;
    o.type = IBV_QPT_UD;
    ASSERT_EQ(connect_qp(*engine, ud, 0, kIpA, o, kQkey), 0);
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.sgid_index = 1;
    const Gid g = ipv4_mapped_gid(kIpA);
    std::memcpy(ah.grh.dgid.raw, g.data(), 16);
    to_peer = engine->create_ah(pd, &ah);
    ASSERT_NE(to_peer, nullptr);
  }
  /// A datagram of `len` bytes from the UD QP to the peer's QP 0x123.
  void post_datagram(uint32_t len) {
    post(ud, IBV_WR_SEND, len, [this](ibv_send_wr& w) {
      w.wr.ud.ah = &to_peer->ibv;
      w.wr.ud.remote_qpn = 0x123;
      w.wr.ud.remote_qkey = kQkey;
    });
  }
  static constexpr uint32_t kQkey = 0x11111111;
  Qp* ud = nullptr;
  Ah* to_peer = nullptr;
};

TEST_F(CongestionUd, DatagramsLeaveEct0AndACeMarkedOneEarnsItsSenderACnp) {
  post_datagram(64);
  std::vector<ParsedPacket> out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ip4.ecn, kEcnEct0);

  // A CE-marked datagram from the peer's QP 0x456: the CNP goes back to that QP, at that
  // address and MAC (a UD QP has no peer of its own), as an RNIC's.
  ExtHeaders x;
  x.deth = {kQkey, 0, 0x456};
  dest_qpn = ud->qpn;
  send_ecn = kEcnCe;
  send(opcode::kUdSendOnly, 5, std::vector<uint8_t>(32, 1), x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  const RoceHeaders& c = out[0].hdr;
  EXPECT_EQ(c.bth.opcode, opcode::kCnp);
  EXPECT_EQ(c.bth.dest_qp, 0x456u);
  EXPECT_TRUE(c.bth.becn);
  EXPECT_EQ(c.eth.dst, kPeerMac);
  EXPECT_EQ(c.ip4.dst, kIpA);
  EXPECT_EQ(c.ip4.src, kIpB);
  EXPECT_EQ(c.ip4.dscp, 48);
  EXPECT_EQ(c.ip4.ecn, 0);
  EXPECT_EQ(engine->counters()[Counter::cnp_sent], 1u);
  // Another within min_time_between_cnps: held.
  send(opcode::kUdSendOnly, 6, std::vector<uint8_t>(32, 1), x);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(engine->counters()[Counter::cnp_held], 1u);
}

TEST_F(CongestionUd, ACnpFromAnyHostCutsTheUdQpsRateAndItsDatagramsArePaced) {
  send_src = {10, 0, 0, 77};  // not a peer of any connected QP: a UD QP may send to anyone
  cnp(ud->qpn);
  step();
  EXPECT_EQ(engine->counters()[Counter::cnp_rcvd], 1u);
  ASSERT_TRUE(ud->cc.dcqcn.limited());
  ASSERT_DOUBLE_EQ(ud->cc.dcqcn.rate_mbps(), 500);
  for (int i = 0; i < 4; ++i) post_datagram(1000);
  std::vector<uint64_t> at;
  size_t len = 0;
  for (int i = 0; i < 1000 && at.size() < 4; ++i) {
    const std::vector<ParsedPacket> out = step();
    for (size_t k = 0; k < out.size(); ++k) {
      at.push_back(now);
      len = sent[k].size();
    }
  }
  ASSERT_EQ(at.size(), 4u);
  const double wire_ns = static_cast<double>(len) * 8 * 1000 / 500;
  const double span = static_cast<double>(at.back() - at.front());
  EXPECT_GE(span, 3 * wire_ns - 20'000 - 1'100);  // the pacer's slack and a wheel tick
  EXPECT_LE(span, 3 * wire_ns + 4'000);
  EXPECT_GT(engine->counters()[Counter::cc_paced], 0u);
}

class CongestionRpOff : public CongestionRp {
 protected:
  void configure(EngineConfig& cfg) override {
    ecn_ = false;
    CongestionRp::configure(cfg);
  }
};

TEST_F(CongestionRpOff, WithEcnOffPacketsAreNotEctAndCnpsAreOnlyCounted) {
  post_write(64);
  std::vector<ParsedPacket> out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ip4.ecn, kEcnNotEct);
  cnp(qp->qpn);
  step();
  EXPECT_EQ(engine->counters()[Counter::cnp_rcvd], 1u);
  EXPECT_EQ(engine->counters()[Counter::cc_rate_cuts], 0u);
  EXPECT_FALSE(qp->cc.dcqcn.limited());
}

// ---- The application's rate limit (IBV_QP_RATE_LIMIT, ibv_modify_qp_rate_limit) ---------------

TEST_F(CongestionRpOff, ARateLimitSpacesPacketsWithoutDcqcnAndZeroLiftsIt) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.rate_limit = 100'000;  // kbit/s: 100 Mb/s
  ASSERT_EQ(engine->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_RATE_LIMIT), 0);
  post_write(4096);  // 4 packets of 1024 bytes (MTU 1024)
  size_t frame_len = 0;
  std::vector<uint64_t> at = departures(4, &frame_len);
  ASSERT_EQ(at.size(), 4u);
  expect_paced(at, frame_len, 100);  // ~88 us a frame
  // Lifted: the next four leave in one pass.
  a.rate_limit = 0;
  ASSERT_EQ(engine->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_RATE_LIMIT), 0);
  now += 1'000'000;  // the ACKs of the first WRITE are not needed: no window in the way
  post_write(4096);
  at = departures(4, &frame_len);
  ASSERT_EQ(at.size(), 4u);
  EXPECT_EQ(at.back(), at.front());
}

TEST_F(CongestionRpOff, ARateLimitsBurstLeavesAtOnceThenTheRateHolds) {
  ibv_qp_rate_limit_attr rl{};
  rl.rate_limit = 10'000;  // 10 Mb/s: ~880 us per frame
  rl.max_burst_sz = 2 * 1100;
  rl.typical_pkt_sz = 1100;
  ASSERT_EQ(engine->modify_rate_limit(qp, rl), 0);
  post_write(4096);  // 4 packets
  size_t frame_len = 0;
  std::vector<uint64_t> at = departures(4, &frame_len);
  ASSERT_EQ(at.size(), 4u);
  // The burst (2 x 1100 bytes at 10 Mb/s: 1.76 ms of credit) lets the first packets go at
  // once; the last is held to the rate.
  EXPECT_LE(at[1] - at[0], 2'000u);
  const double wire_ns = static_cast<double>(frame_len) * 8 * 1000 / 10;
  EXPECT_GE(static_cast<double>(at[3] - at[2]), wire_ns - 1'000);
}

TEST_F(CongestionRp, RateLimitsAreCheckedAsTheKernelsTableAndRdmaCoreSayIt) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.rate_limit = Engine::kRateLimitMaxKbps + 1;  // beyond packet_pacing_caps
  EXPECT_EQ(engine->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_RATE_LIMIT), EINVAL);
  a.qp_state = IBV_QPS_SQD;  // only on the way into RTS or in it
  a.rate_limit = 1000;
  EXPECT_EQ(engine->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_RATE_LIMIT), EINVAL);
  Qp* ud = new_qp(IBV_QPT_UD);  // not a QP type the attribute applies to
  ASSERT_NE(ud, nullptr);
  ibv_qp_rate_limit_attr rl{};
  rl.rate_limit = 1000;
  EXPECT_EQ(engine->modify_rate_limit(ud, rl), EINVAL);
  rl.comp_mask = 1;  // nothing is defined there
  EXPECT_EQ(engine->modify_rate_limit(qp, rl), EINVAL);
  rl = {};
  rl.max_burst_sz = 4096;  // a burst without a rate
  EXPECT_EQ(engine->modify_rate_limit(qp, rl), EINVAL);
  rl.rate_limit = 1000;
  EXPECT_EQ(engine->modify_rate_limit(qp, rl), 0);
  EXPECT_EQ(qp->cc.rate_limit_kbps, 1000u);
  EXPECT_EQ(qp->cc.burst_bytes, 4096u);
  // RESET forgets it, as every attribute.
  a = {};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(engine->modify_qp(qp, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp->cc.rate_limit_kbps, 0u);
}

// ---- Incast through a simulated switch ------------------------------------------------------

struct IncastResult {
  std::vector<uint64_t> bytes;  // per sender, WRITE bytes completed in the measured window
  double goodput_share = 0;     // of the bottleneck's rate
  double jain = 0;
  uint64_t dropped = 0, marked = 0, max_backlog = 0, retransmitted = 0, cnps = 0, failed = 0;
  uint64_t dropped_warmup = 0;  // of `dropped`, before the measured window
  uint64_t steady_backlog = 0;  // the longest queue in the measured window (bytes)
  double converge_ms = -1;  // late joiner: from its start until the shares are fair (see below)
};

struct IncastCase {
  size_t senders;
  double link_gbps;        // every link
  double bottleneck_gbps;  // the switch's port to the receiver
  // DCQCN's clock (timers, CNP spacing) is stretched and its increase steps shrunk by this
  // factor: its defaults suit 10-100 Gb/s links; a 1 Gb/s bottleneck wants them 10 x slower.
  double scale;
  uint64_t late_ns = 0;  // the last sender starts this late (0: with the others)
};

void PrintTo(const IncastCase& c, std::ostream* os) {
  *os << c.senders << " senders at " << c.link_gbps << " Gb/s into " << c.bottleneck_gbps
      << " Gb/s, DCQCN's clock x" << c.scale;
}

/// `c.senders` engines each keep four 64 KiB WRITEs in flight to one receiver through a
/// switch whose egress to it is the bottleneck. Measured over [warmup, end) of simulated
/// time.
IncastResult incast(const IncastCase& c, bool ecn, uint64_t warmup_ns, uint64_t end_ns) {
  const size_t senders = c.senders;
  drivers::MemSwitch::Config sc;
  sc.ports = static_cast<uint32_t>(senders + 1);
  // A 256 KiB queue and DCTCP-style step marking (every ECT packet that leaves more than
  // 16 KiB behind it is marked CE, at dequeue: the mark reports the queue as it is now).
  sc.link_gbps = c.link_gbps;
  sc.rate_gbps = c.bottleneck_gbps;
  sc.queue_bytes = 256 * 1024;
  sc.kmin_bytes = 16 * 1024;
  sc.kmax_bytes = 16 * 1024 + 1;
  sc.mark_on_dequeue = true;
  sc.max_frame_len = 4352;  // MTU 4096 frames
  drivers::MemSwitch sw(sc);
  const auto ip = [](size_t i) { return wire::Ipv4Addr{10, 0, 1, static_cast<uint8_t>(i + 1)}; };
  std::vector<std::unique_ptr<Engine>> eng;
  for (size_t i = 0; i <= senders; ++i) {
    EngineConfig cfg;
    cfg.ipv4 = ip(i);
    cfg.seed = i + 1;
    cfg.key_seed = i + 100;
    cfg.cc.ecn = ecn;
    cfg.cc.dcqcn.line_rate_mbps = sc.link_gbps * 1000;
    const auto stretch = [&c](uint64_t ns) { return static_cast<uint64_t>(static_cast<double>(ns) * c.scale); };
    cfg.cc.min_time_between_cnps_ns = stretch(cfg.cc.min_time_between_cnps_ns);
    cfg.cc.dcqcn.dce_tcp_rtt_ns = stretch(cfg.cc.dcqcn.dce_tcp_rtt_ns);
    cfg.cc.dcqcn.rpg_time_reset_ns = stretch(cfg.cc.dcqcn.rpg_time_reset_ns);
    cfg.cc.dcqcn.rate_reduce_monitor_period_ns = stretch(cfg.cc.dcqcn.rate_reduce_monitor_period_ns);
    cfg.cc.dcqcn.rpg_ai_rate_mbps /= c.scale;
    cfg.cc.dcqcn.rpg_hai_rate_mbps /= c.scale;
    eng.push_back(std::make_unique<Engine>(sw.port(i), cfg));
  }
  for (size_t i = 0; i <= senders; ++i)
    for (size_t j = 0; j <= senders; ++j)
      if (i != j) eng[i]->set_neighbor(wire::ipv4_mapped_gid(ip(j)), sw.port(j).mac());

  Engine& rx = *eng[0];
  mem::Pd* rpd = rx.alloc_pd();
  std::vector<uint8_t> sink(1 << 20);
  mem::Mr* smr = rx.reg_mr(rpd, sink.data(), sink.size(), IBV_ACCESS_LOCAL_WRITE |
                                                             IBV_ACCESS_REMOTE_WRITE);
  Cq* rcq = rx.create_cq(1024);
  constexpr uint32_t kMsg = 64 * 1024;
  constexpr int kDepth = 4;  // 256 KiB in flight per sender: with two, more than the queue
  struct Sender {
    mem::Pd* pd;
    Cq* cq;
    Qp* qp;
    mem::Mr* mr;
    std::vector<uint8_t> buf = std::vector<uint8_t>(kMsg, 0x5a);
    uint64_t done_bytes = 0;
  };
  std::vector<Sender> tx(senders);
  QpOptions o;
  o.mtu = IBV_MTU_4096;
  o.max_send_wr = 64;
  o.retry_cnt = 7;
  o.timeout = 14;  // 67 ms, perftest's
  for (size_t s = 0; s < senders; ++s) {
    Engine& e = *eng[s + 1];
    Sender& t = tx[s];
    t.pd = e.alloc_pd();
    t.cq = e.create_cq(256);
    t.mr = e.reg_mr(t.pd, t.buf.data(), t.buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = &t.cq->ibv;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {64, 4, 1, 1, 0};
    t.qp = e.create_qp(t.pd, &ia);
    ia.send_cq = ia.recv_cq = &rcq->ibv;
    Qp* r = rx.create_qp(rpd, &ia);
    EXPECT_EQ(connect_qp(e, t.qp, r->qpn, ip(0), o), 0);
    EXPECT_EQ(connect_qp(rx, r, t.qp->qpn, ip(s + 1), o), 0);
  }
  const auto post = [&](Sender& t, Engine& e) {
    ibv_sge sge{reinterpret_cast<uint64_t>(t.buf.data()), kMsg, t.mr->key};
    ibv_send_wr w{};
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(sink.data());
    w.wr.rdma.rkey = smr->key;
    EXPECT_EQ(e.post_send(t.qp, &w, nullptr), 0);
  };
  const auto start = [&](size_t s) {
    for (int k = 0; k < kDepth; ++k) post(tx[s], *eng[s + 1]);
  };
  for (size_t s = 0; s < senders; ++s)
    if (s + 1 < senders || c.late_ns == 0) start(s);
  // Each sender's completed bytes per millisecond since the late one started.
  std::vector<std::vector<uint64_t>> per_ms(senders);

  IncastResult r;
  for (uint64_t now = 0; now < end_ns; now += 1000) {
    if (c.late_ns != 0 && now == c.late_ns) start(senders - 1);
    for (auto& e : eng) e->poll(now);
    if (now >= warmup_ns) r.steady_backlog = std::max(r.steady_backlog, sw.port(0).backlog(now));
    for (size_t s = 0; s < senders; ++s) {
      ibv_wc wc[8];
      const int n = eng[s + 1]->poll_cq(tx[s].cq, 8, wc);
      for (int k = 0; k < n; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) {
          ++r.failed;  // the QP is in error: nothing more to post
          continue;
        }
        if (now >= warmup_ns) tx[s].done_bytes += kMsg;
        if (c.late_ns != 0 && now >= c.late_ns) {
          const size_t ms = static_cast<size_t>((now - c.late_ns) / 1'000'000);
          if (per_ms[s].size() <= ms) per_ms[s].resize(ms + 1);
          per_ms[s][ms] += kMsg;
        }
        if (now < warmup_ns) r.dropped_warmup = sw.port(0).egress().dropped;
        post(tx[s], *eng[s + 1]);
      }
    }
  }
  double sum = 0, sq = 0;
  for (const Sender& t : tx) {
    r.bytes.push_back(t.done_bytes);
    sum += static_cast<double>(t.done_bytes);
    sq += static_cast<double>(t.done_bytes) * static_cast<double>(t.done_bytes);
  }
  r.jain = sq > 0 ? sum * sum / (static_cast<double>(senders) * sq) : 0;
  r.goodput_share = sum * 8 / static_cast<double>(end_ns - warmup_ns) / sc.rate_gbps;
  if (c.late_ns != 0) {
    // Converged: the first moment from which Jain's index over every window of W ms stays
    // at 0.95 or more (W = 5 ms of DCQCN's clock: 5 ms, or 50 ms stretched ten times).
    const size_t w = static_cast<size_t>(5 * c.scale);
    size_t len = 0;
    for (const auto& v : per_ms) len = std::max(len, v.size());
    for (auto& v : per_ms) v.resize(len);
    std::vector<bool> fair;
    for (size_t m = 0; m + w <= len; ++m) {
      double all = 0, squares = 0;
      for (const auto& v : per_ms) {
        const double b = static_cast<double>(std::accumulate(
            v.begin() + static_cast<long>(m), v.begin() + static_cast<long>(m + w), uint64_t{0}));
        all += b;
        squares += b * b;
      }
      fair.push_back(squares > 0 && all * all / (static_cast<double>(senders) * squares) >= 0.95);
    }
    for (size_t m = 0; m < fair.size(); ++m) {
      if (std::all_of(fair.begin() + static_cast<long>(m), fair.end(), [](bool f) { return f; })) {
        r.converge_ms = static_cast<double>(m);
        break;
      }
    }
  }
  const auto& eg = sw.port(0).egress();
  r.dropped = eg.dropped;
  r.marked = eg.marked;
  r.max_backlog = eg.max_backlog;
  for (size_t s = 1; s <= senders; ++s) {
    r.retransmitted += eng[s]->counters()[Counter::retransmitted_pkts];
    r.cnps += eng[s]->counters()[Counter::cnp_rcvd];
  }
  return r;
}

void print(const char* what, const IncastResult& r) {
  std::printf("%s: goodput %.3f of the bottleneck, Jain %.3f, dropped %llu, marked %llu, "
              "(%llu in warmup) max backlog %llu B (%llu B measured), retransmitted %llu, CNPs %llu, failed WRs %llu; per sender MB:",
              what, r.goodput_share, r.jain, static_cast<unsigned long long>(r.dropped),
              static_cast<unsigned long long>(r.marked),
              static_cast<unsigned long long>(r.dropped_warmup),
              static_cast<unsigned long long>(r.max_backlog),
              static_cast<unsigned long long>(r.steady_backlog),
              static_cast<unsigned long long>(r.retransmitted),
              static_cast<unsigned long long>(r.cnps), static_cast<unsigned long long>(r.failed));
  for (uint64_t b : r.bytes) std::printf(" %.2f", static_cast<double>(b) / 1e6);
  std::printf("\n");
}

class Incast : public ::testing::TestWithParam<IncastCase> {};

TEST_P(Incast, DcqcnFillsTheBottleneckFairlyWithoutLoss) {
  const IncastCase& c = GetParam();
  constexpr uint64_t kWarmup = 20'000'000, kEnd = 220'000'000;  // 200 ms measured
  const IncastResult on = incast(c, true, kWarmup, kEnd);
  print("DCQCN on ", on);
  EXPECT_GE(on.goodput_share, 0.95);
  EXPECT_GE(on.jain, 0.97);
  EXPECT_EQ(on.failed, 0u);
  EXPECT_GT(on.cnps, 0u);
  // The first burst (every sender starts at its line rate) may overflow the queue; once the
  // rates are cut, nothing is lost and the queue stays short.
  EXPECT_EQ(on.dropped, on.dropped_warmup);
  EXPECT_LT(on.steady_backlog, 64u * 1024);

  // The same incast, ECN-blind (uroce before congestion control): the switch drops instead
  // of marking, go-back-N resends whole windows into the same queue, and little gets through.
  const IncastResult off = incast(c, false, kWarmup, kEnd);
  print("DCQCN off", off);
  EXPECT_GT(off.dropped - off.dropped_warmup, 0u);
  EXPECT_LT(off.goodput_share, on.goodput_share / 2);
}

TEST_P(Incast, ALateSender) {
  IncastCase c = GetParam();
  c.late_ns = 50'000'000;
  const IncastResult r = incast(c, true, 50'000'000, 50'000'000 + 300'000'000);
  print("late join", r);
  std::printf("fair (Jain >= 0.95 over every window of %.0f ms) %.0f ms after the late sender "
              "started (-1: not within 300 ms)\n", 5 * c.scale, r.converge_ms);
  // The newcomer starts at its line rate into a standing queue: a few of its first packets
  // may be lost (DCQCN is meant to run beside PFC), and nobody's QP fails.
  EXPECT_EQ(r.failed, 0u);
  EXPECT_LT(r.dropped - r.dropped_warmup, 200u);
  EXPECT_GE(r.goodput_share, 0.90);
  // At DCQCN's own clock the shares even out within ~100 ms. Stretched ten times (1 Gb/s),
  // DCQCN's slow additive increase leaves the incumbents behind for longer than the run
  // (measured: not fair within 300 ms at 2:1, 209 ms at 4:1): reported, not asserted.
  if (c.scale == 1) {
    ASSERT_GE(r.converge_ms, 0);
    EXPECT_LE(r.converge_ms, 150);
  }
}

// 40 Gb/s senders into 10 Gb/s with DCQCN's defaults; 10 Gb/s senders into 1 Gb/s with its
// clock stretched ten times (as tools/bench/incast.sh runs the live testbed).
INSTANTIATE_TEST_SUITE_P(Senders, Incast,
                         ::testing::Values(IncastCase{2, 40, 10, 1}, IncastCase{4, 40, 10, 1},
                                           IncastCase{2, 10, 1, 10}, IncastCase{4, 10, 1, 10}),
                         [](const ::testing::TestParamInfo<IncastCase>& i) {
                           return std::to_string(i.param.senders) + "to1_at_" +
                                  std::to_string(static_cast<int>(i.param.bottleneck_gbps)) + "G";
                         });

}  // namespace
}  // namespace uroce::test

// The responder fixture: one engine with an RC QP in RTS whose peer (QPN 0x99 at kIpA) is
// played by the test, packet by packet. send() builds a request as that peer would and
// step() polls once and returns what the engine sent. Used by the single-packet protocol
// tests and the hostile-peer suite.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "capture_port.h"
#include "harness.h"

namespace uroce::test {

using namespace wire;

constexpr uint32_t kPeerQpn = 0x99;
constexpr uint32_t kEpsn = 1000;
const MacAddr kPeerMac = {0x02, 0, 0, 0, 0, 0x0a};

class Responder : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineConfig cfg;
    cfg.ipv4 = kIpB;
    cfg.key_seed = 0x5eed;  // keys repeat from run to run
    configure(cfg);
    engine = std::make_unique<Engine>(port, cfg);
    engine->set_neighbor(ipv4_mapped_gid(kIpA), kPeerMac);
    pd = engine->alloc_pd();
    cq = engine->create_cq(64);
    QpOptions o;
    o.rq_psn = kEpsn;
    o.sq_psn = 5000;
    o.min_rnr_timer = 12;
    o.rd_atomic = 4;
    side_qp(o);
    mem.assign(4096 + 64, 0xAB);  // 32 guard bytes on each side of the MR's 4096
    mr = engine->reg_mr(pd, mem.data() + 32, 4096,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    ASSERT_NE(mr, nullptr);
  }

  /// For fixtures built on this one: engine settings before the engine is made.
  virtual void configure(EngineConfig&) {}

  /// A new QP of type `t` on the fixture's PD and CQ, in RESET.
  Qp* new_qp(ibv_qp_type t) {
    ibv_qp_init_attr ia{};
    ia.send_cq = &cq->ibv;
    ia.recv_cq = &cq->ibv;
    ia.qp_type = t;
    ia.cap = {16, 16, 2, 2, 0};
    return engine->create_qp(pd, &ia);
  }

  /// A new QP (now `qp`) connected to the peer, in RTS (or left in RTR).
  void side_qp(const QpOptions& o, bool stop_at_rtr = false) {
    qp = new_qp(IBV_QPT_RC);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = static_cast<unsigned>(o.access);
    ASSERT_EQ(engine->modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                    IBV_QP_ACCESS_FLAGS),
              0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = kPeerQpn;
    a.rq_psn = o.rq_psn;
    a.max_dest_rd_atomic = o.rd_atomic;
    a.min_rnr_timer = o.min_rnr_timer;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 1;
    const Gid g = ipv4_mapped_gid(kIpA);
    std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
    ASSERT_EQ(engine->modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER),
              0);
    if (stop_at_rtr) return;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = o.sq_psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = o.rd_atomic;
    ASSERT_EQ(engine->modify_qp(qp, &a,
                                IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_MAX_QP_RD_ATOMIC),
              0);
  }

  /// A request from the peer with the given opcode and PSN; ext headers from `x`.
  void send(uint8_t opcode, uint32_t psn, const std::vector<uint8_t>& payload = {},
            const ExtHeaders& x = {}, bool ack_req = true, uint16_t pkey = 0xFFFF) {
    RoceHeaders h;
    h.eth.src = kPeerMac;
    h.eth.dst = port.mac();
    h.ip4.dst = kIpB;
    h.ip4.ecn = send_ecn;
    h.ip4.src = send_src;
    h.udp.src_port = 0xC123;
    h.bth.opcode = opcode;
    h.bth.psn = psn;
    h.bth.dest_qp = dest_qpn != 0 ? dest_qpn : qp->qpn;
    h.bth.ack_req = ack_req;
    h.bth.pkey = pkey;
    h.ext = x;
    std::vector<uint8_t> frame(frame_len(h, payload.size()));
    ASSERT_EQ(build_frame(h, payload, frame), frame.size());
    port.inject(frame);
  }

  /// Polls once and returns what the engine sent, parsed.
  std::vector<ParsedPacket> step() {
    now += 1000;
    engine->poll(now);
    sent = port.take_sent();
    std::vector<ParsedPacket> out;
    for (const auto& f : sent) {
      ParsedPacket p;
      EXPECT_EQ(parse_frame(f, p), ParseError::kOk);
      out.push_back(p);
    }
    return out;
  }

  ExtHeaders reth(uint64_t offset, uint32_t len, uint32_t rkey = 0) {
    ExtHeaders x;
    x.reth = {reinterpret_cast<uint64_t>(mem.data() + 32) + offset, rkey ? rkey : mr->key, len};
    return x;
  }

  void post_recv(uint64_t wr_id, uint32_t len = 4096) {
    ibv_sge s{reinterpret_cast<uint64_t>(mem.data() + 32), len, mr->key};
    ibv_recv_wr w{};
    w.wr_id = wr_id;
    w.sg_list = &s;
    w.num_sge = 1;
    ASSERT_EQ(engine->post_recv(qp, &w, nullptr), 0);
  }

  bool guards_intact() const {
    for (size_t i = 0; i < 32; ++i)
      if (mem[i] != 0xAB || mem[mem.size() - 1 - i] != 0xAB) return false;
    return true;
  }

  CapturePort port;
  std::unique_ptr<Engine> engine;
  mem::Pd* pd = nullptr;
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  mem::Mr* mr = nullptr;
  std::vector<uint8_t> mem;
  std::vector<std::vector<uint8_t>> sent;
  uint64_t now = 1'000'000;
  uint32_t dest_qpn = 0;  // send() addresses this QPN instead of qp's when set
  uint8_t send_ecn = 0;   // the ECN bits send() puts in the IP header
  Ipv4Addr send_src = kIpA;  // and its source address
};

}  // namespace uroce::test

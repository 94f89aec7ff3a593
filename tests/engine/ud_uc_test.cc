// UD and UC end to end: datagrams with the GRH in front of the payload, Q_Key checks,
// loopback between two QPs of one device, and UC's "a lost packet loses the message".
#include <gtest/gtest.h>

#include <cstring>

#include "harness.h"
#include "trace/pcap_trace.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr uint32_t kQkey = 0x11111111;

struct UdPair {
  explicit UdPair(const drivers::FaultConfig* f = nullptr) : p(3, f) {
    QpOptions o;
    o.type = IBV_QPT_UD;
    qa = make_qp(p.a, o);
    qb = make_qp(p.b, o);
    EXPECT_EQ(connect_qp(p.a, qa, 0, kIpB, o, kQkey), 0);
    EXPECT_EQ(connect_qp(p.b, qb, 0, kIpA, o, kQkey), 0);
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.sgid_index = 1;
    const wire::Gid g = wire::ipv4_mapped_gid(kIpB);
    std::memcpy(ah.grh.dgid.raw, g.data(), 16);
    to_b = p.a.engine->create_ah(p.a.pd, &ah);
    EXPECT_NE(to_b, nullptr);
  }
  Pair p;
  Qp* qa = nullptr;
  Qp* qb = nullptr;
  Ah* to_b = nullptr;
};

ibv_send_wr ud_wr(uint64_t id, ibv_sge* s, Ah* ah, uint32_t qpn, uint32_t qkey) {
  ibv_send_wr w{};
  w.wr_id = id;
  w.sg_list = s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND_WITH_IMM;
  w.imm_data = 0xA1B2C3D4;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.ud.ah = &ah->ibv;
  w.wr.ud.remote_qpn = qpn;
  w.wr.ud.remote_qkey = qkey;
  return w;
}

TEST(Ud, DatagramArrivesBehindA40ByteGrhWithSourceQp) {
  UdPair u;
  std::vector<uint8_t> src(1000), dst(2048, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13);
  auto* smr = u.p.a.reg(src, kAll);
  auto* dmr = u.p.b.reg(dst, kAll);
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 2048, dmr->key};
  ibv_recv_wr rw{};
  rw.wr_id = 3;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_EQ(u.p.b.engine->post_recv(u.qb, &rw, nullptr), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 1000, smr->key};
  ibv_send_wr w = ud_wr(1, &s, u.to_b, u.qb->qpn, kQkey);
  ASSERT_EQ(u.p.a.engine->post_send(u.qa, &w, nullptr), 0);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(u.p.run_until([&] {
    for (auto& x : drain(u.p.a)) wa.push_back(x);
    for (auto& x : drain(u.p.b)) wb.push_back(x);
    return wa.size() == 1 && wb.size() == 1;
  }));
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].byte_len, 1040u);
  EXPECT_EQ(wb[0].src_qp, u.qa->qpn);
  EXPECT_TRUE(wb[0].wc_flags & IBV_WC_GRH);
  EXPECT_TRUE(wb[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wb[0].imm_data, 0xA1B2C3D4u);
  // RoCEv2 over IPv4: bytes 20..39 of the GRH area are the IPv4 header (source 10.0.0.1).
  EXPECT_EQ(dst[20] >> 4, 4);
  EXPECT_EQ(dst[20 + 12], 10);
  EXPECT_EQ(dst[20 + 15], 1);
  // The completion says so as mlx5 does (sl: RoCEv2, IPv4), and UCX then finds the destination
  // IPv4 address (10.0.0.2) in the last 4 bytes of the area.
  EXPECT_EQ(wb[0].sl, kWcSlRoceV2Ipv4);
  EXPECT_EQ(dst[36], 10);
  EXPECT_EQ(dst[39], 2);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 40));
}

TEST(Ud, WrongQkeyIsDroppedAndCounted) {
  UdPair u;
  std::vector<uint8_t> buf(2048, 0);
  auto* mr = u.p.b.reg(buf, kAll);
  auto* smr = u.p.a.reg(buf, kAll);
  ibv_sge r{reinterpret_cast<uint64_t>(buf.data()), 2048, mr->key};
  ibv_recv_wr rw{};
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_EQ(u.p.b.engine->post_recv(u.qb, &rw, nullptr), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), 100, smr->key};
  ibv_send_wr w = ud_wr(1, &s, u.to_b, u.qb->qpn, kQkey + 1);
  ASSERT_EQ(u.p.a.engine->post_send(u.qa, &w, nullptr), 0);
  u.p.run_until([] { return false; }, 1'000'000);
  EXPECT_EQ(drain(u.p.a).size(), 1u);  // UD send completes once it is on the wire
  EXPECT_TRUE(drain(u.p.b).empty());
  EXPECT_EQ(u.p.b.engine->counters()[Counter::rx_drop_bad_qkey], 1u);
}

TEST(Ud, NoReceiveWqeDropsTheDatagram) {
  UdPair u;
  std::vector<uint8_t> buf(64, 1);
  auto* smr = u.p.a.reg(buf, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), 64, smr->key};
  ibv_send_wr w = ud_wr(1, &s, u.to_b, u.qb->qpn, kQkey);
  ASSERT_EQ(u.p.a.engine->post_send(u.qa, &w, nullptr), 0);
  u.p.run_until([] { return false; }, 1'000'000);
  EXPECT_EQ(u.p.b.engine->counters()[Counter::rx_drop_ud_no_recv], 1u);
}

TEST(Ud, LoopbackBetweenTwoQpsOfOneDevice) {
  Pair p;
  QpOptions o;
  o.type = IBV_QPT_UD;
  Qp* q1 = make_qp(p.a, o);
  Qp* q2 = make_qp(p.a, o);
  ASSERT_EQ(connect_qp(p.a, q1, 0, kIpA, o, kQkey), 0);
  ASSERT_EQ(connect_qp(p.a, q2, 0, kIpA, o, kQkey), 0);
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.sgid_index = 1;
  const wire::Gid g = wire::ipv4_mapped_gid(kIpA);  // ourselves
  std::memcpy(ah.grh.dgid.raw, g.data(), 16);
  Ah* self = p.a.engine->create_ah(p.a.pd, &ah);
  ASSERT_NE(self, nullptr);
  std::vector<uint8_t> src(300, 0x42), dst(512, 0);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.a.reg(dst, kAll);
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 512, dmr->key};
  ibv_recv_wr rw{};
  rw.wr_id = 9;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_EQ(p.a.engine->post_recv(q2, &rw, nullptr), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 300, smr->key};
  ibv_send_wr w = ud_wr(1, &s, self, q2->qpn, kQkey);
  ASSERT_EQ(p.a.engine->post_send(q1, &w, nullptr), 0);
  std::vector<ibv_wc> wc;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wc.push_back(x);
    return wc.size() == 2;
  }));
  EXPECT_EQ(p.link.b().rx_pending() + p.a.engine->counters()[Counter::tx_frames], 0u);
  EXPECT_EQ(p.a.engine->counters()[Counter::tx_loopback], 1u);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 40));
}

// ---- Multicast (ibv_attach_mcast) ---------------------------------------------------------------

/// Side B with four UD QPs, a receive posted on each: 0 and 1 attached to group 239.1.2.3
/// with the group's Q_Key, 2 attached with another Q_Key, 3 not attached. Side A sends to the
/// group.
struct McastGroup {
  McastGroup() {
    QpOptions o;
    o.type = IBV_QPT_UD;
    qa = make_qp(p.a, o);
    EXPECT_EQ(connect_qp(p.a, qa, 0, kIpB, o, kQkey), 0);
    for (int i = 0; i < 4; ++i) {
      qb[i] = make_qp(p.b, o);
      EXPECT_EQ(connect_qp(p.b, qb[i], 0, kIpA, o, i == 2 ? kQkey + 1 : kQkey), 0);
      if (i < 3) {
        EXPECT_EQ(p.b.engine->attach_mcast(qb[i], group), 0);
      }
    }
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.sgid_index = 1;
    std::memcpy(ah.grh.dgid.raw, group.data(), 16);
    to_group = p.a.engine->create_ah(p.a.pd, &ah);  // no neighbour to resolve: the group's MAC
    EXPECT_NE(to_group, nullptr);
    smr = p.a.reg(src, kAll);
    dmr = p.b.reg(dst, kAll);
    for (int i = 0; i < 4; ++i) post_recv(i);
  }
  void post_recv(int i) {
    ibv_sge r{reinterpret_cast<uint64_t>(dst.data()) + 512 * i, 512, dmr->key};
    ibv_recv_wr rw{};
    rw.wr_id = static_cast<uint64_t>(i);
    rw.sg_list = &r;
    rw.num_sge = 1;
    ASSERT_EQ(p.b.engine->post_recv(qb[i], &rw, nullptr), 0);
  }
  /// Sends one datagram to the group (DQPN 0xFFFFFF unless `qpn`) and returns the wr_ids of
  /// the receive completions B got.
  std::vector<uint64_t> send(uint32_t qpn = wire::kMulticastQpn) {
    ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 200, smr->key};
    ibv_send_wr w = ud_wr(1, &s, to_group, qpn, kQkey);
    EXPECT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0);
    p.run_until([] { return false; }, 1'000'000);
    EXPECT_EQ(drain(p.a).size(), 1u);
    std::vector<uint64_t> got;
    for (const ibv_wc& wc : drain(p.b)) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(wc.src_qp, qa->qpn);
      got.push_back(wc.wr_id);
    }
    return got;
  }
  uint64_t count(Counter c) const { return p.b.engine->counters()[c]; }
  const wire::Gid group = wire::ipv4_mapped_gid({239, 1, 2, 3});
  Pair p;
  Qp* qa = nullptr;
  Qp* qb[4] = {};
  Ah* to_group = nullptr;
  std::vector<uint8_t> src = std::vector<uint8_t>(200, 0x5A), dst = std::vector<uint8_t>(2048, 0);
  mem::Mr* smr = nullptr;
  mem::Mr* dmr = nullptr;
};

TEST(Multicast, AGroupDatagramReachesEveryAttachedQpWithTheGroupsQkeyOnly) {
  McastGroup m;
  EXPECT_EQ(m.to_group->path.dmac, (wire::MacAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
  EXPECT_EQ(m.send(), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(m.count(Counter::rx_mcast), 2u);
  EXPECT_EQ(m.count(Counter::rx_drop_bad_qkey), 1u);  // QP 2: attached, another Q_Key
  EXPECT_EQ(m.dst[40], 0x5A);                          // behind the GRH, as any datagram
  EXPECT_EQ(m.dst[512 + 40], 0x5A);
  EXPECT_EQ(m.dst[3 * 512 + 40], 0);                   // QP 3 never joined
  // A detached QP hears nothing more; the last one out ends the group.
  m.post_recv(0);
  m.post_recv(1);
  ASSERT_EQ(m.p.b.engine->detach_mcast(m.qb[1], m.group), 0);
  EXPECT_EQ(m.send(), (std::vector<uint64_t>{0}));
  ASSERT_EQ(m.p.b.engine->detach_mcast(m.qb[0], m.group), 0);
  ASSERT_EQ(m.p.b.engine->destroy_qp(m.qb[2]), 0);  // destroying detaches
  m.post_recv(0);
  const uint64_t wrong_dst = m.count(Counter::rx_drop_wrong_dst);
  EXPECT_TRUE(m.send().empty());
  EXPECT_EQ(m.count(Counter::rx_drop_wrong_dst), wrong_dst + 1);
}

TEST(Multicast, OnlyUdDatagramsToTheMulticastQpnAreDelivered) {
  McastGroup m;
  EXPECT_TRUE(m.send(m.qb[0]->qpn).empty());  // a group address with a unicast QPN
  EXPECT_EQ(m.count(Counter::rx_drop_qp_type), 1u);
  EXPECT_EQ(m.count(Counter::rx_mcast), 0u);
}

TEST(Multicast, AttachRules) {
  McastGroup m;
  Engine& e = *m.p.b.engine;
  auto [ra, rb] = m.p.rc_pair();
  (void)ra;
  EXPECT_EQ(e.attach_mcast(rb, m.group), EINVAL);                            // not UD
  EXPECT_EQ(e.attach_mcast(m.qb[3], wire::ipv4_mapped_gid(kIpA)), EINVAL);  // not a group
  wire::Gid v6{};
  v6[0] = 0xFF;
  v6[1] = 0x0E;
  v6[15] = 7;
  EXPECT_EQ(e.attach_mcast(m.qb[3], v6), 0);  // ff0e::7
  EXPECT_EQ(e.detach_mcast(m.qb[3], m.group), EINVAL);  // not attached to it
  EXPECT_EQ(e.attach_mcast(m.qb[0], m.group), 0);       // twice is once
  EXPECT_EQ(e.detach_mcast(m.qb[0], m.group), 0);
  EXPECT_EQ(e.detach_mcast(m.qb[0], m.group), EINVAL);
  EXPECT_EQ(wire::multicast_mac(v6), (wire::MacAddr{0x33, 0x33, 0, 0, 0, 7}));
  // At most max_mcast_qp_attach QPs in a group (2 are attached now).
  QpOptions o;
  o.type = IBV_QPT_UD;
  ibv_device_attr da;
  e.query_device(&da);
  for (int i = 2; i < da.max_mcast_qp_attach; ++i) {
    Qp* q = make_qp(m.p.b, o);
    ASSERT_EQ(e.attach_mcast(q, m.group), 0) << i;
  }
  EXPECT_EQ(e.attach_mcast(make_qp(m.p.b, o), m.group), ENOMEM);
}

TEST(Multicast, APortWithoutMulticastSaysSoAndRefusesAttachWithEopnotsupp) {
  // The udp port (its sockets are bound to unicast addresses): max_mcast_grp 0, as a device
  // without multicast reports it, and attach fails rather than pretend.
  drivers::MemLink link;
  EngineConfig cfg;
  cfg.max_mcast_grp = 0;
  Side s(link.a(), kIpA, 5, cfg);
  ibv_device_attr da;
  s.engine->query_device(&da);
  EXPECT_EQ(da.max_mcast_grp, 0);
  EXPECT_EQ(da.max_total_mcast_qp_attach, 0);
  EXPECT_FALSE(s.engine->multicast());
  QpOptions o;
  o.type = IBV_QPT_UD;
  Qp* q = make_qp(s, o);
  EXPECT_EQ(s.engine->attach_mcast(q, wire::ipv4_mapped_gid({239, 1, 2, 3})), EOPNOTSUPP);
  EXPECT_EQ(s.engine->detach_mcast(q, wire::ipv4_mapped_gid({239, 1, 2, 3})), EINVAL);
}

TEST(Multicast, TheInterfaceJoinsAGroupWithItsFirstQpAndLeavesItWithItsLast) {
  // What the provider joins on the interface (IGMP / MLD) follows the groups exactly; a QP
  // destroyed while in two groups leaves only the one it was alone in.
  McastGroup m;  // group 239.1.2.3: QPs 0, 1, 2 attached before the listener
  Engine& e = *m.p.b.engine;
  std::vector<std::pair<wire::Gid, bool>> changes;
  e.on_group_change([&](const wire::Gid& g, bool join) { changes.emplace_back(g, join); });
  const wire::Gid other = wire::ipv4_mapped_gid({239, 9, 9, 9});
  const wire::Gid third = wire::ipv4_mapped_gid({239, 9, 9, 10});
  ASSERT_EQ(e.attach_mcast(m.qb[3], other), 0);  // QP 3 alone in `other`
  ASSERT_EQ(e.attach_mcast(m.qb[3], third), 0);  // and with QP 0 in `third`, made after it
  ASSERT_EQ(e.attach_mcast(m.qb[0], third), 0);
  ASSERT_EQ(e.attach_mcast(m.qb[3], m.group), 0);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], std::make_pair(other, true));
  EXPECT_EQ(changes[1], std::make_pair(third, true));
  ASSERT_EQ(e.destroy_qp(m.qb[3]), 0);  // only `other` loses its last QP
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[2], std::make_pair(other, false));
  ASSERT_EQ(e.detach_mcast(m.qb[0], third), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(e.detach_mcast(m.qb[i], m.group), 0);
  ASSERT_EQ(changes.size(), 5u);
  EXPECT_EQ(changes[3], std::make_pair(third, false));
  EXPECT_EQ(changes[4], std::make_pair(m.group, false));
}

TEST(Uc, LostPacketLosesOnlyItsMessage) {
  // Drop exactly the second packet on the wire: the 3-packet first message is lost (its
  // receive WQE is reused), the second message arrives whole.
  Pair p;
  QpOptions o;
  o.type = IBV_QPT_UC;
  auto [qa, qb] = p.rc_pair(o, o);
  std::vector<uint8_t> m1(3000, 1), m2(2000, 2), dst(4096, 0);
  auto* mr1 = p.a.reg(m1, kAll);
  auto* mr2 = p.a.reg(m2, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 4096, dmr->key};
  ibv_recv_wr rw{};
  rw.wr_id = 50;
  rw.sg_list = &r;
  rw.num_sge = 1;
  ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
  ibv_sge s1{reinterpret_cast<uint64_t>(m1.data()), 3000, mr1->key};
  ibv_sge s2{reinterpret_cast<uint64_t>(m2.data()), 2000, mr2->key};
  ibv_send_wr w1{}, w2{};
  w1.wr_id = 1;
  w1.sg_list = &s1;
  w1.num_sge = 1;
  w1.opcode = IBV_WR_SEND;
  w1.send_flags = IBV_SEND_SIGNALED;
  w2 = w1;
  w2.wr_id = 2;
  w2.sg_list = &s2;
  w1.next = &w2;
  ASSERT_EQ(p.a.engine->post_send(qa, &w1, nullptr), 0);
  // Let A transmit, then remove the second frame from B's receive queue.
  p.a.engine->poll(p.now);
  std::array<Frame*, 8> frames{};
  const uint16_t n = p.link.b().rx_burst(p.now, frames);
  ASSERT_EQ(n, 5u);  // 3 + 2 packets
  p.link.b().free_frame(frames[1]);
  std::array<Frame*, 4> keep = {frames[0], frames[2], frames[3], frames[4]};
  p.link.a().tx_burst(p.now, keep);  // re-inject them towards B, minus the lost one
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 2 && wb.size() == 1;
  }));
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);  // UC: the sender never knows
  EXPECT_EQ(wb[0].wr_id, 50u);
  EXPECT_EQ(wb[0].byte_len, 2000u);
  EXPECT_EQ(dst[0], 2);
  EXPECT_EQ(dst[1999], 2);
  EXPECT_GT(p.b.engine->counters()[Counter::rx_drop_uc_msg], 0u);
}

TEST(Uc, ACopyOrALatePacketIsDroppedNotDeliveredAgain) {
  // Three one-packet UC SENDs; the link delivers the second, then a copy of the second, the
  // first (overtaken), the third. UC never sends a PSN twice: the copy and the late first
  // packet are dropped (rx_drop_uc_stale), so the receiver sees messages 2 and 3, once each
  // and in order, as UC promises (rxe would take both, as new messages).
  Pair p;
  QpOptions o;
  o.type = IBV_QPT_UC;
  auto [qa, qb] = p.rc_pair(o, o);
  std::vector<uint8_t> src(300, 0), dst(4 * 256, 0);
  for (int m = 0; m < 3; ++m) std::fill(src.begin() + m * 100, src.begin() + m * 100 + 100, m + 1);
  auto* smr = p.a.reg(src, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_sge r{reinterpret_cast<uint64_t>(dst.data() + i * 256), 256, dmr->key};
    ibv_recv_wr rw{};
    rw.wr_id = 50 + i;
    rw.sg_list = &r;
    rw.num_sge = 1;
    ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
  }
  std::array<ibv_sge, 3> sg{};
  std::array<ibv_send_wr, 3> w{};
  for (int m = 0; m < 3; ++m) {
    sg[m] = {reinterpret_cast<uint64_t>(src.data() + m * 100), 100, smr->key};
    w[m].wr_id = static_cast<uint64_t>(m + 1);
    w[m].sg_list = &sg[m];
    w[m].num_sge = 1;
    w[m].opcode = IBV_WR_SEND;
    w[m].send_flags = IBV_SEND_SIGNALED;
    if (m < 2) w[m].next = &w[m + 1];
  }
  ASSERT_EQ(p.a.engine->post_send(qa, &w[0], nullptr), 0);
  p.a.engine->poll(p.now);
  std::array<Frame*, 8> frames{};
  ASSERT_EQ(p.link.b().rx_burst(p.now, frames), 3u);
  Frame* copy = p.link.a().alloc_frame();
  ASSERT_NE(copy, nullptr);
  std::memcpy(copy->data, frames[1]->data, frames[1]->len);
  copy->len = frames[1]->len;
  std::array<Frame*, 4> order = {frames[1], copy, frames[0], frames[2]};
  p.link.a().tx_burst(p.now, order);
  std::vector<ibv_wc> wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.b)) wb.push_back(x);
    return p.b.engine->counters()[Counter::rx_drop_uc_stale] == 2 && wb.size() == 2;
  }));
  // Give anything else time to arrive: nothing may.
  p.run_until([&] {
    for (auto& x : drain(p.b)) wb.push_back(x);
    return false;
  }, 1'000'000);
  ASSERT_EQ(wb.size(), 2u);
  EXPECT_EQ(wb[0].wr_id, 50u);
  EXPECT_EQ(dst[0], 2);  // the second message
  EXPECT_EQ(wb[1].wr_id, 51u);
  EXPECT_EQ(dst[256], 3);  // then the third
}

TEST(Trace, TransferRecordedToAPcapThatParsesCleanly) {
  const std::string path = ::testing::TempDir() + "uroce-trace-test.pcap";
  {
    drivers::MemLink link;
    drivers::PcapTrace trace(link.a(), path);
    ASSERT_TRUE(trace.ok()) << trace.error();
    Side a(trace, kIpA, 1), b(link.b(), kIpB, 2);
    a.engine->set_neighbor(wire::ipv4_mapped_gid(kIpB), link.b().mac());
    b.engine->set_neighbor(wire::ipv4_mapped_gid(kIpA), link.a().mac());
    QpOptions o;
    Qp* qa = make_qp(a, o);
    Qp* qb = make_qp(b, o);
    ASSERT_EQ(connect_qp(a, qa, qb->qpn, kIpB, o), 0);
    ASSERT_EQ(connect_qp(b, qb, qa->qpn, kIpA, o), 0);
    std::vector<uint8_t> src(5000, 7), dst(5000, 0);
    auto* smr = a.reg(src, kAll);
    auto* dmr = b.reg(dst, kAll);
    ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 5000, smr->key};
    ibv_send_wr w{};
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data());
    w.wr.rdma.rkey = dmr->key;
    ASSERT_EQ(a.engine->post_send(qa, &w, nullptr), 0);
    for (uint64_t t = 1000; t < 100000; t += 1000) {
      a.engine->poll(t);
      b.engine->poll(t);
    }
    ibv_wc wc;
    ASSERT_EQ(a.engine->poll_cq(a.cq, 1, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  }
  drivers::PcapReader r(path);
  ASSERT_TRUE(r.ok()) << r.error();
  drivers::PcapRecord rec;
  int writes = 0, acks = 0;
  while (r.next(rec)) {
    wire::ParsedPacket pp;
    ASSERT_EQ(wire::parse_frame(rec.data, pp), wire::ParseError::kOk);
    if (pp.info->op == wire::Operation::kWrite) ++writes;
    if (pp.info->op == wire::Operation::kAck) ++acks;
  }
  EXPECT_EQ(writes, 5);  // 5000 bytes at MTU 1024
  EXPECT_EQ(acks, 1);
}

}  // namespace
}  // namespace uroce::test

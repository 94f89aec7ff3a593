// Raw-packet QPs, flow steering and RSS (stack/engine/raw.cc, flow.cc) between two engines on
// the in-memory link: frames sent as they are, steered by their headers, never mixed with
// RoCE's; the rules' priorities, drop action and defaults; multicast loopback; RSS spreading
// by the Toeplitz hash; and what the verbs answer to what they cannot do.
#include <gtest/gtest.h>

#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "engine/flow.h"
#include "harness.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
using Mac = std::array<uint8_t, 6>;

/// An Ethernet + IPv4 (+ VLAN tag if `vlan` != 0) + UDP frame with `payload` bytes of a pattern.
std::vector<uint8_t> udp_frame(const Mac& dst, const Mac& src, const std::array<uint8_t, 4>& sip,
                               const std::array<uint8_t, 4>& dip, uint16_t sport, uint16_t dport,
                               size_t payload, uint16_t vlan = 0, uint8_t proto = IPPROTO_UDP) {
  const size_t l4 = proto == IPPROTO_TCP ? 20 : 8, eth = vlan != 0 ? 18 : 14;
  std::vector<uint8_t> f(eth + 20 + l4 + payload, 0);
  size_t at = 0;
  auto put = [&f, &at](std::initializer_list<uint32_t> bytes) {
    for (uint32_t b : bytes) f[at++] = static_cast<uint8_t>(b);
  };
  auto be16 = [&put](size_t v) { put({static_cast<uint32_t>(v >> 8) & 0xFF, static_cast<uint32_t>(v) & 0xFF}); };
  std::memcpy(f.data(), dst.data(), 6);
  std::memcpy(f.data() + 6, src.data(), 6);
  at = 12;
  if (vlan != 0) {
    be16(0x8100);
    be16(vlan);
  }
  be16(0x0800);
  put({0x45, 0});
  be16(20 + l4 + payload);
  put({0, 1, 0x40, 0, 64, proto, 0, 0});
  std::memcpy(f.data() + at, sip.data(), 4);
  std::memcpy(f.data() + at + 4, dip.data(), 4);
  at += 8;
  be16(sport);
  be16(dport);
  if (proto == IPPROTO_UDP) be16(8 + payload);
  at = eth + 20 + l4;
  for (size_t i = 0; i < payload; ++i) f[at + i] = static_cast<uint8_t>(i * 7 + dport);
  return f;
}

/// The bytes of an ibv_flow_attr followed by its specs.
struct FlowBuf {
  explicit FlowBuf(ibv_flow_attr_type type = IBV_FLOW_ATTR_NORMAL, uint16_t priority = 0) {
    ibv_flow_attr a{};
    a.type = type;
    a.size = sizeof a;
    a.priority = priority;
    a.port = 1;
    append(a);
  }
  template <typename Spec>
  FlowBuf& spec(Spec s) {
    s.size = sizeof s;
    append(s);
    attr()->num_of_specs++;
    return *this;
  }
  template <typename T>
  void append(const T& v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof v);
    std::memcpy(bytes.data() + at, &v, sizeof v);
  }
  ibv_flow_attr* attr() { return reinterpret_cast<ibv_flow_attr*>(bytes.data()); }
  std::vector<uint8_t> bytes;
};

ibv_flow_spec_eth eth_dst(const Mac& mac) {
  ibv_flow_spec_eth s{};
  s.type = IBV_FLOW_SPEC_ETH;
  std::memcpy(s.val.dst_mac, mac.data(), 6);
  std::memset(s.mask.dst_mac, 0xFF, 6);
  return s;
}

ibv_flow_spec_tcp_udp udp_dport(uint16_t port) {
  ibv_flow_spec_tcp_udp s{};
  s.type = IBV_FLOW_SPEC_UDP;
  s.val.dst_port = htons(port);
  s.mask.dst_port = 0xFFFF;
  return s;
}

/// A raw-packet QP on `s`, moved to RTS (RESET -> INIT with the port, RTR, RTS).
Qp* raw_qp(Side& s, int max_recv = 64) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = as_ibv(s.cq);
  ia.qp_type = IBV_QPT_RAW_PACKET;
  ia.cap.max_send_wr = 64;
  ia.cap.max_recv_wr = static_cast<uint32_t>(max_recv);
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
  Qp* qp = s.engine->create_qp(s.pd, &ia);
  EXPECT_NE(qp, nullptr);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  EXPECT_EQ(s.engine->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(s.engine->modify_qp(qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(s.engine->modify_qp(qp, &a, IBV_QP_STATE), 0);
  return qp;
}

/// Receive buffers for raw frames: `n` of 2 KiB each, posted on `qp`.
struct Rx {
  Rx(Side& s, Qp* qp, size_t n) : buf(n * 2048) {
    mr = s.reg(buf, kAll);
    for (size_t i = 0; i < n; ++i) {
      ibv_sge sge{reinterpret_cast<uint64_t>(buf.data() + i * 2048), 2048, mr->key};
      ibv_recv_wr w{};
      w.wr_id = i;
      w.sg_list = &sge;
      w.num_sge = 1;
      EXPECT_EQ(s.engine->post_recv(qp, &w, nullptr), 0);
    }
  }
  std::vector<uint8_t> at(const ibv_wc& wc) const {
    const uint8_t* p = buf.data() + wc.wr_id * 2048;
    return {p, p + wc.byte_len};
  }
  std::vector<uint8_t> buf;
  mem::Mr* mr = nullptr;
};

/// Sends `frame` from `qp` (a raw-packet QP of `s`), signaled with `id`.
void send_frame(Side& s, Qp* qp, std::vector<uint8_t>& frame, uint64_t id, mem::Mr* mr) {
  ibv_sge sge{reinterpret_cast<uint64_t>(frame.data()), static_cast<uint32_t>(frame.size()), mr->key};
  ibv_send_wr w{};
  w.wr_id = id;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(s.engine->post_send(qp, &w, nullptr), 0);
}

std::vector<ibv_wc> of_qp(const std::vector<ibv_wc>& all, const Qp* qp, ibv_wc_opcode op) {
  std::vector<ibv_wc> out;
  for (const ibv_wc& w : all)
    if (w.qp_num == qp->qpn && w.opcode == op) out.push_back(w);
  return out;
}

const std::array<uint8_t, 4> kSip = {10, 0, 0, 1}, kDip = {10, 0, 0, 2};

/// RSS by the Toeplitz hash of the IPv4 source and destination under `key`.
ibv_rx_hash_conf ipv4_hash(std::array<uint8_t, 40>& key) {
  ibv_rx_hash_conf h{};
  h.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  h.rx_hash_key_len = static_cast<uint8_t>(key.size());
  h.rx_hash_key = key.data();
  h.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
  return h;
}

TEST(Raw, UdpFramesReachTheQpsTheirFlowsNameBesideRoceTrafficAndNeverMix) {
  Pair p;
  auto [qa, qb] = p.rc_pair();
  Qp* ra = raw_qp(p.a);
  Qp* rb = raw_qp(p.b);
  Qp* catch_all = raw_qp(p.b);
  const Mac mac_b = p.link.b().mac(), mac_a = p.link.a().mac();
  FlowBuf udp;
  udp.spec(eth_dst(mac_b)).spec(udp_dport(5678));
  ASSERT_NE(p.b.engine->create_flow(rb, udp.attr()), nullptr);
  FlowBuf dflt(IBV_FLOW_ATTR_ALL_DEFAULT);
  ASSERT_NE(p.b.engine->create_flow(catch_all, dflt.attr()), nullptr);
  Rx rx_b(p.b, rb, 8), rx_all(p.b, catch_all, 8);

  // RC traffic both ways while the raw frames go: a SEND of 8 KiB from A to B.
  std::vector<uint8_t> big(8192, 0x5A), sink(8192, 0);
  auto* bmr = p.a.reg(big, kAll);
  auto* smr = p.b.reg(sink, kAll);
  ibv_sge rs{reinterpret_cast<uint64_t>(sink.data()), 8192, smr->key};
  ibv_recv_wr rw{};
  rw.wr_id = 77;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
  ibv_sge ss{reinterpret_cast<uint64_t>(big.data()), 8192, bmr->key};
  ibv_send_wr sw{};
  sw.wr_id = 78;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(p.a.engine->post_send(qa, &sw, nullptr), 0);

  std::vector<uint8_t> to_flow = udp_frame(mac_b, mac_a, kSip, kDip, 1234, 5678, 300);
  std::vector<uint8_t> elsewhere = udp_frame(mac_b, mac_a, kSip, kDip, 1234, 9999, 100);
  send_frame(p.a, ra, to_flow, 1, p.a.reg(to_flow, kAll));
  send_frame(p.a, ra, elsewhere, 2, p.a.reg(elsewhere, kAll));

  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 3 && wb.size() == 3;
  }));
  for (const ibv_wc& w : wa) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  for (const ibv_wc& w : wb) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  ASSERT_EQ(of_qp(wa, ra, IBV_WC_SEND).size(), 2u);
  const auto got = of_qp(wb, rb, IBV_WC_RECV);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(rx_b.at(got[0]), to_flow);  // the whole frame, as sent
  const auto rest = of_qp(wb, catch_all, IBV_WC_RECV);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rx_all.at(rest[0]), elsewhere);
  // The RC message arrived whole, and no RoCE frame went to the raw QPs (the default rule
  // takes everything else that is not RoCE).
  ASSERT_EQ(of_qp(wb, qb, IBV_WC_RECV).size(), 1u);
  EXPECT_EQ(sink, big);
  EXPECT_EQ(p.b.engine->counters()[Counter::rx_raw], 2u);
  EXPECT_EQ(p.a.engine->counters()[Counter::tx_raw], 2u);
}

TEST(Raw, TheBestPriorityWinsADropRuleDropsAndDefaultsTakeOnlyWhatNoRuleMatched) {
  Pair p;
  Qp* ra = raw_qp(p.a);
  Qp* rb = raw_qp(p.b);
  Qp* mc = raw_qp(p.b);
  const Mac mac_b = p.link.b().mac(), mac_a = p.link.a().mac();
  FlowBuf keep(IBV_FLOW_ATTR_NORMAL, 5);
  keep.spec(udp_dport(5678));
  ASSERT_NE(p.b.engine->create_flow(rb, keep.attr()), nullptr);
  FlowBuf drop(IBV_FLOW_ATTR_NORMAL, 1);
  ibv_flow_spec_action_drop d{};
  d.type = IBV_FLOW_SPEC_ACTION_DROP;
  drop.spec(eth_dst(mac_b)).spec(d);
  Engine::RawFlow* dropper = p.b.engine->create_flow(rb, drop.attr());
  ASSERT_NE(dropper, nullptr);
  FlowBuf mcd(IBV_FLOW_ATTR_MC_DEFAULT);
  ASSERT_NE(p.b.engine->create_flow(mc, mcd.attr()), nullptr);
  Rx rx_b(p.b, rb, 4), rx_mc(p.b, mc, 4);

  std::vector<uint8_t> f = udp_frame(mac_b, mac_a, kSip, kDip, 1, 5678, 64);
  auto* mr = p.a.reg(f, kAll);
  send_frame(p.a, ra, f, 1, mr);
  std::vector<ibv_wc> wb;
  ASSERT_TRUE(p.run_until([&] { return !drain(p.a).empty(); }));
  for (auto& x : drain(p.b)) wb.push_back(x);
  EXPECT_TRUE(wb.empty());  // priority 1 (drop) beats priority 5
  EXPECT_EQ(p.b.engine->counters()[Counter::rx_drop_raw_flow], 1u);

  ASSERT_EQ(p.b.engine->destroy_flow(dropper), 0);
  EXPECT_EQ(p.b.engine->destroy_flow(dropper), EINVAL);  // gone
  send_frame(p.a, ra, f, 2, mr);
  // A multicast frame no NORMAL rule matches goes to the multicast default.
  const Mac group = {0x01, 0x00, 0x5E, 0x01, 0x02, 0x03};
  std::vector<uint8_t> m = udp_frame(group, mac_a, kSip, {239, 1, 2, 3}, 1, 4000, 64);
  send_frame(p.a, ra, m, 3, p.a.reg(m, kAll));
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wb.size() == 2;
  }));
  ASSERT_EQ(of_qp(wb, rb, IBV_WC_RECV).size(), 1u);
  EXPECT_EQ(rx_b.at(of_qp(wb, rb, IBV_WC_RECV)[0]), f);
  ASSERT_EQ(of_qp(wb, mc, IBV_WC_RECV).size(), 1u);
  EXPECT_EQ(rx_mc.at(of_qp(wb, mc, IBV_WC_RECV)[0]), m);
}

TEST(Raw, AMulticastFrameAlsoReachesThisDevicesFlowsTheSenderUnlessItBlocksItself) {
  Pair p;
  Qp* sender = raw_qp(p.a);
  Qp* other = raw_qp(p.a);
  Qp* remote = raw_qp(p.b);
  const Mac group = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};
  FlowBuf f;
  f.spec(eth_dst(group));
  ASSERT_NE(p.a.engine->create_flow(sender, f.attr()), nullptr);
  ASSERT_NE(p.a.engine->create_flow(other, f.attr()), nullptr);
  ASSERT_NE(p.b.engine->create_flow(remote, f.attr()), nullptr);
  Rx rs(p.a, sender, 4), ro(p.a, other, 4), rr(p.b, remote, 4);
  std::vector<uint8_t> m = udp_frame(group, p.link.a().mac(), kSip, {239, 0, 0, 9}, 1, 2, 40);
  auto* mr = p.a.reg(m, kAll);
  send_frame(p.a, sender, m, 1, mr);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 3 && wb.size() == 1;  // the send, two copies here, one there
  }));
  EXPECT_EQ(of_qp(wa, sender, IBV_WC_RECV).size(), 1u);
  EXPECT_EQ(of_qp(wa, other, IBV_WC_RECV).size(), 1u);
  EXPECT_EQ(rr.at(wb[0]), m);

  sender->block_self_lb = true;  // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB
  wa.clear();
  wb.clear();
  send_frame(p.a, sender, m, 2, mr);
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.a)) wa.push_back(x);
    for (auto& x : drain(p.b)) wb.push_back(x);
    return wa.size() == 2 && wb.size() == 1;
  }));
  EXPECT_TRUE(of_qp(wa, sender, IBV_WC_RECV).empty());
  EXPECT_EQ(of_qp(wa, other, IBV_WC_RECV).size(), 1u);
}

TEST(Raw, RssSpreadsFramesOverItsWorkQueuesByTheToeplitzHashOfTheAddresses) {
  Pair p;
  Qp* ra = raw_qp(p.a);
  Cq* cq2 = p.b.engine->create_cq(256);
  ASSERT_NE(cq2, nullptr);
  std::vector<Qp*> wqs;
  for (int i = 0; i < 4; ++i) {
    Qp* wq = p.b.engine->create_wq(p.b.pd, i % 2 == 0 ? p.b.cq : cq2, 64, 1);
    ASSERT_NE(wq, nullptr);
    wqs.push_back(wq);
  }
  Engine::RwqTable* table = p.b.engine->create_rwq_table(wqs);
  ASSERT_NE(table, nullptr);
  // The key Microsoft's RSS verification suite uses.
  std::array<uint8_t, 40> key = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
  Qp* rss = p.b.engine->create_rss_qp(p.b.pd, table, ipv4_hash(key));
  ASSERT_NE(rss, nullptr);
  EXPECT_EQ(p.b.engine->destroy_rwq_table(table), EBUSY);  // the RSS QP uses it
  EXPECT_EQ(p.b.engine->destroy_wq(wqs[0]), EBUSY);         // the table holds it
  FlowBuf f;
  f.spec(eth_dst(p.link.b().mac()));
  Engine::RawFlow* flow = p.b.engine->create_flow(rss, f.attr());
  ASSERT_NE(flow, nullptr);
  // WQ 3 stays in RESET: what hashes to it is dropped (counted), not queued.
  std::vector<std::unique_ptr<Rx>> rx;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(p.b.engine->modify_wq(wqs[i], IBV_WQS_RDY), 0);
  for (int i = 0; i < 4; ++i) rx.push_back(std::make_unique<Rx>(p.b, wqs[i], i < 3 ? 32 : 0));
  EXPECT_EQ(Engine::wq_state(wqs[0]), IBV_WQS_RDY);
  EXPECT_EQ(Engine::wq_state(wqs[3]), IBV_WQS_RESET);

  std::array<int, 4> expect{};
  std::vector<std::vector<uint8_t>> sent;
  for (uint8_t i = 0; i < 32; ++i) {
    const std::array<uint8_t, 4> src = {i, static_cast<uint8_t>(i + 1), static_cast<uint8_t>(i + 2),
                                        static_cast<uint8_t>(i + 3)};
    std::array<uint8_t, 8> in;
    std::memcpy(in.data(), src.data(), 4);
    std::memcpy(in.data() + 4, kDip.data(), 4);
    ++expect[toeplitz_hash(key, in) & 3];
    sent.push_back(udp_frame(p.link.b().mac(), p.link.a().mac(), src, kDip, 1, 2, 32));
  }
  for (size_t i = 0; i < sent.size(); ++i) send_frame(p.a, ra, sent[i], i, p.a.reg(sent[i], kAll));
  const int delivered = expect[0] + expect[1] + expect[2];
  std::vector<ibv_wc> wb;
  size_t sends = 0;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& x : drain(p.b)) wb.push_back(x);
    ibv_wc w[16];
    for (int n; (n = p.b.engine->poll_cq(cq2, 16, w)) > 0;) wb.insert(wb.end(), w, w + n);
    sends += drain(p.a).size();
    return static_cast<int>(wb.size()) == delivered && sends == sent.size();
  }));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(static_cast<int>(of_qp(wb, wqs[i], IBV_WC_RECV).size()), expect[i]) << "WQ " << i;
  EXPECT_GE(std::count_if(expect.begin(), expect.end(), [](int n) { return n > 0; }), 3);
  EXPECT_EQ(p.b.engine->counters()[Counter::rx_drop_qp_state], static_cast<uint64_t>(expect[3]));

  // Teardown in order: flow, RSS QP, table, WQs.
  EXPECT_EQ(p.b.engine->destroy_qp(rss), EBUSY);
  ASSERT_EQ(p.b.engine->destroy_flow(flow), 0);
  ASSERT_EQ(p.b.engine->destroy_qp(rss), 0);
  ASSERT_EQ(p.b.engine->destroy_rwq_table(table), 0);
  for (Qp* wq : wqs) EXPECT_EQ(p.b.engine->destroy_wq(wq), 0);
}

TEST(Raw, WhatARawQpOrAFlowCannotBeIsRefusedWithTheErrnoVerbsDocument) {
  Pair p;
  Qp* raw = raw_qp(p.b);
  auto [rc, unused] = p.rc_pair();
  (void)unused;
  FlowBuf ok;
  ok.spec(udp_dport(1));
  errno = 0;
  EXPECT_EQ(p.a.engine->create_flow(rc, ok.attr()), nullptr);  // not a raw-packet QP
  EXPECT_EQ(errno, EINVAL);
  ibv_flow_attr* a = ok.attr();
  a->port = 2;
  EXPECT_EQ(p.b.engine->create_flow(raw, a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a->port = 1;

  struct Case {
    const char* what;
    std::function<void(FlowBuf&)> build;
    int err;
  };
  const std::vector<Case> cases = {
      {"sniffer", [](FlowBuf& b) { b.attr()->type = IBV_FLOW_ATTR_SNIFFER; }, EOPNOTSUPP},
      {"egress", [](FlowBuf& b) { b.attr()->flags = IBV_FLOW_ATTR_FLAGS_EGRESS; }, EOPNOTSUPP},
      {"unknown flag", [](FlowBuf& b) { b.attr()->flags = 1u << 9; }, EINVAL},
      {"VXLAN", [](FlowBuf& b) {
         ibv_flow_spec_tunnel t{};
         t.type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
         b.spec(t);
       }, EOPNOTSUPP},
      {"spec smaller than its type", [](FlowBuf& b) {
         ibv_flow_spec_eth e = eth_dst({});
         b.spec(e);
         reinterpret_cast<ibv_flow_spec_eth*>(b.bytes.data() + sizeof(ibv_flow_attr))->size = 8;
       }, EINVAL},
      {"two L4 specs", [](FlowBuf& b) { b.spec(udp_dport(1)).spec(udp_dport(2)); }, EINVAL},
      {"IPv4 under an IPv6 EtherType", [](FlowBuf& b) {
         ibv_flow_spec_eth e{};
         e.type = IBV_FLOW_SPEC_ETH;
         e.val.ether_type = htons(0x86DD);
         e.mask.ether_type = 0xFFFF;
         ibv_flow_spec_ipv4 ip{};
         ip.type = IBV_FLOW_SPEC_IPV4;
         b.spec(e).spec(ip);
       }, EINVAL},
      {"UDP under protocol TCP", [](FlowBuf& b) {
         ibv_flow_spec_ipv4_ext ip{};
         ip.type = IBV_FLOW_SPEC_IPV4_EXT;
         ip.val.proto = IPPROTO_TCP;
         ip.mask.proto = 0xFF;
         b.spec(ip).spec(udp_dport(1));
       }, EINVAL},
      {"default rule with specs", [](FlowBuf& b) {
         b.attr()->type = IBV_FLOW_ATTR_ALL_DEFAULT;
         b.spec(udp_dport(1));
       }, EINVAL},
  };
  for (const Case& c : cases) {
    FlowBuf b;
    c.build(b);
    errno = 0;
    EXPECT_EQ(p.b.engine->create_flow(raw, b.attr()), nullptr) << c.what;
    EXPECT_EQ(errno, c.err) << c.what;
  }

  // A QP with rules cannot go; its rules first.
  Engine::RawFlow* fl = p.b.engine->create_flow(raw, ok.attr());
  ASSERT_NE(fl, nullptr);
  EXPECT_EQ(p.b.engine->destroy_qp(raw), EBUSY);
  // Posting: a whole frame only (an Ethernet header at least, at most the port's frame),
  // and SEND only.
  std::vector<uint8_t> buf(20000, 0);
  auto* mr = p.b.reg(buf, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), 13, mr->key};
  ibv_send_wr w{};
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = IBV_WR_SEND;
  EXPECT_EQ(p.b.engine->post_send(raw, &w, nullptr), EINVAL);
  s.length = p.link.b().max_frame_len() + 1;
  EXPECT_EQ(p.b.engine->post_send(raw, &w, nullptr), EINVAL);
  s.length = 64;
  w.opcode = IBV_WR_RDMA_WRITE;
  EXPECT_EQ(p.b.engine->post_send(raw, &w, nullptr), EINVAL);
  w.opcode = IBV_WR_SEND_WITH_IMM;
  EXPECT_EQ(p.b.engine->post_send(raw, &w, nullptr), EINVAL);
  // Its states: no transport attributes, no SQD.
  ibv_qp_attr qa{};
  qa.qp_state = IBV_QPS_RTS;
  qa.qkey = 1;
  EXPECT_EQ(p.b.engine->modify_qp(raw, &qa, IBV_QP_STATE | IBV_QP_QKEY), EINVAL);
  qa.qp_state = IBV_QPS_SQD;
  EXPECT_EQ(p.b.engine->modify_qp(raw, &qa, IBV_QP_STATE), EINVAL);
  ASSERT_EQ(p.b.engine->destroy_flow(fl), 0);
  EXPECT_EQ(p.b.engine->destroy_qp(raw), 0);
}

TEST(Raw, AWorkQueueWhoseCompletionIsLostFailsWithAWqFatalEvent) {
  // IBA 11.6.3.1: a lost completion is a local work queue catastrophic error. For a receive
  // work queue of RSS the event is IBV_EVENT_WQ_FATAL, naming the WQ; the WQ enters ERR.
  Pair p;
  Qp* ra = raw_qp(p.a);
  Cq* small = p.b.engine->create_cq(2);
  ASSERT_NE(small, nullptr);
  Qp* wq = p.b.engine->create_wq(p.b.pd, small, 64, 1);
  ASSERT_NE(wq, nullptr);
  const std::vector<Qp*> one = {wq};
  Engine::RwqTable* table = p.b.engine->create_rwq_table(one);
  ASSERT_NE(table, nullptr);
  std::array<uint8_t, 40> key{};
  key[0] = 1;
  Qp* rss = p.b.engine->create_rss_qp(p.b.pd, table, ipv4_hash(key));
  ASSERT_NE(rss, nullptr);
  FlowBuf f;
  f.spec(eth_dst(p.link.b().mac()));
  Engine::RawFlow* flow = p.b.engine->create_flow(rss, f.attr());
  ASSERT_NE(flow, nullptr);
  ASSERT_EQ(p.b.engine->modify_wq(wq, IBV_WQS_RDY), 0);
  Rx rx(p.b, wq, 32);
  const size_t cap = small->ring.capacity();
  std::vector<std::vector<uint8_t>> frames;
  for (size_t i = 0; i < cap + 4; ++i)
    frames.push_back(udp_frame(p.link.b().mac(), p.link.a().mac(), kSip, kDip, 1, 2, 16));
  for (size_t i = 0; i < frames.size(); ++i)
    send_frame(p.a, ra, frames[i], i, p.a.reg(frames[i], kAll));
  size_t sends = 0;
  ASSERT_TRUE(p.run_until([&] {
    sends += drain(p.a).size();
    return sends == frames.size();
  }));
  std::vector<ibv_event_type> got;
  AsyncEvent ev;
  while (p.b.engine->pop_async_event(&ev)) {
    got.push_back(ev.type);
    if (ev.type == IBV_EVENT_WQ_FATAL) {
      EXPECT_EQ(ev.qp, wq);
    }
  }
  EXPECT_NE(std::find(got.begin(), got.end(), IBV_EVENT_CQ_ERR), got.end());
  EXPECT_NE(std::find(got.begin(), got.end(), IBV_EVENT_WQ_FATAL), got.end());
  EXPECT_EQ(std::find(got.begin(), got.end(), IBV_EVENT_QP_FATAL), got.end());
  EXPECT_EQ(Engine::wq_state(wq), IBV_WQS_ERR);
  ASSERT_EQ(p.b.engine->destroy_flow(flow), 0);
  ASSERT_EQ(p.b.engine->destroy_qp(rss), 0);
  ASSERT_EQ(p.b.engine->destroy_rwq_table(table), 0);
  EXPECT_EQ(p.b.engine->destroy_wq(wq), 0);
}

TEST(Raw, RssRefusesWhatItCannotHash) {
  Pair p;
  Qp* wq = p.b.engine->create_wq(p.b.pd, p.b.cq, 8, 1);
  ASSERT_NE(wq, nullptr);
  std::vector<Qp*> three = {wq, wq, wq};
  EXPECT_EQ(p.b.engine->create_rwq_table(three), nullptr);  // not a power of two
  EXPECT_EQ(errno, EINVAL);
  Engine::RwqTable* t = p.b.engine->create_rwq_table(std::vector<Qp*>{wq});
  ASSERT_NE(t, nullptr);
  std::array<uint8_t, 40> key{};
  ibv_rx_hash_conf h{};
  h.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  h.rx_hash_key = key.data();
  h.rx_hash_key_len = 8;  // an IPv6 pair needs 36 bytes and 4 more
  h.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6;
  EXPECT_EQ(p.b.engine->create_rss_qp(p.b.pd, t, h), nullptr);
  EXPECT_EQ(errno, EINVAL);
  h.rx_hash_key_len = 40;
  h.rx_hash_fields_mask |= IBV_RX_HASH_INNER;
  EXPECT_EQ(p.b.engine->create_rss_qp(p.b.pd, t, h), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(p.b.engine->modify_wq(wq, IBV_WQS_ERR), EINVAL);  // not from RESET
  ASSERT_EQ(p.b.engine->modify_wq(wq, IBV_WQS_RDY), 0);
  ASSERT_EQ(p.b.engine->modify_wq(wq, IBV_WQS_ERR), 0);
  EXPECT_EQ(p.b.engine->modify_wq(wq, IBV_WQS_RDY), EINVAL);  // out of ERR through RESET
  EXPECT_EQ(p.b.engine->destroy_rwq_table(t), 0);
  EXPECT_EQ(p.b.engine->destroy_wq(wq), 0);
}

// ---- The matcher and the hash on their own -------------------------------------------------

TEST(FlowMatch, FieldsComeFromEveryLayerAndAFragmentHasNoPorts) {
  const Mac dst = {2, 0, 0, 0, 0, 9}, src = {2, 0, 0, 0, 0, 1};
  std::vector<uint8_t> f = udp_frame(dst, src, kSip, kDip, 1000, 2000, 10, 0x2064);
  FrameFields ff;
  ASSERT_TRUE(read_fields(f, &ff));
  EXPECT_EQ(ff.vlan_tag, htons(0x2064));
  EXPECT_EQ(ff.ether_type, htons(0x0800));
  EXPECT_TRUE(ff.has_ipv4);
  EXPECT_EQ(ff.l4, IPPROTO_UDP);
  EXPECT_EQ(ff.dst_port, htons(2000));
  FlowRule r;
  FlowBuf b;
  ibv_flow_spec_eth e{};
  e.type = IBV_FLOW_SPEC_ETH;
  e.val.vlan_tag = htons(0x0064);
  e.mask.vlan_tag = htons(0x0FFF);  // the VLAN ID, not the priority
  b.spec(e).spec(udp_dport(2000));
  ASSERT_EQ(compile_flow(b.attr(), &r), 0);
  EXPECT_TRUE(r.matches(ff));
  ff.dst_port = htons(2001);
  EXPECT_FALSE(r.matches(ff));
  // A later fragment (offset != 0) has no UDP header: no ports, no match on them.
  f[14 + 4 + 6] = 0x00;
  f[14 + 4 + 7] = 0x10;
  ASSERT_TRUE(read_fields(f, &ff));
  EXPECT_EQ(ff.l4, 0);
  EXPECT_FALSE(r.matches(ff));
  EXPECT_FALSE(read_fields(std::vector<uint8_t>(13, 0), &ff));
}

TEST(FlowMatch, ToeplitzAgreesWithMicrosoftsVerificationSuite) {
  const std::array<uint8_t, 40> key = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                       0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                       0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                       0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
  // Source 66.9.149.187:2794, destination 161.142.100.80:1766.
  const std::array<uint8_t, 12> in = {66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6};
  EXPECT_EQ(toeplitz_hash(key, std::span(in).first(8)), 0x323e8fc2u);
  EXPECT_EQ(toeplitz_hash(key, in), 0x51ccc178u);
  // Source 199.92.111.2:14230, destination 65.69.140.83:4739.
  const std::array<uint8_t, 12> in2 = {199, 92, 111, 2, 65, 69, 140, 83, 0x37, 0x96, 0x12, 0x83};
  EXPECT_EQ(toeplitz_hash(key, std::span(in2).first(8)), 0xd718262au);
  EXPECT_EQ(toeplitz_hash(key, in2), 0xc626b0eau);
}

}  // namespace
}  // namespace uroce::test

// ARP: the engine answers for its IPv4 address, learns from requests addressed to it, and
// resolves neighbours with up to 3 requests 1 s apart before giving up cleanly.
#include <gtest/gtest.h>

#include "capture_port.h"
#include "harness.h"
#include "wire/arp.h"

namespace uroce::test {
namespace {

using namespace wire;

const MacAddr kPeerMac = {0x02, 0, 0, 0, 0, 0x0a};
const MacAddr kBroadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

std::vector<uint8_t> arp_frame(uint16_t oper, const MacAddr& sha, const Ipv4Addr& spa,
                               const MacAddr& dst, const Ipv4Addr& tpa) {
  std::vector<uint8_t> f(60, 0);
  EthernetRepr eth;
  eth.dst = dst;
  eth.src = sha;
  eth.ethertype = kEtherTypeArp;
  eth.emit(f);
  ArpRepr a;
  a.oper = oper;
  a.sha = sha;
  a.spa = spa;
  a.tpa = tpa;
  a.emit(MutBytes(f).subspan(14));
  return f;
}

struct ArpSide {
  ArpSide() {
    EngineConfig cfg;
    cfg.ipv4 = kIpB;
    engine = std::make_unique<Engine>(port, cfg);
  }
  std::vector<ArpRepr> sent_arps() {
    std::vector<ArpRepr> out;
    for (auto& f : port.take_sent()) {
      EthernetRepr eth;
      EXPECT_EQ(EthernetRepr::parse(f, eth), ParseError::kOk);
      EXPECT_EQ(eth.ethertype, kEtherTypeArp);
      EXPECT_GE(f.size(), 60u);  // padded to the Ethernet minimum
      ArpRepr a;
      EXPECT_EQ(ArpRepr::parse(Bytes(f).subspan(14), a), ParseError::kOk);
      out.push_back(a);
    }
    return out;
  }
  CapturePort port;
  std::unique_ptr<Engine> engine;
};

TEST(Arp, AnswersRequestsForItsAddressOnly) {
  ArpSide s;
  s.port.inject(arp_frame(ArpRepr::kRequest, kPeerMac, kIpA, kBroadcast, kIpB));
  s.port.inject(arp_frame(ArpRepr::kRequest, kPeerMac, kIpA, kBroadcast, {10, 0, 0, 77}));
  s.engine->poll(1000);
  auto sent = s.sent_arps();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].oper, ArpRepr::kReply);
  EXPECT_EQ(sent[0].sha, s.port.mac());
  EXPECT_EQ(sent[0].spa, kIpB);
  EXPECT_EQ(sent[0].tha, kPeerMac);
  EXPECT_EQ(sent[0].tpa, kIpA);
  // It learned the requester: resolving it needs no request.
  MacAddr mac{};
  EXPECT_EQ(s.engine->resolve(ipv4_mapped_gid(kIpA), &mac), NeighborState::kReachable);
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_TRUE(s.port.take_sent().empty());
}

TEST(Arp, ResolvesWithARequestAndTheReply) {
  ArpSide s;
  MacAddr mac{};
  s.engine->poll(1000);
  EXPECT_EQ(s.engine->resolve(ipv4_mapped_gid(kIpA), &mac), NeighborState::kIncomplete);
  auto sent = s.sent_arps();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].oper, ArpRepr::kRequest);
  EXPECT_EQ(sent[0].tpa, kIpA);
  EXPECT_EQ(sent[0].spa, kIpB);
  // Asking again while it is pending sends nothing new.
  EXPECT_EQ(s.engine->resolve(ipv4_mapped_gid(kIpA), &mac), NeighborState::kIncomplete);
  EXPECT_EQ(s.engine->neighbor_state(ipv4_mapped_gid(kIpA), &mac), NeighborState::kIncomplete);
  EXPECT_TRUE(s.port.take_sent().empty());
  s.port.inject(arp_frame(ArpRepr::kReply, kPeerMac, kIpA, s.port.mac(), kIpB));
  s.engine->poll(2000);
  EXPECT_EQ(s.engine->neighbor_state(ipv4_mapped_gid(kIpA), &mac), NeighborState::kReachable);
  EXPECT_EQ(mac, kPeerMac);
  // No retries after the answer.
  s.engine->poll(5'000'000'000);
  EXPECT_TRUE(s.port.take_sent().empty());
}

TEST(Arp, GivesUpAfterThreeRequestsAndTheQpFailsCleanly) {
  ArpSide s;
  MacAddr mac{};
  uint64_t now = 1000;
  s.engine->poll(now);
  EXPECT_EQ(s.engine->resolve(ipv4_mapped_gid(kIpA), &mac), NeighborState::kIncomplete);
  size_t requests = s.sent_arps().size();
  NeighborState st = NeighborState::kIncomplete;
  while (st == NeighborState::kIncomplete && now < 10'000'000'000) {
    now = s.engine->next_deadline();
    s.engine->poll(now);
    requests += s.sent_arps().size();
    st = s.engine->neighbor_state(ipv4_mapped_gid(kIpA), &mac);
  }
  EXPECT_EQ(st, NeighborState::kFailed);
  EXPECT_EQ(requests, 3u);
  EXPECT_GE(now, 1000 + 3 * kArpRetryNs);
  EXPECT_LT(now, 1000 + 4 * kArpRetryNs);
  EXPECT_EQ(s.engine->counters()[Counter::arp_failures], 1u);
  // A QP towards it cannot reach RTR: EHOSTUNREACH, not a hang.
  mem::Pd* pd = s.engine->alloc_pd();
  Cq* cq = s.engine->create_cq(8);
  ibv_qp_init_attr ia{};
  ia.send_cq = &cq->ibv;
  ia.recv_cq = &cq->ibv;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {4, 4, 1, 1, 0};
  Qp* qp = s.engine->create_qp(pd, &ia);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(s.engine->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                            IBV_QP_ACCESS_FLAGS),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x22;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1;
  const Gid g = ipv4_mapped_gid(kIpA);
  std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
  EXPECT_EQ(s.engine->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                            IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            EHOSTUNREACH);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  // A later resolve() starts over with a fresh request.
  EXPECT_EQ(s.engine->resolve(ipv4_mapped_gid(kIpA), &mac), NeighborState::kIncomplete);
  EXPECT_EQ(s.sent_arps().size(), 1u);
}

TEST(Arp, StaticEntriesAreNotOverwritten) {
  ArpSide s;
  const MacAddr fixed = {0x02, 1, 2, 3, 4, 5};
  s.engine->set_neighbor(ipv4_mapped_gid(kIpA), fixed);
  s.port.inject(arp_frame(ArpRepr::kRequest, kPeerMac, kIpA, kBroadcast, kIpB));
  s.engine->poll(1000);
  MacAddr mac{};
  EXPECT_EQ(s.engine->resolve(ipv4_mapped_gid(kIpA), &mac), NeighborState::kReachable);
  EXPECT_EQ(mac, fixed);
}

TEST(Arp, TwoEnginesFindEachOtherAndTalk) {
  drivers::MemLink link;
  Side a(link.a(), kIpA, 1), b(link.b(), kIpB, 2);  // no static neighbours
  MacAddr mac{};
  NeighborState st = a.engine->resolve(ipv4_mapped_gid(kIpB), &mac);
  for (uint64_t t = 1000; st == NeighborState::kIncomplete && t < 100'000; t += 1000) {
    a.engine->poll(t);
    b.engine->poll(t);
    st = a.engine->neighbor_state(ipv4_mapped_gid(kIpB), &mac);
  }
  ASSERT_EQ(st, NeighborState::kReachable);
  EXPECT_EQ(mac, link.b().mac());
  // B learned A from the request: both directions resolve without further ARP.
  EXPECT_EQ(b.engine->resolve(ipv4_mapped_gid(kIpA), &mac), NeighborState::kReachable);
  EXPECT_EQ(mac, link.a().mac());
  QpOptions o;
  Qp* qa = make_qp(a, o);
  Qp* qb = make_qp(b, o);
  EXPECT_EQ(connect_qp(a, qa, qb->qpn, kIpB, o), 0);
  EXPECT_EQ(connect_qp(b, qb, qa->qpn, kIpA, o), 0);
}

TEST(Nd, LinkLocalGidsResolveAndCarryRcTrafficWithoutAnyIpv6Address) {
  // Issue 12: GID index 0, the fe80:: link-local GID, as `ibv_rc_pingpong -g 0` uses it. The
  // engines have IPv4 addresses only: neighbour discovery asks from the link-local address.
  Pair p(4);
  ibv_gid ga, gb;
  ASSERT_EQ(p.a.engine->query_gid(1, 0, &ga), 0);
  ASSERT_EQ(p.b.engine->query_gid(1, 0, &gb), 0);
  EXPECT_EQ(ga.raw[0], 0xfe);
  EXPECT_EQ(ga.raw[1], 0x80);
  wire::Gid la, lb;
  std::memcpy(la.data(), ga.raw, 16);
  std::memcpy(lb.data(), gb.raw, 16);
  MacAddr mac{};
  NeighborState st = p.a.engine->resolve(lb, &mac);
  ASSERT_EQ(st, NeighborState::kIncomplete);  // a solicitation went out
  ASSERT_TRUE(p.run_until([&] { return p.a.engine->neighbor_state(lb, &mac) != st; }));
  ASSERT_EQ(p.a.engine->neighbor_state(lb, &mac), NeighborState::kReachable);
  EXPECT_EQ(mac, p.link.b().mac());
  QpOptions oa, ob;
  oa.sgid_index = ob.sgid_index = 0;
  oa.dgid = lb;
  ob.dgid = la;
  auto [qa, qb] = p.rc_pair(oa, ob);
  std::vector<uint8_t> src(3000, 0x5a), dst(4096, 0);
  mem::Mr* smr = p.a.reg(src, IBV_ACCESS_LOCAL_WRITE);
  mem::Mr* dmr = p.b.reg(dst, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge rs{reinterpret_cast<uint64_t>(dst.data()), 4096, dmr->key};
  ibv_recv_wr rwr{};
  rwr.sg_list = &rs;
  rwr.num_sge = 1;
  ASSERT_EQ(p.b.engine->post_recv(qb, &rwr, nullptr), 0);
  ibv_sge ss{reinterpret_cast<uint64_t>(src.data()), 3000, smr->key};
  ibv_send_wr swr{};
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(p.a.engine->post_send(qa, &swr, nullptr), 0);
  std::vector<ibv_wc> wa, wb;
  ASSERT_TRUE(p.run_until([&] {
    for (auto& w : drain(p.a)) wa.push_back(w);
    for (auto& w : drain(p.b)) wb.push_back(w);
    return wa.size() == 1 && wb.size() == 1;
  }));
  EXPECT_EQ(wa[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wb[0].byte_len, 3000u);
  EXPECT_EQ(dst[2999], 0x5a);
  EXPECT_EQ(p.a.engine->counters()[Counter::retransmitted_pkts], 0u);
}

}  // namespace
}  // namespace uroce::test

namespace uroce::test {
namespace {

using namespace wire;

TEST(Nd, TwoEnginesResolveEachOtherOverIpv6) {
  drivers::MemLink link;
  const Ipv6Addr ip_a = *parse_ipv6("fd00::a"), ip_b = *parse_ipv6("fd00::b");
  EngineConfig ca, cb;
  ca.ipv6 = ip_a;
  cb.ipv6 = ip_b;
  Engine a(link.a(), ca), b(link.b(), cb);
  MacAddr mac{};
  NeighborState st = a.resolve(ip_b, &mac);
  EXPECT_EQ(st, NeighborState::kIncomplete);
  // The solicitation goes to the solicited-node group of fd00::b: 33:33:ff:00:00:0b.
  ASSERT_EQ(link.b().rx_pending(), 1u);
  std::array<Frame*, 1> f{};
  ASSERT_EQ(link.b().rx_burst(0, f), 1);
  EXPECT_EQ(f[0]->data[0], 0x33);
  EXPECT_EQ(f[0]->data[5], 0x0b);
  ParsedPacket p;
  EXPECT_EQ(parse_frame(f[0]->bytes(), p), ParseError::kNotUdp);
  EXPECT_EQ(p.hdr.ip6.hop_limit, 255);
  EXPECT_EQ(p.hdr.ip6.next_header, 58);
  link.a().tx_burst(0, f);  // put it back on the wire towards B
  for (uint64_t t = 1000; st == NeighborState::kIncomplete && t < 100'000; t += 1000) {
    a.poll(t);
    b.poll(t);
    st = a.neighbor_state(ip_b, &mac);
  }
  ASSERT_EQ(st, NeighborState::kReachable);
  EXPECT_EQ(mac, link.b().mac());
  EXPECT_EQ(b.neighbor_state(ip_a, &mac), NeighborState::kReachable);  // learned from the NS
  EXPECT_EQ(mac, link.a().mac());
  // GID index 1 is the global IPv6 address when there is no IPv4 one.
  ibv_gid gid;
  ASSERT_EQ(a.query_gid(1, 1, &gid), 0);
  EXPECT_EQ(std::memcmp(gid.raw, ip_a.data(), 16), 0);
}

TEST(Nd, UnansweredSolicitationFails) {
  drivers::MemLink link;
  EngineConfig ca;
  ca.ipv6 = *parse_ipv6("fd00::a");
  Engine a(link.a(), ca);
  MacAddr mac{};
  const Ipv6Addr nobody = *parse_ipv6("fd00::99");
  a.resolve(nobody, &mac);
  uint64_t now = 1000;
  while (a.neighbor_state(nobody, &mac) == NeighborState::kIncomplete && now < 10'000'000'000) {
    now = a.next_deadline();
    a.poll(now);
  }
  EXPECT_EQ(a.neighbor_state(nobody, &mac), NeighborState::kFailed);
  EXPECT_EQ(a.counters()[Counter::arp_requests_sent], 3u);
  EXPECT_EQ(link.b().rx_pending(), 3u);
}

}  // namespace
}  // namespace uroce::test

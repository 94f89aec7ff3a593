// UdpPort on loopback, with no privileges: RoCEv2 frames built by the wire layer cross from
// one port to another and arrive as the same packets (ICRC good over the headers written in
// front of them), DSCP and ECN kept; runs leave as one UDP GSO send and arrive as one GRO
// datagram cut back into the packets; ARP and neighbour solicitations are answered by the
// port, which wakes its wait descriptor for them; the errors a user can make name the fix.
// The addresses are 127.77.0.x (IPv4) and ::1 on test ports (IPv6), nobody else's.
#include "udp/udp_port.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "wire/arp.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::drivers {
namespace {

constexpr int kWaitMs = 10000;  // a bound on a wait that ends as soon as data is there

wire::Ipv4Addr v4(uint8_t last) { return {127, 77, 0, last}; }
const wire::Ipv6Addr kLoop6 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

std::unique_ptr<UdpPort> open4(uint8_t last, bool gso = true) {
  UdpConfig c;
  c.ipv4 = v4(last);
  c.gso = gso;
  c.frames = 512;
  std::string err;
  auto p = UdpPort::open(c, &err);
  EXPECT_NE(p, nullptr) << err;
  return p;
}

/// The frame the engine would build: identification 0 and DF, UDP source port `sport`.
Frame* roce_frame(Port& from, const wire::Gid& src, const wire::Gid& dst, uint16_t sport,
                  uint16_t dport, uint32_t psn, size_t payload_len, uint8_t tos = 0) {
  wire::RoceHeaders h;
  h.eth.src = from.mac();
  h.eth.dst = UdpPort::mac_for(dst);
  h.ipv6 = !wire::is_ipv4_mapped(src);
  if (h.ipv6) {
    h.ip6.src = src;
    h.ip6.dst = dst;
    h.ip6.traffic_class = tos;
  } else {
    std::copy(src.begin() + 12, src.end(), h.ip4.src.begin());
    std::copy(dst.begin() + 12, dst.end(), h.ip4.dst.begin());
    h.ip4.dscp = static_cast<uint8_t>(tos >> 2);
    h.ip4.ecn = static_cast<uint8_t>(tos & 3);
    h.ip4.ident = 0;
    h.ip4.dont_frag = true;
  }
  h.udp.src_port = sport;  // the socket's own port: it sends from there
  h.udp.dst_port = dport;
  h.bth.opcode = 0x04;  // RC SEND_ONLY
  h.bth.dest_qp = 0x123456;
  h.bth.psn = psn;
  std::vector<uint8_t> payload(payload_len);
  for (size_t i = 0; i < payload_len; ++i) payload[i] = static_cast<uint8_t>(psn * 7 + i);
  Frame* f = from.alloc_frame();
  if (f == nullptr) return nullptr;
  f->len = static_cast<uint32_t>(wire::build_frame(h, payload, f->room()));
  EXPECT_GT(f->len, 0u);
  return f;
}

/// Receives until `want` frames came (poll on wait_fd between bursts, bounded).
std::vector<Frame*> receive(UdpPort& p, size_t want) {
  std::vector<Frame*> got;
  Frame* burst[64];
  while (got.size() < want) {
    const uint16_t n = p.rx_burst(0, burst);
    got.insert(got.end(), burst, burst + n);
    if (n > 0) continue;
    pollfd pf{p.wait_fd(), POLLIN, 0};
    if (poll(&pf, 1, kWaitMs) <= 0) break;
  }
  return got;
}

void send_all(UdpPort& p, std::vector<Frame*> frames) {
  size_t off = 0;
  while (off < frames.size()) {
    const uint16_t n = p.tx_burst(0, std::span<Frame* const>(frames).subspan(off));
    ASSERT_GT(n, 0u) << "the port took nothing";
    off += n;
  }
}

TEST(UdpPort, OpeningErrorsNameTheFix) {
  std::string err;
  EXPECT_EQ(UdpPort::open(UdpConfig{}, &err), nullptr);
  EXPECT_NE(err.find("set ipv4"), std::string::npos) << err;
  UdpConfig ll;
  ll.ipv6 = wire::Ipv6Addr{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(UdpPort::open(ll, &err), nullptr);
  EXPECT_NE(err.find("link-local"), std::string::npos) << err;
  UdpConfig elsewhere;
  elsewhere.ipv4 = wire::Ipv4Addr{192, 0, 2, 77};  // TEST-NET-1: no host has it
  EXPECT_EQ(UdpPort::open(elsewhere, &err), nullptr);
  EXPECT_NE(err.find("no address of this host"), std::string::npos) << err;
  auto first = open4(10);
  ASSERT_NE(first, nullptr);
  UdpConfig again;
  again.ipv4 = v4(10);
  EXPECT_EQ(UdpPort::open(again, &err), nullptr);
  EXPECT_NE(err.find("127.77.0.10:4791 is taken"), std::string::npos) << err;
  EXPECT_NE(err.find("127.0.0.2"), std::string::npos) << err;
}

TEST(UdpPort, LoopbackCandidatesRunFrom127002AndSkipEachNetworksZeroAnd255) {
  EXPECT_EQ(UdpPort::loopback_candidate(0), (wire::Ipv4Addr{127, 0, 0, 2}));
  EXPECT_EQ(UdpPort::loopback_candidate(252), (wire::Ipv4Addr{127, 0, 0, 254}));
  EXPECT_EQ(UdpPort::loopback_candidate(253), (wire::Ipv4Addr{127, 0, 1, 1}));
  EXPECT_EQ(UdpPort::loopback_candidate(253 + 253), (wire::Ipv4Addr{127, 0, 1, 254}));
  EXPECT_EQ(UdpPort::loopback_candidate(253 + 254), (wire::Ipv4Addr{127, 0, 2, 1}));
  EXPECT_EQ(UdpPort::loopback_candidate(UdpPort::kLoopbackCandidates - 1),
            (wire::Ipv4Addr{127, 0, 15, 254}));
  std::vector<wire::Ipv4Addr> all;
  for (uint32_t n = 0; n < UdpPort::kLoopbackCandidates; ++n) {
    const wire::Ipv4Addr a = UdpPort::loopback_candidate(n);
    EXPECT_TRUE(a[3] != 0 && a[3] != 255 && a != (wire::Ipv4Addr{127, 0, 0, 1})) << n;
    all.push_back(a);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());  // each once
}

TEST(UdpPort, WithNoAddressOnLoopbackEachPortTakesAFreeOneOfItsOwn) {
  constexpr uint16_t kPort = 47919;  // a test port: a real uroce on 4791 keeps its addresses
  // The first candidate held by someone else (a plain socket, as another process would).
  const int held = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(held, 0);
  sockaddr_in h{};
  h.sin_family = AF_INET;
  h.sin_port = htons(kPort);
  const wire::Ipv4Addr first = UdpPort::loopback_candidate(0);
  std::memcpy(&h.sin_addr, first.data(), 4);
  const bool holding = bind(held, reinterpret_cast<sockaddr*>(&h), sizeof h) == 0;
  UdpConfig c;
  c.loopback_auto = true;
  c.udp_port = kPort;
  c.frames = 64;
  std::string err;
  auto a = UdpPort::open(c, &err);
  ASSERT_NE(a, nullptr) << err;
  auto b = UdpPort::open(c, &err);
  ASSERT_NE(b, nullptr) << err;
  ASSERT_TRUE(a->ipv4() && b->ipv4());
  EXPECT_NE(*a->ipv4(), *b->ipv4());
  if (holding) {
    EXPECT_NE(*a->ipv4(), first);
    EXPECT_NE(*b->ipv4(), first);
  }
  for (const auto* p : {a.get(), b.get()}) {
    EXPECT_EQ((*p->ipv4())[0], 127);
    EXPECT_NE(*p->ipv4(), (wire::Ipv4Addr{127, 0, 0, 1}));
    EXPECT_NE(p->describe().find(wire::to_string(*p->ipv4()) + ":47919"), std::string::npos)
        << p->describe();
  }
  close(held);
}

TEST(UdpPort, PacketsCrossLoopbackWithTheHeadersTheyWereBuiltWith) {
  auto a = open4(1), b = open4(2);
  ASSERT_TRUE(a && b);
  EXPECT_GE(a->max_frame_len(), 4096u + 100) << "loopback carries RoCE's largest MTU";
  const wire::Gid ga = wire::ipv4_mapped_gid(v4(1)), gb = wire::ipv4_mapped_gid(v4(2));
  // Sizes that are no run (each differs), DSCP 26 and each ECN codepoint.
  std::vector<Frame*> out;
  const size_t sizes[] = {0, 1, 100, 1024, 4096, 33};
  for (uint32_t i = 0; i < std::size(sizes); ++i)
    out.push_back(roce_frame(*a, ga, gb, 4791, 4791, 1000 + i, sizes[i], static_cast<uint8_t>(26 << 2 | (i & 3))));
  send_all(*a, out);
  const std::vector<Frame*> in = receive(*b, std::size(sizes));
  ASSERT_EQ(in.size(), std::size(sizes));
  for (uint32_t i = 0; i < in.size(); ++i) {
    wire::ParsedPacket p;
    ASSERT_EQ(wire::parse_frame(in[i]->bytes(), p), wire::ParseError::kOk) << "packet " << i;
    EXPECT_EQ(p.hdr.bth.psn, 1000 + i);
    ASSERT_EQ(p.payload.size(), sizes[i]);
    for (size_t k = 0; k < sizes[i]; ++k)
      ASSERT_EQ(p.payload[k], static_cast<uint8_t>((1000 + i) * 7 + k)) << "packet " << i;
    EXPECT_EQ(p.hdr.ip4.src, v4(1));
    EXPECT_EQ(p.hdr.ip4.dst, v4(2));
    EXPECT_EQ(p.hdr.ip4.dscp, 26);
    EXPECT_EQ(p.hdr.ip4.ecn, i & 3) << "ECN as sent (CE seen by DCQCN)";
    EXPECT_EQ(p.hdr.udp.src_port, 4791);
    EXPECT_EQ(p.hdr.eth.dst, b->mac());
    EXPECT_EQ(p.hdr.eth.src, UdpPort::mac_for(ga));
    b->free_frame(in[i]);
  }
  EXPECT_EQ(a->stats().tx_frames, std::size(sizes));
  EXPECT_EQ(b->stats().rx_frames, std::size(sizes));
}

TEST(UdpPort, ARunLeavesAsOneGsoSendAndArrivesAsItsPackets) {
  auto a = open4(3), b = open4(4);
  ASSERT_TRUE(a && b);
  const wire::Gid ga = wire::ipv4_mapped_gid(v4(3)), gb = wire::ipv4_mapped_gid(v4(4));
  // 40 packets of 4096 bytes and a shorter last one: runs of up to 64 packets and 64 KiB.
  std::vector<Frame*> out;
  for (uint32_t i = 0; i < 41; ++i) out.push_back(roce_frame(*a, ga, gb, 4791, 4791, i, i < 40 ? 4096 : 500));
  send_all(*a, out);
  EXPECT_GE(a->stats().tx_gso, 3u) << "41 packets of 4 KiB in runs of at most 64 KiB";
  const std::vector<Frame*> in = receive(*b, 41);
  ASSERT_EQ(in.size(), 41u);
  EXPECT_GE(b->stats().rx_gro, 1u);
  for (uint32_t i = 0; i < in.size(); ++i) {
    wire::ParsedPacket p;
    ASSERT_EQ(wire::parse_frame(in[i]->bytes(), p), wire::ParseError::kOk)
        << "packet " << i << ": the identification the kernel gives segment i is in its ICRC";
    EXPECT_EQ(p.hdr.bth.psn, i);
    EXPECT_EQ(p.payload.size(), i < 40 ? 4096u : 500u);
    EXPECT_EQ(p.payload[p.payload.size() - 1], static_cast<uint8_t>(i * 7 + p.payload.size() - 1));
    b->free_frame(in[i]);
  }
}

TEST(UdpPort, PacketsLeaveFromTheSocketOfTheirSourcePort) {
  // Per-QP entropy: send-only sockets on ports the kernel picked; a packet built with one of
  // them leaves from it (its ICRC covers the port), one built with any other port does not leave.
  auto a = open4(7), b = open4(8);
  ASSERT_TRUE(a && b);
  const std::vector<uint16_t> ports = a->source_ports();
  ASSERT_EQ(ports.size(), UdpConfig{}.source_ports);
  EXPECT_EQ(std::set<uint16_t>(ports.begin(), ports.end()).size(), ports.size());
  EXPECT_EQ(std::count(ports.begin(), ports.end(), 4791), 0);
  const wire::Gid ga = wire::ipv4_mapped_gid(v4(7)), gb = wire::ipv4_mapped_gid(v4(8));
  std::vector<Frame*> out;
  for (uint32_t i = 0; i < ports.size(); ++i)
    for (uint32_t k = 0; k < 3; ++k) out.push_back(roce_frame(*a, ga, gb, ports[i], 4791, i * 3 + k, 1000));
  out.push_back(roce_frame(*a, ga, gb, 4791, 4791, 100, 64));  // the receiving socket's own
  out.push_back(roce_frame(*a, ga, gb, 4444, 4791, 101, 64));  // no socket of ours: not sent
  send_all(*a, out);
  EXPECT_EQ(a->stats().tx_dropped, 1u);
  const std::vector<Frame*> in = receive(*b, ports.size() * 3 + 1);
  ASSERT_EQ(in.size(), ports.size() * 3 + 1);
  for (uint32_t i = 0; i < in.size(); ++i) {
    wire::ParsedPacket p;
    ASSERT_EQ(wire::parse_frame(in[i]->bytes(), p), wire::ParseError::kOk) << "packet " << i;
    EXPECT_EQ(p.hdr.udp.src_port, p.hdr.bth.psn == 100 ? 4791 : ports[p.hdr.bth.psn / 3])
        << "packet " << i;
    b->free_frame(in[i]);
  }
  // source_ports = 0: every packet from the receiving socket's port.
  UdpConfig one;
  one.ipv4 = v4(9);
  one.source_ports = 0;
  std::string err;
  auto c = UdpPort::open(one, &err);
  ASSERT_NE(c, nullptr) << err;
  EXPECT_EQ(c->source_ports(), std::vector<uint16_t>{4791});
}

TEST(UdpPort, WithoutGroTheKernelCutsTheRunAndTheIdentificationsAreSolvedFor) {
  auto a = open4(5), b = open4(6, /*gso=*/false);
  ASSERT_TRUE(a && b);
  const wire::Gid ga = wire::ipv4_mapped_gid(v4(5)), gb = wire::ipv4_mapped_gid(v4(6));
  std::vector<Frame*> out;
  for (uint32_t i = 0; i < 8; ++i) out.push_back(roce_frame(*a, ga, gb, 4791, 4791, i, 2048));
  send_all(*a, out);
  const std::vector<Frame*> in = receive(*b, 8);
  ASSERT_EQ(in.size(), 8u);
  for (uint32_t i = 0; i < in.size(); ++i) {
    // b writes identification 0 in front of each; segment i left with i.
    wire::ParsedPacket p;
    const wire::ParseError e = wire::parse_frame(in[i]->bytes(), p);
    ASSERT_EQ(e, i == 0 ? wire::ParseError::kOk : wire::ParseError::kBadIcrc) << "packet " << i;
    wire::Ipv4Ident id;
    ASSERT_TRUE(wire::icrc_solve_ipv4_ident(p.icrc_calc, p.icrc_wire, p.hdr.ip4.total_len - 4,
                                            {0, true}, &id));
    EXPECT_EQ(id.ident, i);
    EXPECT_TRUE(id.dont_frag);
    b->free_frame(in[i]);
  }
}

TEST(UdpPort, Ipv6PacketsCrossLoopback) {
  UdpConfig c;
  c.ipv6 = kLoop6;
  c.frames = 256;
  std::string err;
  c.udp_port = 47917;
  auto a = UdpPort::open(c, &err);
  ASSERT_NE(a, nullptr) << err;
  c.udp_port = 47918;
  auto b = UdpPort::open(c, &err);
  ASSERT_NE(b, nullptr) << err;
  std::vector<Frame*> out;
  for (uint32_t i = 0; i < 10; ++i)
    out.push_back(roce_frame(*a, kLoop6, kLoop6, 47917, 47918, i, i < 9 ? 1024 : 3, 0x02));
  send_all(*a, out);
  const std::vector<Frame*> in = receive(*b, 10);
  ASSERT_EQ(in.size(), 10u);
  for (uint32_t i = 0; i < in.size(); ++i) {
    // Not port 4791 (one process on this host may hold [::1]:4791), so not parse_frame:
    // the headers one by one, and the ICRC over them.
    const uint8_t* d = in[i]->data;
    ASSERT_EQ(in[i]->len, 14 + 40 + 8 + 12 + (i < 9 ? 1024u : 4u) + 4);
    EXPECT_EQ(d[12] << 8 | d[13], 0x86DD);
    wire::Ipv6Repr ip;
    ASSERT_EQ(wire::Ipv6Repr::parse(wire::Bytes(d + 14, in[i]->len - 14), ip), wire::ParseError::kOk);
    EXPECT_EQ(ip.src, kLoop6);
    EXPECT_EQ(ip.traffic_class & 3, 2) << "ECT(0) as sent";
    EXPECT_EQ(d[54] << 8 | d[55], 47917) << "from a's socket";
    EXPECT_EQ(d[56] << 8 | d[57], 47918);
    const uint8_t* bth = d + 62;
    EXPECT_EQ(uint32_t{bth[9]} << 16 | uint32_t{bth[10]} << 8 | bth[11], i) << "PSN";
    const size_t l3 = in[i]->len - 14 - wire::kIcrcLen;
    EXPECT_EQ(wire::icrc_compute(wire::Bytes(d + 14, l3), true, 40), wire::load_icrc(d + 14 + l3))
        << "packet " << i;
    b->free_frame(in[i]);
  }
}

TEST(UdpPort, NeighboursAreAnsweredByThePortAndWakeItsWaiter) {
  auto a = open4(7);
  ASSERT_TRUE(a);
  pollfd pf{a->wait_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, 0), 0) << "nothing to read yet";
  Frame* f = a->alloc_frame();
  wire::ArpRepr req;
  req.oper = wire::ArpRepr::kRequest;
  req.sha = a->mac();
  req.spa = v4(7);
  req.tpa = {10, 9, 8, 7};
  std::memset(f->data, 0xFF, 6);
  std::memcpy(f->data + 6, a->mac().data(), 6);
  f->data[12] = 0x08;
  f->data[13] = 0x06;
  req.emit(f->room().subspan(14));
  f->len = 60;
  send_all(*a, {f});
  ASSERT_EQ(poll(&pf, 1, kWaitMs), 1) << "the answer wakes whoever sleeps on wait_fd";
  Frame* in[4];
  ASSERT_EQ(a->rx_burst(0, in), 1);
  wire::ArpRepr rep;
  ASSERT_EQ(wire::ArpRepr::parse(wire::Bytes(in[0]->data + 14, in[0]->len - 14), rep),
            wire::ParseError::kOk);
  EXPECT_EQ(rep.oper, wire::ArpRepr::kReply);
  EXPECT_EQ(rep.spa, req.tpa);
  EXPECT_EQ(rep.sha, UdpPort::mac_for(wire::ipv4_mapped_gid(req.tpa)));
  EXPECT_EQ(rep.tpa, v4(7));
  EXPECT_TRUE(std::equal(in[0]->data, in[0]->data + 6, a->mac().begin()));
  a->free_frame(in[0]);
  EXPECT_EQ(poll(&pf, 1, 0), 0) << "read: the wait descriptor is quiet again";
  EXPECT_EQ(a->stats().neighbors_answered, 1u);
  // Anything else that is no IP/UDP is dropped and counted, not sent.
  Frame* junk = a->alloc_frame();
  std::memset(junk->data, 0, 60);
  junk->data[12] = 0x88;
  junk->data[13] = 0xB5;
  junk->len = 60;
  send_all(*a, {junk});
  EXPECT_EQ(a->stats().tx_dropped, 1u);
}

TEST(UdpPort, MadeUpEthernetAddressesAreUnicastLocallyAdministeredAndDistinct) {
  const wire::MacAddr m4 = UdpPort::mac_for(wire::ipv4_mapped_gid(v4(1)));
  EXPECT_EQ(m4, (wire::MacAddr{0x02, 0x00, 127, 77, 0, 1}));
  const wire::MacAddr m6 = UdpPort::mac_for(kLoop6);
  EXPECT_EQ(m6[0] & 0x03, 0x02) << "locally administered, unicast";
  wire::Ipv6Addr other = kLoop6;
  other[15] = 2;
  EXPECT_NE(UdpPort::mac_for(other), m6);
}

}  // namespace
}  // namespace uroce::drivers

// UdpPort on loopback, with no privileges: RoCEv2 frames built by the wire layer cross from
// one port to another and arrive as the same packets (ICRC good over the headers written in
// front of them), DSCP and ECN kept; runs leave as one UDP GSO send and arrive as one GRO
// datagram cut back into the packets; ARP and neighbour solicitations are answered by the
// port, which wakes its wait descriptor for them; the errors a user can make name the fix.
// The addresses are 127.77.N.x (IPv4, N of the process) and ::1 on test ports (IPv6),
// nobody else's.
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
#include <thread>
#include <vector>

#include "wire/arp.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::drivers {
namespace {

constexpr int kWaitMs = 10000;  // a bound on a wait that ends as soon as data is there

// 127.77.N.x, N of this process: a suite running beside another (a second build's) must not
// share its addresses, whose SO_REUSEPORT groups would then mix the two runs' packets.
uint8_t third_octet() {
  static const uint8_t n = static_cast<uint8_t>(getpid() % 250);
  return n;
}
wire::Ipv4Addr v4(uint8_t last) { return {127, 77, third_octet(), last}; }
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
  // Taken by a socket that does not share it (as the kernel's rdma_rxe holds 4791).
  const int other = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(4791);
  const wire::Ipv4Addr ten = v4(10);
  std::memcpy(&a.sin_addr, ten.data(), 4);
  ASSERT_EQ(bind(other, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  UdpConfig again;
  again.ipv4 = v4(10);
  EXPECT_EQ(UdpPort::open(again, &err), nullptr);
  EXPECT_NE(err.find(wire::to_string(v4(10)) + ":4791 is taken by a program that does not share it"),
            std::string::npos)
      << err;
  close(other);
  // Another uroce port (of this user) shares it.
  auto first = open4(10), second = open4(10);
  EXPECT_NE(first, nullptr);
  EXPECT_NE(second, nullptr);
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

TEST(UdpPort, WithBothFamiliesEachSourcePortHasASocketOfEach) {
  UdpConfig c;
  c.ipv4 = v4(26);
  c.ipv6 = kLoop6;
  c.udp_port = 47919;
  c.frames = 256;
  std::string err;
  auto a = UdpPort::open(c, &err);
  ASSERT_NE(a, nullptr) << err;
  c.ipv4 = v4(27);
  c.udp_port = 47920;
  auto b = UdpPort::open(c, &err);
  ASSERT_NE(b, nullptr) << err;
  const std::vector<uint16_t> ports = a->source_ports();
  ASSERT_EQ(ports.size(), c.source_ports);
  std::vector<Frame*> out;
  for (uint32_t i = 0; i < ports.size(); ++i) {
    out.push_back(roce_frame(*a, kLoop6, kLoop6, ports[i], 47920, i, 100));
    out.push_back(roce_frame(*a, wire::ipv4_mapped_gid(v4(26)), wire::ipv4_mapped_gid(v4(27)),
                             ports[i], 47920, 100 + i, 100));
  }
  send_all(*a, out);
  EXPECT_EQ(a->stats().tx_dropped, 0u) << "a socket of each family on each port";
  const std::vector<Frame*> in = receive(*b, 2 * ports.size());
  ASSERT_EQ(in.size(), 2 * ports.size());
  std::set<std::pair<bool, uint16_t>> seen;
  for (Frame* f : in) {
    const bool v6 = (f->data[12] << 8 | f->data[13]) == 0x86DD;
    const uint8_t* udp = f->data + 14 + (v6 ? 40 : 20);
    seen.insert({v6, static_cast<uint16_t>(udp[0] << 8 | udp[1])});
    b->free_frame(f);
  }
  EXPECT_EQ(seen.size(), 2 * ports.size()) << "each port, from each family";
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

// Two processes' ports on one address (each would be in a process of its own; the kernel
// cannot tell), and a third port sending to QPs of each and to QP1.
struct SharedAddress {
  std::unique_ptr<UdpPort> first, second, peer;
  uint32_t first_block, second_block;
  SharedAddress(uint8_t shared, uint8_t other, uint32_t block1, uint32_t block2)
      : first_block(block1), second_block(block2) {
    UdpConfig c;
    c.ipv4 = v4(shared);
    c.frames = 512;
    std::string err;
    first = UdpPort::open(c, &err);  // joins the socket group first: index 0
    EXPECT_NE(first, nullptr) << err;
    second = UdpPort::open(c, &err);
    EXPECT_NE(second, nullptr) << err;
    peer = open4(other);
    if (!first || !second) return;
    EXPECT_TRUE(first->share(0x11 + first_block * 0x10000, 0x10000, &err)) << err;
    EXPECT_TRUE(second->share(0x11 + second_block * 0x10000, 0x10000, &err)) << err;
  }
  /// `n` packets to a QP of each block, and two to QP1; returns the QPNs each port got.
  std::pair<std::vector<uint32_t>, std::vector<uint32_t>> exchange(uint8_t shared, uint8_t other, uint32_t n) {
    const wire::Gid gs = wire::ipv4_mapped_gid(v4(shared)), go = wire::ipv4_mapped_gid(v4(other));
    std::vector<Frame*> out;
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t b : {first_block, second_block}) {
        // No run mixes the QPs (the kernel steers a run by its first packet).
        const uint16_t sport = peer->source_ports()[(b == first_block ? 0 : 4) + i % 4];
        Frame* f = roce_frame(*peer, go, gs, sport, 4791, i, 100);
        f->data[42 + 5] = static_cast<uint8_t>(b);  // destination QP 0x<b>3456 (ICRC redone below)
        wire::ParsedPacket p;
        wire::parse_frame(f->bytes(), p);
        wire::store_icrc(f->data + f->len - 4, p.icrc_calc);
        out.push_back(f);
      }
    for (uint32_t psn : {1000u, 1001u}) {
      Frame* f = roce_frame(*peer, go, gs, 4791, 4791, psn, 256);
      f->data[42 + 5] = f->data[42 + 6] = 0;
      f->data[42 + 7] = 1;  // QP1
      wire::ParsedPacket p;
      wire::parse_frame(f->bytes(), p);
      wire::store_icrc(f->data + f->len - 4, p.icrc_calc);
      out.push_back(f);
    }
    send_all(*peer, out);
    std::vector<uint32_t> got[2];
    UdpPort* ports[2] = {first.get(), second.get()};
    // Both polled in turn (what lands at one may have to be passed on to the other).
    for (int rounds = 0; got[0].size() + got[1].size() < 2 * n + 4 && rounds < 1000; ++rounds) {
      for (int k = 0; k < 2; ++k) {
        Frame* burst[64];
        const uint16_t m = ports[k]->rx_burst(0, burst);
        for (uint16_t i = 0; i < m; ++i) {
          wire::ParsedPacket p;
          EXPECT_EQ(wire::parse_frame(burst[i]->bytes(), p), wire::ParseError::kOk);
          got[k].push_back(p.hdr.bth.dest_qp);
          ports[k]->free_frame(burst[i]);
        }
      }
      pollfd pf[2] = {{first->wait_fd(), POLLIN, 0}, {second->wait_fd(), POLLIN, 0}};
      if (got[0].size() + got[1].size() < 2 * n + 4) poll(pf, 2, 10);
    }
    return {got[0], got[1]};
  }
};

uint32_t count(const std::vector<uint32_t>& v, uint32_t qpn) {
  return static_cast<uint32_t>(std::count(v.begin(), v.end(), qpn));
}

TEST(UdpPort, ProcessesSharingAnAddressEachGetTheirQpsPacketsSteeredByTheKernel) {
  // Blocks in the order the sockets joined: the group's program steers every packet to its
  // QP's process, and nothing has to be passed on.
  SharedAddress s(20, 21, 0, 1);
  ASSERT_TRUE(s.first && s.second && s.peer);
  const auto [first, second] = s.exchange(20, 21, 30);
  EXPECT_EQ(count(first, 0x003456), 30u);
  EXPECT_EQ(count(second, 0x013456), 30u);
  EXPECT_EQ(count(first, 1), 2u) << "QP1's (the CM's) reach both";
  EXPECT_EQ(count(second, 1), 2u);
  EXPECT_EQ(first.size(), 32u);
  EXPECT_EQ(second.size(), 32u);
  EXPECT_EQ(s.first->stats().rx_forwarded + s.second->stats().rx_forwarded, 2u)
      << "the classic-BPF program chose each data packet's socket: only QP1's were passed on";
}

TEST(UdpPort, ProcessesSharingAnAddressPassOnWhatLandsAtTheWrongOne) {
  // The kernel numbered the sockets the other way round (as after one left the group): every
  // data packet lands at the other process, which passes it on.
  SharedAddress s(22, 23, 1, 0);
  ASSERT_TRUE(s.first && s.second && s.peer);
  const auto [first, second] = s.exchange(22, 23, 30);
  EXPECT_EQ(count(first, 0x013456), 30u);
  EXPECT_EQ(count(second, 0x003456), 30u);
  EXPECT_EQ(count(first, 1) + count(second, 1), 4u);
  EXPECT_EQ(first.size() + second.size(), 64u);
  EXPECT_EQ(s.first->stats().rx_forwarded + s.second->stats().rx_forwarded, 62u)
      << "60 data packets, 2 of QP1 copied";
  EXPECT_EQ(s.first->stats().rx_unowned + s.second->stats().rx_unowned, 0u);
}

TEST(UdpPort, AProcessLeavingAnAddressPassesOnWhatWaitsThereForOthers) {
  // The kernel numbered the sockets the other way round, so every packet for the second
  // process's QPs lands at the first one's socket. The first process is leaving (exiting)
  // before it received them: what waits there, QP1's included (a DREQ whose sender exited is
  // never resent), must still reach the second, and what comes later goes straight to it.
  SharedAddress s(26, 27, 1, 0);
  ASSERT_TRUE(s.first && s.second && s.peer);
  const wire::Gid gs = wire::ipv4_mapped_gid(v4(26)), go = wire::ipv4_mapped_gid(v4(27));
  auto packet = [&](uint16_t sport, uint32_t qpn, uint32_t psn) {
    Frame* f = roce_frame(*s.peer, go, gs, sport, 4791, psn, 100);
    f->data[42 + 5] = static_cast<uint8_t>(qpn >> 16);
    f->data[42 + 6] = static_cast<uint8_t>(qpn >> 8);
    f->data[42 + 7] = static_cast<uint8_t>(qpn);
    wire::ParsedPacket p;
    wire::parse_frame(f->bytes(), p);
    wire::store_icrc(f->data + f->len - 4, p.icrc_calc);
    return f;
  };
  std::vector<Frame*> out;
  for (uint32_t i = 0; i < 30; ++i) out.push_back(packet(s.peer->source_ports()[i % 4], 0x003456, i));
  // QP1's from every source port the peer has: the kernel hashes each flow to one socket.
  for (uint32_t i = 0; i < s.peer->source_ports().size(); ++i)
    out.push_back(packet(s.peer->source_ports()[i], 1, 1000 + i));
  const uint32_t qp1 = static_cast<uint32_t>(s.peer->source_ports().size());
  send_all(*s.peer, out);
  std::vector<uint32_t> got;
  auto collect = [&](size_t want) {
    for (int rounds = 0; got.size() < want && rounds < 1000; ++rounds) {
      Frame* burst[64];
      const uint16_t m = s.second->rx_burst(0, burst);
      for (uint16_t i = 0; i < m; ++i) {
        wire::ParsedPacket p;
        EXPECT_EQ(wire::parse_frame(burst[i]->bytes(), p), wire::ParseError::kOk);
        got.push_back(p.hdr.bth.dest_qp);
        s.second->free_frame(burst[i]);
      }
      pollfd pf{s.second->wait_fd(), POLLIN, 0};
      if (got.size() < want) poll(&pf, 1, 10);
    }
  };
  // Two processes: the second receives while the first leaves (an owner's Unix socket holds
  // few datagrams; the leaving one waits for room).
  std::thread leaving([&] {
    s.first->leave();
    s.first->leave();  // once is what counts
  });
  collect(30 + qp1);
  leaving.join();
  EXPECT_EQ(count(got, 0x003456), 30u) << "the data packets that waited at the leaving socket";
  EXPECT_EQ(count(got, 1), qp1) << "QP1's, whichever socket the kernel had hashed them to";
  EXPECT_EQ(s.first->stats().rx_unowned, 0u);
  // Gone from the group: the second socket is the group's only one, index 0, its block.
  const uint64_t passed = s.first->stats().rx_forwarded;
  EXPECT_GE(passed, 30u);
  send_all(*s.peer, {packet(s.peer->source_ports()[0], 0x003456, 99)});
  collect(30 + qp1 + 1);
  EXPECT_EQ(count(got, 0x003456), 31u);
  EXPECT_EQ(s.first->stats().rx_forwarded, passed) << "steered by the kernel, not passed on";
  Frame* burst[8];
  EXPECT_EQ(s.first->rx_burst(0, burst), 0u) << "the leaving port receives nothing more";
  // It still sends (the CM's last words go out after leave()).
  send_all(*s.first, {roce_frame(*s.first, gs, go, s.first->source_ports()[0], 4791, 5, 100)});
  uint16_t m = 0;
  for (int rounds = 0; m == 0 && rounds < 1000; ++rounds) {
    m = s.peer->rx_burst(0, burst);
    pollfd pf{s.peer->wait_fd(), POLLIN, 0};
    if (m == 0) poll(&pf, 1, 10);
  }
  ASSERT_EQ(m, 1u);
  s.peer->free_frame(burst[0]);
}

TEST(UdpPort, APacketForABlockNoProcessHasIsDropped) {
  SharedAddress s(24, 25, 0, 1);
  ASSERT_TRUE(s.first && s.second && s.peer);
  // Block 2: the program's index is past the group, the kernel picks by hash; nobody owns it.
  const wire::Gid gs = wire::ipv4_mapped_gid(v4(24)), go = wire::ipv4_mapped_gid(v4(25));
  Frame* f = roce_frame(*s.peer, go, gs, 4791, 4791, 7, 100);
  f->data[42 + 5] = 2;
  wire::ParsedPacket p;
  wire::parse_frame(f->bytes(), p);
  wire::store_icrc(f->data + f->len - 4, p.icrc_calc);
  send_all(*s.peer, {f});
  for (int i = 0; i < 1000 && s.first->stats().rx_unowned + s.second->stats().rx_unowned == 0; ++i) {
    Frame* burst[8];
    for (UdpPort* q : {s.first.get(), s.second.get()}) EXPECT_EQ(q->rx_burst(0, burst), 0u);
    pollfd pf[2] = {{s.first->wait_fd(), POLLIN, 0}, {s.second->wait_fd(), POLLIN, 0}};
    poll(pf, 2, 10);
  }
  EXPECT_EQ(s.first->stats().rx_unowned + s.second->stats().rx_unowned, 1u);
}

TEST(UdpPort, MadeUpEthernetAddressesAreUnicastLocallyAdministeredAndDistinct) {
  const wire::MacAddr m4 = UdpPort::mac_for(wire::ipv4_mapped_gid(v4(1)));
  EXPECT_EQ(m4, (wire::MacAddr{0x02, 0x00, 127, 77, third_octet(), 1}));
  const wire::MacAddr m6 = UdpPort::mac_for(kLoop6);
  EXPECT_EQ(m6[0] & 0x03, 0x02) << "locally administered, unicast";
  wire::Ipv6Addr other = kLoop6;
  other[15] = 2;
  EXPECT_NE(UdpPort::mac_for(other), m6);
}

}  // namespace
}  // namespace uroce::drivers

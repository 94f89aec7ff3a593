// The headers the kernel writes for uroce's UDP port, seen on the wire (udp_port_wire.sh runs
// this in namespace A, with B's path and B's end of the veth pair as arguments): frames built
// as the engine builds them for that port (identification 0, DF, source port 4791) are sent
// through a UdpPort in A, singly and as UDP GSO runs that A's veth end cannot segment (so the
// kernel cuts them), and captured with a packet socket in B. Every captured packet must
// parse with a good ICRC, and each IPv4 one carry the identification predicted for it (0
// alone, i for segment i of a run) with DF: if the kernel wrote other headers than the
// engine assumed, the ICRCs would not hold and this fails.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "udp/udp_port.h"
#include "wire/packet.h"

using namespace uroce;

namespace {

const wire::Ipv4Addr kA4 = {10, 79, 0, 1}, kB4 = {10, 79, 0, 2};
const wire::Ipv6Addr kA6 = {0xfd, 0, 0, 0x79, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
const wire::Ipv6Addr kB6 = {0xfd, 0, 0, 0x79, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

struct Sent {
  bool v6;
  uint32_t psn;
  uint16_t ident;  // predicted (IPv4)
  uint16_t sport = wire::kRoceV2Port;
};

Frame* build(Port& p, bool v6, uint32_t psn, size_t len, uint16_t sport = wire::kRoceV2Port) {
  wire::RoceHeaders h;
  h.eth.src = p.mac();
  h.ipv6 = v6;
  if (v6) {
    h.eth.dst = drivers::UdpPort::mac_for(kB6);
    h.ip6.src = kA6;
    h.ip6.dst = kB6;
    h.ip6.traffic_class = 0x02;
  } else {
    h.eth.dst = drivers::UdpPort::mac_for(wire::ipv4_mapped_gid(kB4));
    h.ip4.src = kA4;
    h.ip4.dst = kB4;
    h.ip4.ecn = 2;
    h.ip4.ident = 0;  // as EngineConfig::ipv4_ident_zero builds them
    h.ip4.dont_frag = true;
  }
  h.udp.src_port = sport;  // one of EngineConfig::udp_src_ports
  h.bth.opcode = 0x04;
  h.bth.dest_qp = 0x4242;
  h.bth.psn = psn;
  std::vector<uint8_t> payload(len, static_cast<uint8_t>(psn));
  Frame* f = p.alloc_frame();
  f->len = static_cast<uint32_t>(wire::build_frame(h, payload, f->room()));
  return f;
}

int fail(const std::string& why) {
  std::fprintf(stderr, "FAIL: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: udp_port_wire_test /run/netns/B IFACE_IN_B");
  std::string err;
  drivers::UdpConfig ca;
  ca.ipv4 = kA4;
  ca.ipv6 = kA6;
  auto a = drivers::UdpPort::open(ca, &err);
  if (!a) return fail("port in A: " + err);
  // B: a capture on its veth end, and a port so that the datagrams are taken.
  const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  const int there = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (home < 0 || there < 0 || setns(there, CLONE_NEWNET) != 0) return fail("entering B");
  const int cap = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_ALL);
  ll.sll_ifindex = static_cast<int>(if_nametoindex(argv[2]));
  if (cap < 0 || ll.sll_ifindex == 0 || bind(cap, reinterpret_cast<sockaddr*>(&ll), sizeof ll) != 0)
    return fail(std::string("capture on ") + argv[2] + ": " + std::strerror(errno));
  drivers::UdpConfig cb;
  cb.ipv4 = kB4;
  cb.ipv6 = kB6;
  auto b = drivers::UdpPort::open(cb, &err);
  if (!b) return fail("port in B: " + err);
  if (setns(home, CLONE_NEWNET) != 0) return fail("back to A");

  // Singles, then runs (a veth MTU of 1500: 1024-byte payloads).
  std::vector<Sent> sent;
  std::vector<Frame*> out;
  uint32_t psn = 100;
  auto add = [&](bool v6, size_t len, uint16_t ident) {
    out.push_back(build(*a, v6, psn, len));
    sent.push_back({v6, psn++, ident});
  };
  const size_t singles[] = {16, 700, 1200};
  for (size_t len : singles) {
    add(false, len, 0);
    std::vector<Frame*> one{out.back()};
    if (a->tx_burst(0, one) != 1) return fail("single not taken");
  }
  out.clear();
  for (uint16_t i = 0; i < 8; ++i) add(false, 1024, i);
  for (uint16_t i = 0; i < 6; ++i) add(true, 1024, 0);
  add(true, 200, 0);
  size_t off = 0;
  while (off < out.size()) {
    const uint16_t n = a->tx_burst(0, std::span<Frame* const>(out).subspan(off));
    if (n == 0) return fail("the port took nothing");
    off += n;
  }
  if (a->stats().tx_gso < 2) return fail("the runs did not leave as GSO sends");
  // A port with one address family: its QPs spread over send-only sockets on ports the kernel
  // picked (UdpConfig::source_ports). Another receiving port (4790), so that both can be
  // bound in A; a single and a run from each of two of its source ports.
  drivers::UdpConfig cs;
  cs.ipv4 = kA4;
  cs.udp_port = 4790;
  auto spread = drivers::UdpPort::open(cs, &err);
  if (!spread) return fail("port with source ports in A: " + err);
  const std::vector<uint16_t>& ports = spread->source_ports();
  if (ports.size() != cs.source_ports) return fail(std::to_string(ports.size()) + " source ports");
  out.clear();
  for (uint16_t sport : {ports[0], ports[5]}) {
    out.push_back(build(*spread, false, psn, 300, sport));
    sent.push_back({false, psn++, 0, sport});
    for (uint16_t i = 0; i < 4; ++i) {
      out.push_back(build(*spread, false, psn, 1024, sport));
      sent.push_back({false, psn++, i, sport});
    }
  }
  for (off = 0; off < out.size();) {
    const uint16_t n = spread->tx_burst(0, std::span<Frame* const>(out).subspan(off));
    if (n == 0) return fail("the port with source ports took nothing");
    off += n;
  }

  // Capture until every packet was seen (10 s bound).
  size_t seen = 0;
  std::vector<uint8_t> buf(65536);
  while (seen < sent.size()) {
    pollfd pf{cap, POLLIN, 0};
    if (poll(&pf, 1, 10000) <= 0)
      return fail("captured " + std::to_string(seen) + " of " + std::to_string(sent.size()));
    const ssize_t got = recv(cap, buf.data(), buf.size(), 0);
    if (got <= 0) continue;
    wire::ParsedPacket p;
    const wire::ParseError e = wire::parse_frame(wire::Bytes(buf.data(), static_cast<size_t>(got)), p);
    if (e == wire::ParseError::kNotIp || e == wire::ParseError::kNotUdp ||
        e == wire::ParseError::kNotRoce)
      continue;  // neighbour discovery and the like
    const Sent& s = sent[seen];
    const std::string which = "packet " + std::to_string(seen) + " (" + (s.v6 ? "IPv6" : "IPv4") + ")";
    if (e != wire::ParseError::kOk)
      return fail(which + ": " + std::string(wire::error_text(e)) + " over the kernel's headers" +
                  (s.v6 ? "" : " (identification " + std::to_string(p.hdr.ip4.ident) +
                                   (p.hdr.ip4.dont_frag ? ", DF)" : ", no DF)")));
    if (p.hdr.bth.psn != s.psn) return fail(which + ": PSN " + std::to_string(p.hdr.bth.psn));
    if (!s.v6 && (p.hdr.ip4.ident != s.ident || !p.hdr.ip4.dont_frag))
      return fail(which + ": identification " + std::to_string(p.hdr.ip4.ident) + ", predicted " +
                  std::to_string(s.ident));
    if (p.hdr.udp.src_port != s.sport)
      return fail(which + ": source port " + std::to_string(p.hdr.udp.src_port) + ", built with " +
                  std::to_string(s.sport));
    ++seen;
  }
  std::printf("ok: %zu packets (3 IPv4 alone, a run of 8 cut by the kernel, 7 IPv6, 10 "
              "from two send-only sockets): the ICRC holds over the headers the kernel wrote\n", seen);
  return 0;
}

// uroce's af_packet port on a real veth pair (tests/ports/packet_port.sh makes it in a network
// namespace of its own): frames sent on one end arrive on the other byte for byte, in order,
// whether the port sends runs of them as UDP GSO super-frames that cross whole (and are cut
// again by the receiving port) or the kernel cuts them itself on the way (MODE "segmented":
// the script turns tx-udp-segmentation off on the sending end, as a device without it
// would). Either way every packet must come out exactly as built: the IPv4 identification,
// the lengths and the header checksum are what the ICRC covers. The UDP checksum is the one
// field allowed to differ (RoCEv2 receivers ignore it; the ICRC does not cover it).
//
// Usage: packet_port_test IFACE_A IFACE_B whole|segmented. Exit 0 when all checks pass.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "packet/packet_port.h"
#include "wire/ipv4.h"

using uroce::Frame;
using uroce::drivers::PacketConfig;
using uroce::drivers::PacketPort;

namespace {

int g_failures = 0;
#define CHECK(cond, ...)                        \
  do {                                          \
    if (!(cond)) {                              \
      std::fprintf(stderr, "FAIL: " __VA_ARGS__); \
      std::fprintf(stderr, "\n");               \
      ++g_failures;                             \
    }                                           \
  } while (0)

void put16(uint8_t* p, unsigned v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
unsigned get16(const uint8_t* p) { return unsigned{p[0]} << 8 | p[1]; }

struct Spec {
  bool v6 = false;
  bool vlan = false;
  uint16_t sport = 49152;
  uint16_t ident = 0;
  uint32_t payload = 0;
  uint16_t dport = 4791;
  uint8_t proto = 17;  // IPv4 only: 6 makes it look like the kernel's TCP
};

/// An Ethernet / (802.1Q) / IPv4 or IPv6 / UDP 4791 frame as uroce's engine builds one (UDP
/// checksum 0), its payload seeded random bytes.
std::vector<uint8_t> build(const Spec& s, const std::array<uint8_t, 6>& dst,
                           const std::array<uint8_t, 6>& src, std::mt19937& rng) {
  std::vector<uint8_t> f(14 + (s.vlan ? 4 : 0) + (s.v6 ? 40 : 20) + 8 + s.payload);
  uint8_t* d = f.data();
  std::memcpy(d, dst.data(), 6);
  std::memcpy(d + 6, src.data(), 6);
  size_t off = 12;
  if (s.vlan) {
    put16(d + off, 0x8100);
    put16(d + off + 2, 7);
    off += 4;
  }
  put16(d + off, s.v6 ? 0x86DD : 0x0800);
  uint8_t* ip = d + off + 2;
  uint8_t* udp = nullptr;
  const unsigned udp_len = 8 + s.payload;
  if (s.v6) {
    ip[0] = 0x60;
    put16(ip + 4, udp_len);
    ip[6] = 17;
    ip[7] = 64;
    const uint8_t a[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    std::memcpy(ip + 8, a, 16);
    std::memcpy(ip + 24, a, 16);
    ip[39] = 2;
    udp = ip + 40;
  } else {
    ip[0] = 0x45;
    put16(ip + 2, 20 + udp_len);
    put16(ip + 4, s.ident);
    put16(ip + 6, 0x4000);  // DF
    ip[8] = 64;
    ip[9] = s.proto;
    const uint8_t a[8] = {10, 97, 0, 1, 10, 97, 0, 2};
    std::memcpy(ip + 12, a, 8);
    put16(ip + 10, uroce::wire::internet_checksum(uroce::wire::Bytes(ip, 20)));
    udp = ip + 20;
  }
  put16(udp, s.sport);
  put16(udp + 2, s.dport);
  put16(udp + 4, udp_len);
  for (uint32_t i = 0; i < s.payload; ++i) udp[8 + i] = static_cast<uint8_t>(rng());
  return f;
}

/// Where the UDP checksum of a frame is.
size_t udp_check_at(const std::vector<uint8_t>& f) {
  size_t off = 12;
  if (get16(&f[off]) == 0x8100) off += 4;
  const bool v6 = get16(&f[off]) == 0x86DD;
  return off + 2 + (v6 ? 40 : 20) + 6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s IFACE_A IFACE_B whole|copied|segmented\n", argv[0]);
    return 2;
  }
  // whole: super-frames cross the veth whole, and those queued on the socket are read
  // straight into their packets' frames; copied: the same, read whole and cut from there (the
  // way taken when frames run short); segmented: the kernel cuts them on the way.
  const bool segmented = std::string(argv[3]) == "segmented";
  const bool copied = std::string(argv[3]) == "copied";
  std::string err;
  PacketConfig ca, cb;
  ca.iface = argv[1];
  cb.iface = argv[2];
  cb.scatter = !copied;
  auto a = PacketPort::open(ca, &err);
  if (!a) {
    std::fprintf(stderr, "FAIL: open %s: %s\n", argv[1], err.c_str());
    return 1;
  }
  auto b = PacketPort::open(cb, &err);
  if (!b) {
    std::fprintf(stderr, "FAIL: open %s: %s\n", argv[2], err.c_str());
    return 1;
  }
  std::mt19937 rng(20261126);
  const uint32_t mss = a->max_frame_len() - 18 - 28;  // the largest IPv4 UDP payload
  // What the engine might hand the port in one burst: a run of 15 packets and a short one
  // (one super-frame), 8 of the largest size (as many super-frames as 64 KiB takes), a run
  // of 2 on another flow, a packet whose identification does
  // not follow (alone), 4 IPv6 packets (a super-frame), a VLAN-tagged one (alone), and 3
  // small ones like ACKs (a super-frame of 3).
  std::vector<Spec> specs;
  uint16_t id = 65530;  // the identification wraps inside the first run
  for (int i = 0; i < 16; ++i) specs.push_back({false, false, 49152, id++, i < 15 ? 4000 : 777u});
  for (int i = 0; i < 8; ++i) specs.push_back({false, false, 49152, id++, mss});
  const uint32_t per = (PacketPort::kMaxSuper - 28) / mss;  // packets per super-frame
  const uint64_t big_supers = per >= 2 ? 8 / per + (8 % per >= 2 ? 1 : 0) : 0;
  specs.push_back({false, false, 50000, id++, 1000});
  specs.push_back({false, false, 50000, id++, 900});
  specs.push_back({false, false, 50000, static_cast<uint16_t>(id + 5), 1000});
  for (int i = 0; i < 4; ++i) specs.push_back({true, false, 49153, 0, 2000});
  specs.push_back({false, true, 49154, id++, 300});
  for (int i = 0; i < 3; ++i) specs.push_back({false, false, 49155, id++, 20});
  // Not RoCE: the port's filter keeps them off the socket (checked below, not expected).
  std::vector<Spec> others = {{false, false, 49156, id++, 100, 9, 17},
                              {false, false, 49156, id++, 1000, 4791, 6}};
  const uint64_t supers = 4 + big_supers;
  std::vector<std::vector<uint8_t>> sent;
  std::vector<Frame*> burst;
  auto add = [&](const Spec& s, bool expected) {
    std::vector<uint8_t> bytes = build(s, b->mac(), a->mac(), rng);
    Frame* f = a->alloc_frame();
    CHECK(f != nullptr && f->cap >= bytes.size(), "alloc_frame");
    if (f == nullptr) return;
    std::memcpy(f->data, bytes.data(), bytes.size());
    f->len = static_cast<uint32_t>(bytes.size());
    burst.push_back(f);
    if (expected) sent.push_back(std::move(bytes));
  };
  for (const Spec& s : specs) add(s, true);
  for (const Spec& s : others) add(s, false);
  size_t off = 0;
  for (int tries = 0; off < burst.size() && tries < 1000; ++tries)
    off += a->tx_burst(0, std::span<Frame* const>(burst).subspan(off));
  CHECK(off == burst.size(), "tx_burst took %zu of %zu frames", off, burst.size());
  CHECK(a->stats().tx_super == supers, "%llu super-frames sent, expected %llu",
        static_cast<unsigned long long>(a->stats().tx_super),
        static_cast<unsigned long long>(supers));
  CHECK(a->stats().tx_frames == burst.size(), "tx_frames %llu",
        static_cast<unsigned long long>(a->stats().tx_frames));
  // Receive until every packet is in or 2 s pass without one.
  std::vector<std::vector<uint8_t>> got;
  size_t unwanted = 0;
  while (got.size() < sent.size()) {
    Frame* in[64];
    const uint16_t n = b->rx_burst(0, in);
    for (uint16_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> bytes(in[i]->data, in[i]->data + in[i]->len);
      const bool from_a = bytes.size() > 42 && std::memcmp(&bytes[6], a->mac().data(), 6) == 0;
      // Only our test traffic (UDP 4791): the kernel may send IPv6 router solicitations.
      if (from_a && get16(&bytes[12]) == 0x0800 && (bytes[23] != 17 || get16(&bytes[36]) != 4791))
        ++unwanted;
      else if (bytes.size() > 42 && get16(&bytes[udp_check_at(bytes) - 4]) == 4791)
        got.push_back(bytes);
      b->free_frame(in[i]);
    }
    if (n > 0) continue;
    pollfd p{b->wait_fd(), POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) break;
  }
  CHECK(got.size() == sent.size(), "received %zu packets of %zu", got.size(), sent.size());
  CHECK(unwanted == 0, "%zu frames that are not RoCE (UDP to port 9, TCP) got past the filter",
        unwanted);
  for (size_t i = 0; i < got.size() && i < sent.size(); ++i) {
    std::vector<uint8_t> g = got[i];
    const size_t at = udp_check_at(g);
    CHECK(g.size() == sent[i].size(), "packet %zu: %zu bytes, sent %zu", i, g.size(), sent[i].size());
    if (g.size() != sent[i].size()) continue;
    g[at] = g[at + 1] = 0;  // the one field the kernel may fill in on the way
    CHECK(g == sent[i], "packet %zu differs from what was sent", i);
  }
  const uint64_t rx_super = b->stats().rx_super;
  const uint64_t rx_scattered = b->stats().rx_scattered;
  // Steady state, as the engine runs it: bursts of full-sized runs sent, received in small
  // bursts that leave cut packets waiting from one call to the next, all frames returned.
  // Nothing may allocate (no growth of the port's queues either), however long it runs.
  if (!segmented) {
    size_t moved = 0, sent_n = 0;
    std::vector<std::vector<uint8_t>> tmpl;  // built before counting; identifications set below
    for (int i = 0; i < 15; ++i) tmpl.push_back(build({false, false, 49160, 0, 4000}, b->mac(), a->mac(), rng));
    const size_t before = uroce::test::allocations();
    for (int round = 0; round < 700; ++round) {
      Frame* run[15];
      for (int i = 0; i < 15; ++i) {
        run[i] = a->alloc_frame();
        if (run[i] == nullptr) return 1;
        std::memcpy(run[i]->data, tmpl[i].data(), tmpl[i].size());
        run[i]->len = static_cast<uint32_t>(tmpl[i].size());
        uint8_t* ip = run[i]->data + 14;
        put16(ip + 4, id++);
        put16(ip + 10, 0);
        put16(ip + 10, uroce::wire::internet_checksum(uroce::wire::Bytes(ip, 20)));
        sent_n += 1;
      }
      size_t off2 = 0;
      for (int tries = 0; off2 < 15 && tries < 1000; ++tries)
        off2 += a->tx_burst(0, std::span<Frame* const>(run, 15).subspan(off2));
      for (int k = 0; k < 2; ++k) {  // 8 of the 15: a backlog of cut packets builds up
        Frame* in[4];
        const uint16_t n = b->rx_burst(0, in);
        for (uint16_t i = 0; i < n; ++i) b->free_frame(in[i]);
        moved += n;
      }
    }
    for (int idle = 0; moved < sent_n && idle < 100;) {
      Frame* in[4];
      const uint16_t n = b->rx_burst(0, in);
      for (uint16_t i = 0; i < n; ++i) b->free_frame(in[i]);
      moved += n;
      if (n > 0) continue;
      ++idle;
      pollfd p{b->wait_fd(), POLLIN, 0};
      poll(&p, 1, 100);
    }
    const size_t allocs = uroce::test::allocations() - before;
    CHECK(moved >= sent_n * 9 / 10, "steady state: %zu of %zu packets arrived", moved, sent_n);
    CHECK(allocs == 0, "steady state: %zu allocations while moving %zu packets", allocs, moved);
    std::printf("ok: steady state: %zu packets in 700 super-frames, received 4 at a time "
                "behind a growing backlog, no allocation\n", moved);
  }
  if (segmented)
    CHECK(rx_super == 0, "the kernel was to cut the super-frames, yet %llu arrived whole",
          static_cast<unsigned long long>(rx_super));
  else
    CHECK(rx_super == supers, "%llu super-frames arrived whole, expected %llu",
          static_cast<unsigned long long>(rx_super), static_cast<unsigned long long>(supers));
  // The first run (16 packets, 61 KiB) is longer than a ring slot: queued on the socket.
  if (copied || segmented)
    CHECK(rx_scattered == 0, "%llu super-frames read straight into their packets' frames",
          static_cast<unsigned long long>(rx_scattered));
  else
    CHECK(rx_scattered >= 1 && rx_scattered <= rx_super,
          "%llu of %llu super-frames read straight into their packets' frames",
          static_cast<unsigned long long>(rx_scattered), static_cast<unsigned long long>(rx_super));
  // The receiving interface goes down and comes back: its socket is left holding ENETDOWN,
  // which the kernel reports before it looks at the queue. The next super-frame (read from
  // the socket queue, not the ring) must still arrive, and the one after it too (a frame
  // behind, the queue would hand each slot the previous one's frame).
  if (!segmented) {
    const std::string dev = argv[2];
    CHECK(std::system(("ip link set dev " + dev + " down").c_str()) == 0, "ip link down");
    CHECK(std::system(("ip link set dev " + dev + " up").c_str()) == 0, "ip link up");
    // The kernel brings the pair's carrier back in its link watch, up to a second later on a
    // busy machine; until then what is sent is dropped on the way out. Wait for both ends.
    for (const char* end : {argv[1], argv[2]}) {
      bool up = false;
      for (int i = 0; i < 500 && !up; ++i) {
        char state[16] = {};
        if (std::FILE* f = std::fopen(("/sys/class/net/" + std::string(end) + "/operstate").c_str(), "re")) {
          up = std::fscanf(f, "%15s", state) == 1 && std::strcmp(state, "up") == 0;
          std::fclose(f);
        }
        if (!up) poll(nullptr, 0, 10);
      }
      CHECK(up, "%s did not come back up within 5 s", end);
    }
    for (int round = 0; round < 2; ++round) {
      std::vector<std::vector<uint8_t>> want;
      Frame* run[5];
      for (int i = 0; i < 5; ++i) {
        want.push_back(build({false, false, 49170, id++, 4000}, b->mac(), a->mac(), rng));
        run[i] = a->alloc_frame();
        if (run[i] == nullptr) return 1;
        std::memcpy(run[i]->data, want.back().data(), want.back().size());
        run[i]->len = static_cast<uint32_t>(want.back().size());
      }
      size_t off3 = 0;
      for (int tries = 0; off3 < 5 && tries < 1000; ++tries)
        off3 += a->tx_burst(0, std::span<Frame* const>(run, 5).subspan(off3));
      size_t matched = 0;
      for (int idle = 0; matched < 5 && idle < 20;) {
        Frame* in[8];
        const uint16_t n = b->rx_burst(0, in);
        for (uint16_t i = 0; i < n; ++i) {
          std::vector<uint8_t> g(in[i]->data, in[i]->data + in[i]->len);
          if (g.size() == want[matched].size()) {
            const size_t at = udp_check_at(g);
            g[at] = g[at + 1] = 0;
            if (g == want[matched]) ++matched;
          }
          b->free_frame(in[i]);
        }
        if (n > 0) continue;
        ++idle;
        pollfd p{b->wait_fd(), POLLIN, 0};
        poll(&p, 1, 100);
      }
      CHECK(matched == 5, "after the link went down and up: %zu of the 5 packets of super-frame "
            "%d arrived", matched, round + 1);
    }
    if (g_failures == 0)
      std::printf("ok: after the receiving interface went down and up, two super-frames arrived "
                  "whole and in turn\n");
  }
  // Raw-packet QPs' flows (receive_all): every frame the interface receives gets through,
  // the non-RoCE ones included; none this host sends (the kernel's own UDP from the
  // receiving end's address); and after receive_all(false), RoCE's only again.
  if (!segmented && !copied) {
    auto count_others = [&](const char* what, bool want_kernel_udp) {
      burst.clear();  // (the first burst's frames went with it)
      for (const Spec& s : others) add(s, false);
      size_t off4 = 0;
      for (int tries = 0; off4 < burst.size() && tries < 1000; ++tries)
        off4 += a->tx_burst(0, std::span<Frame* const>(burst).subspan(off4));
      burst.clear();
      if (want_kernel_udp) {
        // The host's own datagram out of the receiving end, to an address beyond it (a
        // neighbour entry of our making: no ARP first).
        char mac[18];
        const auto& m = a->mac();
        std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
        CHECK(std::system(("ip neigh replace 10.96.0.77 lladdr " + std::string(mac) + " dev " +
                           argv[2]).c_str()) == 0, "ip neigh");
        const int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        setsockopt(u, SOL_SOCKET, SO_BINDTODEVICE, argv[2], static_cast<socklen_t>(std::strlen(argv[2])));
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_port = htons(9);
        inet_pton(AF_INET, "10.96.0.77", &to.sin_addr);
        const char msg[] = "outgoing";
        CHECK(sendto(u, msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) > 0,
              "%s: the host's datagram was not sent", what);
        close(u);
      }
      size_t seen = 0, outgoing = 0;
      for (int idle = 0; idle < 5;) {
        Frame* in[16];
        const uint16_t n = b->rx_burst(0, in);
        for (uint16_t i = 0; i < n; ++i) {
          const uint8_t* d = in[i]->data;
          if (in[i]->len > 42 && std::memcmp(d + 6, a->mac().data(), 6) == 0 && get16(d + 12) == 0x0800 &&
              (d[23] != 17 || get16(d + 36) != 4791))
            ++seen;
          if (in[i]->len > 42 && std::memcmp(d + 6, b->mac().data(), 6) == 0 && get16(d + 12) == 0x0800 &&
              d[23] == 17 && get16(d + 36) == 9)
            ++outgoing;
          b->free_frame(in[i]);
        }
        if (n > 0) continue;
        ++idle;
        pollfd p{b->wait_fd(), POLLIN, 0};
        poll(&p, 1, 100);
      }
      CHECK(outgoing == 0, "%s: %zu of the host's own outgoing datagrams were received", what, outgoing);
      return seen;
    };
    CHECK(b->receive_all(true), "receive_all(true) failed");
    const size_t with_all = count_others("receive_all", true);
    CHECK(with_all == others.size(), "receive_all: %zu of the %zu frames that are not RoCE arrived",
          with_all, others.size());
    CHECK(b->receive_all(false), "receive_all(false) failed");
    const size_t after = count_others("RoCE only again", false);
    CHECK(after == 0, "RoCE only again: %zu frames that are not RoCE got past the filter", after);
    if (g_failures == 0)
      std::printf("ok: with every frame wanted (raw-packet flows), the %zu that are not RoCE "
                  "arrived and the host's own outgoing datagram did not; then the filter was "
                  "RoCE's again\n", others.size());
  }
  if (g_failures != 0) return 1;
  std::printf("ok: %zu packets in one burst, %llu super-frames, %s: every packet arrived as built, "
              "the %zu that are not RoCE were kept off the socket\n",
              sent.size(), static_cast<unsigned long long>(supers),
              segmented ? "cut by the kernel on the way"
              : copied  ? "crossed whole, read whole and cut by the receiving port"
                        : "crossed whole, those queued on the socket read straight into their packets' frames",
              others.size());
  return 0;
}

// ecn_switch: a user-space Ethernet switch between Linux interfaces, with one bottleneck
// port that drains at a fixed rate and marks ECN-capable packets CE by RED (drivers/common/
// red.h) — the switch of tools/bench/incast.sh on kernels without an ECN-marking qdisc
// (red, codel, pie, fq_codel are modules many small kernels leave out).
//
//   ecn_switch --bottleneck IF --rate MBPS [--limit BYTES] [--kmin BYTES] [--kmax BYTES]
//              [--pmax P] [--enqueue] [--no-ecn] [--samples FILE] [--sample-ms MS]
//              [--tick-us US] IF [IF ...]
//
// Frames are read from every interface with a packet socket, forwarded by destination MAC
// (learned from sources; unknown and group addresses go to every other port); those for the
// bottleneck wait in its FIFO (at most --limit bytes, tail drop beyond) and leave at --rate
// Mb/s, judged by RED as they leave (or, with --enqueue, as they arrive, as Linux's red
// does); the others leave at once. Every 50 ms (--sample-ms) --samples gets a line: seconds, the bytes
// received on each port (in argument order), the bytes the bottleneck sent, its queue
// (bytes), and its marked and dropped counts. With --tick-us the switch wakes once per tick
// at most (its wake-ups are what it spends most CPU on): what arrived meanwhile is taken in
// one go, and frames due within the tick leave together. SIGINT/SIGTERM print totals and
// end it.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/red.h"

namespace {

using uroce::drivers::RedConfig;
using uroce::drivers::RedVerdict;

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

constexpr size_t kSlot = 9216;     // a jumbo frame and its VLAN tag
constexpr size_t kSlots = 8192;    // the bottleneck queue's frames (72 MiB)
constexpr unsigned kBatch = 64;

struct Port {
  std::string name;
  int fd = -1;
  uint64_t rx_bytes = 0;
};

struct Queued {
  uint32_t slot;
  uint32_t len;
  uint64_t depart_ns;  // when its last bit has left at the bottleneck's rate
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ecn_switch: %s\nusage: ecn_switch --bottleneck IF --rate MBPS [--limit BYTES] "
               "[--kmin BYTES] [--kmax BYTES] [--pmax P] [--enqueue] [--no-ecn] "
               "[--samples FILE] [--sample-ms MS] [--tick-us US] IF [IF ...]\n",
               why);
  std::exit(2);
}

int open_port(const std::string& name) {
  const unsigned idx = if_nametoindex(name.c_str());
  if (idx == 0) {
    std::fprintf(stderr, "ecn_switch: no interface %s here\n", name.c_str());
    std::exit(1);
  }
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) {
    std::fprintf(stderr, "ecn_switch: packet socket: %s (run as root)\n", std::strerror(errno));
    std::exit(1);
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = static_cast<int>(idx);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    std::fprintf(stderr, "ecn_switch: bind %s: %s\n", name.c_str(), std::strerror(errno));
    std::exit(1);
  }
  const int one = 1;
  setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);  // not our own sends
  packet_mreq mr{};
  mr.mr_ifindex = static_cast<int>(idx);
  mr.mr_type = PACKET_MR_PROMISC;
  setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr);
  const int buf = 16 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bottleneck_name, samples_path;
  double rate_mbps = 0;
  uint64_t sample_ns = 50'000'000;
  uint64_t tick_ns = 0;
  uint64_t limit = 1 << 20;
  RedConfig red;
  bool on_enqueue = false;
  std::vector<Port> ports;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--bottleneck") {
      bottleneck_name = value();
    } else if (a == "--rate") {
      rate_mbps = std::atof(value());
    } else if (a == "--limit") {
      limit = std::strtoull(value(), nullptr, 10);
    } else if (a == "--kmin") {
      red.kmin_bytes = std::strtoull(value(), nullptr, 10);
    } else if (a == "--kmax") {
      red.kmax_bytes = std::strtoull(value(), nullptr, 10);
    } else if (a == "--pmax") {
      red.pmax = std::atof(value());
    } else if (a == "--enqueue") {
      on_enqueue = true;
    } else if (a == "--no-ecn") {
      red.ecn = false;
    } else if (a == "--samples") {
      samples_path = value();
    } else if (a == "--tick-us") {
      tick_ns = static_cast<uint64_t>(std::atof(value()) * 1e3);
      if (tick_ns >= 50'000'000) usage("--tick-us must be below 50000");
    } else if (a == "--sample-ms") {
      sample_ns = static_cast<uint64_t>(std::atof(value()) * 1e6);
      if (sample_ns < 100'000) usage("--sample-ms must be 0.1 or more");
    } else if (!a.empty() && a[0] == '-') {
      usage(("unknown option " + a).c_str());
    } else {
      ports.push_back({a});
    }
  }
  if (ports.size() < 2) usage("name two interfaces or more");
  if (rate_mbps <= 0) usage("--rate must be the bottleneck's rate in Mb/s");
  if (red.kmax_bytes <= red.kmin_bytes) usage("--kmax must be above --kmin");
  size_t bn = ports.size();
  for (size_t i = 0; i < ports.size(); ++i)
    if (ports[i].name == bottleneck_name) bn = i;
  if (bn == ports.size()) usage("--bottleneck must be one of the interfaces");
  for (Port& p : ports) p.fd = open_port(p.name);
  std::FILE* samples = nullptr;
  if (!samples_path.empty() && (samples = std::fopen(samples_path.c_str(), "we")) == nullptr) {
    std::fprintf(stderr, "ecn_switch: %s: %s\n", samples_path.c_str(), std::strerror(errno));
    return 1;
  }
  struct Row {
    double t;
    std::array<uint64_t, 16> rx;
    uint64_t tx, queue, marked, dropped;
  };
  std::vector<Row> rows;
  // An hour of samples (a million at most), allocated now.
  rows.reserve(std::min<uint64_t>(3'600'000'000'000 / sample_ns, 1'000'000));
  if (ports.size() > 16) usage("at most 16 interfaces");
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);

  std::vector<uint8_t> store(kSlots * kSlot);
  std::vector<uint32_t> free_slots;
  for (uint32_t s = 0; s < kSlots; ++s) free_slots.push_back(kSlots - 1 - s);
  std::vector<Queued> queue(kSlots);  // a ring
  size_t q_head = 0, q_len = 0;
  uint64_t last_depart = 0, tx_bytes = 0, marked = 0, dropped = 0, max_q = 0;
  uint64_t dropped_full = 0, dropped_red = 0;
  std::vector<std::pair<std::array<uint8_t, 6>, size_t>> macs;  // learned: MAC -> port
  std::mt19937_64 rng(1);
  const double ns_per_byte = 8000.0 / rate_mbps;
  const auto backlog = [&](uint64_t now) -> uint64_t {
    return last_depart > now ? static_cast<uint64_t>(static_cast<double>(last_depart - now) / ns_per_byte) : 0;
  };
  const auto judge = [&](uint64_t q, uint8_t* f, uint32_t len) {
    const RedVerdict v = uroce::drivers::red_judge(red, q, f, len, rng);
    if (v == RedVerdict::kMarked) ++marked;
    return v != RedVerdict::kDrop;
  };
  const auto to_bottleneck = [&](const uint8_t* f, uint32_t len, uint64_t now) {
    const uint64_t q = backlog(now);
    max_q = std::max(max_q, q);
    if (q + len > limit || free_slots.empty()) {
      ++dropped;
      ++dropped_full;
      return;
    }
    const uint32_t slot = free_slots.back();
    uint8_t* dst = &store[size_t{slot} * kSlot];
    std::memcpy(dst, f, len);
    if (on_enqueue && !judge(q, dst, len)) {
      ++dropped;
      ++dropped_red;
      return;
    }
    free_slots.pop_back();
    last_depart = std::max(last_depart, now) + static_cast<uint64_t>(len * ns_per_byte);
    queue[(q_head + q_len++) % kSlots] = {slot, len, last_depart};
  };

  std::vector<pollfd> pfd(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) pfd[i] = {ports[i].fd, POLLIN, 0};
  std::array<std::array<uint8_t, kSlot>, kBatch> rx{};
  std::array<mmsghdr, kBatch> msgs{};
  std::array<iovec, kBatch> iov{};
  for (unsigned k = 0; k < kBatch; ++k) {
    iov[k] = {rx[k].data(), kSlot};
    msgs[k].msg_hdr.msg_iov = &iov[k];
    msgs[k].msg_hdr.msg_iovlen = 1;
  }
  const uint64_t start = now_ns();
  uint64_t next_sample = start;
  while (!g_stop) {
    uint64_t now = now_ns();
    // The bottleneck: everything whose time has come leaves.
    while (q_len > 0 && queue[q_head].depart_ns <= now) {
      Queued& e = queue[q_head];
      uint8_t* f = &store[size_t{e.slot} * kSlot];
      const bool keep = on_enqueue || judge(backlog(e.depart_ns), f, e.len);
      if (keep && send(ports[bn].fd, f, e.len, 0) == static_cast<ssize_t>(e.len)) {
        tx_bytes += e.len;
      } else if (!keep) {
        ++dropped;
        ++dropped_red;
      }
      free_slots.push_back(e.slot);
      q_head = (q_head + 1) % kSlots;
      --q_len;
    }
    if (samples != nullptr && now >= next_sample) {
      // Kept in memory and written at the end: a write to a file can block for tens of ms
      // when the machine writes a lot (dirty page throttling), and the switch must not stop.
      if (rows.size() < rows.capacity()) {
        Row r{static_cast<double>(now - start) / 1e9, {}, tx_bytes, backlog(now), marked, dropped};
        for (size_t i = 0; i < ports.size() && i < r.rx.size(); ++i) r.rx[i] = ports[i].rx_bytes;
        rows.push_back(r);
      }
      next_sample += sample_ns;
    }
    // Sleep until a frame arrives or the next one is due to leave.
    int64_t wait_ns = q_len > 0 ? static_cast<int64_t>(queue[q_head].depart_ns - now) : 50'000'000;
    wait_ns = std::clamp<int64_t>(wait_ns, 0, 50'000'000);
    if (tick_ns > 0) {
      // Wake once per tick: what arrived meanwhile is taken in one go, and frames due within
      // it leave together at the next wake-up.
      const timespec nap{0, static_cast<long>(tick_ns)};
      clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, nullptr);
      wait_ns = 0;
    }
    timespec ts{wait_ns / 1'000'000'000, wait_ns % 1'000'000'000};
    if (ppoll(pfd.data(), pfd.size(), &ts, nullptr) <= 0) continue;
    now = now_ns();
    for (size_t i = 0; i < ports.size(); ++i) {
      if ((pfd[i].revents & POLLIN) == 0) continue;
      const int n = recvmmsg(ports[i].fd, msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
      for (int k = 0; k < n; ++k) {
        const uint32_t len = msgs[static_cast<size_t>(k)].msg_len;
        uint8_t* f = rx[static_cast<size_t>(k)].data();
        if (len < 14) continue;
        ports[i].rx_bytes += len;
        std::array<uint8_t, 6> src{}, dst{};
        std::memcpy(dst.data(), f, 6);
        std::memcpy(src.data(), f + 6, 6);
        auto it = std::find_if(macs.begin(), macs.end(), [&](const auto& m) { return m.first == src; });
        if (it == macs.end()) {
          macs.emplace_back(src, i);
        } else {
          it->second = i;
        }
        auto to = std::find_if(macs.begin(), macs.end(), [&](const auto& m) { return m.first == dst; });
        for (size_t o = 0; o < ports.size(); ++o) {
          if (o == i || ((dst[0] & 1) == 0 && to != macs.end() && to->second != o)) continue;
          if (o == bn) {
            to_bottleneck(f, len, now);
          } else {
            (void)send(ports[o].fd, f, len, 0);
          }
        }
      }
    }
  }
  std::printf("ecn_switch: sent %llu bytes through %s, marked %llu, dropped %llu (%llu with the "
              "queue full, %llu by RED: not ECN-capable), longest queue %llu bytes\n",
              static_cast<unsigned long long>(tx_bytes), ports[bn].name.c_str(),
              static_cast<unsigned long long>(marked), static_cast<unsigned long long>(dropped),
              static_cast<unsigned long long>(dropped_full), static_cast<unsigned long long>(dropped_red),
              static_cast<unsigned long long>(max_q));
  if (samples != nullptr) {
    for (const Row& r : rows) {
      std::fprintf(samples, "%.4f", r.t);
      for (size_t i = 0; i < ports.size() && i < r.rx.size(); ++i)
        std::fprintf(samples, " %llu", static_cast<unsigned long long>(r.rx[i]));
      std::fprintf(samples, " %llu %llu %llu %llu\n", static_cast<unsigned long long>(r.tx),
                   static_cast<unsigned long long>(r.queue), static_cast<unsigned long long>(r.marked),
                   static_cast<unsigned long long>(r.dropped));
    }
    std::fclose(samples);
  }
  return 0;
}

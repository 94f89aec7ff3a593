// ShmPort: two ports in one process paired through a socket path (the connecting side opens
// in a thread: it waits for the listener's next poll), frames both ways with their bytes,
// slots coming back, no allocation per frame, the peer's exit, and a hostile peer that maps
// the region itself and writes garbage into its rings.
#include "shm/shm_port.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "alloc_counter.h"

namespace uroce::drivers {
namespace {

constexpr uint32_t kSlots = 64;

std::string socket_path(const char* name) {
  return "/tmp/uroce-shm-test-" + std::to_string(getpid()) + "-" + name;
}

bool exists(const std::string& path) {
  struct stat st{};
  return lstat(path.c_str(), &st) == 0;
}

ShmConfig config(const std::string& path) {
  ShmConfig c;
  c.path = path;
  c.slots = kSlots;
  return c;
}

/// Opens the listener, then the connecting side in a thread while the listener polls.
struct Pair {
  std::unique_ptr<ShmPort> a, b;  // a listened, b connected
  uint64_t now = 0;
  explicit Pair(const std::string& path) {
    std::string err;
    a = ShmPort::open(config(path), &err);
    EXPECT_NE(a, nullptr) << err;
    if (a == nullptr) return;
    EXPECT_FALSE(a->describe().find("waiting") == std::string::npos);
    std::atomic<bool> done{false};
    std::string berr;
    std::thread t([&] {
      b = ShmPort::open(config(path), &berr);
      done = true;
    });
    std::array<Frame*, 8> out{};
    while (!done) {
      now += 1'000'000;  // the listener looks for its peer once a millisecond
      EXPECT_EQ(a->rx_burst(now, out), 0);
    }
    t.join();
    EXPECT_NE(b, nullptr) << berr;
  }
};

Frame* frame_with(Port& p, uint32_t seq, uint32_t len) {
  Frame* f = p.alloc_frame();
  if (f == nullptr) return nullptr;
  EXPECT_GE(f->cap, p.max_frame_len());
  for (uint32_t i = 0; i < len; ++i) f->data[i] = static_cast<uint8_t>(seq * 7 + i);
  f->len = len;
  return f;
}

bool carries(const Frame* f, uint32_t seq, uint32_t len) {
  if (f->len != len) return false;
  for (uint32_t i = 0; i < len; ++i)
    if (f->data[i] != static_cast<uint8_t>(seq * 7 + i)) return false;
  return true;
}

TEST(ShmPort, PairsAndLeavesNoFileBehind) {
  const std::string path = socket_path("pair");
  Pair p(path);
  ASSERT_NE(p.b, nullptr);
  EXPECT_TRUE(p.a->paired());
  EXPECT_FALSE(exists(path)) << "the socket file must go once paired";
  EXPECT_NE(p.a->mac(), p.b->mac());
  EXPECT_EQ(p.a->mac()[0] & 0x03, 0x02) << "unicast, locally administered";
}

TEST(ShmPort, AListenerNobodyJoinedRemovesItsFile) {
  const std::string path = socket_path("alone");
  {
    std::string err;
    auto a = ShmPort::open(config(path), &err);
    ASSERT_NE(a, nullptr) << err;
    EXPECT_TRUE(exists(path));
    // Frames sent before a peer came are dropped, and their slots stay usable.
    for (uint32_t i = 0; i < 3 * kSlots; ++i) {
      Frame* f = frame_with(*a, i, 60);
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(a->tx_burst(0, std::span<Frame* const>(&f, 1)), 1);
    }
    EXPECT_EQ(a->stats().tx_dropped, 3 * kSlots);
  }
  EXPECT_FALSE(exists(path));
}

TEST(ShmPort, AStaleSocketFileIsTakenOver) {
  const std::string path = socket_path("stale");
  // A socket bound and closed without unlink: what a process killed while listening leaves.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  close(fd);
  ASSERT_TRUE(exists(path));
  Pair p(path);
  ASSERT_NE(p.b, nullptr);
  EXPECT_FALSE(exists(path));
}

TEST(ShmPort, FramesCrossBothWaysAndSlotsComeBack) {
  Pair p(socket_path("frames"));
  ASSERT_NE(p.b, nullptr);
  std::mt19937 rng(7);
  std::array<Frame*, 16> out{};
  uint32_t seq = 0;
  size_t allocs_at_start = 0;
  // Ten times the slots each way, in bursts of 16: slots must come back to be reused.
  for (int round = 0; round < 10 * static_cast<int>(kSlots) / 16; ++round) {
    if (round == 4) allocs_at_start = test::allocations();
    for (ShmPort* from : {p.a.get(), p.b.get()}) {
      ShmPort* to = from == p.a.get() ? p.b.get() : p.a.get();
      std::array<Frame*, 16> burst{};
      std::array<uint32_t, 16> lens{};
      for (size_t i = 0; i < burst.size(); ++i) {
        lens[i] = 60 + static_cast<uint32_t>(rng() % (from->max_frame_len() - 59));
        burst[i] = frame_with(*from, seq + static_cast<uint32_t>(i), lens[i]);
        ASSERT_NE(burst[i], nullptr) << "round " << round << ": slots did not come back";
      }
      ASSERT_EQ(from->tx_burst(p.now, burst), burst.size());
      ASSERT_EQ(to->rx_burst(p.now, out), out.size());
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_TRUE(carries(out[i], seq + static_cast<uint32_t>(i), lens[i])) << i;
        to->free_frame(out[i]);
      }
      seq += static_cast<uint32_t>(burst.size());
    }
  }
  EXPECT_EQ(test::allocations(), allocs_at_start) << "no allocation per frame";
  EXPECT_EQ(p.a->stats().rx_frames, p.b->stats().tx_frames);
  EXPECT_EQ(p.a->stats().rx_bad_slot + p.b->stats().rx_bad_slot, 0u);
}

TEST(ShmPort, AllSlotsWithAPeerThatLeftComeBack) {
  Pair p(socket_path("gone"));
  ASSERT_NE(p.b, nullptr);
  std::vector<Frame*> sent;
  while (Frame* f = frame_with(*p.a, 0, 100)) sent.push_back(f);
  EXPECT_EQ(sent.size(), kSlots);
  ASSERT_EQ(p.a->tx_burst(p.now, sent), sent.size());
  EXPECT_EQ(p.a->alloc_frame(), nullptr) << "every slot is with the peer, which is alive";
  p.b.reset();  // the peer exits without taking them
  Frame* f = p.a->alloc_frame();
  ASSERT_NE(f, nullptr) << "the peer's end of the socket closed: its slots are ours again";
  ASSERT_EQ(p.a->tx_burst(p.now, std::span<Frame* const>(&f, 1)), 1);
  EXPECT_EQ(p.a->stats().tx_dropped, 1u);
}

TEST(ShmPort, DescriptorsAreCloseOnExec) {
  std::vector<bool> before(1024);
  for (int fd = 0; fd < 1024; ++fd) before[fd] = fcntl(fd, F_GETFD) >= 0;
  Pair p(socket_path("cloexec"));
  ASSERT_NE(p.b, nullptr);
  int ours = 0;
  for (int fd = 0; fd < 1024; ++fd) {
    const int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || before[fd]) continue;
    ++ours;
    EXPECT_TRUE(flags & FD_CLOEXEC) << "fd " << fd;
  }
  EXPECT_EQ(ours, 2) << "each side keeps its paired socket only";
}

// The attacker connects like a peer, maps the region and writes what it likes into the ring
// the port reads (layout: shm_port.cc). The port must hand out only its frames, in range,
// each slot once, and count the rest.
TEST(ShmPort, AHostilePeerCannotMakeItReachOutsideTheRegion) {
  const std::string path = socket_path("hostile");
  std::string err;
  auto a = ShmPort::open(config(path), &err);
  ASSERT_NE(a, nullptr) << err;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::array<Frame*, 32> out{};
  EXPECT_EQ(a->rx_burst(1'000'000, out), 0);  // accepts and sends the region
  char data[24];
  char cbuf[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{data, sizeof data};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof cbuf;
  ASSERT_EQ(recvmsg(fd, &msg, MSG_WAITALL), static_cast<ssize_t>(sizeof data));
  int region_fd = -1;
  std::memcpy(&region_fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof region_fd);
  struct stat st{};
  ASSERT_EQ(fstat(region_fd, &st), 0);
  auto* region = static_cast<uint8_t*>(
      mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, region_fd, 0));
  ASSERT_NE(region, MAP_FAILED);
  // The listener sends on direction 0 and reads direction 1's `sent` ring: the fourth ring
  // after the header page would be 1's `returned`; 1's `sent` is the third.
  const size_t ring = 4096;  // the head's cache line + 64 entries, in a page
  auto* head = reinterpret_cast<std::atomic<uint32_t>*>(region + 4096 + 2 * ring);
  auto* entry = reinterpret_cast<uint64_t*>(region + 4096 + 2 * ring + 64);
  ASSERT_EQ(a->region().size(), static_cast<size_t>(st.st_size));
  const uint8_t* slots_begin = a->region().data() + 4096 + 4 * ring;  // as the port maps it
  const uint8_t* slots_end = a->region().data() + a->region().size();
  std::mt19937_64 rng(42);
  uint32_t h = 0;
  uint64_t handed = 0;
  for (int round = 0; round < 200; ++round) {
    // Mostly garbage: slot numbers and lengths out of range, the same slot again and again,
    // and now and then a head far ahead of the tail.
    const uint32_t n = 1 + static_cast<uint32_t>(rng() % kSlots);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t e = rng();
      if (rng() % 3 == 0) e = (rng() % 4) << 32 | (rng() % 2000);  // plausible, often repeated
      entry[(h + i) % kSlots] = e;
    }
    h += (round % 17 == 16) ? 0x80000000u : n;
    head->store(h, std::memory_order_release);
    const uint16_t got = a->rx_burst(1'000'000, out);
    std::vector<const Frame*> held;
    for (uint16_t i = 0; i < got; ++i) {
      const Frame* f = out[i];
      EXPECT_GE(f->data, slots_begin);
      EXPECT_LE(f->data + f->len, slots_end);
      // What a parser re-reading an IP length can reach (the region keeps that much spare).
      EXPECT_LE(f->data + 18 + 65535, slots_end);
      EXPECT_LE(f->len, a->max_frame_len());
      for (const Frame* g : held) EXPECT_NE(g->data, f->data) << "a slot handed out twice";
      held.push_back(f);
    }
    handed += got;
    for (uint16_t i = 0; i < got; ++i) a->free_frame(out[i]);
  }
  EXPECT_GT(handed, 0u) << "plausible entries must get through";
  EXPECT_GT(a->stats().rx_bad_slot, 0u);
  munmap(region, static_cast<size_t>(st.st_size));
  close(region_fd);
  close(fd);
}

}  // namespace
}  // namespace uroce::drivers

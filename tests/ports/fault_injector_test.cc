// FaultInjector over a MemLink: each fault on its own, then all of them together.
// Every test is seeded and steps its own clock; every test ends with the pool full again.
#include "fault/fault_injector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <set>
#include <vector>

#include "alloc_counter.h"
#include "memlink/memlink.h"
#include "test_frames.h"
#include "wire/cm_mad.h"
#include "wire/ipv4.h"
#include "wire/packet.h"

namespace uroce::drivers {
namespace {

using test::frame_bytes;
using test::make_frame;
using test::seq_of;

struct Received {
  uint32_t seq = 0;  // from the first four bytes (meaningless if those were corrupted)
  std::vector<uint8_t> bytes;
  uint64_t at_ns = 0;
};

/// Sends frames first..first+count-1 through `p` at now_ns, in bursts of up to 32.
void send(Port& p, uint64_t now_ns, uint32_t first, uint32_t count) {
  std::array<Frame*, 32> burst{};
  for (uint32_t done = 0; done < count;) {
    const uint32_t n = std::min<uint32_t>(32, count - done);
    for (uint32_t i = 0; i < n; ++i) {
      burst[i] = make_frame(p, first + done + i);
      ASSERT_NE(burst[i], nullptr) << "pool exhausted";
    }
    ASSERT_EQ(p.tx_burst(now_ns, std::span<Frame* const>(burst.data(), n)), n);
    done += n;
  }
}

/// Receives everything `p` has at now_ns; copies it out and frees the frames.
std::vector<Received> drain(Port& p, uint64_t now_ns, std::vector<Received>* into = nullptr) {
  std::vector<Received> local;
  std::vector<Received>& got = into != nullptr ? *into : local;
  std::array<Frame*, 8> burst{};  // smaller than the sends: exercises partial bursts
  for (;;) {
    const uint16_t n = p.rx_burst(now_ns, burst);
    for (uint16_t i = 0; i < n; ++i) {
      const auto b = burst[i]->bytes();
      got.push_back(Received{seq_of(burst[i]), {b.begin(), b.end()}, now_ns});
      p.free_frame(burst[i]);
    }
    if (n == 0) break;
  }
  return local;
}

std::vector<uint32_t> seqs(const std::vector<Received>& r) {
  std::vector<uint32_t> s;
  for (const Received& x : r) s.push_back(x.seq);
  return s;
}

std::vector<uint32_t> iota(uint32_t n) {
  std::vector<uint32_t> s(n);
  for (uint32_t i = 0; i < n; ++i) s[i] = i;
  return s;
}

void expect_pool_full(const MemLink& link) {
  EXPECT_EQ(link.pool().available(), link.pool().capacity());
}

TEST(FaultInjector, NoFaultsPassesFramesUnchangedInOrder) {
  MemLink link;
  {
    FaultInjector fi(link.a(), FaultConfig{});
    send(fi, 0, 0, 100);
    const auto got = drain(link.b(), 0);
    ASSERT_EQ(got.size(), 100u);
    for (uint32_t i = 0; i < 100; ++i) {
      EXPECT_EQ(got[i].seq, i);
      EXPECT_EQ(got[i].bytes, frame_bytes(i)) << "frame " << i;
    }
    EXPECT_EQ(fi.counters().sent, 100u);
    EXPECT_EQ(fi.counters().dropped, 0u);
    EXPECT_EQ(fi.held(), 0u);
    EXPECT_EQ(fi.next_release(), FaultInjector::kNever);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, ForwardsPoolMacAndFrameLength) {
  MemLink link;
  FaultInjector fi(link.a(), FaultConfig{});
  EXPECT_EQ(fi.mac(), link.a().mac());
  EXPECT_EQ(fi.max_frame_len(), link.a().max_frame_len());
  Frame* f = fi.alloc_frame();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(link.pool().available(), link.pool().capacity() - 1);
  fi.free_frame(f);
  expect_pool_full(link);
}

TEST(FaultInjector, LossOneDropsEverything) {
  MemLink link;
  FaultConfig cfg;
  cfg.loss = 1.0;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 0, 0, 1000);
    EXPECT_TRUE(drain(link.b(), 0).empty());
    EXPECT_EQ(fi.counters().dropped, 1000u);
    EXPECT_EQ(fi.counters().sent, 0u);
  }
  expect_pool_full(link);
}

// A UD SEND to `dest_qp` whose 256-byte payload carries `attr` where a MAD's attribute ID is.
std::vector<uint8_t> mad_frame(uint8_t opcode, uint32_t dest_qp, uint16_t attr) {
  wire::RoceHeaders h;
  h.ip4.src = {10, 0, 0, 1};
  h.ip4.dst = {10, 0, 0, 2};
  h.bth.opcode = opcode;
  h.bth.dest_qp = dest_qp;
  h.ext.deth = {wire::kGsiQkey, 1};
  std::vector<uint8_t> payload(256, 0);
  payload[0] = 1;     // base version
  payload[1] = 0x07;  // the CM's class
  wire::store_be16(&payload[16], attr);
  std::vector<uint8_t> f(wire::frame_len(h, payload.size()));
  EXPECT_EQ(wire::build_frame(h, payload, f), f.size());
  return f;
}

TEST(FaultInjector, SpareDreqLetsOnlyTheCmDisconnectRequestThrough) {
  const std::vector<std::vector<uint8_t>> frames = {
      mad_frame(wire::opcode::kUdSendOnly, 1, 0x0015),  // a DREQ: spared
      mad_frame(wire::opcode::kUdSendOnly, 1, 0x0016),  // a DREP
      mad_frame(wire::opcode::kUdSendOnly, 1, 0x0010),  // a REQ
      mad_frame(wire::opcode::kUdSendOnly, 7, 0x0015),  // the same bytes to another QP
  };
  for (const bool spare : {true, false}) {
    MemLink link;
    FaultConfig cfg;
    cfg.seed = 9;
    cfg.loss = 1.0;
    cfg.corrupt = 1.0;
    cfg.spare_dreq = spare;
    {
      FaultInjector fi(link.a(), cfg);
      for (const auto& bytes : frames) {
        Frame* f = fi.alloc_frame();
        ASSERT_NE(f, nullptr);
        std::copy(bytes.begin(), bytes.end(), f->data);
        f->len = static_cast<uint32_t>(bytes.size());
        ASSERT_EQ(fi.tx_burst(0, std::span<Frame* const>(&f, 1)), 1u);
      }
      send(fi, 0, 0, 3);  // not RoCE at all: lost
      const auto got = drain(link.b(), 0);
      if (spare) {
        ASSERT_EQ(got.size(), 1u);
        EXPECT_EQ(got[0].bytes, frames[0]) << "the DREQ arrives untouched";
        EXPECT_EQ(fi.counters().dropped, 6u);
      } else {
        EXPECT_TRUE(got.empty());
        EXPECT_EQ(fi.counters().dropped, 7u);
      }
    }
    expect_pool_full(link);
  }
}

// Sends 10000 frames with 10% loss; returns the number dropped, after checking that the
// survivors arrive in order and that the counters agree with what arrived.
uint64_t run_ten_percent_loss(uint64_t seed) {
  MemLink link;
  FaultConfig cfg;
  cfg.seed = seed;
  cfg.loss = 0.1;
  uint64_t dropped = 0;
  {
    FaultInjector fi(link.a(), cfg);
    std::vector<Received> got;
    for (uint32_t i = 0; i < 10000; i += 100) {
      send(fi, i, i, 100);
      drain(link.b(), i, &got);
    }
    const auto s = seqs(got);
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
    EXPECT_EQ(std::adjacent_find(s.begin(), s.end()), s.end()) << "a frame arrived twice";
    dropped = fi.counters().dropped;
    EXPECT_EQ(dropped + got.size(), 10000u);
    EXPECT_EQ(fi.counters().sent, got.size());
  }
  expect_pool_full(link);
  return dropped;
}

TEST(FaultInjector, TenPercentLossIsSeededAndReproducible) {
  const uint64_t first = run_ten_percent_loss(42);
  EXPECT_GE(first, 800u);
  EXPECT_LE(first, 1200u);
  EXPECT_EQ(run_ten_percent_loss(42), first) << "same seed, same drops";
  const uint64_t other = run_ten_percent_loss(43);
  EXPECT_GE(other, 800u);
  EXPECT_LE(other, 1200u);
  EXPECT_NE(other, first) << "another seed, another pattern";
}

TEST(FaultInjector, DuplicateOneDoublesEveryFrame) {
  MemLink link;
  FaultConfig cfg;
  cfg.duplicate = 1.0;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 0, 0, 200);
    const auto got = drain(link.b(), 0);
    ASSERT_EQ(got.size(), 400u);
    for (uint32_t i = 0; i < 200; ++i) {  // Expect: each frame followed by its copy.
      EXPECT_EQ(got[2 * i].bytes, frame_bytes(i));
      EXPECT_EQ(got[2 * i + 1].bytes, frame_bytes(i));
    }
    EXPECT_EQ(fi.counters().duplicated, 200u);
    EXPECT_EQ(fi.counters().sent, 400u);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, DuplicateSkippedWhenPoolIsEmpty) {
  MemLink::Config lc;
  lc.frames = 4;
  MemLink link(lc);
  FaultConfig cfg;
  cfg.duplicate = 1.0;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 0, 0, 4);  // takes the whole pool: no room for copies
    const auto got = drain(link.b(), 0);
    EXPECT_EQ(seqs(got), iota(4));
    EXPECT_EQ(fi.counters().duplicated, 0u);
    EXPECT_EQ(fi.counters().dup_skipped, 4u);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, CorruptOneFlipsExactlyOneBitPerFrame) {
  MemLink link;
  FaultConfig cfg;
  cfg.seed = 5;
  cfg.corrupt = 1.0;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 0, 0, 500);
    const auto got = drain(link.b(), 0);
    ASSERT_EQ(got.size(), 500u);
    std::set<size_t> positions;
    for (uint32_t i = 0; i < 500; ++i) {
      const std::vector<uint8_t> want = frame_bytes(i);
      ASSERT_EQ(got[i].bytes.size(), want.size());
      int flipped = 0;
      for (size_t b = 0; b < want.size(); ++b) {
        const auto diff = static_cast<unsigned>(got[i].bytes[b] ^ want[b]);
        if (diff != 0) positions.insert(b * 8 + static_cast<size_t>(std::countr_zero(diff)));
        flipped += std::popcount(diff);
      }
      EXPECT_EQ(flipped, 1) << "frame " << i;
    }
    EXPECT_GT(positions.size(), 100u) << "the flipped bit should move around";
    EXPECT_EQ(fi.counters().corrupted, 500u);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, CeMarksIpFramesCongestedAndLeavesTheRestAlone) {
  MemLink link;
  FaultConfig cfg;
  cfg.seed = 6;
  cfg.ce = 1.0;
  // A RoCEv2 WRITE over IPv4, ECN-capable, and one over IPv6 sent Not-ECT.
  std::vector<std::vector<uint8_t>> frames;
  for (bool v6 : {false, true}) {
    wire::RoceHeaders h;
    h.ipv6 = v6;
    h.ip4.src = {10, 0, 0, 1};
    h.ip4.dst = {10, 0, 0, 2};
    h.ip4.ecn = wire::kEcnEct0;
    h.ip6.src[15] = 1;
    h.ip6.dst[15] = 2;
    h.bth.opcode = wire::opcode::kRcWriteOnly;
    h.ext.reth = {0x1000, 0x42, 8};
    const std::vector<uint8_t> payload(8, 0x5a);
    std::vector<uint8_t> f(wire::frame_len(h, payload.size()));
    ASSERT_EQ(wire::build_frame(h, payload, f), f.size());
    frames.push_back(f);
  }
  {
    FaultInjector fi(link.a(), cfg);
    for (const auto& bytes : frames) {
      Frame* f = fi.alloc_frame();
      std::copy(bytes.begin(), bytes.end(), f->data);
      f->len = static_cast<uint32_t>(bytes.size());
      ASSERT_EQ(fi.tx_burst(0, std::span<Frame* const>(&f, 1)), 1u);
    }
    send(fi, 0, 0, 3);  // not IP: untouched, not counted
    const auto got = drain(link.b(), 0);
    ASSERT_EQ(got.size(), 5u);
    for (size_t i = 0; i < 2; ++i) {
      wire::ParsedPacket p;
      // Still a valid packet: the IPv4 checksum was redone, and the ICRC leaves ECN out.
      ASSERT_EQ(wire::parse_frame(got[i].bytes, p), wire::ParseError::kOk) << i;
      EXPECT_EQ(p.hdr.ecn(), wire::kEcnCe) << i;
    }
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(got[2 + i].bytes, frame_bytes(i));
    EXPECT_EQ(fi.counters().ce_marked, 2u);
  }
  expect_pool_full(link);
}

// Sends n frames with reordering, flushes, and returns the order they arrived in.
std::vector<uint32_t> reordered_arrivals(uint32_t n, uint32_t window, double p, uint64_t seed,
                                         FaultInjector::Counters* counters) {
  MemLink link;
  FaultConfig cfg;
  cfg.seed = seed;
  cfg.reorder = p;
  cfg.reorder_window = window;
  std::vector<Received> got;
  {
    FaultInjector fi(link.a(), cfg);
    for (uint32_t i = 0; i < n; i += 50) {
      send(fi, i, i, std::min<uint32_t>(50, n - i));
      drain(link.b(), i, &got);
    }
    fi.flush(n);
    drain(link.b(), n, &got);
    EXPECT_EQ(fi.held(), 0u);
    *counters = fi.counters();
  }
  expect_pool_full(link);
  return seqs(got);
}

TEST(FaultInjector, ReorderPermutesWithinTheWindow) {
  constexpr uint32_t kN = 2000;
  constexpr uint32_t kWindow = 4;
  FaultInjector::Counters c;
  const std::vector<uint32_t> order = reordered_arrivals(kN, kWindow, 0.3, 11, &c);
  // Expect: every frame exactly once (the multiset is kept) ...
  std::vector<uint32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_EQ(sorted, iota(kN));
  // ... in a different order ...
  EXPECT_NE(order, iota(kN));
  size_t displaced = 0;
  for (uint32_t pos = 0; pos < kN; ++pos) {
    // ... and no frame later than `window` places after its place in the input.
    EXPECT_LE(pos, order[pos] + kWindow) << "frame " << order[pos] << " at " << pos;
    displaced += order[pos] != pos;
  }
  EXPECT_GT(displaced, 200u);
  EXPECT_GT(c.reordered, 450u);  // about 0.3 * 2000 (fewer when all four slots are busy)
  EXPECT_LT(c.reordered, 750u);
  EXPECT_EQ(c.sent, kN);
  FaultInjector::Counters again;
  EXPECT_EQ(reordered_arrivals(kN, kWindow, 0.3, 11, &again), order) << "seeded";
}

TEST(FaultInjector, ReorderWindowOneSwapsNeighbours) {
  FaultInjector::Counters c;
  const std::vector<uint32_t> order = reordered_arrivals(10, 1, 1.0, 3, &c);
  // Expect: 0 held, 1 passes and releases 0, 2 held, 3 releases it, ...
  EXPECT_EQ(order, (std::vector<uint32_t>{1, 0, 3, 2, 5, 4, 7, 6, 9, 8}));
  EXPECT_EQ(c.reordered, 5u);
}

TEST(FaultInjector, AReorderedFrameLeavesAfterItsHoldTimeWithoutLaterTraffic) {
  // Request/response traffic: one frame, and nothing after it until it is answered. Held
  // for reordering, it must not wait for a next frame (that would be a loss the transport
  // recovers only by its retransmission timeout): it leaves once reorder_hold_ns passed.
  MemLink link;
  FaultConfig cfg;
  cfg.reorder = 1.0;
  cfg.reorder_window = 4;
  cfg.reorder_hold_ns = 1000;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 100, 0, 1);
    EXPECT_EQ(fi.held(), 1u);
    fi.pump(1099);  // Expect: one ns early, nothing.
    EXPECT_TRUE(drain(link.b(), 1099).empty());
    fi.pump(1100);  // Expect: the frame.
    EXPECT_EQ(seqs(drain(link.b(), 1100)), iota(1));
    EXPECT_EQ(fi.held(), 0u);
    // Several held at once leave in the order they were held, each at its own time.
    send(fi, 2000, 1, 1);
    send(fi, 2500, 2, 1);
    fi.pump(3000);
    EXPECT_EQ(seqs(drain(link.b(), 3000)), std::vector<uint32_t>{1});
    fi.pump(3500);
    EXPECT_EQ(seqs(drain(link.b(), 3500)), std::vector<uint32_t>{2});
    EXPECT_EQ(fi.counters().reordered, 3u);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, DelayHoldsFramesUntilDue) {
  MemLink link;
  FaultConfig cfg;
  cfg.delay_ns = 1000;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 500, 0, 10);
    EXPECT_TRUE(drain(link.b(), 500).empty());
    EXPECT_EQ(fi.held(), 10u);
    EXPECT_EQ(fi.next_release(), 1500u);
    EXPECT_EQ(link.pool().available(), link.pool().capacity() - 10);

    fi.pump(1499);  // Expect: one ns early, nothing.
    EXPECT_TRUE(drain(link.b(), 1499).empty());
    fi.pump(1500);  // Expect: all of them, in order.
    const auto got = drain(link.b(), 1500);
    EXPECT_EQ(seqs(got), iota(10));
    for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(got[i].bytes, frame_bytes(i));
    EXPECT_EQ(fi.held(), 0u);
    EXPECT_EQ(fi.next_release(), FaultInjector::kNever);
    EXPECT_EQ(fi.counters().delayed, 10u);
    EXPECT_EQ(fi.counters().sent, 10u);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, DelayedFramesLeaveOnLaterBursts) {
  MemLink link;
  FaultConfig cfg;
  cfg.delay_ns = 1000;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 0, 0, 5);
    EXPECT_EQ(fi.tx_burst(999, {}), 0u);
    EXPECT_TRUE(drain(link.b(), 999).empty());
    send(fi, 1000, 5, 5);  // Expect: the first five leave, the new five are held.
    EXPECT_EQ(seqs(drain(link.b(), 1000)), iota(5));
    EXPECT_EQ(fi.held(), 5u);
    std::array<Frame*, 4> none{};
    EXPECT_EQ(fi.rx_burst(2000, none), 0u);  // an rx poll moves the clock too
    EXPECT_EQ(seqs(drain(link.b(), 2000)), (std::vector<uint32_t>{5, 6, 7, 8, 9}));
  }
  expect_pool_full(link);
}

TEST(FaultInjector, JitterStaysWithinBoundsAndKeepsOrder) {
  MemLink link;
  FaultConfig cfg;
  cfg.seed = 7;
  cfg.delay_ns = 1000;
  cfg.jitter_ns = 500;
  constexpr uint32_t kN = 200;
  std::vector<Received> got;
  {
    FaultInjector fi(link.a(), cfg);
    // A harness loop: step the clock to the next send or the next release, whichever is first.
    uint32_t next = 0;
    while (next < kN || fi.held() > 0) {
      const uint64_t send_at = next < kN ? uint64_t{100} * next : FaultInjector::kNever;
      const uint64_t now = std::min(send_at, fi.next_release());
      if (now == send_at) {
        send(fi, now, next++, 1);
      } else {
        fi.pump(now);
      }
      drain(link.b(), now, &got);
    }
    EXPECT_EQ(fi.counters().delayed, kN);
  }
  ASSERT_EQ(seqs(got), iota(kN));
  std::set<uint64_t> latencies;
  for (uint32_t i = 0; i < kN; ++i) {
    const uint64_t latency = got[i].at_ns - uint64_t{100} * i;
    EXPECT_GE(latency, 1000u) << "frame " << i;
    EXPECT_LE(latency, 1500u) << "frame " << i;
    latencies.insert(latency);
  }
  EXPECT_GT(latencies.size(), 50u) << "jitter should vary the delay";
  expect_pool_full(link);
}

TEST(FaultInjector, RxSideOnlyAffectsReceivedFrames) {
  MemLink link;
  FaultConfig cfg;
  cfg.rx_side = true;
  cfg.tx_side = false;
  cfg.duplicate = 1.0;
  {
    FaultInjector fi(link.a(), cfg);
    send(link.b(), 0, 0, 50);
    const auto got = drain(fi, 0);
    ASSERT_EQ(got.size(), 100u);
    for (uint32_t i = 0; i < 50; ++i) {
      EXPECT_EQ(got[2 * i].seq, i);
      EXPECT_EQ(got[2 * i + 1].bytes, frame_bytes(i));
    }
    EXPECT_EQ(fi.rx_counters().duplicated, 50u);
    EXPECT_EQ(fi.rx_counters().sent, 100u);

    send(fi, 0, 100, 10);  // Expect: the tx direction untouched.
    EXPECT_EQ(seqs(drain(link.b(), 0)), (std::vector<uint32_t>{100, 101, 102, 103, 104, 105,
                                                                106, 107, 108, 109}));
    EXPECT_EQ(fi.tx_counters().sent, 0u);
    EXPECT_EQ(fi.tx_counters().duplicated, 0u);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, RxDelayHoldsReceivedFrames) {
  MemLink link;
  FaultConfig cfg;
  cfg.rx_side = true;
  cfg.tx_side = false;
  cfg.delay_ns = 1000;
  {
    FaultInjector fi(link.a(), cfg);
    send(link.b(), 0, 0, 20);
    std::array<Frame*, 8> burst{};
    EXPECT_EQ(fi.rx_burst(0, burst), 0u);
    EXPECT_EQ(fi.held(), 20u);
    EXPECT_EQ(link.in_flight(), 0u) << "pulled off the link into the delay queue";
    EXPECT_EQ(fi.next_release(), 1000u);
    EXPECT_EQ(fi.rx_burst(999, burst), 0u);
    std::vector<uint32_t> order;
    for (size_t expect : {8u, 8u, 4u, 0u}) {
      const uint16_t n = fi.rx_burst(1000, burst);
      EXPECT_EQ(size_t{n}, expect);
      for (uint16_t i = 0; i < n; ++i) {
        order.push_back(seq_of(burst[i]));
        fi.free_frame(burst[i]);
      }
    }
    EXPECT_EQ(order, iota(20));
  }
  expect_pool_full(link);
}

// A port that takes only the first `accept` frames of each burst (a full NIC ring).
class StingyPort final : public Port {
 public:
  explicit StingyPort(uint16_t accept) : pool_(16, 2048), accept_(accept) {}
  uint16_t rx_burst(uint64_t, std::span<Frame*>) override { return 0; }
  uint16_t tx_burst(uint64_t, std::span<Frame* const> frames) override {
    const auto n = static_cast<uint16_t>(std::min<size_t>(accept_, frames.size()));
    for (uint16_t i = 0; i < n; ++i) {
      taken_.push_back(seq_of(frames[i]));
      pool_.free(frames[i]);
    }
    return n;
  }
  Frame* alloc_frame() override { return pool_.alloc(); }
  void free_frame(Frame* f) override { pool_.free(f); }
  uint32_t max_frame_len() const override { return 2048; }
  std::array<uint8_t, 6> mac() const override { return {2, 0, 0, 0, 0, 1}; }

  const FramePool& pool() const { return pool_; }
  const std::vector<uint32_t>& taken() const { return taken_; }

 private:
  FramePool pool_;
  uint16_t accept_;
  std::vector<uint32_t> taken_;
};

TEST(FaultInjector, FramesTheInnerPortRefusesAreFreedAndCounted) {
  StingyPort inner(5);
  {
    FaultInjector fi(inner, FaultConfig{});
    std::array<Frame*, 8> burst{};
    for (uint32_t i = 0; i < 8; ++i) burst[i] = make_frame(fi, i);
    // Expect: all eight taken by the injector; three of them refused below it.
    EXPECT_EQ(fi.tx_burst(0, burst), 8u);
    EXPECT_EQ(inner.taken(), iota(5));
    EXPECT_EQ(fi.counters().sent, 5u);
    EXPECT_EQ(fi.counters().refused, 3u);
    EXPECT_EQ(fi.counters().dropped, 3u);
  }
  EXPECT_EQ(inner.pool().available(), inner.pool().capacity());
}

TEST(FaultInjector, DestructorFreesHeldFrames) {
  MemLink link;
  FaultConfig cfg;
  cfg.rx_side = true;
  cfg.delay_ns = 1000;
  cfg.reorder = 0.5;
  cfg.reorder_window = 3;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 0, 0, 40);
    send(link.b(), 0, 0, 40);
    std::array<Frame*, 8> burst{};
    EXPECT_EQ(fi.rx_burst(0, burst), 0u);
    EXPECT_EQ(fi.held(), 80u);
    EXPECT_EQ(link.pool().available(), link.pool().capacity() - 80);
  }
  expect_pool_full(link);
}

TEST(FaultInjector, HoldQueueOverflowDrops) {
  MemLink link;
  FaultConfig cfg;
  cfg.delay_ns = 1000;
  cfg.hold_capacity = 16;
  {
    FaultInjector fi(link.a(), cfg);
    send(fi, 0, 0, 20);
    EXPECT_EQ(fi.held(), 16u);
    EXPECT_EQ(fi.counters().overflowed, 4u);
    EXPECT_EQ(fi.counters().dropped, 4u);
    fi.pump(1000);
    EXPECT_EQ(seqs(drain(link.b(), 1000)), iota(16));
  }
  expect_pool_full(link);
}

// Both ends faulty in both directions; the pool must balance at every step and the loop
// must not allocate.
TEST(FaultInjector, AllFaultsBothWaysKeepThePoolBalancedWithoutAllocating) {
  MemLink link;
  FaultConfig cfg;
  cfg.seed = 99;
  cfg.loss = 0.05;
  cfg.duplicate = 0.05;
  cfg.corrupt = 0.05;
  cfg.reorder = 0.1;
  cfg.reorder_window = 8;
  cfg.delay_ns = 300;
  cfg.jitter_ns = 200;
  cfg.rx_side = true;
  cfg.tx_side = true;
  {
    FaultInjector fa(link.a(), cfg);
    cfg.seed = 100;
    FaultInjector fb(link.b(), cfg);
    const size_t cap = link.pool().capacity();
    bool balanced = true;
    bool sends_ok = true;
    uint64_t received = 0;
    std::array<Frame*, 4> out{};
    std::array<Frame*, 16> in{};
    uint32_t seq = 0;
    const size_t before = test::allocations();
    for (uint64_t now = 0; now < 2000 * 50; now += 50) {
      for (FaultInjector* f : {&fa, &fb}) {
        size_t k = 0;
        for (; k < out.size(); ++k) {
          out[k] = f->alloc_frame();
          if (out[k] == nullptr) break;
          out[k]->len = 64;
          out[k]->data[0] = static_cast<uint8_t>(seq++);
        }
        sends_ok = sends_ok && k == out.size() &&
                   f->tx_burst(now, std::span<Frame* const>(out.data(), k)) == k;
        const uint16_t n = f->rx_burst(now, in);
        for (uint16_t i = 0; i < n; ++i) f->free_frame(in[i]);
        received += n;
      }
      balanced = balanced &&
                 link.pool().available() + fa.held() + fb.held() + link.in_flight() == cap;
    }
    const size_t allocated = test::allocations() - before;
    EXPECT_EQ(allocated, 0u) << "the packet loop allocated";
    EXPECT_TRUE(balanced);
    EXPECT_TRUE(sends_ok);
    EXPECT_GT(received, 10000u);
    for (const FaultInjector* f : {&fa, &fb}) {
      const FaultInjector::Counters c = f->counters();
      EXPECT_GT(c.dropped, 0u);
      EXPECT_GT(c.duplicated, 0u);
      EXPECT_GT(c.corrupted, 0u);
      EXPECT_GT(c.reordered, 0u);
      EXPECT_GT(c.delayed, 0u);
      EXPECT_GT(f->rx_counters().sent, 0u);
      EXPECT_GT(f->tx_counters().sent, 0u);
    }
    // Wind down: release everything and take it off the link.
    for (FaultInjector* f : {&fa, &fb}) f->flush(1'000'000);
    for (FaultInjector* f : {&fa, &fb}) {
      for (;;) {
        const uint16_t n = f->rx_burst(1'000'000, in);
        for (uint16_t i = 0; i < n; ++i) f->free_frame(in[i]);
        if (n == 0) break;
      }
      f->flush(1'000'000);
    }
    for (FaultInjector* f : {&fa, &fb}) {
      for (;;) {
        const uint16_t n = f->rx_burst(1'000'000, in);
        for (uint16_t i = 0; i < n; ++i) f->free_frame(in[i]);
        if (n == 0) break;
      }
    }
    EXPECT_EQ(fa.held() + fb.held() + link.in_flight(), 0u);
  }
  expect_pool_full(link);
}

}  // namespace
}  // namespace uroce::drivers

namespace uroce::test {
namespace {

int* volatile g_sink = nullptr;

// The allocation check above is only as good as the counter: make sure it counts.
TEST(AllocCounter, CountsOperatorNew) {
  const size_t before = allocations();
  g_sink = new int(1);
  delete g_sink;
  g_sink = nullptr;
  EXPECT_EQ(allocations() - before, 1u);
}

}  // namespace
}  // namespace uroce::test

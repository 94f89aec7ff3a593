// A port decorator that damages traffic on purpose: loss, duplication, bit corruption,
// bounded reordering, and delay with jitter, each chosen by a seeded RNG so a run can be
// replayed exactly. Stack it over any port: FaultInjector(PcapTrace(MemLink end)).
//
// Each direction (tx: frames given to tx_burst; rx: frames returned by rx_burst) is a
// "lane" with its own RNG and counters. A frame moving through an enabled lane meets:
//
//   loss       -> dropped (freed) with probability `loss`, except a CM DREQ when spare_dreq
//                 is set (it meets neither loss nor corruption; the draws are made all the
//                 same, so the other frames see the faults they would have seen)
//   duplicate  -> a copy follows it with probability `duplicate` (skipped when the pool is
//                 empty: counted in dup_skipped)
//   corrupt    -> one random bit of one random byte flipped, for the frame and for its copy
//                 independently (the engine's ICRC check must then drop it)
//   ce         -> the IP header's ECN bits set to CE (congestion experienced), as a switch
//                 marks a packet, whatever they were (a switch marks only ECN-capable ones:
//                 this also marks a peer's Not-ECT packets, to test a receiver against peers
//                 that never ask for it); the ICRC does not cover them
//   reorder    -> held aside with probability `reorder` until k later frames have passed,
//                 k uniform in [1, reorder_window]; so no frame comes out more than
//                 reorder_window positions after its place in the input. At most
//                 reorder_window frames are held aside at once. With reorder_hold_ns, a held
//                 frame also leaves once it has waited that long (a frame overtaken on a
//                 real link arrives a little late, it does not wait for later traffic).
//   delay      -> released when now_ns >= now + delay_ns + uniform[0, jitter_ns]. Jitter
//                 does not reorder: a frame never leaves before the one ahead of it (its
//                 release time is raised to its predecessor's), so the held frames form a
//                 FIFO with non-decreasing release times.
//
// Time is the injected now_ns of each call. Delayed frames leave on any later call that
// carries a large enough now_ns: tx_burst, rx_burst or pump(). A harness advances its clock
// to next_release() when nothing else is pending. Frames held aside for reordering wait for
// later traffic, their reorder_hold_ns (checked on every call, as delays are), or flush();
// next_release() does not cover them.
//
// Ownership: tx_burst takes every frame it is given and returns frames.size() (capped at
// 65535). Frames the inner port refuses to take are freed and counted as dropped (and
// refused): to the transport this is ordinary loss and it retransmits. Held frames belong to
// the injector until released; the destructor frees them to the inner port.
// With tx_side off, tx_burst is the inner port's own (its return value and ownership rule).
//
// Allocation: every queue is sized at construction; nothing allocates per packet.
// Probabilities outside [0, 1] are clamped in effect (<= 0 never, >= 1 always).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "uroce/port.h"
#include "util/ring.h"

namespace uroce::drivers {

struct FaultConfig {
  uint64_t seed = 1;
  double loss = 0.0;              // probability a frame is dropped
  double duplicate = 0.0;         // probability a frame is sent twice
  double corrupt = 0.0;           // probability one bit of a frame is flipped
  double ce = 0.0;                // probability an IP frame is marked CE
  uint32_t reorder_window = 0;    // max positions a reordered frame falls back (0: off)
  double reorder = 0.0;           // probability a frame is held back for reordering
  uint64_t reorder_hold_ns = 0;   // longest a reordered frame is held (0: until overtaken)
  uint64_t delay_ns = 0;          // fixed delay
  uint64_t jitter_ns = 0;         // extra delay, uniform in [0, jitter_ns]
  bool rx_side = false;           // apply to frames returned by rx_burst
  bool tx_side = true;            // apply to frames given to tx_burst
  uint32_t hold_capacity = 4096;  // delayed frames held per lane; beyond it frames are dropped
  // The CM's disconnect request (a MAD to QP1, attribute 0x0015) is never lost or corrupted.
  // A program that calls rdma_disconnect and then rdma_destroy_id at once (rping, rstream)
  // cancels the DREQ's retries (the kernel's CM and uroce's alike): lost once, it never
  // arrives, and the peer waits for it forever. A test of recovery under loss spares it.
  bool spare_dreq = false;
};

class FaultInjector final : public PortDecorator {
 public:
  /// Per-lane counters (counters() sums both lanes).
  struct Counters {
    uint64_t sent = 0;         // passed on: taken by the inner port / handed to the rx caller
    uint64_t dropped = 0;      // frames freed: random loss + overflowed + refused
    uint64_t duplicated = 0;   // copies made
    uint64_t dup_skipped = 0;  // copies not made because the pool was empty
    uint64_t corrupted = 0;    // frames with one bit flipped
    uint64_t ce_marked = 0;    // frames marked CE
    uint64_t reordered = 0;    // frames held back for reordering
    uint64_t delayed = 0;      // frames put through the delay queue
    uint64_t overflowed = 0;   // of dropped: the delay queue (or rx ready queue) was full
    uint64_t refused = 0;      // of dropped: the inner tx_burst did not take them
  };

  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

  FaultInjector(Port& inner, const FaultConfig& cfg);
  ~FaultInjector() override;
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
  /// None: frames it holds back come out when their time comes, not when the inner port's
  /// descriptor says so.
  int wait_fd() const override { return -1; }

  /// Releases the delayed frames that are due at now_ns (tx: to the inner port; rx: to the
  /// queue the next rx_burst returns from).
  void pump(uint64_t now_ns);
  /// Releases every held frame now, delays and reorder countdowns ignored (end of a test).
  /// rx frames that do not fit in the rx ready queue stay held.
  void flush(uint64_t now_ns);

  /// Frames the injector owns right now (delayed, held for reordering, or received and
  /// waiting for rx_burst).
  size_t held() const;
  /// Earliest release time of a delayed frame, kNever if none is delayed.
  uint64_t next_release() const;

  Counters counters() const;
  const Counters& tx_counters() const { return tx_.c; }
  const Counters& rx_counters() const { return rx_.c; }
  const FaultConfig& config() const { return cfg_; }

 private:
  struct Delayed {
    Frame* f = nullptr;
    uint64_t release_ns = 0;
  };
  struct Aside {
    Frame* f = nullptr;
    uint32_t remaining = 0;  // later frames still to pass before release
    uint64_t until = 0;      // released then at the latest (reorder_hold_ns; 0: no bound)
  };
  struct Lane {
    bool enabled = false;
    bool is_tx = false;
    std::mt19937_64 rng;
    Counters c;
    std::vector<Aside> aside;  // capacity reorder_window, in hold order; size() = in use
    Ring<Delayed> delayq;
    uint64_t last_release = 0;
  };

  static constexpr size_t kBurst = 64;

  bool chance(Lane& l, double p);
  void corrupt(Lane& l, Frame* f);
  void process(Lane& l, Frame* f, uint64_t now_ns);
  void reorder_stage(Lane& l, Frame* f, uint64_t now_ns);
  void delay_stage(Lane& l, Frame* f, uint64_t now_ns);
  void deliver(Lane& l, Frame* f, uint64_t now_ns);
  void release_due(Lane& l, uint64_t now_ns);
  void release_held(Lane& l, uint64_t now_ns);  // reordered frames past reorder_hold_ns
  void drop(Lane& l, Frame* f);
  void flush_tx(uint64_t now_ns);
  bool delaying() const { return cfg_.delay_ns != 0 || cfg_.jitter_ns != 0; }

  FaultConfig cfg_;
  Lane tx_, rx_;
  std::array<Frame*, kBurst> tx_out_{};  // tx frames on their way to the inner port
  size_t tx_out_n_ = 0;
  Ring<Frame*> rx_ready_;  // rx frames that passed every stage, for the next rx_burst
};

}  // namespace uroce::drivers

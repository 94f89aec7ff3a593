// An in-memory Ethernet switch for tests: N ports, frames forwarded by destination MAC
// (broadcast to every other port). Each port's link carries link_gbps in each direction:
// what an engine sends enters the switch at that rate (a NIC's line rate), and each egress
// is a FIFO that drains at that rate on the injected clock, except the bottleneck port's,
// which drains at rate_gbps — the receiver's link of an incast. Above Kmin bytes of backlog it marks
// ECN-capable packets CE with a probability rising linearly to Pmax at Kmax (1 beyond: RED as
// DCQCN's switches run it) and drops Not-ECT ones with that probability; a full queue drops.
// Seeded, so a run repeats exactly.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "common/frame_pool.h"
#include "common/red.h"
#include "uroce/port.h"
#include "util/ring.h"

namespace uroce::drivers {

class MemSwitch {
 public:
  struct Config {
    uint32_t ports = 3;
    uint32_t frames = 16384;        // frames in the shared pool
    uint32_t max_frame_len = 9018;
    double link_gbps = 10.0;        // every port's link, both ways
    double rate_gbps = 1.0;         // the bottleneck port's egress drains at this rate
    uint32_t bottleneck = 0;        // which port that is
    uint64_t delay_ns = 2'000;      // propagation, port to port
    uint32_t queue_bytes = 1024 * 1024;  // a longer backlog drops (tail drop)
    uint32_t kmin_bytes = 16 * 1024;    // RED: marking starts
    uint32_t kmax_bytes = 128 * 1024;   // RED: marking reaches pmax, then always
    double pmax = 0.1;
    bool ecn = true;                // mark ECT packets (false: RED drops them too)
    // Where RED looks at the queue: as a packet joins it (Linux's red qdisc, most switches'
    // WRED), or as it leaves (the mark then tells of the queue now, not of the queue it
    // joined a queueing delay ago: faster feedback, as DCTCP's and DCQCN's authors advise).
    bool mark_on_dequeue = false;
    uint64_t seed = 1;
  };

  /// What one egress saw.
  struct EgressStats {
    uint64_t frames = 0;       // forwarded out of this port
    uint64_t bytes = 0;
    uint64_t marked = 0;       // CE set
    uint64_t dropped = 0;      // RED or tail drop
    uint64_t max_backlog = 0;  // bytes
  };

  class SwitchPort final : public Port {
   public:
    uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
    uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
    Frame* alloc_frame() override { return sw_->pool_.alloc(); }
    void free_frame(Frame* f) override { sw_->pool_.free(f); }
    uint32_t max_frame_len() const override { return sw_->cfg_.max_frame_len; }
    std::array<uint8_t, 6> mac() const override { return mac_; }
    bool raw_frames() const override { return true; }
    bool receive_all(bool) override { return true; }  // every frame arrives as it is

    const EgressStats& egress() const { return stats_; }
    /// Bytes waiting in this port's egress queue at `now_ns`.
    uint64_t backlog(uint64_t now_ns) const;

   private:
    friend class MemSwitch;
    struct Queued {
      Frame* f;
      uint64_t arrive_ns;  // at the attached engine: left the queue + propagation
    };
    void enqueue(uint64_t now_ns, Frame* f);
    /// RED's verdict on `f` at queue length `q`: false to drop it (it may be marked CE).
    bool red(uint64_t q, Frame* f);
    void forward(uint64_t now_ns, Frame* f);
    MemSwitch* sw_ = nullptr;
    double gbps_ = 10;  // this egress's drain rate
    Ring<Queued> in_;   // sent by the engine, still crossing its link into the switch
    uint64_t last_in_ns_ = 0;
    std::array<uint8_t, 6> mac_{};
    Ring<Queued> q_;
    uint64_t last_depart_ns_ = 0;  // when the last queued frame finishes leaving
    EgressStats stats_;
  };

  MemSwitch() : MemSwitch(Config{}) {}
  explicit MemSwitch(const Config& cfg);
  ~MemSwitch();
  MemSwitch(const MemSwitch&) = delete;
  MemSwitch& operator=(const MemSwitch&) = delete;

  SwitchPort& port(size_t i) { return *ports_[i]; }
  size_t ports() const { return ports_.size(); }
  /// Frames inside the switch or on its wires.
  size_t in_flight() const;
  /// When the next queued frame reaches its engine (UINT64_MAX: none).
  uint64_t next_arrival() const;
  const FramePool& pool() const { return pool_; }

 private:
  /// Frames that crossed their link by `now_ns` reach their egress queue, in time order.
  void advance(uint64_t now_ns);
  Config cfg_;
  FramePool pool_;
  std::vector<std::unique_ptr<SwitchPort>> ports_;
  std::mt19937_64 rng_;
};

}  // namespace uroce::drivers

// An in-memory Ethernet cable between two ports, for tests and benchmarks that run two
// engines in one process. Frames sent on one end appear, in order, at the other end's
// rx_burst. Each end has a bounded receive queue; a full queue drops (as a NIC ring would)
// and counts the drop.
#pragma once

#include <array>
#include <cstdint>

#include "common/frame_pool.h"
#include "uroce/port.h"
#include "util/ring.h"

namespace uroce::drivers {

class MemLink {
 public:
  struct Config {
    uint32_t frames = 4096;         // frames in the shared pool
    uint32_t max_frame_len = 9018;  // jumbo + 802.1Q
    uint32_t rx_queue = 2048;       // receive queue depth per end
    std::array<uint8_t, 6> mac_a = {0x02, 0, 0, 0, 0, 0x0a};
    std::array<uint8_t, 6> mac_b = {0x02, 0, 0, 0, 0, 0x0b};
  };

  class End final : public Port {
   public:
    uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
    uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
    Frame* alloc_frame() override { return link_->pool_.alloc(); }
    void free_frame(Frame* f) override { link_->pool_.free(f); }
    uint32_t max_frame_len() const override { return link_->cfg_.max_frame_len; }
    std::array<uint8_t, 6> mac() const override { return mac_; }
    bool raw_frames() const override { return true; }
    bool receive_all(bool) override { return true; }  // every frame arrives as it is

    uint64_t rx_dropped() const { return rx_dropped_; }
    uint64_t tx_frames() const { return tx_frames_; }
    size_t rx_pending() const { return rxq_.size(); }

   private:
    friend class MemLink;
    MemLink* link_ = nullptr;
    End* peer_ = nullptr;
    std::array<uint8_t, 6> mac_{};
    Ring<Frame*> rxq_;
    uint64_t rx_dropped_ = 0;
    uint64_t tx_frames_ = 0;
  };

  MemLink() : MemLink(Config{}) {}
  explicit MemLink(const Config& cfg);
  ~MemLink();
  MemLink(const MemLink&) = delete;
  MemLink& operator=(const MemLink&) = delete;

  End& a() { return a_; }
  End& b() { return b_; }
  /// Frames sitting in either receive queue (nothing in flight means the link is idle).
  size_t in_flight() const { return a_.rxq_.size() + b_.rxq_.size(); }
  /// The shared frame pool (tests check that every frame comes back).
  const FramePool& pool() const { return pool_; }

 private:
  Config cfg_;
  FramePool pool_;
  End a_, b_;
};

}  // namespace uroce::drivers

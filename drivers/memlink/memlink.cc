#include "memlink/memlink.h"

namespace uroce::drivers {

MemLink::MemLink(const Config& cfg) : cfg_(cfg), pool_(cfg.frames, cfg.max_frame_len) {
  a_.link_ = b_.link_ = this;
  a_.peer_ = &b_;
  b_.peer_ = &a_;
  a_.rxq_ = Ring<Frame*>(cfg.rx_queue);
  b_.rxq_ = Ring<Frame*>(cfg.rx_queue);
  a_.mac_ = cfg.mac_a;
  b_.mac_ = cfg.mac_b;
}

MemLink::~MemLink() {
  for (End* e : {&a_, &b_}) {
    while (!e->rxq_.empty()) {
      pool_.free(e->rxq_.front());
      e->rxq_.pop();
    }
  }
}

uint16_t MemLink::End::rx_burst(uint64_t, std::span<Frame*> out) {
  uint16_t n = 0;
  while (n < out.size() && !rxq_.empty()) {
    out[n++] = rxq_.front();
    rxq_.pop();
  }
  return n;
}

uint16_t MemLink::End::tx_burst(uint64_t, std::span<Frame* const> frames) {
  for (Frame* f : frames) {
    ++tx_frames_;
    if (!peer_->rxq_.push(f)) {
      ++peer_->rx_dropped_;
      link_->pool_.free(f);
    }
  }
  return static_cast<uint16_t>(frames.size());
}

}  // namespace uroce::drivers

// A port for single-packet protocol tests: the test injects frames as if they came from the
// wire and inspects, parsed, every frame the engine transmits.
#pragma once

#include <cstring>
#include <vector>

#include "common/frame_pool.h"
#include "uroce/port.h"
#include "wire/packet.h"

namespace uroce::test {

class CapturePort final : public Port {
 public:
  CapturePort() : pool_(256, 9018) {}
  ~CapturePort() override {
    for (Frame* f : rx_) pool_.free(f);
  }

  /// Queues a frame for the engine's next rx_burst.
  void inject(std::span<const uint8_t> bytes) {
    Frame* f = pool_.alloc();
    std::memcpy(f->data, bytes.data(), bytes.size());
    f->len = static_cast<uint32_t>(bytes.size());
    rx_.push_back(f);
  }
  /// Frames transmitted since the last call, as byte vectors.
  std::vector<std::vector<uint8_t>> take_sent() { return std::exchange(sent_, {}); }

  uint16_t rx_burst(uint64_t, std::span<Frame*> out) override {
    uint16_t n = 0;
    while (n < out.size() && !rx_.empty()) {
      out[n++] = rx_.front();
      rx_.erase(rx_.begin());
    }
    return n;
  }
  uint16_t tx_burst(uint64_t, std::span<Frame* const> frames) override {
    if (!frames.empty()) ++bursts;
    for (Frame* f : frames) {
      sent_.emplace_back(f->data, f->data + f->len);
      pool_.free(f);
    }
    return static_cast<uint16_t>(frames.size());
  }
  Frame* alloc_frame() override { return pool_.alloc(); }
  void free_frame(Frame* f) override { pool_.free(f); }
  uint32_t max_frame_len() const override { return 9018; }
  std::array<uint8_t, 6> mac() const override { return {0x02, 0, 0, 0, 0, 0x0b}; }
  size_t pool_available() const { return pool_.available(); }
  uint64_t bursts = 0;  // tx_burst calls that sent something (a burst is one write to a socket)

 private:
  drivers::FramePool pool_;
  std::vector<Frame*> rx_;
  std::vector<std::vector<uint8_t>> sent_;
};

}  // namespace uroce::test

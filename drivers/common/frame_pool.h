// A fixed pool of equally sized frame buffers, allocated once at start-up.
// alloc/free are O(1) pops and pushes on a free stack: nothing allocates per packet.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "uroce/port.h"

namespace uroce::drivers {

class FramePool {
 public:
  FramePool(uint32_t count, uint32_t frame_cap)
      : storage_(std::make_unique<uint8_t[]>(size_t{count} * frame_cap)), frames_(count) {
    free_.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      frames_[i].data = storage_.get() + size_t{i} * frame_cap;
      frames_[i].cap = frame_cap;
      frames_[i].cookie = this;
      free_.push_back(&frames_[count - 1 - i]);
    }
  }
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  Frame* alloc() {
    if (free_.empty()) return nullptr;
    Frame* f = free_.back();
    free_.pop_back();
    f->len = 0;
    return f;
  }
  void free(Frame* f) { free_.push_back(f); }
  bool owns(const Frame* f) const { return f->cookie == this; }
  uint32_t frame_cap() const { return frames_.empty() ? 0 : frames_[0].cap; }
  size_t available() const { return free_.size(); }
  size_t capacity() const { return frames_.size(); }

 private:
  std::unique_ptr<uint8_t[]> storage_;
  std::vector<Frame> frames_;
  std::vector<Frame*> free_;
};

}  // namespace uroce::drivers

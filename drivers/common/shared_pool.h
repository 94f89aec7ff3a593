// Frame buffers for a port whose frames any thread may free (a posting thread sends and frees
// while the progress thread receives): a free stack under a spin lock held for one push or
// pop. Each buffer has `head` bytes of room in front of where a frame starts, for headers
// written before a received payload or an 802.1Q tag put back; Frame::cookie is the
// buffer's first byte. Allocated once: nothing allocates per packet.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/spin_guard.h"
#include "uroce/port.h"

namespace uroce::drivers {

class SharedPool {
 public:
  /// `count` buffers of `head` + `cap` bytes (each starts on a 64-byte line).
  void init(uint32_t count, uint32_t head, uint32_t cap) {
    head_ = head;
    cap_ = cap;
    stride_ = (size_t{head} + cap + 63) / 64 * 64;
    storage_ = std::make_unique<uint8_t[]>(stride_ * count + 64);
    uint8_t* base = storage_.get() + (64 - reinterpret_cast<uintptr_t>(storage_.get()) % 64) % 64;
    frames_.resize(count);
    free_.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {  // the first buffer on top
      Frame& f = frames_[count - 1 - i];
      f.cookie = base + stride_ * (count - 1 - i);
      free_.push_back(&f);
    }
  }
  /// An empty frame (data `head` bytes into its buffer, cap bytes), or nullptr.
  Frame* alloc() {
    Frame* f = nullptr;
    {
      SpinGuard g(lock_);
      if (free_.empty()) return nullptr;
      f = free_.back();
      free_.pop_back();
    }
    f->data = buffer(f) + head_;
    f->cap = cap_;
    f->len = 0;
    return f;
  }
  void free(Frame* f) {
    SpinGuard g(lock_);
    free_.push_back(f);
  }
  static uint8_t* buffer(const Frame* f) { return static_cast<uint8_t*>(f->cookie); }
  size_t count() const { return frames_.size(); }

 private:
  std::unique_ptr<uint8_t[]> storage_;
  std::vector<Frame> frames_;
  std::vector<Frame*> free_;
  std::atomic_flag lock_ = ATOMIC_FLAG_INIT;
  size_t stride_ = 0;
  uint32_t head_ = 0, cap_ = 0;
};

}  // namespace uroce::drivers

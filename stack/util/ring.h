// A fixed-capacity FIFO ring, sized once at construction: push/pop never allocate.
// Single-threaded (the engine owns its rings); capacity is rounded up to a power of two.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace uroce {

template <typename T>
class Ring {
 public:
  explicit Ring(size_t capacity = 0)
      : slots_(std::bit_ceil(capacity > 0 ? capacity : size_t{1})), cap_(capacity) {}

  size_t capacity() const { return cap_; }
  size_t size() const { return static_cast<size_t>(tail_ - head_); }
  bool empty() const { return head_ == tail_; }
  bool full() const { return size() >= cap_; }

  /// False (and nothing stored) when full.
  bool push(const T& v) {
    if (full()) return false;
    slots_[tail_++ & mask()] = v;
    return true;
  }
  /// In-place push for large elements: fill next_slot() (only when !full()), then commit().
  T& next_slot() { return slots_[tail_ & mask()]; }
  void commit() { ++tail_; }
  T& front() { return slots_[head_ & mask()]; }
  const T& front() const { return slots_[head_ & mask()]; }
  void pop() { ++head_; }
  /// i-th element from the front (0 = front).
  T& at(size_t i) { return slots_[(head_ + i) & mask()]; }
  const T& at(size_t i) const { return slots_[(head_ + i) & mask()]; }
  void clear() { head_ = tail_ = 0; }

  // Absolute positions: an element keeps its index from push to pop, so a cursor into the
  // ring stays valid while elements ahead of it are popped.
  uint64_t head_index() const { return head_; }
  uint64_t tail_index() const { return tail_; }
  T& at_abs(uint64_t idx) { return slots_[idx & mask()]; }
  const T& at_abs(uint64_t idx) const { return slots_[idx & mask()]; }
  T& back() { return slots_[(tail_ - 1) & mask()]; }

 private:
  size_t mask() const { return slots_.size() - 1; }
  std::vector<T> slots_;
  size_t cap_;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
};

}  // namespace uroce

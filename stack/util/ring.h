// A fixed-capacity FIFO ring, sized once at construction: push/pop never allocate.
// Capacity is rounded up to a power of two.
//
// Threading contract (the boundary between application threads and the engine, as in
// rdma-core's rxe_queue.h): one producer and one consumer may run at the same time without a
// lock. The producer alone calls push / next_slot + commit and reads the slot it is filling;
// the consumer alone calls front / pop / at*. The producer publishes a filled slot by moving
// the tail (release), the consumer frees a slot by moving the head (release); each reads the
// other's index with acquire, so a slot's contents are visible before its index is. Several
// producers (or consumers) must serialise among themselves with a lock of their own (the
// verbs provider keeps one per queue). clear(), assignment and moves are not concurrent: the
// caller holds both sides. Single-threaded users (most of the engine's rings) pay nothing:
// on x86 acquire loads and release stores are plain moves.
#pragma once

#include <atomic>
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
  Ring(Ring&& o) noexcept : slots_(std::move(o.slots_)), cap_(o.cap_) {
    head_.store(o.head_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    tail_.store(o.tail_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  Ring& operator=(Ring&& o) noexcept {
    slots_ = std::move(o.slots_);
    cap_ = o.cap_;
    head_.store(o.head_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    tail_.store(o.tail_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }

  size_t capacity() const { return cap_; }
  size_t size() const { return static_cast<size_t>(tail() - head()); }
  bool empty() const { return head() == tail(); }
  bool full() const { return size() >= cap_; }

  /// False (and nothing stored) when full.
  bool push(const T& v) {
    if (full()) return false;
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    slots_[t & mask()] = v;
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }
  /// In-place push for large elements: fill next_slot() (only when !full()), then commit().
  /// next_slot(k) is the k-th free slot past it (k < capacity() - size()): a batch is filled
  /// in place and published at once by commit(n), or dropped by not committing it.
  T& next_slot(size_t k = 0) { return slots_[(tail_.load(std::memory_order_relaxed) + k) & mask()]; }
  void commit(size_t n = 1) {
    tail_.store(tail_.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }
  T& front() { return slots_[head_.load(std::memory_order_relaxed) & mask()]; }
  const T& front() const { return slots_[head_.load(std::memory_order_relaxed) & mask()]; }
  void pop() { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  /// i-th element from the front (0 = front).
  T& at(size_t i) { return slots_[(head_.load(std::memory_order_relaxed) + i) & mask()]; }
  const T& at(size_t i) const {
    return slots_[(head_.load(std::memory_order_relaxed) + i) & mask()];
  }
  /// A new capacity (at least size()), the elements kept in order. Both sides held.
  void resize(size_t capacity) {
    Ring bigger(capacity);
    for (size_t i = 0; i < size(); ++i) bigger.push(at(i));
    *this = std::move(bigger);
  }
  void clear() {
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
  }

  // Absolute positions: an element keeps its index from push to pop, so a cursor into the
  // ring stays valid while elements ahead of it are popped.
  uint64_t head_index() const { return head(); }
  uint64_t tail_index() const { return tail(); }
  T& at_abs(uint64_t idx) { return slots_[idx & mask()]; }
  const T& at_abs(uint64_t idx) const { return slots_[idx & mask()]; }
  T& back() { return slots_[(tail() - 1) & mask()]; }

 private:
  uint64_t head() const { return head_.load(std::memory_order_acquire); }
  uint64_t tail() const { return tail_.load(std::memory_order_acquire); }
  size_t mask() const { return slots_.size() - 1; }
  std::vector<T> slots_;
  size_t cap_;
  std::atomic<uint64_t> head_{0};  // written by the consumer only
  std::atomic<uint64_t> tail_{0};  // written by the producer only
};

}  // namespace uroce

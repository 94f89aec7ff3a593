// A scoped spin lock on an std::atomic_flag, for the ports' free lists: held for a push or a
// pop, never across a system call.
#pragma once

#include <atomic>

namespace uroce::drivers {

class SpinGuard {
 public:
  explicit SpinGuard(std::atomic_flag& f) : f_(f) {
    while (f_.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~SpinGuard() { f_.clear(std::memory_order_release); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

 private:
  std::atomic_flag& f_;
};

}  // namespace uroce::drivers

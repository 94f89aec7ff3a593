// Packet Sequence Numbers: 24-bit counters that wrap from 0xFFFFFF to 0.
//
// Comparison is "serial number arithmetic": a is before b when the 24-bit forward distance
// from a to b is less than 2^23. Shifting the difference into the top of a 32-bit signed
// integer gives the signed distance in one step.
#pragma once

#include <compare>
#include <cstdint>

namespace uroce::wire {

class Psn {
 public:
  static constexpr uint32_t kMask = 0xFFFFFF;
  static constexpr uint32_t kModulus = 0x1000000;

  constexpr Psn() = default;
  constexpr explicit Psn(uint32_t v) : v_(v & kMask) {}

  constexpr uint32_t value() const { return v_; }

  /// Signed distance from `from` to this PSN, in [-2^23, 2^23).
  constexpr int32_t operator-(Psn from) const {
    return static_cast<int32_t>((v_ - from.v_) << 8) >> 8;
  }
  constexpr Psn operator+(int32_t n) const { return Psn(v_ + static_cast<uint32_t>(n)); }
  constexpr Psn operator-(int32_t n) const { return Psn(v_ - static_cast<uint32_t>(n)); }
  constexpr Psn& operator+=(int32_t n) { return *this = *this + n; }
  constexpr Psn& operator++() { return *this += 1; }

  constexpr bool operator==(const Psn&) const = default;
  /// Wrap-aware order: Psn(0) > Psn(0xFFFFFF).
  constexpr std::strong_ordering operator<=>(Psn o) const { return (*this - o) <=> 0; }

 private:
  uint32_t v_ = 0;
};

static_assert(Psn(0) - Psn(0xFFFFFF) == 1);
static_assert(Psn(0xFFFFFF) + 1 == Psn(0));
static_assert(Psn(0) > Psn(0xFFFFFF));
static_assert(Psn(5) < Psn(6));

}  // namespace uroce::wire

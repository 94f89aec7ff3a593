// FLUSH Extended Transport Header (IBA 1.5 annex), 4 bytes, on RC FLUSH before the RETH.
//
//   | reserved (26) | selectivity level (2) | placement type (4) |
//
// Selectivity: 0 = memory region range, 1 = whole memory region. Placement type bits:
// bit 0 global visibility, bit 1 persistence.
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class FethView {
 public:
  static constexpr size_t kLen = 4;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit FethView(Bytes b) : b_(b) {}
  uint32_t raw() const { return load_be32(&b_[0]); }
  uint8_t selectivity() const { return static_cast<uint8_t>((raw() >> 4) & 3); }
  uint8_t placement() const { return static_cast<uint8_t>(raw() & 0xF); }

 private:
  Bytes b_;
};

struct FethRepr {
  uint32_t raw = 0;

  uint8_t selectivity() const { return static_cast<uint8_t>((raw >> 4) & 3); }
  uint8_t placement() const { return static_cast<uint8_t>(raw & 0xF); }

  static constexpr size_t header_len() { return FethView::kLen; }
  static ParseError parse(Bytes b, FethRepr& out) {
    if (auto e = FethView::check(b); e != ParseError::kOk) return e;
    out.raw = FethView(b).raw();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const { store_be32(&out[0], raw); }
  bool operator==(const FethRepr&) const = default;
};

}  // namespace uroce::wire

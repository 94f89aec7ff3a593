// Immediate Data Extended Transport Header (IBA 9.3.7), 4 bytes, on SEND / RDMA WRITE
// "with immediate". The value is opaque to the transport and lands in the receiver's
// work completion (ibv_wc.imm_data, which verbs keeps in network byte order).
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class ImmDtView {
 public:
  static constexpr size_t kLen = 4;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit ImmDtView(Bytes b) : b_(b) {}
  uint32_t imm() const { return load_be32(&b_[0]); }

 private:
  Bytes b_;
};

struct ImmDtRepr {
  uint32_t imm = 0;  // host-order value of the big-endian wire field

  static constexpr size_t header_len() { return ImmDtView::kLen; }
  static ParseError parse(Bytes b, ImmDtRepr& out) {
    if (auto e = ImmDtView::check(b); e != ParseError::kOk) return e;
    out.imm = ImmDtView(b).imm();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const { store_be32(&out[0], imm); }
  bool operator==(const ImmDtRepr&) const = default;
};

}  // namespace uroce::wire

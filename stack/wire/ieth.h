// Invalidate Extended Transport Header (IBA 9.3.8), 4 bytes, on SEND with invalidate:
// the R_Key the responder must invalidate before completing the receive.
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class IethView {
 public:
  static constexpr size_t kLen = 4;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit IethView(Bytes b) : b_(b) {}
  uint32_t rkey() const { return load_be32(&b_[0]); }

 private:
  Bytes b_;
};

struct IethRepr {
  uint32_t rkey = 0;

  static constexpr size_t header_len() { return IethView::kLen; }
  static ParseError parse(Bytes b, IethRepr& out) {
    if (auto e = IethView::check(b); e != ParseError::kOk) return e;
    out.rkey = IethView(b).rkey();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const { store_be32(&out[0], rkey); }
  bool operator==(const IethRepr&) const = default;
};

}  // namespace uroce::wire

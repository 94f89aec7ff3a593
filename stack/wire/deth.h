// Datagram Extended Transport Header (IBA 9.3.2), 8 bytes, on every UD packet.
//
//   | Q_Key (32) | reserved (8) | source QP (24) |
//
// A Q_Key with the high bit set is a "controlled" Q_Key: the sender uses its QP's own Q_Key.
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class DethView {
 public:
  static constexpr size_t kLen = 8;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit DethView(Bytes b) : b_(b) {}
  uint32_t qkey() const { return load_be32(&b_[0]); }
  uint8_t reserved() const { return b_[4]; }
  uint32_t src_qp() const { return load_be24(&b_[5]); }

 private:
  Bytes b_;
};

struct DethRepr {
  uint32_t qkey = 0;
  uint8_t reserved = 0;
  uint32_t src_qp = 0;  // 24 bits

  static constexpr size_t header_len() { return DethView::kLen; }
  static ParseError parse(Bytes b, DethRepr& out) {
    if (auto e = DethView::check(b); e != ParseError::kOk) return e;
    DethView v(b);
    out = {v.qkey(), v.reserved(), v.src_qp()};
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be32(&out[0], qkey);
    out[4] = reserved;
    store_be24(&out[5], src_qp & 0xFFFFFF);
  }
  bool operator==(const DethRepr&) const = default;
};

}  // namespace uroce::wire

// XRC Extended Transport Header (IBA 9.3.5), 4 bytes, first after the BTH on every XRC
// request packet (never on a response):
//
//   | reserved (8) | XRC SRQ number (24) |
//
// The BTH's DestQP names the XRC target QP; the XRCETH names which of its domain's shared
// receive queues takes the message (and so whose PD checks the keys, whose CQ completes it).
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class XrcethView {
 public:
  static constexpr size_t kLen = 4;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit XrcethView(Bytes b) : b_(b) {}
  uint8_t reserved() const { return b_[0]; }
  uint32_t srqn() const { return load_be24(&b_[1]); }

 private:
  Bytes b_;
};

struct XrcethRepr {
  uint8_t reserved = 0;
  uint32_t srqn = 0;  // 24 bits

  static constexpr size_t header_len() { return XrcethView::kLen; }
  static ParseError parse(Bytes b, XrcethRepr& out) {
    if (auto e = XrcethView::check(b); e != ParseError::kOk) return e;
    XrcethView v(b);
    out = {v.reserved(), v.srqn()};
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    out[0] = reserved;
    store_be24(&out[1], srqn & 0xFFFFFF);
  }
  bool operator==(const XrcethRepr&) const = default;
};

}  // namespace uroce::wire

// UDP header (RFC 768). RoCEv2 uses destination port 4791; the source port carries flow
// entropy (one value per QP so ECMP keeps a QP's packets in order). The checksum is 0 on
// IPv4 (RoCEv2 relies on the ICRC).
//
//   | src port(16) | dst port(16) | length(16) | checksum(16) |
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

inline constexpr uint16_t kRoceV2Port = 4791;

class UdpView {
 public:
  static constexpr size_t kLen = 8;
  /// `b` is the IP payload; the UDP length must match it exactly.
  static ParseError check(Bytes b) {
    if (b.size() < kLen) return ParseError::kTruncated;
    size_t len = load_be16(&b[4]);
    if (len < kLen || len != b.size()) return ParseError::kBadUdpLen;
    return ParseError::kOk;
  }
  explicit UdpView(Bytes b) : b_(b) {}

  uint16_t src_port() const { return load_be16(&b_[0]); }
  uint16_t dst_port() const { return load_be16(&b_[2]); }
  uint16_t length() const { return load_be16(&b_[4]); }
  uint16_t checksum() const { return load_be16(&b_[6]); }
  Bytes payload() const { return b_.subspan(kLen, length() - kLen); }

 private:
  Bytes b_;
};

struct UdpRepr {
  uint16_t src_port = 0xC000;
  uint16_t dst_port = kRoceV2Port;
  uint16_t length = 0;    // filled in by the frame builder
  uint16_t checksum = 0;  // carried as-is; RoCEv2 senders write 0

  static constexpr size_t header_len() { return UdpView::kLen; }

  static ParseError parse(Bytes b, UdpRepr& out) {
    if (auto e = UdpView::check(b); e != ParseError::kOk) return e;
    UdpView v(b);
    out.src_port = v.src_port();
    out.dst_port = v.dst_port();
    out.length = v.length();
    out.checksum = v.checksum();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be16(&out[0], src_port);
    store_be16(&out[2], dst_port);
    store_be16(&out[4], length);
    store_be16(&out[6], checksum);
  }
  bool operator==(const UdpRepr&) const = default;
};

}  // namespace uroce::wire

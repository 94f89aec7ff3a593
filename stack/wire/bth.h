// Base Transport Header (IBA 9.2), 12 bytes, first header after UDP in RoCEv2.
//
//   byte 0   opcode
//   byte 1   SE(1) M(1) PadCnt(2) TVer(4)
//   byte 2-3 P_Key
//   byte 4   FECN(1) BECN(1) reserved(6)   <- IBA "Resv8a"; RoCEv2 puts ECN feedback here
//   byte 5-7 destination QP
//   byte 8   AckReq(1) reserved(7)
//   byte 9-11 PSN
#pragma once

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

/// The DestQP of a datagram sent to a multicast group (IBA 10.5).
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;

class BthView {
 public:
  static constexpr size_t kLen = 12;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit BthView(Bytes b) : b_(b) {}

  uint8_t opcode() const { return b_[0]; }
  bool se() const { return (b_[1] & 0x80) != 0; }
  bool mig() const { return (b_[1] & 0x40) != 0; }
  uint8_t pad_count() const { return (b_[1] >> 4) & 3; }
  uint8_t tver() const { return b_[1] & 0x0F; }
  uint16_t pkey() const { return load_be16(&b_[2]); }
  bool fecn() const { return (b_[4] & 0x80) != 0; }
  bool becn() const { return (b_[4] & 0x40) != 0; }
  uint8_t resv6() const { return b_[4] & 0x3F; }
  uint32_t dest_qp() const { return load_be24(&b_[5]); }
  bool ack_req() const { return (b_[8] & 0x80) != 0; }
  uint8_t resv7() const { return b_[8] & 0x7F; }
  uint32_t psn() const { return load_be24(&b_[9]); }

 private:
  Bytes b_;
};

struct BthRepr {
  uint8_t opcode = 0;
  bool se = false;        // solicited event
  bool mig = false;       // migration state (APM); always 0 for RoCE in practice
  uint8_t pad_count = 0;  // 0..3 bytes of pad after the payload
  uint8_t tver = 0;       // transport header version: 0
  uint16_t pkey = 0xFFFF;
  bool fecn = false;
  bool becn = false;
  uint8_t resv6 = 0;      // kept only so that re-emitting reproduces a capture exactly
  uint32_t dest_qp = 0;   // 24 bits
  bool ack_req = false;
  uint8_t resv7 = 0;
  uint32_t psn = 0;       // 24 bits

  static constexpr size_t header_len() { return BthView::kLen; }

  static ParseError parse(Bytes b, BthRepr& out) {
    if (auto e = BthView::check(b); e != ParseError::kOk) return e;
    BthView v(b);
    out.opcode = v.opcode();
    out.se = v.se();
    out.mig = v.mig();
    out.pad_count = v.pad_count();
    out.tver = v.tver();
    out.pkey = v.pkey();
    out.fecn = v.fecn();
    out.becn = v.becn();
    out.resv6 = v.resv6();
    out.dest_qp = v.dest_qp();
    out.ack_req = v.ack_req();
    out.resv7 = v.resv7();
    out.psn = v.psn();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    out[0] = opcode;
    out[1] = static_cast<uint8_t>((se ? 0x80 : 0) | (mig ? 0x40 : 0) | ((pad_count & 3) << 4) |
                                  (tver & 0x0F));
    store_be16(&out[2], pkey);
    out[4] = static_cast<uint8_t>((fecn ? 0x80 : 0) | (becn ? 0x40 : 0) | (resv6 & 0x3F));
    store_be24(&out[5], dest_qp & 0xFFFFFF);
    out[8] = static_cast<uint8_t>((ack_req ? 0x80 : 0) | (resv7 & 0x7F));
    store_be24(&out[9], psn & 0xFFFFFF);
  }
  bool operator==(const BthRepr&) const = default;
};

}  // namespace uroce::wire

// ACK Extended Transport Header (IBA 9.3.5), 4 bytes: the responder's verdict.
//
//   | syndrome (8) | MSN (24) |
//
// Syndrome bits 6..5 select the kind, bits 4..0 its value:
//   00 ACK      value = credit count (31 = credits not reported)
//   01 RNR NAK  value = RNR timer code (how long the requester must wait, table below)
//   10 reserved
//   11 NAK      value = NAK code (0 PSN sequence error, 1 invalid request,
//                                 2 remote access error, 3 remote operational error,
//                                 4 invalid RD request)
// Bit 7 is reserved and must be 0.
#pragma once

#include <string_view>

#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

enum class AckKind : uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };

enum class NakCode : uint8_t {
  kPsnSeqError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOpError = 3,
  kInvalidRdRequest = 4,
};

std::string_view to_string(AckKind k);
std::string_view to_string(NakCode c);  // "PSN sequence error", ...

/// RNR NAK timer code (0..31) to the minimum wait in nanoseconds (code 0 = 655.36 ms).
uint64_t rnr_timer_ns(uint8_t code);

class AethView {
 public:
  static constexpr size_t kLen = 4;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit AethView(Bytes b) : b_(b) {}
  uint8_t syndrome() const { return b_[0]; }
  uint32_t msn() const { return load_be24(&b_[1]); }

 private:
  Bytes b_;
};

struct AethRepr {
  uint8_t syndrome = 0x1F;  // ACK, credits not reported (what rxe sends)
  uint32_t msn = 0;

  static constexpr size_t header_len() { return AethView::kLen; }

  AckKind kind() const { return static_cast<AckKind>((syndrome >> 5) & 3); }
  uint8_t value() const { return syndrome & 0x1F; }
  bool is_ack() const { return kind() == AckKind::kAck; }
  bool is_rnr_nak() const { return kind() == AckKind::kRnrNak; }
  bool is_nak() const { return kind() == AckKind::kNak; }
  /// ACK: the 5-bit credit code (IBA table 44 maps it to a credit count; 31 = not reported).
  uint8_t credit_code() const { return value(); }
  uint8_t rnr_timer_code() const { return value(); }
  NakCode nak_code() const { return static_cast<NakCode>(value()); }

  static constexpr uint8_t make_ack(uint8_t credits = 0x1F) { return credits & 0x1F; }
  static constexpr uint8_t make_rnr_nak(uint8_t timer_code) {
    return static_cast<uint8_t>(0x20 | (timer_code & 0x1F));
  }
  static constexpr uint8_t make_nak(NakCode c) {
    return static_cast<uint8_t>(0x60 | (static_cast<uint8_t>(c) & 0x1F));
  }

  static ParseError parse(Bytes b, AethRepr& out) {
    if (auto e = AethView::check(b); e != ParseError::kOk) return e;
    AethView v(b);
    out = {v.syndrome(), v.msn()};
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    out[0] = syndrome;
    store_be24(&out[1], msn & 0xFFFFFF);
  }
  bool operator==(const AethRepr&) const = default;
};

}  // namespace uroce::wire

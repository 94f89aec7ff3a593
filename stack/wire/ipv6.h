// IPv6 fixed header (RFC 8200). RoCEv2 puts UDP directly after it; extension headers
// are not used by RoCEv2 and are reported as "not UDP" by the frame parser.
//
//   |ver(4)| traffic class(8) | flow label(20)              |
//   | payload length(16)       | next header(8)| hop limit(8)|
//   | source address (16 bytes)                             |
//   | destination address (16 bytes)                        |
#pragma once

#include "wire/addr.h"
#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class Ipv6View {
 public:
  static constexpr size_t kLen = 40;

  static ParseError check(Bytes b) {
    if (b.size() < kLen) return ParseError::kTruncated;
    if ((b[0] >> 4) != 6) return ParseError::kBadIpVersion;
    if (kLen + load_be16(&b[4]) > b.size()) return ParseError::kTruncated;
    return ParseError::kOk;
  }
  explicit Ipv6View(Bytes b) : b_(b) {}

  uint8_t version() const { return b_[0] >> 4; }
  uint8_t traffic_class() const { return static_cast<uint8_t>((load_be16(&b_[0]) >> 4) & 0xFF); }
  uint32_t flow_label() const { return load_be32(&b_[0]) & 0xFFFFF; }
  uint16_t payload_len() const { return load_be16(&b_[4]); }
  uint8_t next_header() const { return b_[6]; }
  uint8_t hop_limit() const { return b_[7]; }
  Ipv6Addr src() const { return addr_at(8); }
  Ipv6Addr dst() const { return addr_at(24); }
  Bytes payload() const { return b_.subspan(kLen, payload_len()); }

 private:
  Ipv6Addr addr_at(size_t off) const {
    Ipv6Addr a;
    for (size_t i = 0; i < 16; ++i) a[i] = b_[off + i];
    return a;
  }
  Bytes b_;
};

struct Ipv6Repr {
  uint8_t traffic_class = 0;  // DSCP << 2 | ECN
  uint32_t flow_label = 0;
  uint16_t payload_len = 0;   // filled in by the frame builder
  uint8_t next_header = 17;   // UDP
  uint8_t hop_limit = 64;
  Ipv6Addr src{};
  Ipv6Addr dst{};

  static constexpr size_t header_len() { return Ipv6View::kLen; }

  static ParseError parse(Bytes b, Ipv6Repr& out) {
    if (auto e = Ipv6View::check(b); e != ParseError::kOk) return e;
    Ipv6View v(b);
    out.traffic_class = v.traffic_class();
    out.flow_label = v.flow_label();
    out.payload_len = v.payload_len();
    out.next_header = v.next_header();
    out.hop_limit = v.hop_limit();
    out.src = v.src();
    out.dst = v.dst();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be32(&out[0], (6u << 28) | (uint32_t{traffic_class} << 20) | (flow_label & 0xFFFFF));
    store_be16(&out[4], payload_len);
    out[6] = next_header;
    out[7] = hop_limit;
    for (size_t i = 0; i < 16; ++i) {
      out[8 + i] = src[i];
      out[24 + i] = dst[i];
    }
  }
  bool operator==(const Ipv6Repr&) const = default;
};

}  // namespace uroce::wire

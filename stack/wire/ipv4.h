// IPv4 header (RFC 791). Options are carried through (they are covered by the ICRC like the
// rest of the header) but never interpreted; fragments are rejected because RoCEv2 sets DF.
//
//   0       4       8              16      19             32
//   |ver|ihl| DSCP|ECN|   total length                     |
//   |   identification         |flags|  fragment offset    |
//   |  TTL  |protocol|         header checksum             |
//   |                source address                        |
//   |              destination address                     |
//   |              options (ihl > 5) ...                   |
#pragma once

#include <algorithm>
#include <array>

#include "wire/addr.h"
#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

inline constexpr uint8_t kIpProtoUdp = 17;
/// The two ECN bits of the IPv4 TOS / IPv6 traffic class (RFC 3168).
inline constexpr uint8_t kEcnNotEct = 0;
inline constexpr uint8_t kEcnEct1 = 1;
inline constexpr uint8_t kEcnEct0 = 2;
inline constexpr uint8_t kEcnCe = 3;  // congestion experienced: a switch marked it

/// RFC 1071 one's-complement sum of `b`, folded to 16 bits and complemented.
uint16_t internet_checksum(Bytes b);

class Ipv4View {
 public:
  static constexpr size_t kMinLen = 20;
  static constexpr size_t kMaxLen = 60;

  /// Version, IHL and total length are consistent with the bytes present.
  /// Does not verify the checksum (see checksum_ok()).
  static ParseError check(Bytes b) {
    if (b.size() < kMinLen) return ParseError::kTruncated;
    if ((b[0] >> 4) != 4) return ParseError::kBadIpVersion;
    size_t ihl = size_t{b[0] & 0x0Fu} * 4;
    if (ihl < kMinLen) return ParseError::kBadIpHeaderLen;
    if (ihl > b.size()) return ParseError::kTruncated;
    size_t total = load_be16(&b[2]);
    if (total < ihl) return ParseError::kBadIpTotalLen;
    if (total > b.size()) return ParseError::kTruncated;
    return ParseError::kOk;
  }
  explicit Ipv4View(Bytes b) : b_(b) {}

  uint8_t version() const { return b_[0] >> 4; }
  size_t header_len() const { return size_t{b_[0] & 0x0Fu} * 4; }
  uint8_t dscp() const { return b_[1] >> 2; }
  uint8_t ecn() const { return b_[1] & 3; }
  uint16_t total_len() const { return load_be16(&b_[2]); }
  uint16_t ident() const { return load_be16(&b_[4]); }
  bool reserved_flag() const { return (b_[6] & 0x80) != 0; }
  bool dont_frag() const { return (b_[6] & 0x40) != 0; }
  bool more_frags() const { return (b_[6] & 0x20) != 0; }
  uint16_t frag_offset() const { return load_be16(&b_[6]) & 0x1FFF; }
  uint8_t ttl() const { return b_[8]; }
  uint8_t protocol() const { return b_[9]; }
  uint16_t checksum() const { return load_be16(&b_[10]); }
  Ipv4Addr src() const { return {b_[12], b_[13], b_[14], b_[15]}; }
  Ipv4Addr dst() const { return {b_[16], b_[17], b_[18], b_[19]}; }
  Bytes options() const { return b_.subspan(kMinLen, header_len() - kMinLen); }
  bool checksum_ok() const { return internet_checksum(b_.first(header_len())) == 0; }
  bool is_fragment() const { return more_frags() || frag_offset() != 0; }
  /// The bytes after the header up to total_len (Ethernet padding excluded).
  Bytes payload() const { return b_.subspan(header_len(), total_len() - header_len()); }

 private:
  Bytes b_;
};

struct Ipv4Repr {
  uint8_t dscp = 0;
  uint8_t ecn = 0;
  uint16_t total_len = 0;   // filled in by emit_with_payload / the frame builder
  uint16_t ident = 0;
  bool reserved_flag = false;  // must be 0; kept so that re-emitting reproduces a capture
  bool dont_frag = true;    // RoCEv2 traffic is sent with DF
  uint8_t ttl = 64;
  uint8_t protocol = kIpProtoUdp;
  uint16_t checksum = 0;    // as parsed; emit() always writes a fresh one
  Ipv4Addr src{};
  Ipv4Addr dst{};
  uint8_t options_len = 0;  // multiple of 4, at most 40
  std::array<uint8_t, 40> options{};

  /// options_len is clamped to 40 and rounded down to a multiple of 4 (IHL counts words).
  size_t header_len() const { return Ipv4View::kMinLen + (std::min<size_t>(options_len, 40) & ~size_t{3}); }

  /// Structural parse; also rejects fragments and bad checksums.
  static ParseError parse(Bytes b, Ipv4Repr& out) {
    if (auto e = parse_fields(b, out); e != ParseError::kOk) return e;
    Ipv4View v(b);
    if (!v.checksum_ok()) return ParseError::kBadIpChecksum;
    if (v.is_fragment()) return ParseError::kIpFragment;
    return ParseError::kOk;
  }
  /// Reads the fields after the structural checks only (no checksum, no fragment check):
  /// for describing traffic that is not ours.
  static ParseError parse_fields(Bytes b, Ipv4Repr& out) {
    if (auto e = Ipv4View::check(b); e != ParseError::kOk) return e;
    Ipv4View v(b);
    out.dscp = v.dscp();
    out.ecn = v.ecn();
    out.total_len = v.total_len();
    out.ident = v.ident();
    out.reserved_flag = v.reserved_flag();
    out.dont_frag = v.dont_frag();
    out.ttl = v.ttl();
    out.protocol = v.protocol();
    out.checksum = v.checksum();
    out.src = v.src();
    out.dst = v.dst();
    Bytes opt = v.options();
    out.options_len = static_cast<uint8_t>(opt.size());
    for (size_t i = 0; i < opt.size(); ++i) out.options[i] = opt[i];
    return ParseError::kOk;
  }
  /// Writes header_len() bytes with total_len as set and a computed header checksum.
  void emit(MutBytes out) const {
    out[0] = static_cast<uint8_t>(0x40 | (header_len() / 4));
    out[1] = static_cast<uint8_t>((dscp << 2) | (ecn & 3));
    store_be16(&out[2], total_len);
    store_be16(&out[4], ident);
    store_be16(&out[6], static_cast<uint16_t>((reserved_flag ? 0x8000 : 0) | (dont_frag ? 0x4000 : 0)));
    out[8] = ttl;
    out[9] = protocol;
    store_be16(&out[10], 0);
    for (size_t i = 0; i < 4; ++i) {
      out[12 + i] = src[i];
      out[16 + i] = dst[i];
    }
    for (size_t i = 0; i < header_len() - Ipv4View::kMinLen; ++i) out[20 + i] = options[i];
    store_be16(&out[10], internet_checksum(Bytes(out.data(), header_len())));
  }
  bool operator==(const Ipv4Repr&) const = default;
};

}  // namespace uroce::wire

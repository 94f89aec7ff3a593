// Helpers shared by the wire tests: hex literals, an independent RFC 1071 checksum, codec
// checks that every header test repeats, and seeded random RoCEv2 headers.
//
// Expected values in the tests come from hand-written bytes (or bytes computed by an
// independent Python/zlib model and pasted in), never from the code under test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "wire/packet.h"

namespace uroce::wire::test {

/// "45 00 00 73 ..." -> bytes. Whitespace is ignored; anything else must be hex digits.
inline std::vector<uint8_t> hex(std::string_view s) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out;
  int hi = -1;
  for (char c : s) {
    if (c == ' ' || c == '\n' || c == '\t') continue;
    const int v = nibble(c);
    if (v < 0) {
      ADD_FAILURE() << "bad hex digit '" << c << "'";
      return {};
    }
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) ADD_FAILURE() << "odd number of hex digits";
  return out;
}

/// RFC 1071 checksum written independently of wire::internet_checksum, for tests that
/// patch an IPv4 header and need a valid checksum again.
inline uint16_t ref_checksum(Bytes b) {
  uint64_t sum = 0;
  for (size_t i = 0; i < b.size(); ++i) sum += (i % 2 == 0) ? uint64_t{b[i]} << 8 : b[i];
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xFFFF);
}

/// Recomputes the checksum of the IPv4 header at `ip` (IHL taken from the header).
inline void fix_ipv4_checksum(uint8_t* ip) {
  const size_t ihl = size_t{ip[0] & 0x0Fu} * 4;
  ip[10] = 0;
  ip[11] = 0;
  const uint16_t c = ref_checksum(Bytes(ip, ihl));
  ip[10] = static_cast<uint8_t>(c >> 8);
  ip[11] = static_cast<uint8_t>(c);
}

/// Emits `r` into a buffer of `len` bytes followed by guard bytes, checks that emit() wrote
/// nothing past `len`, and returns the first `len` bytes.
template <typename Repr>
std::vector<uint8_t> emit_bytes(const Repr& r, size_t len) {
  constexpr uint8_t kGuard = 0xA5;
  std::vector<uint8_t> buf(len + 16, kGuard);
  r.emit(MutBytes(buf));
  for (size_t i = len; i < buf.size(); ++i)
    EXPECT_EQ(buf[i], kGuard) << "emit() wrote past the header at byte " << i;
  buf.resize(len);
  return buf;
}

/// Every prefix of `wire` shorter than `len` is kTruncated for both View::check and
/// Repr::parse.
template <typename View, typename Repr>
void expect_truncated_below(Bytes wire, size_t len) {
  ASSERT_LE(len, wire.size());
  for (size_t n = 0; n < len; ++n) {
    SCOPED_TRACE(::testing::Message() << "length " << n);
    EXPECT_EQ(View::check(wire.first(n)), ParseError::kTruncated);
    Repr r;
    EXPECT_EQ(Repr::parse(wire.first(n), r), ParseError::kTruncated);
  }
}

/// The checks shared by the fixed-size transport headers: `wire` parses to `repr`, `repr`
/// emits exactly `wire`, emit -> parse round-trips, and every shorter input is truncated.
template <typename View, typename Repr>
void expect_fixed_codec(const std::vector<uint8_t>& wire, const Repr& repr) {
  ASSERT_EQ(wire.size(), View::kLen);
  ASSERT_EQ(Repr::header_len(), View::kLen);
  EXPECT_EQ(View::check(wire), ParseError::kOk);
  Repr parsed;
  ASSERT_EQ(Repr::parse(wire, parsed), ParseError::kOk);
  EXPECT_EQ(parsed, repr);
  const std::vector<uint8_t> emitted = emit_bytes(repr, View::kLen);
  EXPECT_EQ(emitted, wire);
  Repr again;
  ASSERT_EQ(Repr::parse(emitted, again), ParseError::kOk);
  EXPECT_EQ(again, repr);
  // Trailing bytes after the header are not the header's business.
  std::vector<uint8_t> longer = wire;
  longer.insert(longer.end(), {0xDE, 0xAD});
  Repr from_longer;
  ASSERT_EQ(Repr::parse(longer, from_longer), ParseError::kOk);
  EXPECT_EQ(from_longer, repr);
  expect_truncated_below<View, Repr>(wire, View::kLen);
}

/// Random bits from a seeded engine; uses the raw engine output (fully specified by the
/// standard) rather than distributions, so the sequence is the same on every library.
class Rand {
 public:
  explicit Rand(uint32_t seed) : g_(seed) {}
  uint32_t u32() { return static_cast<uint32_t>(g_()); }
  uint64_t u64() { return uint64_t{u32()} << 32 | u32(); }
  uint16_t u16() { return static_cast<uint16_t>(u32()); }
  uint8_t u8() { return static_cast<uint8_t>(u32()); }
  bool coin() { return (u32() & 1) != 0; }
  /// Uniform-enough value in [0, n) for the small n used here.
  size_t below(size_t n) { return static_cast<size_t>(u32() % n); }
  std::vector<uint8_t> bytes(size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = u8();
    return v;
  }

 private:
  std::mt19937 g_;
};

/// Random but well-formed RoCEv2 headers for `opcode`: every field a parser must carry
/// through is random; fields build_frame computes (lengths, checksum, pad count, EtherType)
/// are left at zero. Extension headers the opcode does not carry stay default, as a parse
/// into a fresh ParsedPacket leaves them.
inline RoceHeaders random_headers(Rand& r, uint8_t opcode, bool ipv6, bool vlan) {
  RoceHeaders h;
  for (auto& b : h.eth.dst) b = r.u8();
  for (auto& b : h.eth.src) b = r.u8();
  h.eth.has_vlan = vlan;
  if (vlan) {
    h.eth.pcp = static_cast<uint8_t>(r.u32() & 7);
    h.eth.dei = r.coin();
    h.eth.vid = static_cast<uint16_t>(r.u32() & 0x0FFF);
  }
  h.eth.ethertype = 0;
  h.ipv6 = ipv6;
  if (ipv6) {
    h.ip6.traffic_class = r.u8();
    h.ip6.flow_label = r.u32() & 0xFFFFF;
    h.ip6.hop_limit = r.u8();
    for (auto& b : h.ip6.src) b = r.u8();
    for (auto& b : h.ip6.dst) b = r.u8();
  } else {
    h.ip4.dscp = static_cast<uint8_t>(r.u32() & 0x3F);
    h.ip4.ecn = static_cast<uint8_t>(r.u32() & 3);
    h.ip4.ident = r.u16();
    h.ip4.dont_frag = r.coin();
    h.ip4.ttl = r.u8();
    for (auto& b : h.ip4.src) b = r.u8();
    for (auto& b : h.ip4.dst) b = r.u8();
    h.ip4.options_len = static_cast<uint8_t>(4 * r.below(11));  // 0..40
    for (size_t i = 0; i < h.ip4.options_len; ++i) h.ip4.options[i] = r.u8();
  }
  h.udp.src_port = r.u16();
  h.udp.checksum = r.u16();
  h.bth.opcode = opcode;
  h.bth.se = r.coin();
  h.bth.mig = r.coin();
  h.bth.pkey = r.u16();
  h.bth.fecn = r.coin();
  h.bth.becn = r.coin();
  h.bth.resv6 = static_cast<uint8_t>(r.u32() & 0x3F);
  h.bth.dest_qp = r.u32() & 0xFFFFFF;
  h.bth.ack_req = r.coin();
  h.bth.resv7 = static_cast<uint8_t>(r.u32() & 0x7F);
  h.bth.psn = r.u32() & 0xFFFFFF;
  const OpcodeInfo& info = opcode_info(opcode);
  ExtHeaders& x = h.ext;
  if (info.has(Ext::kXrceth)) x.xrceth = {r.u8(), r.u32() & 0xFFFFFF};
  if (info.has(Ext::kFeth)) x.feth.raw = r.u32();
  if (info.has(Ext::kDeth)) x.deth = {r.u32(), r.u8(), r.u32() & 0xFFFFFF};
  if (info.has(Ext::kReth)) x.reth = {r.u64(), r.u32(), r.u32()};
  if (info.has(Ext::kAtomicEth)) x.atomic = {r.u64(), r.u32(), r.u64(), r.u64()};
  if (info.has(Ext::kAeth)) x.aeth = {r.u8(), r.u32() & 0xFFFFFF};
  if (info.has(Ext::kAtomicAckEth)) x.atomic_ack.orig = r.u64();
  if (info.has(Ext::kImmDt)) x.imm.imm = r.u32();
  if (info.has(Ext::kIeth)) x.ieth.rkey = r.u32();
  if (info.has(Ext::kCnpReserved))
    for (auto& b : x.cnp_reserved) b = r.u8();
  return h;
}

/// The valid opcodes, in order.
inline std::vector<uint8_t> valid_opcodes() {
  std::vector<uint8_t> v;
  for (unsigned op = 0; op < 256; ++op)
    if (opcode_info(static_cast<uint8_t>(op)).valid) v.push_back(static_cast<uint8_t>(op));
  return v;
}

}  // namespace uroce::wire::test

// Named reasons a frame is not accepted as a well-formed RoCEv2 packet.
//
// Parsing never throws and never crashes: it returns one of these. The first group
// (kNotIp .. kNotRoce) means "valid, just not RoCEv2" and tools show such frames briefly;
// everything from kTruncated on is a malformed packet that the engine drops and counts.
// kBadMad and kUnknownCmAttribute are about the MAD inside a QP1 datagram (wire/cm_mad.h), not
// about the frame.
#pragma once

#include <cstdint>
#include <string_view>

namespace uroce::wire {

#define UROCE_PARSE_ERRORS(X)                                                          \
  X(kOk, "ok", "parsed")                                                               \
  X(kNotIp, "not_ip", "not an IPv4/IPv6 frame")                                        \
  X(kNotUdp, "not_udp", "IP payload is not UDP")                                       \
  X(kNotRoce, "not_roce", "UDP destination port is not 4791")                          \
  X(kTruncated, "truncated", "frame ends before a header or the ICRC")                 \
  X(kBadEthernet, "bad_ethernet", "malformed Ethernet/VLAN header")                    \
  X(kBadIpVersion, "bad_ip_version", "IP version field does not match the EtherType")  \
  X(kBadIpHeaderLen, "bad_ip_header_len", "IPv4 IHL below 5 or beyond the frame")      \
  X(kBadIpTotalLen, "bad_ip_total_len", "IP length field disagrees with the frame")    \
  X(kBadIpChecksum, "bad_ip_checksum", "IPv4 header checksum does not verify")         \
  X(kIpFragment, "ip_fragment", "IPv4 fragment (RoCEv2 never fragments)")              \
  X(kBadUdpLen, "bad_udp_len", "UDP length disagrees with the IP payload")             \
  X(kBadVersion, "bad_version", "BTH transport header version (TVer) is not 0")        \
  X(kUnknownOpcode, "unknown_opcode", "BTH opcode is not a known RC/UC/UD/CNP opcode") \
  X(kBadPad, "bad_pad", "pad count exceeds the payload, does not align it to 4 bytes, or is not allowed for this opcode") \
  X(kBadPayloadLen, "bad_payload_len", "payload length is not allowed for this opcode, or longer than the largest RoCE MTU (4096)") \
  X(kBadIcrc, "bad_icrc", "invariant CRC does not match")                              \
  X(kBadMad, "bad_mad", "MAD base version or management class is not the CM's (1, 0x07)") \
  X(kUnknownCmAttribute, "unknown_cm_attr", "MAD attribute ID is not a CM message decoded here")

enum class ParseError : uint8_t {
#define UROCE_X(id, name, text) id,
  UROCE_PARSE_ERRORS(UROCE_X)
#undef UROCE_X
      kCount
};

/// Short machine name, e.g. "bad_icrc" (used for counters and --json).
std::string_view error_name(ParseError e);
/// One-line human explanation.
std::string_view error_text(ParseError e);

/// True for the "not RoCEv2 at all" outcomes, which are not errors.
constexpr bool is_not_roce(ParseError e) {
  return e == ParseError::kNotIp || e == ParseError::kNotUdp || e == ParseError::kNotRoce;
}

}  // namespace uroce::wire

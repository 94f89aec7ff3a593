// Turning one captured Ethernet frame into a Frame: what it is (RoCEv2, other traffic, or a
// malformed RoCEv2 packet), every header that could be decoded, and a one-line rendering.
//
// The decoding itself is stack/wire's parse_frame(). This file adds what a capture tool
// needs on top: a short description of non-RoCE traffic (ARP, TCP, UDP, ...), and, for frames
// that parse_frame() rejects, a lenient second walk that recovers as many headers as the bytes
// allow, so that a snapped capture (caplen < len) still shows opcode, QP and PSN.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace uroce::dissect {

enum class FrameKind : uint8_t {
  kRoce,       // RoCEv2 with BTH and all extension headers decoded (ICRC may be bad or snapped off)
  kOther,      // valid traffic that is not RoCEv2: shown briefly, skipped
  kMalformed,  // a frame the parser rejected (see `error`)
};

/// One decoded frame. `pkt` points into the captured bytes it was decoded from: use it before
/// the next frame is read.
struct Frame {
  uint64_t index = 0;     // 1-based position in the capture
  int64_t rel_ns = 0;     // time since the first frame
  uint32_t caplen = 0;    // bytes captured
  uint32_t orig_len = 0;  // bytes on the wire

  FrameKind kind = FrameKind::kOther;
  /// kOk or kBadIcrc for RoCE (kTruncated for a snapped RoCE frame); the parse error for
  /// malformed frames; kNotIp / kNotUdp / kNotRoce for other traffic.
  wire::ParseError error = wire::ParseError::kOk;
  wire::ParsedPacket pkt;    // headers valid up to pkt.reached (all of them for kRoce)
  uint16_t ext_present = 0;  // ext_bit() of each extension header actually decoded
  size_t payload_len = 0;    // payload bytes on the wire (from the UDP length when snapped)
  bool has_addrs = false;    // src/dst below are known
  wire::Gid src{};           // IP source (IPv4 as ::ffff:a.b.c.d)
  wire::Gid dst{};
  std::string brief;  // non-RoCE frames: "ARP who-has ...", "TCP a:p → b:q len n"
  /// The IPv4 identification and DF flag were solved for from the ICRC: a frame uroce's
  /// UDP-socket port rebuilt (its source MAC is wire::socket_port_mac of its source address),
  /// whose socket does not show them (wire::icrc_solve_ipv4_ident, as the engine does).
  bool ident_solved = false;

  bool snapped() const { return caplen < orig_len; }
  bool is_roce() const { return kind == FrameKind::kRoce; }
  bool icrc_bad() const { return kind == FrameKind::kRoce && error == wire::ParseError::kBadIcrc; }
  /// A RoCE frame whose ICRC was captured and verified.
  bool icrc_ok() const { return kind == FrameKind::kRoce && error == wire::ParseError::kOk; }
  bool has_ext(wire::Ext e) const { return (ext_present & wire::ext_bit(e)) != 0; }
  const wire::OpcodeInfo* info() const { return pkt.info; }
};

/// Decodes one captured frame (`data` = captured bytes, `orig_len` = length on the wire).
Frame decode_frame(uint64_t index, int64_t rel_ns, std::span<const uint8_t> data,
                   uint32_t orig_len);

/// Running totals over a capture.
struct Counts {
  uint64_t packets = 0;
  uint64_t roce = 0;  // kRoce frames, including bad-ICRC and snapped ones
  uint64_t other = 0;
  uint64_t malformed = 0;
  uint64_t bad_icrc = 0;                // subset of roce
  uint64_t snapped = 0;                 // frames of any kind captured shorter than they were
  std::array<uint64_t, 256> opcodes{};  // RoCE frames per BTH opcode
  std::array<uint64_t, static_cast<size_t>(wire::ParseError::kCount)> errors{};  // malformed

  void add(const Frame& f);
};

// ---- formatting helpers shared by the output modes ----

/// "10.77.0.11" for IPv4-mapped GIDs, RFC 5952 text otherwise.
std::string addr_string(const wire::Gid& g);
/// Seconds with 6 decimals, e.g. "0.143511" (negative if the capture goes back in time).
std::string seconds_string(int64_t ns);
/// Milliseconds with 3 decimals, e.g. "8.154 ms".
std::string ms_string(int64_t ns);
/// An RNR timer as the spec's table writes it: "0.64ms", "655.36ms".
std::string rnr_timer_string(uint8_t code);
/// printf into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/// Credits encoded by an ACK's 5-bit credit code (IBA table 44); -1 for code 31 (not reported).
int credits_from_code(uint8_t code);
/// The compact AETH form of the one-line output: "ACK msn=1", "NAK PSN-seq-error msn=2",
/// "RNR-NAK 0.64ms msn=2".
std::string aeth_compact(const wire::AethRepr& a);
/// Short dashed NAK code name: "PSN-seq-error", "remote-access-error", ...
std::string_view nak_short_name(uint8_t code);

// ---- Communication Manager MADs (connection setup over QP1) ----

/// A UD SEND_ONLY to QP1: the general services QP, where rdma_cm's connection setup travels.
bool is_qp1_datagram(const Frame& f);
/// The CM message a frame carries: a UD SEND_ONLY to QP1 whose captured payload is a whole
/// CM MAD (wire::CmMessage::parse accepts it).
std::optional<wire::CmMessage> cm_message(const Frame& f);
/// "TCP:7471" for an rdma_cm service ID (port space and port), "0x..." (16 hex digits) for
/// any other.
std::string service_id_string(uint64_t sid);
/// rdma_cm's private-data header of a REQ / SIDR_REQ, when the service ID is an rdma_cm one
/// and the header is valid.
std::optional<wire::CmaIpHeader> cma_header(const wire::CmMessage& m);
/// The compact CM form of the one-line output: "CM REQ comm=0x... sid=TCP:7471 qpn=0x...
/// psn=... rr=1 id=1 ...", "CM REJ comm=0x... remote=0x... reason=8 (invalid service ID)".
std::string cm_compact(const wire::CmMessage& m);
/// What the one-line output says about a QP1 datagram's payload: cm_compact() of its CM
/// message, a short note when it is some other MAD or cut short, "" for other frames.
std::string qp1_compact(const Frame& f);

/// The one-line rendering of a frame (without tracking notes and without a newline):
/// index, time, then format_summary().
std::string format_line(const Frame& f);
/// The line without index and time: addresses, opcode, QP, PSN, flags, extension headers,
/// payload length, ICRC verdict (or the brief / the parse error). `align` pads the opcode.
std::string format_summary(const Frame& f, bool align);

}  // namespace uroce::dissect

// A whole RoCEv2 frame: parse (Ethernet -> IP -> UDP -> BTH -> extension headers from the
// opcode table -> payload -> pad -> ICRC) and build (the inverse, with every length,
// checksum, pad count and the ICRC filled in).
//
// Neither allocates: a ParsedPacket refers into the frame it came from, and build_frame
// writes into a caller-supplied buffer.
#pragma once

#include <array>

#include "wire/aeth.h"
#include "wire/atomic_eth.h"
#include "wire/bth.h"
#include "wire/deth.h"
#include "wire/error.h"
#include "wire/ethernet.h"
#include "wire/feth.h"
#include "wire/icrc.h"
#include "wire/ieth.h"
#include "wire/immdt.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"
#include "wire/opcode.h"
#include "wire/reth.h"
#include "wire/udp.h"
#include "wire/xrceth.h"

namespace uroce::wire {

/// Extension headers; which of them are meaningful is given by the opcode's ext_mask.
struct ExtHeaders {
  XrcethRepr xrceth;
  FethRepr feth;
  DethRepr deth;
  RethRepr reth;
  AtomicEthRepr atomic;
  AethRepr aeth;
  AtomicAckEthRepr atomic_ack;
  ImmDtRepr imm;
  IethRepr ieth;
  std::array<uint8_t, 16> cnp_reserved{};
  bool operator==(const ExtHeaders&) const = default;
};

/// Every header of a RoCEv2 frame as plain values.
struct RoceHeaders {
  EthernetRepr eth;
  bool ipv6 = false;
  Ipv4Repr ip4;  // when !ipv6
  Ipv6Repr ip6;  // when ipv6
  UdpRepr udp;
  BthRepr bth;
  ExtHeaders ext;

  size_t ip_header_len() const { return ipv6 ? Ipv6Repr::header_len() : ip4.header_len(); }
  /// The IP header's two ECN bits (kEcnNotEct .. kEcnCe), IPv4 or IPv6.
  uint8_t ecn() const { return ipv6 ? ip6.traffic_class & 3 : ip4.ecn; }
  bool operator==(const RoceHeaders&) const = default;
};

/// How far parsing got; on an error, the headers up to this layer are filled in.
enum class Layer : uint8_t { kNone, kEthernet, kIp, kUdp, kBth, kComplete };

struct ParsedPacket {
  RoceHeaders hdr;
  const OpcodeInfo* info = nullptr;  // set once the BTH parsed
  Layer reached = Layer::kNone;
  size_t l3_offset = 0;   // IP header
  size_t l4_offset = 0;   // UDP header
  size_t bth_offset = 0;  // BTH
  Bytes payload;          // without pad
  Bytes pad;              // 0..3 pad bytes
  uint32_t icrc_wire = 0;
  uint32_t icrc_calc = 0;  // only when verified
  Bytes trailer;           // link-layer bytes after the IP datagram (Ethernet min-size padding)

  bool icrc_ok() const { return icrc_wire == icrc_calc; }
};

struct ParseOptions {
  bool verify_icrc = true;
  CrcImpl crc = CrcImpl::kFast;
};

/// Parses one Ethernet frame. Returns kOk for a well-formed RoCEv2 packet; kNotIp / kNotUdp /
/// kNotRoce for other traffic; otherwise the first problem found. On kBadIcrc every field of
/// `out` is filled in (only the CRC disagrees); on other errors, up to `out.reached`.
ParseError parse_frame(Bytes frame, ParsedPacket& out, const ParseOptions& opt = {});

/// Where things landed in a frame written by emit_headers().
struct FrameLayout {
  size_t len = 0;          // whole frame (0: emit failed)
  size_t l3_off = 0;       // IP header
  size_t payload_off = 0;  // first payload byte
  size_t icrc_off = 0;     // the 4 ICRC bytes
  size_t ip_hdr_len = 0;
  bool ipv6 = false;
  // The ICRC's CRC so far, over the crc_len bytes from l3_off (icrc_compute of the headers, then crc32 over
  // what followed); seal_frame() goes on from there. crc_len 0: seal_frame computes it all.
  uint32_t crc = 0;
  size_t crc_len = 0;
};

/// The zero-copy way to build a frame: writes every header (lengths, pad count, IPv4 checksum
/// filled in) and zero pad bytes for a payload of `payload_len` bytes, but not the payload
/// itself. Copy the payload to out[payload_off ...], then call seal_frame(). Returns a layout
/// with len 0 if `out` is too small, the opcode is invalid, or the IP datagram would exceed
/// the 16-bit IP length field.
FrameLayout emit_headers(const RoceHeaders& h, size_t payload_len, MutBytes out);
/// The same, but writes only the bytes before the payload, into `hdr` (at least
/// layout.payload_off long), for a frame of `frame_room` bytes; no pad.
FrameLayout emit_header_bytes(const RoceHeaders& h, size_t payload_len, MutBytes hdr,
                              size_t frame_room);
/// Computes (or finishes: FrameLayout::crc_len) and stores the ICRC once the payload is in
/// place.
void seal_frame(MutBytes out, const FrameLayout& layout);

/// After a payload of `payload_len` bytes was copied in right after the headers whose CRC
/// `layout` carries, with `crc` carried on over it: adds the (zero) pad, so that
/// seal_frame() reads nothing of the frame.
void payload_crc(FrameLayout& layout, uint32_t crc, size_t payload_len);

/// The largest payload a RoCE packet can carry: the largest path MTU (IBA 9.7.7: 4096). A
/// longer one is malformed (kBadPayloadLen), however well its headers and ICRC agree.
inline constexpr size_t kMaxRocePayload = 4096;

/// Size of the frame build_frame() will produce.
size_t frame_len(const RoceHeaders& h, size_t payload_len, size_t trailer_len = 0);

struct BuildExtras {
  Bytes pad;      // pad byte values (default: zeros)
  Bytes trailer;  // bytes to append after the IP datagram
};

/// Writes a complete frame for `h` (taking the opcode, addresses, ports and header fields
/// from it) carrying `payload`, computing the BTH pad count, IP/UDP lengths, the IPv4 header
/// checksum and the ICRC. Returns the frame length, or 0 if `out` is too small, the opcode
/// is not valid, or the IP datagram would exceed the 16-bit IP length field.
size_t build_frame(const RoceHeaders& h, Bytes payload, MutBytes out,
                   const BuildExtras& extras = {});

}  // namespace uroce::wire

// The RoCEv2 Invariant CRC (ICRC): a CRC-32 (the Ethernet polynomial, reflected) over the
// parts of the packet that no router may change, appended as the last 4 bytes of the UDP
// payload.
//
// What it covers, in order (IBA Annex A17.3.3):
//   1. 8 bytes of 0xFF standing in for the (absent) InfiniBand LRH,
//   2. the IP header with its variant fields set to all ones:
//        IPv4: TOS (DSCP+ECN), TTL, header checksum
//        IPv6: traffic class, flow label, hop limit
//   3. the UDP header with its checksum set to all ones,
//   4. the BTH with byte 4 (FECN/BECN/reserved) set to all ones,
//   5. every extension header, the payload and the pad bytes.
// The 32-bit result is stored least-significant byte first (it is the plain CRC-32 value
// written in little-endian order, as Ethernet's FCS is).
#pragma once

#include "wire/bytes.h"

namespace uroce::wire {

inline constexpr size_t kIcrcLen = 4;

enum class CrcImpl : uint8_t {
  kFast,       // ISA-L's folded/CLMUL CRC-32
  kReference,  // one bit at a time, straight from the definition
};

/// CRC-32 (IEEE 802.3, reflected, init/final ~0) with zlib-style chaining:
/// crc32(crc32(0, a), b) == crc32(0, a ++ b).
uint32_t crc32(uint32_t crc, Bytes data, CrcImpl impl = CrcImpl::kFast);

/// ICRC of a RoCEv2 packet. `l3` runs from the first byte of the IP header to the last pad
/// byte (the ICRC itself excluded); `ip_hdr_len` is 20..60 for IPv4 and 40 for IPv6.
/// Precondition: l3.size() >= ip_hdr_len + 8 (UDP) + 12 (BTH).
/// Over a packet's first bytes only (any point past the BTH) it is the running CRC, to be
/// carried on with crc32() over the rest: crc32(icrc_compute(l3.first(k)), l3.subspan(k)) ==
/// icrc_compute(l3). A sender that starts it from the headers it has at hand and carries it
/// over the payload's source never reads the frame back (docs/shm.md).
uint32_t icrc_compute(Bytes l3, bool ipv6, size_t ip_hdr_len, CrcImpl impl = CrcImpl::kFast);

/// The ICRC is linear in the bits it covers: two packets of one length that differ only in
/// some bytes have ICRCs that differ by the CRC of the difference alone (no initial value, no
/// final inversion), carried over the bytes that follow it. A field the kernel writes after
/// the ICRC was sealed (the IPv4 identification, through a UDP socket) can so be changed
/// without reading the payload again, and one that a socket does not show can be solved for.
///
/// How the ICRC changes when `diff` is XORed into a packet's ICRC-covered bytes with `after`
/// of them following it. `shift` is icrc_shift(after) (computed once for many packets of one
/// length).
uint32_t icrc_delta(Bytes diff, uint32_t shift);
/// x^(8 * after) modulo the CRC-32 polynomial, the multiplier of icrc_delta(..., after).
uint32_t icrc_shift(size_t after);

/// A packet's IPv4 identification and DF flag, as solved for by icrc_solve_ipv4_ident.
struct Ipv4Ident {
  uint16_t ident = 0;
  bool dont_frag = false;
};
/// For an IPv4 RoCEv2 packet whose ICRC was computed (`calc`) over headers that may carry the
/// wrong identification and DF flag (a UDP socket shows neither): the change to those 17 bits
/// that turns `calc` into `wire`, if there is one. `l3_len` is the ICRC's coverage from the
/// IP header (IP datagram length - 4); `assumed` what `calc` was computed with. 15 of the
/// ICRC's 32 bits still check the packet (a wrong ICRC passes with probability 2^-15).
bool icrc_solve_ipv4_ident(uint32_t calc, uint32_t wire, size_t l3_len, Ipv4Ident assumed,
                           Ipv4Ident* out);

inline uint32_t load_icrc(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
inline void store_icrc(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

}  // namespace uroce::wire

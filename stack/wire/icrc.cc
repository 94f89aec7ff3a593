#include "wire/icrc.h"

#include <isa-l/crc.h>

#include <array>

namespace uroce::wire {

namespace {

uint32_t crc32_bitwise(uint32_t crc, Bytes data) {
  crc = ~crc;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

constexpr size_t kUdpLen = 8;
constexpr size_t kBthLen = 12;
constexpr size_t kMaxMasked = 60 + kUdpLen + kBthLen;  // IPv4 with 40 bytes of options
// Up to this much of a packet's start goes through the masked copy, so that the extension
// headers after the BTH cost no CRC call of their own (a call has a fixed cost of its own).
constexpr size_t kMaxCopied = kMaxMasked + 64;

}  // namespace

uint32_t crc32(uint32_t crc, Bytes data, CrcImpl impl) {
  if (impl == CrcImpl::kReference) return crc32_bitwise(crc, data);
  // crc32_gzip_refl takes and returns the CRC in the same pre/post-inverted form as zlib.
  return crc32_gzip_refl(crc, data.data(), data.size());
}

uint32_t icrc_compute(Bytes l3, bool ipv6, size_t ip_hdr_len, CrcImpl impl) {
  static constexpr std::array<uint8_t, 8> kMaskedLrh = {0xFF, 0xFF, 0xFF, 0xFF,
                                                        0xFF, 0xFF, 0xFF, 0xFF};
  const size_t masked_len = ip_hdr_len + kUdpLen + kBthLen;
  const size_t copied = l3.size() <= kMaxCopied ? l3.size() : masked_len;
  std::array<uint8_t, kMaxCopied> hdr;
  for (size_t i = 0; i < copied; ++i) hdr[i] = l3[i];

  if (ipv6) {
    hdr[0] |= 0x0F;  // traffic class (high nibble) ...
    hdr[1] = 0xFF;   // ... traffic class (low nibble) + flow label
    hdr[2] = 0xFF;
    hdr[3] = 0xFF;
    hdr[7] = 0xFF;  // hop limit
  } else {
    hdr[1] = 0xFF;  // TOS
    hdr[8] = 0xFF;  // TTL
    hdr[10] = 0xFF;  // header checksum
    hdr[11] = 0xFF;
  }
  hdr[ip_hdr_len + 6] = 0xFF;  // UDP checksum
  hdr[ip_hdr_len + 7] = 0xFF;
  hdr[ip_hdr_len + kUdpLen + 4] = 0xFF;  // BTH FECN/BECN/reserved byte

  // The masked LRH never changes: its CRC is a constant (computed once, by the reference).
  static const uint32_t kLrhCrc = crc32(0, kMaskedLrh, CrcImpl::kReference);
  uint32_t crc = kLrhCrc;
  crc = crc32(crc, Bytes(hdr.data(), copied), impl);
  return l3.size() == copied ? crc : crc32(crc, l3.subspan(copied), impl);
}

}  // namespace uroce::wire

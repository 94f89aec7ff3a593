#include "wire/icrc.h"

// ISA-L's folded CRC where it exists; a table-driven one elsewhere (WebAssembly: the lab).
#if !defined(__EMSCRIPTEN__)
#include <isa-l/crc.h>
#define UROCE_HAVE_ISAL 1
#endif

#include <array>

namespace uroce::wire {

namespace {

#ifndef UROCE_HAVE_ISAL
// CRC-32 (reflected 0xEDB88320) a byte at a time from a table, zlib's pre/post inversion.
constexpr std::array<uint32_t, 256> kCrcTable = [] {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    t[i] = c;
  }
  return t;
}();
uint32_t crc32_gzip_refl(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}
#endif

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

namespace {

constexpr uint32_t kPoly = 0xEDB88320u;  // x^32 + ... + 1, reflected (bit 31 is x^0)

/// a(x) * b(x) modulo the polynomial, both reflected.
uint32_t mul_mod(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (int i = 31; i >= 0; --i) {  // a's coefficient of x^(31-i)
    if ((a >> i) & 1u) p ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPoly : b >> 1;  // b *= x
  }
  return p;
}

/// x^(2^k) modulo the polynomial, k = 0..63.
struct PowersOfX {
  std::array<uint32_t, 64> v{};
  PowersOfX() {
    v[0] = 1u << 30;  // x^1
    for (size_t k = 1; k < v.size(); ++k) v[k] = mul_mod(v[k - 1], v[k - 1]);
  }
};

}  // namespace

uint32_t icrc_shift(size_t after) {
  static const PowersOfX kPow;
  uint64_t n = uint64_t{after} * 8;
  uint32_t p = 1u << 31;  // x^0
  for (size_t k = 0; n != 0; ++k, n >>= 1)
    if (n & 1u) p = mul_mod(kPow.v[k], p);
  return p;
}

uint32_t icrc_delta(Bytes diff, uint32_t shift) {
  uint32_t r = 0;  // the CRC register over the difference, from zero
  for (uint8_t byte : diff) {
    r ^= byte;
    for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ (kPoly & (0u - (r & 1u)));
  }
  return mul_mod(shift, r);
}

bool icrc_solve_ipv4_ident(uint32_t calc, uint32_t wire, size_t l3_len, Ipv4Ident assumed,
                           Ipv4Ident* out) {
  if (l3_len < 8) return false;
  // Column j: how the ICRC changes when unknown bit j flips (0-15: the identification, bit
  // 15 its most significant; 16: DF). Gaussian elimination over GF(2): basis[b] has its
  // highest set bit at b, and comb[b] says which columns it sums.
  const uint32_t at4 = icrc_shift(l3_len - 6), at6 = icrc_shift(l3_len - 7);
  std::array<uint32_t, 32> basis{}, comb{};
  for (uint32_t j = 0; j < 17; ++j) {
    uint8_t d[2] = {static_cast<uint8_t>(j < 16 ? (1u << j) >> 8 : 0x40),
                    static_cast<uint8_t>(j < 16 ? (1u << j) & 0xFF : 0)};
    uint32_t v = j < 16 ? icrc_delta(Bytes(d, 2), at4) : icrc_delta(Bytes(d, 1), at6);
    uint32_t m = 1u << j;
    for (int b = 31; b >= 0 && v != 0; --b) {
      if (((v >> b) & 1u) == 0) continue;
      if (basis[b] == 0) {
        basis[b] = v;
        comb[b] = m;
        v = 0;
      } else {
        v ^= basis[b];
        m ^= comb[b];
      }
    }
  }
  uint32_t t = calc ^ wire, x = 0;
  for (int b = 31; b >= 0 && t != 0; --b) {
    if (((t >> b) & 1u) == 0) continue;
    if (basis[b] == 0) return false;
    t ^= basis[b];
    x ^= comb[b];
  }
  out->ident = static_cast<uint16_t>(assumed.ident ^ (x & 0xFFFF));
  out->dont_frag = assumed.dont_frag != (((x >> 16) & 1u) != 0);
  return true;
}

}  // namespace uroce::wire

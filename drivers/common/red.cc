#include "common/red.h"

#include "wire/ethernet.h"
#include "wire/ipv4.h"

namespace uroce::drivers {

namespace {

/// The byte holding the ECN bits of an IPv4 / IPv6 frame (after an optional VLAN tag);
/// nullptr if neither.
uint8_t* ecn_byte(uint8_t* f, size_t len, bool* ipv6) {
  size_t off = 12;
  if (len < off + 2) return nullptr;
  uint16_t type = static_cast<uint16_t>(f[off] << 8 | f[off + 1]);
  if (type == wire::kEtherTypeVlan) {
    off += 4;
    if (len < off + 2) return nullptr;
    type = static_cast<uint16_t>(f[off] << 8 | f[off + 1]);
  }
  off += 2;
  if (type == 0x0800 && len >= off + 20) {
    *ipv6 = false;
    return &f[off + 1];  // TOS: DSCP(6) ECN(2)
  }
  if (type == 0x86DD && len >= off + 40) {
    *ipv6 = true;
    return &f[off];  // version(4) traffic class(8): the ECN bits are byte 1's 0x30
  }
  return nullptr;
}

uint8_t ecn_of(const uint8_t* b, bool ipv6) { return ipv6 ? (b[1] >> 4) & 3 : b[0] & 3; }

void mark_ce(uint8_t* b, bool ipv6) {
  if (ipv6) {
    b[1] |= 0x30;
    return;
  }
  b[0] |= wire::kEcnCe;
  uint8_t* ip = b - 1;  // the TOS is the header's second byte
  ip[10] = ip[11] = 0;
  const size_t ihl = static_cast<size_t>(ip[0] & 0x0F) * 4;
  const uint16_t c = wire::internet_checksum(wire::Bytes(ip, ihl));
  ip[10] = static_cast<uint8_t>(c >> 8);
  ip[11] = static_cast<uint8_t>(c);
}

}  // namespace

bool set_ce(uint8_t* f, size_t len) {
  bool ipv6 = false;
  uint8_t* ecn = ecn_byte(f, len, &ipv6);
  if (ecn == nullptr) return false;
  mark_ce(ecn, ipv6);
  return true;
}

RedVerdict red_judge(const RedConfig& c, uint64_t q, uint8_t* f, size_t len, std::mt19937_64& rng) {
  if (q <= c.kmin_bytes) return RedVerdict::kPass;
  bool ipv6 = false;
  uint8_t* ecn = ecn_byte(f, len, &ipv6);
  if (ecn == nullptr) return RedVerdict::kPass;  // not IP: nothing RED judges
  const double p = q >= c.kmax_bytes ? 1.0
                                     : c.pmax * static_cast<double>(q - c.kmin_bytes) /
                                           static_cast<double>(c.kmax_bytes - c.kmin_bytes);
  if (std::uniform_real_distribution<double>(0, 1)(rng) >= p) return RedVerdict::kPass;
  const uint8_t e = ecn_of(ecn, ipv6);
  if (c.ecn && (e == wire::kEcnEct0 || e == wire::kEcnEct1 || e == wire::kEcnCe)) {
    mark_ce(ecn, ipv6);
    return RedVerdict::kMarked;
  }
  return RedVerdict::kDrop;
}

}  // namespace uroce::drivers

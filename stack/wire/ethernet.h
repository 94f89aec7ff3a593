// Ethernet II header with an optional 802.1Q VLAN tag.
//
//   0      6      12           14(18)
//   | dst  | src  | [0x8100 TCI] | EtherType | payload ...
//
// EthernetView reads fields in place; EthernetRepr is the plain value with parse/emit.
#pragma once

#include "wire/addr.h"
#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86DD;

class EthernetView {
 public:
  static constexpr size_t kLen = 14;
  static constexpr size_t kVlanLen = 18;

  /// Validates that the whole header (including a VLAN tag if announced) fits.
  static ParseError check(Bytes b) {
    if (b.size() < kLen) return ParseError::kTruncated;
    if (load_be16(&b[12]) == kEtherTypeVlan && b.size() < kVlanLen) return ParseError::kTruncated;
    return ParseError::kOk;
  }
  /// Unchecked: call check() first.
  explicit EthernetView(Bytes b) : b_(b) {}

  MacAddr dst() const { return mac_at(0); }
  MacAddr src() const { return mac_at(6); }
  bool has_vlan() const { return load_be16(&b_[12]) == kEtherTypeVlan; }
  uint16_t tci() const { return has_vlan() ? load_be16(&b_[14]) : 0; }
  uint8_t pcp() const { return static_cast<uint8_t>(tci() >> 13); }
  bool dei() const { return (tci() & 0x1000) != 0; }
  uint16_t vid() const { return tci() & 0x0FFF; }
  uint16_t ethertype() const { return load_be16(&b_[has_vlan() ? 16 : 12]); }
  size_t header_len() const { return has_vlan() ? kVlanLen : kLen; }
  Bytes payload() const { return b_.subspan(header_len()); }

 private:
  MacAddr mac_at(size_t off) const {
    MacAddr m;
    for (size_t i = 0; i < 6; ++i) m[i] = b_[off + i];
    return m;
  }
  Bytes b_;
};

struct EthernetRepr {
  MacAddr dst{};
  MacAddr src{};
  bool has_vlan = false;
  uint8_t pcp = 0;     // 802.1p priority (0..7)
  bool dei = false;    // drop eligible
  uint16_t vid = 0;    // VLAN id (0..4095)
  uint16_t ethertype = kEtherTypeIpv4;

  size_t header_len() const { return has_vlan ? EthernetView::kVlanLen : EthernetView::kLen; }

  static ParseError parse(Bytes b, EthernetRepr& out) {
    if (auto e = EthernetView::check(b); e != ParseError::kOk) return e;
    EthernetView v(b);
    out.dst = v.dst();
    out.src = v.src();
    out.has_vlan = v.has_vlan();
    out.pcp = v.pcp();
    out.dei = v.dei();
    out.vid = v.vid();
    out.ethertype = v.ethertype();
    return ParseError::kOk;
  }
  /// Writes header_len() bytes; `out` must be at least that long.
  void emit(MutBytes out) const {
    for (size_t i = 0; i < 6; ++i) {
      out[i] = dst[i];
      out[6 + i] = src[i];
    }
    size_t off = 12;
    if (has_vlan) {
      store_be16(&out[12], kEtherTypeVlan);
      store_be16(&out[14], static_cast<uint16_t>((pcp & 7u) << 13 | (dei ? 0x1000u : 0u) |
                                                 (vid & 0x0FFFu)));
      off = 16;
    }
    store_be16(&out[off], ethertype);
  }
  bool operator==(const EthernetRepr&) const = default;
};

}  // namespace uroce::wire

// ARP for IPv4 over Ethernet (RFC 826): the only ARP flavour RoCEv2 needs.
//
//   htype(2)=1 ptype(2)=0x0800 hlen(1)=6 plen(1)=4 oper(2) sha(6) spa(4) tha(6) tpa(4)
#pragma once

#include "wire/addr.h"
#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

class ArpView {
 public:
  static constexpr size_t kLen = 28;
  static ParseError check(Bytes b) {
    return b.size() < kLen ? ParseError::kTruncated : ParseError::kOk;
  }
  explicit ArpView(Bytes b) : b_(b) {}

  uint16_t htype() const { return load_be16(&b_[0]); }
  uint16_t ptype() const { return load_be16(&b_[2]); }
  uint8_t hlen() const { return b_[4]; }
  uint8_t plen() const { return b_[5]; }
  uint16_t oper() const { return load_be16(&b_[6]); }
  MacAddr sha() const { return copy<6>(8); }
  Ipv4Addr spa() const { return copy<4>(14); }
  MacAddr tha() const { return copy<6>(18); }
  Ipv4Addr tpa() const { return copy<4>(24); }

 private:
  template <size_t N>
  std::array<uint8_t, N> copy(size_t off) const {
    std::array<uint8_t, N> a;
    for (size_t i = 0; i < N; ++i) a[i] = b_[off + i];
    return a;
  }
  Bytes b_;
};

struct ArpRepr {
  static constexpr uint16_t kRequest = 1;
  static constexpr uint16_t kReply = 2;
  uint16_t oper = kRequest;
  MacAddr sha{};
  Ipv4Addr spa{};
  MacAddr tha{};
  Ipv4Addr tpa{};

  /// Accepts only Ethernet/IPv4 ARP (anything else is kBadEthernet: not ours to answer).
  static ParseError parse(Bytes b, ArpRepr& out) {
    if (auto e = ArpView::check(b); e != ParseError::kOk) return e;
    ArpView v(b);
    if (v.htype() != 1 || v.ptype() != 0x0800 || v.hlen() != 6 || v.plen() != 4)
      return ParseError::kBadEthernet;
    out.oper = v.oper();
    out.sha = v.sha();
    out.spa = v.spa();
    out.tha = v.tha();
    out.tpa = v.tpa();
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be16(&out[0], 1);
    store_be16(&out[2], 0x0800);
    out[4] = 6;
    out[5] = 4;
    store_be16(&out[6], oper);
    for (size_t i = 0; i < 6; ++i) out[8 + i] = sha[i];
    for (size_t i = 0; i < 4; ++i) out[14 + i] = spa[i];
    for (size_t i = 0; i < 6; ++i) out[18 + i] = tha[i];
    for (size_t i = 0; i < 4; ++i) out[24 + i] = tpa[i];
  }
  bool operator==(const ArpRepr&) const = default;
};

}  // namespace uroce::wire

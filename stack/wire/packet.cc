#include "wire/packet.h"

#include <algorithm>

namespace uroce::wire {

namespace {

/// Parses the extension headers announced by `info` from `b` (which starts at the BTH).
void parse_ext(const OpcodeInfo& info, Bytes b, ExtHeaders& x) {
  auto at = [&](Ext e) { return b.subspan(info.offset_of(e)); };
  // Lengths were checked against info.length by the caller, so these cannot fail.
  if (info.has(Ext::kXrceth)) XrcethRepr::parse(at(Ext::kXrceth), x.xrceth);
  if (info.has(Ext::kFeth)) FethRepr::parse(at(Ext::kFeth), x.feth);
  if (info.has(Ext::kDeth)) DethRepr::parse(at(Ext::kDeth), x.deth);
  if (info.has(Ext::kReth)) RethRepr::parse(at(Ext::kReth), x.reth);
  if (info.has(Ext::kAtomicEth)) AtomicEthRepr::parse(at(Ext::kAtomicEth), x.atomic);
  if (info.has(Ext::kAeth)) AethRepr::parse(at(Ext::kAeth), x.aeth);
  if (info.has(Ext::kAtomicAckEth)) AtomicAckEthRepr::parse(at(Ext::kAtomicAckEth), x.atomic_ack);
  if (info.has(Ext::kImmDt)) ImmDtRepr::parse(at(Ext::kImmDt), x.imm);
  if (info.has(Ext::kIeth)) IethRepr::parse(at(Ext::kIeth), x.ieth);
  if (info.has(Ext::kCnpReserved)) {
    Bytes r = at(Ext::kCnpReserved);
    for (size_t i = 0; i < x.cnp_reserved.size(); ++i) x.cnp_reserved[i] = r[i];
  }
}

void emit_ext(const OpcodeInfo& info, const ExtHeaders& x, MutBytes b) {
  auto at = [&](Ext e) { return b.subspan(info.offset_of(e)); };
  if (info.has(Ext::kXrceth)) x.xrceth.emit(at(Ext::kXrceth));
  if (info.has(Ext::kFeth)) x.feth.emit(at(Ext::kFeth));
  if (info.has(Ext::kDeth)) x.deth.emit(at(Ext::kDeth));
  if (info.has(Ext::kReth)) x.reth.emit(at(Ext::kReth));
  if (info.has(Ext::kAtomicEth)) x.atomic.emit(at(Ext::kAtomicEth));
  if (info.has(Ext::kAeth)) x.aeth.emit(at(Ext::kAeth));
  if (info.has(Ext::kAtomicAckEth)) x.atomic_ack.emit(at(Ext::kAtomicAckEth));
  if (info.has(Ext::kImmDt)) x.imm.emit(at(Ext::kImmDt));
  if (info.has(Ext::kIeth)) x.ieth.emit(at(Ext::kIeth));
  if (info.has(Ext::kCnpReserved)) {
    MutBytes r = at(Ext::kCnpReserved);
    for (size_t i = 0; i < x.cnp_reserved.size(); ++i) r[i] = x.cnp_reserved[i];
  }
}

}  // namespace

ParseError parse_frame(Bytes frame, ParsedPacket& out, const ParseOptions& opt) {
  out = ParsedPacket{};  // nothing stale from an earlier frame
  RoceHeaders& h = out.hdr;

  // Ethernet (+ 802.1Q)
  if (auto e = EthernetRepr::parse(frame, h.eth); e != ParseError::kOk) return e;
  out.reached = Layer::kEthernet;
  out.l3_offset = h.eth.header_len();
  Bytes l3 = frame.subspan(out.l3_offset);

  // IP
  Bytes ip_payload;
  if (h.eth.ethertype == kEtherTypeIpv4) {
    h.ipv6 = false;
    // Other protocols are "not ours" even when their checksum or fragmentation would fail.
    if (Ipv4Repr::parse_fields(l3, h.ip4) == ParseError::kOk && h.ip4.protocol != kIpProtoUdp) {
      out.reached = Layer::kIp;
      return ParseError::kNotUdp;
    }
    if (auto e = Ipv4Repr::parse(l3, h.ip4); e != ParseError::kOk) return e;
    Ipv4View v(l3);
    ip_payload = v.payload();
    l3 = l3.first(v.total_len());
  } else if (h.eth.ethertype == kEtherTypeIpv6) {
    h.ipv6 = true;
    if (auto e = Ipv6Repr::parse(l3, h.ip6); e != ParseError::kOk) return e;
    if (h.ip6.next_header != kIpProtoUdp) {
      out.reached = Layer::kIp;
      return ParseError::kNotUdp;
    }
    ip_payload = Ipv6View(l3).payload();
    l3 = l3.first(Ipv6View::kLen + h.ip6.payload_len);
  } else {
    return ParseError::kNotIp;
  }
  out.reached = Layer::kIp;
  out.l4_offset = out.l3_offset + h.ip_header_len();
  out.trailer = frame.subspan(out.l3_offset + l3.size());

  // UDP
  if (auto e = UdpRepr::parse(ip_payload, h.udp); e != ParseError::kOk) return e;
  if (h.udp.dst_port != kRoceV2Port) return ParseError::kNotRoce;
  out.reached = Layer::kUdp;
  out.bth_offset = out.l4_offset + UdpView::kLen;
  Bytes roce = ip_payload.subspan(UdpView::kLen);  // BTH .. ICRC

  // BTH and the opcode's extension headers
  if (auto e = BthRepr::parse(roce, h.bth); e != ParseError::kOk) return e;
  out.reached = Layer::kBth;
  if (h.bth.tver != 0) return ParseError::kBadVersion;
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  if (!info.valid) return ParseError::kUnknownOpcode;
  out.info = &info;
  if (roce.size() < size_t{info.length} + kIcrcLen) return ParseError::kTruncated;
  parse_ext(info, roce, h.ext);

  // Payload, pad, ICRC
  const size_t body = roce.size() - info.length - kIcrcLen;  // payload + pad
  const size_t pad = h.bth.pad_count;
  if (pad > body) return ParseError::kBadPad;
  if (!info.has_payload && body != 0) return ParseError::kBadPayloadLen;
  // The pad count aligns the payload to 4 bytes (IBA 9.2: on InfiniBand the packet length is
  // counted in words, so nothing else can reach the wire); over UDP any length can arrive.
  if (body % 4 != 0) return ParseError::kBadPad;
  // Only the packet that ends a message may be padded: first/middle carry whole MTUs.
  if (pad != 0 && !info.ends_message()) return ParseError::kBadPad;
  out.payload = roce.subspan(info.length, body - pad);
  out.pad = roce.subspan(info.length + body - pad, pad);
  if (out.payload.size() > kMaxRocePayload) return ParseError::kBadPayloadLen;
  if (info.fixed_payload != 0 && out.payload.size() != info.fixed_payload)
    return ParseError::kBadPayloadLen;
  out.icrc_wire = load_icrc(&roce[roce.size() - kIcrcLen]);
  out.reached = Layer::kComplete;

  if (opt.verify_icrc) {
    out.icrc_calc = icrc_compute(l3.first(l3.size() - kIcrcLen), h.ipv6, h.ip_header_len(),
                                 opt.crc);
    if (out.icrc_calc != out.icrc_wire) return ParseError::kBadIcrc;
  } else {
    out.icrc_calc = out.icrc_wire;
  }
  return ParseError::kOk;
}

size_t frame_len(const RoceHeaders& h, size_t payload_len, size_t trailer_len) {
  const OpcodeInfo& info = opcode_info(h.bth.opcode);
  const size_t pad = (4 - (payload_len & 3)) & 3;
  return h.eth.header_len() + h.ip_header_len() + UdpView::kLen + info.length + payload_len +
         pad + kIcrcLen + trailer_len;
}

FrameLayout emit_headers(const RoceHeaders& h, size_t payload_len, MutBytes out) {
  const FrameLayout lay = emit_header_bytes(h, payload_len, out, out.size());
  if (lay.len == 0) return lay;
  for (size_t i = lay.payload_off + payload_len; i < lay.icrc_off; ++i) out[i] = 0;  // pad
  return lay;
}

FrameLayout emit_header_bytes(const RoceHeaders& hin, size_t payload_len, MutBytes out,
                              size_t frame_room) {
  FrameLayout lay;
  const OpcodeInfo& info = opcode_info(hin.bth.opcode);
  if (!info.valid) return lay;
  const size_t len = frame_len(hin, payload_len);
  const size_t pad = (4 - (payload_len & 3)) & 3;
  if (frame_room < len || out.size() < len - payload_len - pad - kIcrcLen) return lay;

  RoceHeaders h = hin;
  h.bth.pad_count = static_cast<uint8_t>(pad);
  const size_t udp_len = UdpView::kLen + info.length + payload_len + pad + kIcrcLen;
  // The IPv4 total length / IPv6 payload length (and so the UDP length) are 16 bits.
  if ((h.ipv6 ? 0 : h.ip4.header_len()) + udp_len > 0xFFFF) return lay;
  h.udp.length = static_cast<uint16_t>(udp_len);
  h.eth.ethertype = h.ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4;

  size_t off = 0;
  h.eth.emit(out);
  off += h.eth.header_len();
  lay.l3_off = off;
  if (h.ipv6) {
    h.ip6.payload_len = static_cast<uint16_t>(udp_len);
    h.ip6.emit(out.subspan(off));
  } else {
    h.ip4.total_len = static_cast<uint16_t>(h.ip4.header_len() + udp_len);
    h.ip4.emit(out.subspan(off));
  }
  off += h.ip_header_len();
  h.udp.emit(out.subspan(off));
  off += UdpView::kLen;
  h.bth.emit(out.subspan(off));
  emit_ext(info, h.ext, out.subspan(off));
  off += info.length;
  lay.payload_off = off;
  off += payload_len + pad;
  lay.icrc_off = off;
  lay.len = off + kIcrcLen;
  lay.ip_hdr_len = h.ip_header_len();
  lay.ipv6 = h.ipv6;
  return lay;
}

void seal_frame(MutBytes out, const FrameLayout& lay) {
  const Bytes l3(out.data() + lay.l3_off, lay.icrc_off - lay.l3_off);
  const uint32_t crc = lay.crc_len == 0            ? icrc_compute(l3, lay.ipv6, lay.ip_hdr_len)
                       : lay.crc_len == l3.size() ? lay.crc
                                                  : crc32(lay.crc, l3.subspan(lay.crc_len));
  store_icrc(&out[lay.icrc_off], crc);
}

void payload_crc(FrameLayout& lay, uint32_t crc, size_t payload_len) {
  static constexpr std::array<uint8_t, 3> kZeros{};
  if (lay.crc_len != lay.payload_off - lay.l3_off) {  // no CRC of the headers to go on from
    lay.crc_len = 0;
    return;
  }
  const size_t pad = lay.icrc_off - lay.payload_off - payload_len;
  lay.crc = pad == 0 ? crc : crc32(crc, Bytes(kZeros.data(), std::min(pad, kZeros.size())));
  lay.crc_len = lay.icrc_off - lay.l3_off;
}

size_t build_frame(const RoceHeaders& h, Bytes payload, MutBytes out, const BuildExtras& x) {
  const size_t len = frame_len(h, payload.size(), x.trailer.size());
  if (out.size() < len) return 0;
  const FrameLayout lay = emit_headers(h, payload.size(), out);
  if (lay.len == 0) return 0;
  std::copy(payload.begin(), payload.end(), out.begin() + static_cast<ptrdiff_t>(lay.payload_off));
  for (size_t i = 0; i < x.pad.size() && lay.payload_off + payload.size() + i < lay.icrc_off; ++i)
    out[lay.payload_off + payload.size() + i] = x.pad[i];
  seal_frame(out, lay);
  std::copy(x.trailer.begin(), x.trailer.end(), out.begin() + static_cast<ptrdiff_t>(lay.len));
  return len;
}

}  // namespace uroce::wire

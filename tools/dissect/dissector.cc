#include "dissect/dissector.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "wire/addr.h"
#include "wire/arp.h"
#include "wire/icrc.h"

namespace uroce::dissect {

using wire::Bytes;
using wire::Ext;
using wire::ParseError;

std::string strf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return {};
  if (static_cast<size_t>(n) < sizeof buf) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.resize(static_cast<size_t>(n));
  return big;
}

std::string addr_string(const wire::Gid& g) {
  if (wire::is_ipv4_mapped(g)) return wire::to_string(wire::Ipv4Addr{g[12], g[13], g[14], g[15]});
  return wire::to_string(g);
}

std::string seconds_string(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t mag = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  const uint64_t us = (mag + 500) / 1000;  // rounded to the microsecond
  return strf("%s%" PRIu64 ".%06" PRIu64, sign, us / 1'000'000, us % 1'000'000);
}

std::string ms_string(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t mag = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  const uint64_t us = (mag + 500) / 1000;
  return strf("%s%" PRIu64 ".%03" PRIu64 " ms", sign, us / 1000, us % 1000);
}

std::string rnr_timer_string(uint8_t code) {
  // Every entry of the table is a whole number of 10 us, so two decimals of a ms are exact.
  const uint64_t ten_us = wire::rnr_timer_ns(code) / 10'000;
  return strf("%" PRIu64 ".%02" PRIu64 "ms", ten_us / 100, ten_us % 100);
}

int credits_from_code(uint8_t code) {
  // IBA table 44: 0, 1, 2, 3, 4, 6, 8, 12, ... 32768; 31 means "no credit count".
  code &= 31;
  if (code == 31) return -1;
  if (code <= 4) return code;
  const int base = 1 << ((code - 1) / 2);  // 5,6 -> 4; 7,8 -> 8; ...
  return (code % 2 == 1) ? base + base / 2 : base * 2;
}

std::string_view nak_short_name(uint8_t code) {
  switch (code) {
    case 0: return "PSN-seq-error";
    case 1: return "invalid-request";
    case 2: return "remote-access-error";
    case 3: return "remote-op-error";
    case 4: return "invalid-RD-request";
    default: return "reserved-code";
  }
}

std::string aeth_compact(const wire::AethRepr& a) {
  switch (a.kind()) {
    case wire::AckKind::kAck: {
      const int c = credits_from_code(a.credit_code());
      if (c < 0) return strf("ACK msn=%u", a.msn);
      return strf("ACK credits=%d msn=%u", c, a.msn);
    }
    case wire::AckKind::kRnrNak:
      return strf("RNR-NAK %s msn=%u", rnr_timer_string(a.rnr_timer_code()).c_str(), a.msn);
    case wire::AckKind::kNak: {
      const std::string_view n = nak_short_name(a.value());
      if (a.value() > 4) return strf("NAK code-%u msn=%u", a.value(), a.msn);
      return strf("NAK %.*s msn=%u", static_cast<int>(n.size()), n.data(), a.msn);
    }
    case wire::AckKind::kReserved: break;
  }
  return strf("AETH reserved-syndrome=0x%02x msn=%u", a.syndrome, a.msn);
}

bool is_qp1_datagram(const Frame& f) {
  return f.kind == FrameKind::kRoce && f.pkt.hdr.bth.opcode == wire::opcode::kUdSendOnly &&
         f.pkt.hdr.bth.dest_qp == wire::kGsiQpn;
}

std::optional<wire::CmMessage> cm_message(const Frame& f) {
  if (!is_qp1_datagram(f)) return std::nullopt;
  wire::CmMessage m;
  if (wire::CmMessage::parse(f.pkt.payload, m) != ParseError::kOk) return std::nullopt;
  return m;
}

std::string service_id_string(uint64_t sid) {
  if (const auto ip = wire::decode_ip_service_id(sid)) {
    const std::string_view ps = wire::rdma_ps_name(ip->ps);
    return strf("%.*s:%u", static_cast<int>(ps.size()), ps.data(), ip->port);
  }
  return strf("0x%016" PRIx64, sid);
}

std::optional<wire::CmaIpHeader> cma_header(const wire::CmMessage& m) {
  Bytes priv;
  uint64_t sid = 0;
  if (const auto* req = m.get<wire::CmReq>()) {
    priv = req->private_data;
    sid = req->service_id;
  } else if (const auto* sreq = m.get<wire::CmSidrReq>()) {
    priv = sreq->private_data;
    sid = sreq->service_id;
  } else {
    return std::nullopt;
  }
  wire::CmaIpHeader h;
  if (!wire::decode_ip_service_id(sid) || wire::CmaIpHeader::parse(priv, h) != ParseError::kOk ||
      !h.valid())
    return std::nullopt;
  return h;
}

namespace {

/// "10.0.0.1:39030" / "[fe80::1]:39030".
std::string endpoint(const wire::Gid& g, uint16_t port) {
  const std::string a = addr_string(g);
  if (wire::is_ipv4_mapped(g)) return strf("%s:%u", a.c_str(), port);
  return strf("[%s]:%u", a.c_str(), port);
}

/// " ip=10.0.0.1:39030→10.0.0.2:7471" from rdma_cm's header (destination port: service ID).
std::string cma_compact(const wire::CmMessage& m, uint64_t sid) {
  const auto h = cma_header(m);
  if (!h) return {};
  const auto ip = wire::decode_ip_service_id(sid);
  return " ip=" + endpoint(h->src_gid(), h->src_port) + "→" + endpoint(h->dst_gid(), ip->port);
}

std::string_view sv_or(std::string_view v, std::string_view fallback) {
  return v.empty() ? fallback : v;
}

}  // namespace

std::string cm_compact(const wire::CmMessage& m) {
  const std::string_view name = sv_or(m.name(), "?");
  std::string s = strf("CM %.*s", static_cast<int>(name.size()), name.data());
  if (const auto* r = m.get<wire::CmReq>()) {
    s += strf(" comm=0x%08x sid=%s qpn=0x%06x psn=%u rr=%u id=%u", r->local_comm_id,
              service_id_string(r->service_id).c_str(), r->local_qpn, r->starting_psn,
              r->responder_resources, r->initiator_depth);
    if (r->transport_service_type == wire::kCmTransportUc) s += " UC";
    if (r->transport_service_type == wire::kCmTransportRd) s += " RD";
    if (r->transport_service_type == 3) s += " transport=3";
    s += strf(" mtu=%u retry=%u rnr=%u pkey=0x%04x", wire::ib_mtu_bytes(r->path_mtu),
              r->retry_count, r->rnr_retry_count, r->pkey);
    if (r->srq) s += " srq";
    s += cma_compact(m, r->service_id);
  } else if (const auto* p = m.get<wire::CmRep>()) {
    s += strf(" comm=0x%08x remote=0x%08x qpn=0x%06x psn=%u rr=%u id=%u rnr=%u", p->local_comm_id,
              p->remote_comm_id, p->local_qpn, p->starting_psn, p->responder_resources,
              p->initiator_depth, p->rnr_retry_count);
    if (p->srq) s += " srq";
  } else if (const auto* j = m.get<wire::CmRej>()) {
    const std::string_view why = wire::to_string(j->reason);
    const std::string_view what = wire::to_string(j->msg_rejected);
    s += strf(" comm=0x%08x remote=0x%08x reason=%u (%.*s) rejects=%.*s", j->local_comm_id,
              j->remote_comm_id, static_cast<unsigned>(j->reason), static_cast<int>(why.size()),
              why.data(), static_cast<int>(what.size()), what.data());
  } else if (const auto* a = m.get<wire::CmMra>()) {
    const std::string_view what = wire::to_string(a->msg_mraed);
    s += strf(" comm=0x%08x remote=0x%08x delays=%.*s timeout=%s", a->local_comm_id,
              a->remote_comm_id, static_cast<int>(what.size()), what.data(),
              ms_string(static_cast<int64_t>(wire::cm_timeout_ns(a->service_timeout))).c_str());
  } else if (const auto* d = m.get<wire::CmDreq>()) {
    s += strf(" comm=0x%08x remote=0x%08x qpn=0x%06x", d->local_comm_id, d->remote_comm_id,
              d->remote_qpn_eecn);
  } else if (const auto* t = m.get<wire::CmRtu>()) {
    s += strf(" comm=0x%08x remote=0x%08x", t->local_comm_id, t->remote_comm_id);
  } else if (const auto* e = m.get<wire::CmDrep>()) {
    s += strf(" comm=0x%08x remote=0x%08x", e->local_comm_id, e->remote_comm_id);
  } else if (const auto* q = m.get<wire::CmSidrReq>()) {
    s += strf(" req=0x%08x sid=%s pkey=0x%04x", q->request_id,
              service_id_string(q->service_id).c_str(), q->pkey);
    s += cma_compact(m, q->service_id);
  } else if (const auto* r2 = m.get<wire::CmSidrRep>()) {
    const std::string_view st = wire::to_string(r2->status);
    s += strf(" req=0x%08x status=%.*s qpn=0x%06x qkey=0x%08x sid=%s", r2->request_id,
              static_cast<int>(st.size()), st.data(), r2->qpn, r2->qkey,
              service_id_string(r2->service_id).c_str());
  }
  return s;
}

std::string qp1_compact(const Frame& f) {
  if (!is_qp1_datagram(f)) return {};
  wire::CmMessage m;
  const ParseError e = wire::CmMessage::parse(f.pkt.payload, m);
  if (e == ParseError::kOk) return cm_compact(m);
  wire::MadHeader h;
  if (wire::MadHeader::parse(f.pkt.payload, h) != ParseError::kOk) return {};
  if (h.mgmt_class != wire::kMgmtClassCm)
    return strf("MAD class=0x%02x method=0x%02x attr=0x%04x", h.mgmt_class, h.method, h.attr_id);
  const std::string_view name = wire::cm_attr_name(h.attr_id);
  const std::string what = name.empty() ? strf("attr=0x%04x", h.attr_id) : std::string(name);
  const char* why = e == ParseError::kTruncated ? "payload not captured"
                    : e == ParseError::kBadMad     ? "MAD base version is not 1"
                                                   : "not a message this tool decodes";
  return strf("CM %s (%s)", what.c_str(), why);
}

namespace {

std::string ethertype_brief(uint16_t type) {
  switch (type) {
    case 0x8915:
      return "RoCEv1 frame (EtherType 0x8915, InfiniBand GRH over Ethernet; not decoded)";
    case 0x88CC: return "non-IP ethertype 0x88cc (LLDP)";
    case 0x8808: return "non-IP ethertype 0x8808 (MAC control: PAUSE / PFC)";
    case 0x8100:
      return "non-IP ethertype 0x8100 (a second VLAN tag: stacked VLANs are not decoded)";
    default: return strf("non-IP ethertype 0x%04x", type);
  }
}

std::string arp_brief(Bytes l3) {
  wire::ArpRepr a;
  if (wire::ArpRepr::parse(l3, a) != ParseError::kOk)
    return "ARP (not Ethernet/IPv4, or cut short)";
  const std::string spa = wire::to_string(a.spa), tpa = wire::to_string(a.tpa);
  if (a.oper == wire::ArpRepr::kRequest) return "ARP who-has " + tpa + " tell " + spa;
  if (a.oper == wire::ArpRepr::kReply) return "ARP " + spa + " is-at " + wire::to_string(a.sha);
  return strf("ARP operation %u, %s → %s", a.oper, spa.c_str(), tpa.c_str());
}

std::string tcp_flags(uint8_t fl) {
  static constexpr std::pair<uint8_t, const char*> kNames[] = {
      {0x02, "SYN"}, {0x01, "FIN"}, {0x04, "RST"}, {0x08, "PSH"}, {0x10, "ACK"}, {0x20, "URG"}};
  std::string s;
  for (const auto& [bit, name] : kNames) {
    if ((fl & bit) == 0) continue;
    s += s.empty() ? "[" : ", ";
    s += name;
  }
  return s.empty() ? s : s + "] ";
}

/// Brief line for an IP datagram that is not RoCEv2. `l4` is what was captured of the IP
/// payload, `l4_len` its length according to the IP header.
std::string ip_brief(bool ipv6, uint8_t proto, const std::string& src, const std::string& dst,
                     Bytes l4, size_t l4_len) {
  if (proto == 6 && l4.size() >= 20) {
    const size_t doff = size_t{static_cast<uint8_t>(l4[12] >> 4)} * 4;
    const size_t data = l4_len > doff ? l4_len - doff : 0;
    return strf("TCP %s:%u → %s:%u %slen %zu", src.c_str(), wire::load_be16(&l4[0]), dst.c_str(),
                wire::load_be16(&l4[2]), tcp_flags(l4[13]).c_str(), data);
  }
  if (proto == 17 && l4.size() >= 8) {
    const uint16_t ulen = wire::load_be16(&l4[4]);
    return strf("UDP %s:%u → %s:%u len %u", src.c_str(), wire::load_be16(&l4[0]), dst.c_str(),
                wire::load_be16(&l4[2]), ulen >= 8 ? ulen - 8u : 0u);
  }
  if ((proto == 1 || proto == 58) && l4.size() >= 2) {
    return strf("%s %s → %s type %u code %u", proto == 1 ? "ICMP" : "ICMPv6", src.c_str(),
                dst.c_str(), l4[0], l4[1]);
  }
  return strf("%s %s → %s %s %u", ipv6 ? "IPv6" : "IPv4", src.c_str(), dst.c_str(),
              ipv6 ? "next-header" : "proto", proto);
}

enum class Walk : uint8_t {
  kNothing,   // not even the headers needed to tell what the frame is
  kOther,     // identified as non-RoCE traffic; Frame::brief says what
  kRocePart,  // UDP port 4791, but the BTH or an extension header is cut or invalid
  kRoce,      // BTH and every extension header present
};

/// Decodes `data` header by header, trusting each header's own fields rather than demanding
/// that all the bytes they announce are present. Fills f.pkt.hdr / reached / info /
/// ext_present / payload_len / addresses / brief.
Walk walk(Bytes data, Frame& f) {
  wire::ParsedPacket& p = f.pkt;
  wire::RoceHeaders& h = p.hdr;
  p.reached = wire::Layer::kNone;
  p.info = nullptr;
  if (wire::EthernetRepr::parse(data, h.eth) != ParseError::kOk) return Walk::kNothing;
  p.reached = wire::Layer::kEthernet;
  p.l3_offset = h.eth.header_len();
  Bytes l3 = data.subspan(p.l3_offset);

  uint8_t proto = 0;
  Bytes l4;
  size_t l4_len = 0;  // per the IP header
  if (h.eth.ethertype == wire::kEtherTypeIpv4) {
    if (l3.size() < wire::Ipv4View::kMinLen || (l3[0] >> 4) != 4) return Walk::kNothing;
    wire::Ipv4View v(l3);
    const size_t ihl = v.header_len();
    if (ihl < wire::Ipv4View::kMinLen || ihl > l3.size()) return Walk::kNothing;
    h.ipv6 = false;
    wire::Ipv4Repr& ip = h.ip4;
    ip.dscp = v.dscp();
    ip.ecn = v.ecn();
    ip.total_len = v.total_len();
    ip.ident = v.ident();
    ip.dont_frag = v.dont_frag();
    ip.ttl = v.ttl();
    ip.protocol = v.protocol();
    ip.checksum = v.checksum();
    ip.src = v.src();
    ip.dst = v.dst();
    ip.options_len = static_cast<uint8_t>(ihl - wire::Ipv4View::kMinLen);
    for (size_t i = 0; i < ip.options_len; ++i) ip.options[i] = l3[wire::Ipv4View::kMinLen + i];
    f.src = wire::ipv4_mapped_gid(ip.src);
    f.dst = wire::ipv4_mapped_gid(ip.dst);
    proto = ip.protocol;
    l4_len = ip.total_len > ihl ? ip.total_len - ihl : 0;
    l4 = l3.subspan(ihl);
    if (v.frag_offset() != 0) {  // a later fragment carries no transport header
      f.has_addrs = true;
      p.reached = wire::Layer::kIp;
      f.brief = strf("IPv4 fragment %s → %s proto %u", addr_string(f.src).c_str(),
                     addr_string(f.dst).c_str(), proto);
      return Walk::kOther;
    }
  } else if (h.eth.ethertype == wire::kEtherTypeIpv6) {
    if (l3.size() < wire::Ipv6View::kLen || (l3[0] >> 4) != 6) return Walk::kNothing;
    wire::Ipv6View v(l3);
    h.ipv6 = true;
    h.ip6.traffic_class = v.traffic_class();
    h.ip6.flow_label = v.flow_label();
    h.ip6.payload_len = v.payload_len();
    h.ip6.next_header = v.next_header();
    h.ip6.hop_limit = v.hop_limit();
    h.ip6.src = v.src();
    h.ip6.dst = v.dst();
    f.src = h.ip6.src;
    f.dst = h.ip6.dst;
    proto = v.next_header();
    l4_len = v.payload_len();
    l4 = l3.subspan(wire::Ipv6View::kLen);
  } else if (h.eth.ethertype == wire::kEtherTypeArp) {
    f.brief = arp_brief(l3);
    return Walk::kOther;
  } else {
    f.brief = ethertype_brief(h.eth.ethertype);
    return Walk::kOther;
  }
  f.has_addrs = true;
  p.reached = wire::Layer::kIp;
  p.l4_offset = p.l3_offset + h.ip_header_len();
  if (l4.size() > l4_len) l4 = l4.first(l4_len);  // drop Ethernet padding

  const std::string src = addr_string(f.src), dst = addr_string(f.dst);
  if (proto != wire::kIpProtoUdp || l4.size() < wire::UdpView::kLen) {
    if (proto == wire::kIpProtoUdp) return Walk::kNothing;  // UDP header cut: could be RoCE
    f.brief = ip_brief(h.ipv6, proto, src, dst, l4, l4_len);
    return Walk::kOther;
  }
  wire::UdpView u(l4);
  h.udp.src_port = u.src_port();
  h.udp.dst_port = u.dst_port();
  h.udp.length = u.length();
  h.udp.checksum = u.checksum();
  if (h.udp.dst_port != wire::kRoceV2Port) {
    f.brief = ip_brief(h.ipv6, proto, src, dst, l4, l4_len);
    return Walk::kOther;
  }
  p.reached = wire::Layer::kUdp;
  p.bth_offset = p.l4_offset + wire::UdpView::kLen;
  const Bytes roce = l4.subspan(wire::UdpView::kLen);

  if (wire::BthRepr::parse(roce, h.bth) != ParseError::kOk) return Walk::kRocePart;
  p.reached = wire::Layer::kBth;
  const wire::OpcodeInfo& info = wire::opcode_info(h.bth.opcode);
  if (h.bth.tver != 0 || !info.valid) return Walk::kRocePart;
  p.info = &info;

  // Each extension header that fits; any missing one makes the frame partial.
  wire::ExtHeaders& x = h.ext;
  f.ext_present = 0;
  for (size_t e = 0; e < wire::kExtCount; ++e) {
    const auto ext = static_cast<Ext>(e);
    if (!info.has(ext)) continue;
    const size_t off = info.offset_of(ext);
    if (off + wire::kExtLen[e] > roce.size()) continue;
    const Bytes b = roce.subspan(off);
    switch (ext) {
      case Ext::kXrceth: wire::XrcethRepr::parse(b, x.xrceth); break;
      case Ext::kFeth: wire::FethRepr::parse(b, x.feth); break;
      case Ext::kDeth: wire::DethRepr::parse(b, x.deth); break;
      case Ext::kReth: wire::RethRepr::parse(b, x.reth); break;
      case Ext::kAtomicEth: wire::AtomicEthRepr::parse(b, x.atomic); break;
      case Ext::kAeth: wire::AethRepr::parse(b, x.aeth); break;
      case Ext::kAtomicAckEth: wire::AtomicAckEthRepr::parse(b, x.atomic_ack); break;
      case Ext::kImmDt: wire::ImmDtRepr::parse(b, x.imm); break;
      case Ext::kIeth: wire::IethRepr::parse(b, x.ieth); break;
      case Ext::kCnpReserved:
        for (size_t i = 0; i < x.cnp_reserved.size(); ++i) x.cnp_reserved[i] = b[i];
        break;
      case Ext::kCount: break;
    }
    f.ext_present = static_cast<uint16_t>(f.ext_present | wire::ext_bit(ext));
  }
  // The payload length the UDP header announces: UDP - BTH/ETHs - pad - ICRC.
  const size_t overhead = wire::UdpView::kLen + info.length + h.bth.pad_count + wire::kIcrcLen;
  f.payload_len = h.udp.length > overhead ? h.udp.length - overhead : 0;
  if (roce.size() > info.length) {
    p.payload = roce.subspan(info.length, std::min(roce.size() - info.length, f.payload_len));
  }
  return f.ext_present == info.ext_mask ? Walk::kRoce : Walk::kRocePart;
}

}  // namespace

Frame decode_frame(uint64_t index, int64_t rel_ns, Bytes data, uint32_t orig_len) {
  Frame f;
  f.index = index;
  f.rel_ns = rel_ns;
  f.caplen = static_cast<uint32_t>(data.size());
  f.orig_len = orig_len;
  f.error = wire::parse_frame(data, f.pkt);
  if (f.error == ParseError::kOk || f.error == ParseError::kBadIcrc) {
    wire::RoceHeaders& h = f.pkt.hdr;
    wire::Ipv4Ident id;
    if (f.error == ParseError::kBadIcrc && !h.ipv6 &&
        h.eth.src == wire::socket_port_mac(wire::ipv4_mapped_gid(h.ip4.src)) &&
        h.ip4.total_len >= wire::kIcrcLen &&
        wire::icrc_solve_ipv4_ident(f.pkt.icrc_calc, f.pkt.icrc_wire,
                                    h.ip4.total_len - wire::kIcrcLen,
                                    {h.ip4.ident, h.ip4.dont_frag}, &id)) {
      h.ip4.ident = id.ident;
      h.ip4.dont_frag = id.dont_frag;
      f.pkt.icrc_calc = f.pkt.icrc_wire;
      f.error = ParseError::kOk;
      f.ident_solved = true;
    }
    f.kind = FrameKind::kRoce;
    f.ext_present = f.pkt.info->ext_mask;
    f.payload_len = f.pkt.payload.size();
    f.has_addrs = true;
    f.src = h.ipv6 ? h.ip6.src : wire::ipv4_mapped_gid(h.ip4.src);
    f.dst = h.ipv6 ? h.ip6.dst : wire::ipv4_mapped_gid(h.ip4.dst);
    return f;
  }
  // Anything else: walk the headers again, leniently, to say what the frame is and to show
  // as much of it as possible.
  const wire::ParsedPacket strict = f.pkt;
  const Walk w = walk(data, f);
  if (wire::is_not_roce(f.error)) {
    f.kind = FrameKind::kOther;
    if (f.brief.empty()) f.brief = "not RoCEv2";
    return f;
  }
  if (f.snapped() && f.error == ParseError::kTruncated) {
    // Cut by the capture's snap length, not by the sender: report what is there.
    if (w == Walk::kRoce) {
      f.kind = FrameKind::kRoce;
      return f;
    }
    if (w == Walk::kOther) {
      f.kind = FrameKind::kOther;
      return f;
    }
  }
  f.kind = FrameKind::kMalformed;
  // Where the strict parse got further (it always has the exact payload), keep its view.
  if (strict.reached > f.pkt.reached) f.pkt = strict;
  return f;
}

void Counts::add(const Frame& f) {
  ++packets;
  if (f.snapped()) ++snapped;
  switch (f.kind) {
    case FrameKind::kRoce:
      ++roce;
      ++opcodes[f.pkt.hdr.bth.opcode];
      if (f.icrc_bad()) ++bad_icrc;
      break;
    case FrameKind::kOther: ++other; break;
    case FrameKind::kMalformed:
      ++malformed;
      ++errors[static_cast<size_t>(f.error)];
      break;
  }
}

namespace {

/// " RETH va=... rkey=... dlen=..." and friends, for every extension header decoded.
std::string ext_compact(const Frame& f) {
  const wire::ExtHeaders& x = f.pkt.hdr.ext;
  const wire::OpcodeInfo* info = f.info();
  std::string s;
  if (f.has_ext(Ext::kXrceth)) s += strf(" XRCETH srq=0x%06x", x.xrceth.srqn);
  if (f.has_ext(Ext::kFeth))
    s += strf(" FETH sel=%u placement=%u", x.feth.selectivity(), x.feth.placement());
  if (f.has_ext(Ext::kDeth))
    s += strf(" DETH qkey=0x%08x src-qp=0x%06x", x.deth.qkey, x.deth.src_qp);
  if (f.has_ext(Ext::kReth))
    s += strf(" RETH va=0x%016" PRIx64 " rkey=0x%08x dlen=%u", x.reth.va, x.reth.rkey,
              x.reth.dma_len);
  if (f.has_ext(Ext::kAtomicEth)) {
    s += strf(" AtomicETH va=0x%016" PRIx64 " rkey=0x%08x", x.atomic.va, x.atomic.rkey);
    if (info != nullptr && info->op == wire::Operation::kFetchAdd)
      s += strf(" add=%" PRIu64, x.atomic.swap_add);
    else
      s += strf(" cmp=%" PRIu64 " swap=%" PRIu64, x.atomic.compare, x.atomic.swap_add);
  }
  // Not `s += " " + aeth_compact(...)`: GCC 12 at -O3 sees an overlapping memcpy in
  // `const char* + std::string&&` (a -Wrestrict false positive that breaks -Werror builds).
  if (f.has_ext(Ext::kAeth)) s.append(" ").append(aeth_compact(x.aeth));
  if (f.has_ext(Ext::kAtomicAckEth)) s += strf(" orig=%" PRIu64, x.atomic_ack.orig);
  if (f.has_ext(Ext::kImmDt)) s += strf(" imm=0x%08x", x.imm.imm);
  if (f.has_ext(Ext::kIeth)) s += strf(" IETH rkey=0x%08x", x.ieth.rkey);
  return s;
}

std::string bth_compact(const Frame& f, bool pad) {
  const wire::BthRepr& b = f.pkt.hdr.bth;
  const int width = pad ? 28 : 0;
  std::string s;
  if (f.info() != nullptr) {
    s = strf("%-*.*s", width, static_cast<int>(f.info()->name.size()), f.info()->name.data());
  } else {
    s = strf("%-*s", width, strf("opcode 0x%02x", b.opcode).c_str());
  }
  s += strf(" qp=0x%06x psn=%u", b.dest_qp, b.psn);
  if (b.ack_req) s += " ackreq";
  if (b.se) s += " se";
  if (b.fecn) s += " fecn";
  if (b.becn) s += " becn";
  return s;
}

std::string prefix(const Frame& f) {
  return strf("%5" PRIu64 " %9s  ", f.index, seconds_string(f.rel_ns).c_str());
}

std::string addrs(const Frame& f) { return addr_string(f.src) + " → " + addr_string(f.dst); }

std::string snap_note(const Frame& f) {
  return strf("snapped: captured %u of %u bytes", f.caplen, f.orig_len);
}

}  // namespace

std::string format_line(const Frame& f) { return prefix(f) + format_summary(f, true); }

std::string format_summary(const Frame& f, bool align) {
  std::string s;
  if (f.kind == FrameKind::kOther) {
    s += f.brief;
    if (f.snapped()) s += " (" + snap_note(f) + ")";
    return s;
  }
  if (f.has_addrs) s += addrs(f) + "  ";
  if (f.kind == FrameKind::kRoce) {
    s += bth_compact(f, align);
    s += ext_compact(f);
    if (f.pkt.hdr.bth.pad_count != 0) s += strf(" pad=%u", f.pkt.hdr.bth.pad_count);
    s += strf(" payload=%zu", f.payload_len);
    if (const std::string cm = qp1_compact(f); !cm.empty()) s.append(" ").append(cm);
    if (f.error == ParseError::kOk) {
      s += f.ident_solved ? strf("  ICRC ok (IPv4 ID 0x%04x solved for)", f.pkt.hdr.ip4.ident)
                          : std::string("  ICRC ok");
    } else if (f.error == ParseError::kBadIcrc) {
      s += strf("  ICRC BAD (wire 0x%08x calc 0x%08x)", f.pkt.icrc_wire, f.pkt.icrc_calc);
    } else {
      s += "  ICRC not captured (truncated, " + snap_note(f) + ")";
    }
    return s;
  }
  // Malformed: the named error, then whatever was decoded.
  s += strf("MALFORMED %.*s (%.*s)", static_cast<int>(wire::error_name(f.error).size()),
            wire::error_name(f.error).data(), static_cast<int>(wire::error_text(f.error).size()),
            wire::error_text(f.error).data());
  if (f.snapped()) s += " [" + snap_note(f) + "]";
  const wire::RoceHeaders& h = f.pkt.hdr;
  std::string parsed;
  if (f.pkt.reached >= wire::Layer::kEthernet) parsed += "Ethernet";
  if (f.pkt.reached >= wire::Layer::kIp) parsed += h.ipv6 ? ", IPv6" : ", IPv4";
  if (f.pkt.reached >= wire::Layer::kUdp)
    parsed += strf(", UDP %u→%u", h.udp.src_port, h.udp.dst_port);
  if (f.pkt.reached >= wire::Layer::kBth)
    parsed += ", BTH " + bth_compact(f, false) + ext_compact(f);
  if (!f.brief.empty()) parsed += " — " + f.brief;
  if (!parsed.empty()) s += "; parsed: " + parsed;
  return s;
}

}  // namespace uroce::dissect

// --explain: the capture as a short lesson.
//
// Each RoCE packet is shown field by field, one line per field: name, value, meaning. The
// first time a field (or a value with its own meaning) appears, the meaning is spelled out;
// later packets get a short reminder, so the lesson reads top to bottom without repeating
// itself. The tracker's notes follow each packet, and a per-QP summary closes the capture.
#include <cinttypes>
#include <ostream>
#include <set>

#include "dissect/printer.h"

namespace uroce::dissect {

namespace {

using wire::Ext;
using wire::Operation;
using wire::Position;
using wire::Transport;

std::string sv(std::string_view v) { return std::string(v); }

std::string_view transport_words(Transport t) {
  switch (t) {
    case Transport::kRc: return "reliable connection (RC)";
    case Transport::kUc: return "unreliable connection (UC)";
    case Transport::kUd: return "unreliable datagram (UD)";
    case Transport::kCnp: return "RoCEv2 congestion control";
    case Transport::kXrc: return "extended reliable connection (XRC)";
  }
  return "?";
}

std::string_view position_words(Position p) {
  switch (p) {
    case Position::kOnly: return "the only packet of its message";
    case Position::kFirst: return "the first packet of a multi-packet message";
    case Position::kMiddle: return "a middle packet of a message";
    case Position::kLast: return "the last packet of a message";
  }
  return "?";
}

std::string_view operation_words(Operation o) {
  switch (o) {
    case Operation::kSend:
      return "a SEND: the data lands in the next receive buffer the receiver posted";
    case Operation::kWrite:
      return "an RDMA WRITE: the data goes straight to the responder's memory at the RETH "
             "address; no receive buffer is used";
    case Operation::kReadRequest:
      return "an RDMA READ request: asks the responder to send back bytes from its memory";
    case Operation::kReadResponse:
      return "an RDMA READ response: data read from the responder's memory, travelling back to "
             "the requester";
    case Operation::kAck: return "an acknowledgement: the AETH says ACK, NAK or RNR NAK";
    case Operation::kAtomicAck: return "the answer to an atomic: the value the target held before";
    case Operation::kCompareSwap:
      return "an atomic COMPARE & SWAP on 8 bytes of the responder's memory";
    case Operation::kFetchAdd: return "an atomic FETCH & ADD on 8 bytes of the responder's memory";
    case Operation::kFlush:
      return "a FLUSH: make earlier writes visible or persistent at the responder";
    case Operation::kAtomicWrite:
      return "an ATOMIC WRITE: 8 bytes written to the responder's memory as one unit";
    case Operation::kCnp:
      return "a congestion notification packet (CNP): slow down, your packets were ECN-marked";
  }
  return "?";
}

std::string ecn_words(uint8_t ecn) {
  switch (ecn & 3) {
    case 0: return "not ECN-capable";
    case 3:
      return "congestion experienced (CE): a switch marked it; the receiver answers with a CNP";
    default: return "ECN-capable: a congested switch may mark it instead of dropping it";
  }
}

std::string_view cm_message_words(uint16_t attr) {
  switch (attr) {
    case wire::cm_attr::kReq:
      return "connection request: the active side offers its QP, first PSN and path; the "
             "passive side answers REP (accept), REJ (refuse) or MRA (wait)";
    case wire::cm_attr::kMra:
      return "message receipt acknowledgement: the message arrived, the answer will take "
             "longer; the other side waits instead of resending";
    case wire::cm_attr::kRej: return "connection rejected; the reason says why";
    case wire::cm_attr::kRep:
      return "connection reply: the passive side accepts and gives its own QP and first PSN; "
             "the active side answers RTU";
    case wire::cm_attr::kRtu:
      return "ready to use: the active side's QP is ready, the connection is established";
    case wire::cm_attr::kDreq:
      return "disconnect request: the sender tears the connection down; the peer answers DREP";
    case wire::cm_attr::kDrep: return "disconnect reply: the connection is gone";
    case wire::cm_attr::kSidrReq:
      return "service ID resolution request: which UD QP and Q_Key serve this service ID?";
    case wire::cm_attr::kSidrRep:
      return "service ID resolution reply: the UD QP and Q_Key to send datagrams to";
    default: return "a CM message";
  }
}

std::string_view rej_reason_words(wire::CmRejReason r) {
  switch (r) {
    case wire::CmRejReason::kInvalidServiceId:
      return "nobody listens on that service ID (rdma_cm: no listener on the port)";
    case wire::CmRejReason::kConsumerReject:
      return "the application refused the connection (rdma_reject)";
    case wire::CmRejReason::kNoResources: return "the peer ran out of resources";
    case wire::CmRejReason::kTimeout: return "the peer gave up waiting for an answer";
    case wire::CmRejReason::kStaleConn:
      return "the peer still has a connection with this QP or comm ID";
    case wire::CmRejReason::kInsufficientRespResources:
      return "the peer cannot serve as many READs / atomics at once as asked";
    case wire::CmRejReason::kInvalidClassVersion: return "the peer speaks another CM version";
    default: return "IBA table 112";
  }
}

/// "10.0.0.1:39030" / "[fe80::1]:39030".
std::string endpoint(const wire::Gid& g, uint16_t port) {
  const std::string a = addr_string(g);
  return wire::is_ipv4_mapped(g) ? strf("%s:%u", a.c_str(), port)
                                 : strf("[%s]:%u", a.c_str(), port);
}

std::string cm_timeout_string(uint8_t code) {
  return ms_string(static_cast<int64_t>(wire::cm_timeout_ns(code)));
}

class ExplainPrinter final : public Printer {
 public:
  explicit ExplainPrinter(std::ostream& out) : out_(out) {}

  void begin(const CaptureInfo& info) override {
    mtu_ = info.mtu;
    out_ << "uroce-dissect --explain " << info.path << "\n\n"
         << "RoCEv2 in brief\n"
         << "  RoCEv2 carries the InfiniBand transport over Ethernet, IPv4/IPv6 and UDP "
            "(destination port 4791), so RDMA traffic is routable like any IP traffic.\n"
         << "  Each packet starts with a Base Transport Header (BTH): an opcode, the destination "
            "queue pair (QP) and a 24-bit packet sequence number (PSN).\n"
         << "  The opcode decides which extension headers follow (RETH: remote memory, AETH: "
            "ACK/NAK, DETH: datagram, ImmDt, AtomicETH, ...), then the payload and a 4-byte "
            "invariant CRC (ICRC).\n"
         << "  On a reliable connection (RC) the responder acknowledges PSNs in order; a NAK or "
            "a timeout makes the requester resend from the missing PSN (go-back-N).\n\n"
         << "Path MTU: " << describe(info.mtu) << "\n"
         << "Non-RoCE frames get one line. For RoCE packets every field is shown with its "
            "meaning, in full the first time, briefly after that.\n\n";
  }

  void packet(const Frame& f, const std::vector<Note>& notes) override {
    const std::string head =
        strf("#%" PRIu64 "  %s s  ", f.index, seconds_string(f.rel_ns).c_str());
    if (f.kind == FrameKind::kOther) {
      out_ << head << f.brief << "  (not RoCE: skipped)\n";
      if (!tcp_hint_given_ && f.brief.starts_with("TCP ") &&
          f.brief.find(":18515 ") != std::string::npos) {
        tcp_hint_given_ = true;
        out_ << "    perftest and the ibv_*_pingpong examples use this TCP connection (port "
                "18515) to swap QPN, PSN, GID and R_Key before the RoCE traffic starts\n";
      }
      return;
    }
    out_ << '\n' << head << format_summary(f, false) << strf("  (%u bytes)\n", f.orig_len);
    if (f.kind == FrameKind::kMalformed) {
      out_ << "    a receiver drops this frame; the headers that could be decoded:\n";
    }
    explain_headers(f);
    if (!notes.empty()) {
      out_ << "  tracking:\n";
      for (const Note& n : notes) out_ << "    - " << n.text << '\n';
    }
  }

  void end(const CaptureEnd& e) override {
    out_ << "\nPer-QP summary (path MTU " << describe(e.tracker.mtu()) << ")\n";
    if (e.tracker.streams().empty()) out_ << "  no RoCE request streams in this capture\n";
    for (const RequestStream& s : e.tracker.streams()) stream_summary(s);
    if (e.tracker.unmatched() != 0)
      out_ << strf("  %" PRIu64 " response%s matched no request in the capture\n",
                   e.tracker.unmatched(), e.tracker.unmatched() == 1 ? "" : "s");
    out_ << '\n' << summary_line(e.counts);
    if (!e.complete) out_ << " (capture incomplete: " << e.problem << ")";
    out_ << '\n';
  }

 private:
  /// One field line. `key` identifies the meaning: the long text is shown the first time a
  /// key appears, the short one afterwards (or the long one again when there is no short).
  void line(std::string_view name, const std::string& value, const std::string& key,
            const std::string& long_text, const std::string& short_text = {}) {
    const bool first = seen_.insert(key).second;
    const std::string& text = (first || short_text.empty()) ? long_text : short_text;
    out_ << strf("    %-19.*s %-18s — ", static_cast<int>(name.size()), name.data(), value.c_str())
         << text << '\n';
  }

  void explain_headers(const Frame& f) {
    const wire::ParsedPacket& p = f.pkt;
    if (p.reached >= wire::Layer::kEthernet) ethernet(f);
    if (p.reached >= wire::Layer::kIp) {
      if (p.hdr.ipv6) {
        ipv6(f);
      } else {
        ipv4(f);
      }
    }
    if (p.reached >= wire::Layer::kUdp) udp(f);
    if (p.reached >= wire::Layer::kBth) bth(f);
    if (p.reached >= wire::Layer::kBth && f.info() != nullptr) {
      extensions(f);
      if (f.kind == FrameKind::kRoce) {
        cm(f);
        payload_and_icrc(f);
      }
    }
  }

  void ethernet(const Frame& f) {
    const wire::EthernetRepr& e = f.pkt.hdr.eth;
    // uroce's UDP-socket port shows the engine frames it made up around each datagram.
    const bool made_up = f.has_addrs && e.src == wire::socket_port_mac(f.src) &&
                         e.dst == wire::socket_port_mac(f.dst);
    if (made_up) {
      line("Eth.Dst", wire::to_string(e.dst), "eth.dst.socket",
           "destination MAC address, made up from the IP address by uroce's udp port: the "
           "packet went through a UDP socket, which shows no Ethernet header",
           "destination MAC (made up by the udp port)");
      line("Eth.Src", wire::to_string(e.src), "eth.src.socket",
           "source MAC address, made up from the IP address the same way",
           "source MAC (made up)");
    } else {
      line("Eth.Dst", wire::to_string(e.dst), "eth.dst",
           "destination MAC address: the next hop on this link", "destination MAC");
      line("Eth.Src", wire::to_string(e.src), "eth.src", "source MAC address", "source MAC");
    }
    if (e.has_vlan) {
      line("Eth.VLAN", strf("PCP %u DEI %u VID %u", e.pcp, e.dei ? 1 : 0, e.vid), "eth.vlan",
           "802.1Q tag: PCP is the priority (RoCE usually gets a lossless, PFC-protected one), "
           "VID the VLAN",
           "802.1Q priority and VLAN");
    }
    std::string what = "IPv4 follows";
    if (e.ethertype == wire::kEtherTypeIpv6) what = "IPv6 follows";
    line("Eth.Type", strf("0x%04x", e.ethertype), strf("eth.type.%u", e.ethertype),
         what + " (RoCEv2 rides on IP/UDP; RoCEv1 used EtherType 0x8915 and could not be routed)",
         what);
  }

  void ipv4(const Frame& f) {
    const wire::Ipv4Repr& ip = f.pkt.hdr.ip4;
    line("IPv4.Version/IHL", strf("4 / %zu", ip.header_len() / 4), "ip4.ihl",
         strf("IP version 4, header length %zu × 4 = %zu bytes%s", ip.header_len() / 4,
              ip.header_len(), ip.options_len == 0 ? " (no options)" : ""),
         strf("%zu-byte header", ip.header_len()));
    line("IPv4.DSCP", std::to_string(ip.dscp), "ip4.dscp",
         "differentiated services: the traffic class switches queue it in (RoCE often has its "
         "own lossless class)",
         "traffic class");
    line("IPv4.ECN", std::to_string(ip.ecn), strf("ip4.ecn.%u", ip.ecn & 3),
         "explicit congestion notification: " + ecn_words(ip.ecn), ecn_words(ip.ecn));
    line("IPv4.TotalLength", std::to_string(ip.total_len), "ip4.len",
         "bytes in the IP packet: IP header + UDP + RoCE headers + payload + pad + ICRC",
         "IP packet length");
    if (f.ident_solved) {
      line("IPv4.ID", strf("0x%04x", ip.ident), "ip4.id.solved",
           "identification: the UDP socket this frame came through (uroce's udp port) does not "
           "show it, but the ICRC covers it: solved for from the ICRC, as the receiver does",
           "identification (solved for from the ICRC)");
    } else {
      line("IPv4.ID", strf("0x%04x", ip.ident), "ip4.id",
           "identification: only used to reassemble fragments, and RoCEv2 never fragments",
           "identification (unused)");
    }
    line("IPv4.Flags", ip.dont_frag ? "DF" : "none", strf("ip4.df.%d", ip.dont_frag ? 1 : 0),
         ip.dont_frag ? "don't fragment: RoCEv2 packets are never fragmented; the path MTU keeps "
                        "them small enough"
                      : "DF clear: unusual, RoCEv2 senders set don't-fragment",
         ip.dont_frag ? "don't fragment" : "");
    line("IPv4.TTL", std::to_string(ip.ttl), "ip4.ttl",
         "time to live: every router decrements it, which is why the ICRC leaves it out",
         "time to live");
    line("IPv4.Protocol", std::to_string(ip.protocol), strf("ip4.proto.%u", ip.protocol),
         ip.protocol == wire::kIpProtoUdp ? "UDP follows" : "not UDP", "");
    line("IPv4.Checksum", strf("0x%04x", ip.checksum), "ip4.csum",
         f.snapped() ? "header checksum (not checked: the frame was snapped)"
                     : "header checksum, verified; routers rewrite it, so the ICRC leaves it out",
         f.snapped() ? "" : "header checksum, verified");
    line("IPv4.Src", wire::to_string(ip.src), "ip4.src",
         "source address; as a RoCE GID: ::ffff:" + wire::to_string(ip.src), "source");
    line("IPv4.Dst", wire::to_string(ip.dst), "ip4.dst",
         "destination address (GID ::ffff:" + wire::to_string(ip.dst) + ")", "destination");
    if (ip.options_len != 0) {
      line("IPv4.Options", strf("%u bytes", ip.options_len), "ip4.opt",
           "IP options: unusual for RoCEv2; covered by the ICRC", "IP options");
    }
  }

  void ipv6(const Frame& f) {
    const wire::Ipv6Repr& ip = f.pkt.hdr.ip6;
    line("IPv6.TrafficClass", strf("0x%02x", ip.traffic_class), "ip6.tc",
         strf("DSCP %u, ECN %u (%s); left out of the ICRC", ip.traffic_class >> 2,
              ip.traffic_class & 3, ecn_words(ip.traffic_class).c_str()),
         strf("DSCP %u, ECN %u", ip.traffic_class >> 2, ip.traffic_class & 3));
    line("IPv6.FlowLabel", strf("0x%05x", ip.flow_label), "ip6.flow",
         "flow label: may carry flow entropy like the UDP source port; left out of the ICRC",
         "flow label");
    line("IPv6.PayloadLength", std::to_string(ip.payload_len), "ip6.len",
         "bytes after the 40-byte IPv6 header: UDP + RoCE headers + payload + pad + ICRC",
         "payload length");
    line("IPv6.NextHeader", std::to_string(ip.next_header), strf("ip6.nh.%u", ip.next_header),
         ip.next_header == wire::kIpProtoUdp ? "UDP follows" : "not UDP", "");
    line("IPv6.HopLimit", std::to_string(ip.hop_limit), "ip6.hop",
         "IPv6's TTL: routers decrement it, so the ICRC leaves it out", "hop limit");
    line("IPv6.Src", addr_string(ip.src), "ip6.src", "source address = the sender's GID",
         "source GID");
    line("IPv6.Dst", addr_string(ip.dst), "ip6.dst", "destination address = the receiver's GID",
         "destination GID");
  }

  void udp(const Frame& f) {
    const wire::UdpRepr& u = f.pkt.hdr.udp;
    line("UDP.SrcPort", std::to_string(u.src_port), "udp.sport",
         "flow entropy: one value per QP, so ECMP switches keep a QP's packets on one path and "
         "in order",
         "flow entropy (one per QP)");
    line("UDP.DstPort", std::to_string(u.dst_port), "udp.dport",
         "4791 is the IANA port for RoCEv2: this is what marks the packet as RoCE", "RoCEv2");
    line("UDP.Length", std::to_string(u.length), "udp.len",
         "UDP header (8) + BTH and extension headers + payload + pad + ICRC (4)", "UDP length");
    line("UDP.Checksum", strf("0x%04x", u.checksum), strf("udp.csum.%d", u.checksum == 0 ? 0 : 1),
         u.checksum == 0 ? "0 = not used; the ICRC protects the packet end to end instead"
                         : "a UDP checksum (optional for RoCEv2; the ICRC is what counts)",
         u.checksum == 0 ? "unused (0)" : "");
  }

  void bth(const Frame& f) {
    const wire::BthRepr& b = f.pkt.hdr.bth;
    const wire::OpcodeInfo* info = f.info();
    if (info != nullptr) {
      // ACKs, atomic ACKs and CNPs are single packets by nature: no message position to tell.
      const bool positioned = info->op != Operation::kAck && info->op != Operation::kAtomicAck &&
                              info->op != Operation::kCnp;
      const std::string name = sv(info->name);
      std::string full =
          strf("%s: %s, %s", name.c_str(), sv(transport_words(info->transport)).c_str(),
               sv(operation_words(info->op)).c_str());
      std::string brief = name;
      if (positioned) {
        full += "; " + sv(position_words(info->pos));
        brief += " (" + sv(position_words(info->pos)) + ")";
      }
      line("BTH.OpCode", strf("0x%02x", b.opcode), strf("bth.op.%u", b.opcode), full, brief);
    } else {
      line("BTH.OpCode", strf("0x%02x", b.opcode), "bth.op.bad",
           "not a valid RC, UC, UD, XRC or CNP opcode", "");
    }
    const bool response = info != nullptr && info->is_response();
    const bool connected = info != nullptr &&
                           (info->transport == Transport::kRc || info->transport == Transport::kXrc);
    line("BTH.SE", b.se ? "1" : "0", strf("bth.se.%d", b.se ? 1 : 0),
         b.se ? "solicited event: the receiver should wake a thread waiting for completions"
              : "solicited event: not requested",
         b.se ? "solicited event requested" : "no solicited event");
    line("BTH.M", b.mig ? "1" : "0", "bth.m",
         "migration state for automatic path migration; not used by RoCE", "migration state");
    line("BTH.PadCnt", std::to_string(b.pad_count), strf("bth.pad.%d", b.pad_count != 0 ? 1 : 0),
         b.pad_count == 0
             ? std::string("no pad: the payload is a multiple of 4 bytes")
             : strf("%u pad byte%s follow%s the payload so it ends on a 4-byte boundary",
                    b.pad_count, b.pad_count == 1 ? "" : "s", b.pad_count == 1 ? "s" : ""),
         b.pad_count == 0 ? std::string("no pad") : strf("%u pad bytes", b.pad_count));
    line("BTH.TVer", std::to_string(b.tver), "bth.tver", "transport header version, always 0",
         "version");
    line("BTH.P_Key", strf("0x%04x", b.pkey), "bth.pkey",
         b.pkey == 0xFFFF ? "partition key: both QPs must be in this partition; 0xffff is the "
                            "default partition, full member"
                          : "partition key: both QPs must be in this partition",
         "partition key");
    line("BTH.FECN/BECN", strf("%d / %d", b.fecn ? 1 : 0, b.becn ? 1 : 0), "bth.ecn",
         "InfiniBand congestion bits; RoCEv2 uses IP ECN and CNPs instead, and the ICRC leaves "
         "this byte out",
         "IB congestion bits");
    std::string qp_key = "bth.qp.req",
                qp_text = "destination queue pair: the QP at the receiver this packet is for";
    if (response) {
      qp_key = "bth.qp.resp";
      qp_text = "destination QP: the requester's QP this response returns to";
    } else if (info != nullptr && info->op == Operation::kCnp) {
      qp_key = "bth.qp.cnp";
      qp_text = "the QP whose packets were ECN-marked";
    } else if (b.dest_qp == 1) {
      qp_key = "bth.qp.1";
      qp_text = "QP1, the general services QP: RDMA CM connection setup messages (MADs)";
    }
    line("BTH.DestQP", strf("0x%06x", b.dest_qp), qp_key, qp_text, "destination QP");
    if (!connected) {
      line("BTH.AckReq", b.ack_req ? "1" : "0", "bth.ackreq.na",
           "acknowledge request: meaningless here, only RC acknowledges", "");
    } else if (response) {
      line("BTH.AckReq", b.ack_req ? "1" : "0", "bth.ackreq.resp",
           "acknowledge request: not used on responses", "unused on responses");
    } else {
      line("BTH.AckReq", b.ack_req ? "1" : "0", strf("bth.ackreq.%d", b.ack_req ? 1 : 0),
           b.ack_req ? "the requester asks the responder to acknowledge this packet"
                     : "no ACK asked for this packet; a later ACK will cover it",
           b.ack_req ? "ACK requested" : "no ACK requested");
    }
    std::string psn_key = "bth.psn.req";
    std::string psn_text =
        "packet sequence number: +1 per request packet, 24 bits, wraps after 16777215";
    if (info != nullptr && info->op == Operation::kReadResponse) {
      psn_key = "bth.psn.read";
      psn_text = "READ responses use the PSNs their READ request reserved, one per packet";
    } else if (response) {
      psn_key = "bth.psn.ack";
      psn_text = "the PSN of the request packet this answers";
    } else if (info != nullptr && info->op == Operation::kCnp) {
      psn_key = "bth.psn.cnp";
      psn_text = "not used by CNPs";
    }
    line("BTH.PSN", std::to_string(b.psn), psn_key, psn_text, "sequence number");
  }

  void extensions(const Frame& f) {
    const wire::ExtHeaders& x = f.pkt.hdr.ext;
    const wire::OpcodeInfo& info = *f.info();
    if (f.has_ext(Ext::kXrceth)) {
      line("XRCETH.SRQ", strf("0x%06x", x.xrceth.srqn), "xrceth.srqn",
           "XRC: the shared receive queue of the target QP's XRC domain this message goes to; "
           "its PD checks the keys, its CQ gets the receive completion",
           "XRC SRQ number");
    }
    if (f.has_ext(Ext::kFeth)) {
      line("FETH.Selectivity", std::to_string(x.feth.selectivity()), "feth.sel",
           x.feth.selectivity() == 0 ? "flush the address range in the RETH"
                                     : "flush the whole memory region",
           "");
      line("FETH.Placement", std::to_string(x.feth.placement()), "feth.plt",
           "placement type: bit 0 global visibility, bit 1 persistence", "placement type");
    }
    if (f.has_ext(Ext::kDeth)) {
      if (x.deth.qkey == wire::kGsiQkey && f.pkt.hdr.bth.dest_qp == wire::kGsiQpn) {
        line("DETH.Q_Key", strf("0x%08x", x.deth.qkey), "deth.qkey.gsi",
             "queue key: 0x80010000 is the well-known Q_Key of QP1, the general services QP",
             "QP1's Q_Key");
      } else {
        line("DETH.Q_Key", strf("0x%08x", x.deth.qkey), "deth.qkey",
             "queue key: the receiving UD QP accepts only datagrams with its Q_Key", "queue key");
      }
      line("DETH.SrcQP", strf("0x%06x", x.deth.src_qp), "deth.srcqp",
           "the sending QP: UD has no connection, so every datagram names its source", "source QP");
    }
    if (f.has_ext(Ext::kReth)) {
      const wire::RethRepr& r = x.reth;
      const bool read = info.op == Operation::kReadRequest;
      line("RETH.VA", strf("0x%016" PRIx64, r.va), read ? "reth.va.r" : "reth.va.w",
           read ? "virtual address in the responder's memory to read from"
                : "virtual address in the responder's memory where the data goes",
           "remote virtual address");
      line("RETH.R_Key", strf("0x%08x", r.rkey), "reth.rkey",
           "remote key: proves the requester may access that memory region", "remote key");
      const uint32_t mtu = mtu_.bytes != 0 ? mtu_.bytes : 1024;
      const uint32_t pkts = r.dma_len == 0 ? 1 : (r.dma_len + mtu - 1) / mtu;
      line("RETH.DMALen", std::to_string(r.dma_len), read ? "reth.len.r" : "reth.len.w",
           read ? strf("bytes to read: the response takes ceil(%u / %u) = %u packet%s", r.dma_len,
                       mtu, pkts, pkts == 1 ? "" : "s")
                : strf("length of the whole message: %u packet%s at MTU %u", pkts,
                       pkts == 1 ? "" : "s", mtu),
           read ? strf("bytes to read (%u packet%s)", pkts, pkts == 1 ? "" : "s")
                : strf("message length (%u packet%s)", pkts, pkts == 1 ? "" : "s"));
    }
    if (f.has_ext(Ext::kAtomicEth)) {
      const wire::AtomicEthRepr& a = x.atomic;
      const bool add = info.op == Operation::kFetchAdd;
      line("AtomicETH.VA", strf("0x%016" PRIx64, a.va), "atomic.va",
           "address of the 8-byte target in the responder's memory (8-byte aligned)",
           "target address");
      line("AtomicETH.R_Key", strf("0x%08x", a.rkey), "atomic.rkey",
           "remote key for the target's memory region", "remote key");
      line("AtomicETH.SwapAdd", std::to_string(a.swap_add), add ? "atomic.add" : "atomic.swap",
           add ? "the value to add" : "the value written if the comparison succeeds",
           add ? "add" : "swap value");
      line("AtomicETH.Compare", std::to_string(a.compare), add ? "atomic.cmp.add" : "atomic.cmp",
           add ? "unused by FETCH & ADD" : "the target must hold this value for the swap to happen",
           add ? "unused" : "compare value");
    }
    if (f.has_ext(Ext::kAeth)) aeth(f);
    if (f.has_ext(Ext::kAtomicAckEth)) {
      line("AtomicAckETH.Orig", std::to_string(x.atomic_ack.orig), "atomicack.orig",
           "the target's value before the atomic ran, returned to the requester", "original value");
    }
    if (f.has_ext(Ext::kImmDt)) {
      line("ImmDt", strf("0x%08x", x.imm.imm), "immdt",
           "immediate data: 4 bytes handed to the receiver in its completion, not written to "
           "memory",
           "immediate data");
    }
    if (f.has_ext(Ext::kIeth)) {
      line("IETH.R_Key", strf("0x%08x", x.ieth.rkey), "ieth",
           "the receiver invalidates this R_Key (send with invalidate)", "R_Key to invalidate");
    }
    if (f.has_ext(Ext::kCnpReserved)) {
      line("CNP.Reserved", "16 bytes", "cnp.resv", "reserved, zero", "");
    }
  }

  void aeth(const Frame& f) {
    const wire::AethRepr& a = f.pkt.hdr.ext.aeth;
    const uint32_t psn = f.pkt.hdr.bth.psn;
    std::string text;
    switch (a.kind()) {
      case wire::AckKind::kAck: {
        const int credits = credits_from_code(a.credit_code());
        text = credits < 0
                   ? strf(
                         "ACK, credit code 31 (no credit count): PSN %u and everything before it "
                         "arrived",
                         psn)
                   : strf(
                         "ACK, credit code %u = %d receive buffers free: PSN %u and everything "
                         "before it arrived",
                         a.credit_code(), credits, psn);
        break;
      }
      case wire::AckKind::kNak:
        if (a.value() == 0) {
          text = strf(
              "NAK, code 0 (PSN sequence error): the responder expected PSN %u and got a "
              "later one",
              psn);
        } else if (a.value() <= 4) {
          text = strf("NAK, code %u (%s): a fatal error for this QP", a.value(),
                      sv(wire::to_string(a.nak_code())).c_str());
        } else {
          text = strf("NAK, code %u: reserved", a.value());
        }
        break;
      case wire::AckKind::kRnrNak:
        text = strf(
            "RNR NAK, timer code %u (%s): receiver not ready (no receive buffer); resend "
            "PSN %u after at least that long",
            a.rnr_timer_code(),
            ms_string(static_cast<int64_t>(wire::rnr_timer_ns(a.rnr_timer_code()))).c_str(), psn);
        break;
      case wire::AckKind::kReserved: text = "reserved syndrome (bits 6..5 = 10)"; break;
    }
    // Syndrome lines differ per packet: always in full.
    out_ << strf("    %-19s %-18s — ", "AETH.Syndrome", strf("0x%02x", a.syndrome).c_str()) << text
         << '\n';
    line("AETH.MSN", std::to_string(a.msn), "aeth.msn",
         "message sequence number: how many request messages the responder has completed",
         "messages completed");
  }

  // ---- Communication Manager MADs (UD datagrams to QP1) ----

  void cm(const Frame& f) {
    if (!is_qp1_datagram(f)) return;
    const auto msg = cm_message(f);
    if (!msg) {
      const std::string note = qp1_compact(f);
      if (!note.empty())
        line("MAD", note, "mad.other", "a management datagram this tool does not decode", "");
      return;
    }
    const wire::CmMessage& m = *msg;
    const uint16_t attr = m.attr_id();
    line("MAD.Class", strf("0x%02x v%u", m.hdr.mgmt_class, m.hdr.class_version),
         strf("mad.class.%u", m.hdr.class_version),
         m.hdr.class_version == wire::kCmClassVersion
             ? "management datagram (MAD) of the Communication Manager (class 0x07, version 2): "
               "rdma_cm sets connections up with these 256-byte datagrams to QP1"
             : "Communication Manager MAD of an unknown class version: a CM answers REJ reason 31",
         "Communication Manager MAD");
    line("MAD.Method", strf("0x%02x", m.hdr.method), strf("mad.method.%u", m.hdr.method),
         m.hdr.method == wire::kMadMethodSend
             ? "Send: every CM message is a one-way Send; the sender resends it itself until the "
               "answer (or an MRA) comes"
             : "not Send, the method CM messages use",
         m.hdr.method == wire::kMadMethodSend ? "Send" : "");
    line("MAD.TID", strf("0x%016" PRIx64, m.hdr.tid), "mad.tid",
         "transaction ID: the sender's number for this exchange; a resend keeps it",
         "transaction ID");
    const std::string name = sv(m.name());
    line("MAD.AttributeID", strf("0x%04x %s", attr, name.c_str()), strf("cm.msg.%u", attr),
         "CM " + name + ": " + sv(cm_message_words(attr)), "CM " + name);
    if (const auto* r = m.get<wire::CmReq>()) {
      comm_ids(r->local_comm_id, 0, false);
      service_id(r->service_id);
      line("CM.LocalQPN", strf("0x%06x", r->local_qpn), "cm.req.qpn",
           "the QP the sender will use for this connection: the peer's QP sends to it",
           "the sender's QP");
      line("CM.StartingPSN", std::to_string(r->starting_psn), "cm.req.psn",
           "the first PSN the sender's QP expects to receive: the passive side's QP sends "
           "from it (the REP's PSN is the other direction's)",
           "the PSN the sender receives first");
      line("CM.RespResources", std::to_string(r->responder_resources), "cm.rr",
           "responder resources: RDMA READs and atomics from the peer that the sender's QP "
           "serves at once",
           "READs / atomics it serves at once");
      line("CM.InitiatorDepth", std::to_string(r->initiator_depth), "cm.id",
           "initiator depth: RDMA READs and atomics the sender's QP keeps outstanding at most",
           "READs / atomics it issues at once");
      static constexpr const char* kTypes[] = {"RC", "UC", "RD", "reserved"};
      line("CM.TransportType", kTypes[r->transport_service_type & 3],
           strf("cm.type.%u", r->transport_service_type),
           strf("transport service type: %s", r->transport_service_type == 0
                                                  ? "reliable connection"
                                                  : "not RC (rdma_cm connects RC QPs)"),
           "");
      line("CM.RetryCount", std::to_string(r->retry_count), "cm.retry",
           "how often the QP resends after a transport timeout before it gives up",
           "transport retries");
      line("CM.RnrRetryCount", std::to_string(r->rnr_retry_count), "cm.rnr",
           "how often the QP resends after an RNR NAK (7 = without limit)", "RNR retries");
      line("CM.P_Key", strf("0x%04x", r->pkey), "cm.pkey",
           "the partition the connection's QPs will be in", "partition key");
      const uint32_t mtu = wire::ib_mtu_bytes(r->path_mtu);
      line("CM.PathMTU", strf("%u (%u bytes)", r->path_mtu, mtu), "cm.mtu",
           "path MTU: the largest payload of one packet on the connection", "path MTU");
      line("CM.CMTimeouts",
           strf("%u / %u", r->local_cm_response_timeout, r->remote_cm_response_timeout),
           "cm.req.timeouts",
           strf("CM response timeouts, the sender's / the one it expects of the peer: how long "
                "answering a CM message may take, 4.096 us × 2^n = %s / %s",
                cm_timeout_string(r->local_cm_response_timeout).c_str(),
                cm_timeout_string(r->remote_cm_response_timeout).c_str()),
           strf("%s / %s", cm_timeout_string(r->local_cm_response_timeout).c_str(),
                cm_timeout_string(r->remote_cm_response_timeout).c_str()));
      line("CM.MaxCMRetries", std::to_string(r->max_cm_retries), "cm.maxretries",
           "how often the CM resends this REQ when no answer comes", "REQ resends");
      if (r->srq)
        line("CM.SRQ", "1", "cm.srq", "the sender's QP takes receive buffers from a shared "
             "receive queue", "shared receive queue");
      path("Pri", "primary", r->primary);
      if (r->alternate != wire::CmPath{}) path("Alt", "alternate", r->alternate);
      cma(m, r->service_id);
      private_data(r->private_data.size());
    } else if (const auto* p = m.get<wire::CmRep>()) {
      comm_ids(p->local_comm_id, p->remote_comm_id, true);
      line("CM.LocalQPN", strf("0x%06x", p->local_qpn), "cm.rep.qpn",
           "the QP the replier will use: the requester's QP sends to it", "the replier's QP");
      line("CM.StartingPSN", std::to_string(p->starting_psn), "cm.rep.psn",
           "the first PSN the replier's QP expects to receive: the requester's QP sends from it",
           "the PSN the replier receives first");
      line("CM.RespResources", std::to_string(p->responder_resources), "cm.rr",
           "responder resources: RDMA READs and atomics from the peer that the sender's QP "
           "serves at once",
           "READs / atomics it serves at once");
      line("CM.InitiatorDepth", std::to_string(p->initiator_depth), "cm.id",
           "initiator depth: RDMA READs and atomics the sender's QP keeps outstanding at most",
           "READs / atomics it issues at once");
      line("CM.RnrRetryCount", std::to_string(p->rnr_retry_count), "cm.rnr",
           "how often the QP resends after an RNR NAK (7 = without limit)", "RNR retries");
      line("CM.TargetAckDelay", strf("%u (%s)", p->target_ack_delay,
                                     cm_timeout_string(p->target_ack_delay).c_str()),
           "cm.rep.ackdelay",
           "how long the replier may take to acknowledge, 4.096 us × 2^n: the requester "
           "adds it to its ACK timeout",
           "the replier's ACK delay");
      if (p->srq)
        line("CM.SRQ", "1", "cm.srq", "the sender's QP takes receive buffers from a shared "
             "receive queue", "shared receive queue");
      private_data(p->private_data.size());
    } else if (const auto* j = m.get<wire::CmRej>()) {
      comm_ids(j->local_comm_id, j->remote_comm_id, true);
      line("CM.MsgRejected", sv(wire::to_string(j->msg_rejected)),
           strf("cm.rej.msg.%u", static_cast<unsigned>(j->msg_rejected)),
           "the message this REJ refuses", "");
      const auto reason = static_cast<unsigned>(j->reason);
      line("CM.Reason", strf("%u %s", reason, sv(wire::to_string(j->reason)).c_str()),
           strf("cm.rej.reason.%u", reason), sv(rej_reason_words(j->reason)), "");
      if (j->reject_info_len != 0)
        line("CM.RejectInfo", strf("%u bytes", j->reject_info_len), "cm.rej.ari",
             "additional reject information (the GID, LID or value that was wrong)", "");
      private_data(j->private_data.size());
    } else if (const auto* a = m.get<wire::CmMra>()) {
      comm_ids(a->local_comm_id, a->remote_comm_id, true);
      line("CM.MsgMRAed", sv(wire::to_string(a->msg_mraed)),
           strf("cm.mra.msg.%u", static_cast<unsigned>(a->msg_mraed)),
           "the message whose answer will be late", "");
      line("CM.ServiceTimeout", strf("%u (%s)", a->service_timeout,
                                     cm_timeout_string(a->service_timeout).c_str()),
           "cm.mra.timeout", "how much longer to wait for the answer, 4.096 us × 2^n",
           "extra wait");
    } else if (const auto* d = m.get<wire::CmDreq>()) {
      comm_ids(d->local_comm_id, d->remote_comm_id, true);
      line("CM.RemoteQPN", strf("0x%06x", d->remote_qpn_eecn), "cm.dreq.qpn",
           "the receiver's QP whose connection ends", "the QP disconnected");
    } else if (const auto* t = m.get<wire::CmRtu>()) {
      comm_ids(t->local_comm_id, t->remote_comm_id, true);
    } else if (const auto* e = m.get<wire::CmDrep>()) {
      comm_ids(e->local_comm_id, e->remote_comm_id, true);
    } else if (const auto* q = m.get<wire::CmSidrReq>()) {
      line("CM.RequestID", strf("0x%08x", q->request_id), "cm.sidr.id",
           "the requester's number for this resolution; the SIDR_REP quotes it", "request ID");
      line("CM.P_Key", strf("0x%04x", q->pkey), "cm.pkey",
           "the partition the connection's QPs will be in", "partition key");
      service_id(q->service_id);
      cma(m, q->service_id);
    } else if (const auto* r2 = m.get<wire::CmSidrRep>()) {
      line("CM.RequestID", strf("0x%08x", r2->request_id), "cm.sidr.id",
           "the requester's number for this resolution; the SIDR_REP quotes it", "request ID");
      line("CM.Status", strf("%u %s", static_cast<unsigned>(r2->status),
                             sv(wire::to_string(r2->status)).c_str()),
           strf("cm.sidr.status.%u", static_cast<unsigned>(r2->status)),
           r2->status == wire::SidrStatus::kValid ? "the QPN and Q_Key below serve the service ID"
                                                  : "the service ID could not be resolved",
           "");
      line("CM.QPN", strf("0x%06x", r2->qpn), "cm.sidr.qpn", "the UD QP to send datagrams to",
           "UD QP");
      line("CM.Q_Key", strf("0x%08x", r2->qkey), "cm.sidr.qkey",
           "the Q_Key the datagrams must carry", "Q_Key");
      service_id(r2->service_id);
    }
  }

  void comm_ids(uint32_t local, uint32_t remote, bool has_remote) {
    line("CM.LocalCommID", strf("0x%08x", local), "cm.lcid",
         "local communication ID: the sender's handle for this connection; the peer quotes it "
         "back as the remote comm ID",
         "the sender's connection handle");
    if (has_remote)
      line("CM.RemoteCommID", strf("0x%08x", remote), "cm.rcid",
           "remote communication ID: the receiver's handle, quoted from its earlier message",
           "the receiver's connection handle");
  }

  void service_id(uint64_t sid) {
    const auto ip = wire::decode_ip_service_id(sid);
    if (ip) {
      const std::string ps = sv(wire::rdma_ps_name(ip->ps));
      line("CM.ServiceID", strf("0x%016" PRIx64, sid), strf("cm.sid.%u.%u", ip->ps, ip->port),
           strf("service ID of rdma_cm: port space %s (0x%04x), port %u, the port the passive "
                "side listens on",
                ps.c_str(), ip->ps, ip->port),
           strf("rdma_cm %s port %u", ps.c_str(), ip->port));
    } else {
      line("CM.ServiceID", strf("0x%016" PRIx64, sid), "cm.sid",
           "service ID: what the passive side listens for (not an rdma_cm IP port)", "service ID");
    }
  }

  void path(const char* which, const char* words, const wire::CmPath& p) {
    const std::string w = which;
    line("CM." + w + ".GIDs",
         addr_string(p.local_gid) + " → " + addr_string(p.remote_gid),
         "cm.path.gid." + w,
         strf("the %s path: the sender's GID and the peer's (on RoCE, their IP addresses)",
              words),
         w + " path");
    line("CM." + w + ".Path",
         strf("TC %u, hop limit %u, SL %u, flow 0x%05x", p.traffic_class, p.hop_limit, p.sl,
              p.flow_label),
         "cm.path.fields",
         "traffic class, hop limit, service level and flow label the connection's packets "
         "will carry",
         "traffic class, hop limit, SL, flow label");
    line("CM." + w + ".AckTimeout",
         strf("%u (%s)", p.local_ack_timeout, cm_timeout_string(p.local_ack_timeout).c_str()),
         "cm.path.ack",
         "local ACK timeout: the QP resends when no ACK came within 4.096 us × 2^n",
         "ACK timeout");
  }

  void cma(const wire::CmMessage& m, uint64_t sid) {
    const auto h = cma_header(m);
    if (!h) return;
    const auto ip = wire::decode_ip_service_id(sid);
    line("CMA.Header", strf("version %u, IPv%u", h->cma_version, h->ip_version), "cma.hdr",
         "rdma_cm's 36-byte header at the start of the private data: the addresses and ports "
         "of the connection in IP terms",
         "rdma_cm header");
    line("CMA.Src", endpoint(h->src_gid(), h->src_port), "cma.src",
         "the active side's IP address and port", "active side");
    line("CMA.Dst", endpoint(h->dst_gid(), ip->port), "cma.dst",
         "the passive side's IP address; its port is the service ID's", "passive side");
  }

  void private_data(size_t n) {
    line("CM.PrivateData", strf("%zu bytes", n), strf("cm.priv.%zu", n),
         "private data: the application's bytes (rdma_conn_param), zero-padded to the "
         "message's fixed size",
         "private data");
  }

  void payload_and_icrc(const Frame& f) {
    const wire::OpcodeInfo& info = *f.info();
    if (info.has_payload) {
      std::string what = "the message data";
      switch (info.op) {
        case Operation::kSend:
          what = info.transport == Transport::kUd
                     ? "the datagram; the receiver puts it in a posted "
                       "buffer after 40 bytes kept for the GRH"
                     : "message data, into the posted receive buffer";
          break;
        case Operation::kWrite: what = "data written to the responder's memory"; break;
        case Operation::kReadResponse: what = "data read from the responder's memory"; break;
        case Operation::kAtomicWrite: what = "the 8 bytes to write"; break;
        default: break;
      }
      std::string value = strf("%zu bytes", f.payload_len);
      if (f.snapped()) value += strf(" (%zu captured)", f.pkt.payload.size());
      line("Payload", value,
           strf("payload.%u.%u", static_cast<unsigned>(info.op),
                static_cast<unsigned>(info.transport)),
           what, "");
    }
    if (f.pkt.hdr.bth.pad_count != 0) {
      line("Pad", strf("%u bytes", f.pkt.hdr.bth.pad_count), "pad",
           "padding to the 4-byte boundary, covered by the ICRC", "padding");
    }
    if (f.error == wire::ParseError::kOk) {
      line("ICRC", strf("0x%08x ok", f.pkt.icrc_wire), "icrc.ok",
           "invariant CRC-32 over the packet from the IP header on, with the fields routers "
           "may change (IP TOS/TTL/checksum, UDP checksum, BTH byte 4) and a stand-in for the "
           "IB routing header set to all ones; it matches",
           "invariant CRC, matches");
    } else if (f.error == wire::ParseError::kBadIcrc) {
      out_ << strf("    %-19s %-18s — ", "ICRC", strf("0x%08x BAD", f.pkt.icrc_wire).c_str())
           << strf(
                  "the CRC computed over the packet is 0x%08x: it was damaged on the way; the "
                  "receiver drops it without a word",
                  f.pkt.icrc_calc)
           << '\n';
    } else {
      line("ICRC", "not captured", "icrc.snap", "the capture cut the frame short of the ICRC", "");
    }
  }

  void stream_summary(const RequestStream& s) {
    out_ << "  " << QpTracker::stream_name(s.key) << " (" << wire::to_string(s.transport) << ")";
    if (s.paired) {
      out_ << strf(", responses to QP 0x%06x at %s", s.requester_qpn,
                   addr_string(s.key.src).c_str());
    }
    out_ << '\n';
    auto row = [&](const char* name, const std::string& value) {
      out_ << strf("    %-11s ", name) << value << '\n';
    };
    row("requests", strf("%" PRIu64 " packets, %" PRIu64 " payload bytes (%" PRIu64
                         " on the wire), PSN %u..%u, first in #%" PRIu64,
                         s.req_packets, s.req_payload_bytes, s.req_wire_bytes, s.first_psn.value(),
                         s.last_psn().value(), s.first_frame));
    row("sequence",
        strf("%" PRIu64 " new, %" PRIu64 " retransmitted; %" PRIu64
             " message%s ended (LAST/ONLY, resends not counted)%s",
             s.new_packets, s.retransmitted, s.messages, s.messages == 1 ? "" : "s",
             s.op_seq_errors != 0 ? strf(", %" PRIu64 " out of order", s.op_seq_errors).c_str()
                                  : ""));
    row("gaps", s.gaps == 0 ? std::string("none")
                            : strf("%" PRIu64 " (%" PRIu64 " packet%s missing before the capture "
                                   "point)",
                                   s.gaps, s.missing, s.missing == 1 ? "" : "s"));
    if (s.transport == Transport::kRc || s.transport == Transport::kXrc) {
      std::string naks;
      for (size_t code = 0; code < s.naks.size(); ++code) {
        if (s.naks[code] == 0) continue;
        naks += strf("%s%" PRIu64 " %s", naks.empty() ? "" : ", ", s.naks[code],
                     code <= 4 ? sv(wire::to_string(static_cast<wire::NakCode>(code))).c_str()
                               : "reserved code");
      }
      std::string r = strf("%" PRIu64 " packets: %" PRIu64 " ACK", s.resp_packets, s.acks);
      if (s.duplicate_acks != 0) r += strf(" (%" PRIu64 " duplicate)", s.duplicate_acks);
      r += strf(", %" PRIu64 " NAK", s.nak_total());
      if (!naks.empty()) r += " (" + naks + ")";
      r += strf(", %" PRIu64 " RNR NAK", s.rnr_naks);
      if (s.read_responses != 0) r += strf(", %" PRIu64 " READ response", s.read_responses);
      if (s.atomic_acks != 0) r += strf(", %" PRIu64 " ATOMIC ACK", s.atomic_acks);
      row("responses", r);
    }
    if (s.reads_requested != 0) {
      row("READs", strf("%" PRIu64 " requests, %" PRIu64 " answered, %" PRIu64 " complete",
                        s.reads_requested, s.read_matched, s.reads_completed));
    }
    if (s.atomics_requested != 0) {
      row("atomics", strf("%" PRIu64 " requests, %" PRIu64 " answered", s.atomics_requested,
                          s.atomic_matched));
    }
    if (!s.rnr.empty()) {
      constexpr size_t kShow = 10;
      for (size_t i = 0; i < s.rnr.size() && i < kShow; ++i) {
        const RnrEvent& r = s.rnr[i];
        const auto timer = static_cast<int64_t>(wire::rnr_timer_ns(r.timer_code));
        std::string t = strf("#%" PRIu64 " PSN %u, timer %s: ", r.nak_frame, r.psn.value(),
                             ms_string(timer).c_str());
        t += r.resent ? strf("resent after %s (#%" PRIu64 ")", ms_string(r.wait_ns).c_str(),
                             r.resend_frame)
                      : std::string("no resend seen before the capture ends");
        row(i == 0 ? "RNR waits" : "", t);
      }
      if (s.rnr.size() > kShow) row("", strf("... and %zu more", s.rnr.size() - kShow));
    }
  }

  std::ostream& out_;
  PathMtu mtu_;
  std::set<std::string> seen_;
  bool tcp_hint_given_ = false;
};

}  // namespace

std::unique_ptr<Printer> make_explain_printer(std::ostream& out) {
  return std::make_unique<ExplainPrinter>(out);
}

}  // namespace uroce::dissect

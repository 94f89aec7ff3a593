// A case's connection manager steps: CM MADs between our QP1 and the DUT's (IBA chapter 12,
// with rdma_cm's addressing, annex A11).
#include <algorithm>

#include "case_run.h"

namespace uroce::conform {

bool CaseRun::next_mad(uint64_t deadline, wire::CmMessage* out, std::string* raw_desc) {
  for (;;) {
    if (!cm_waiting_.empty()) {
      std::vector<uint8_t> f = std::move(cm_waiting_.front());
      cm_waiting_.pop_front();
      wire::ParsedPacket pk;
      if (wire::parse_frame(f, pk) != wire::ParseError::kOk) continue;
      if (wire::CmMessage::parse(pk.payload, *out) == wire::ParseError::kOk) return true;
      *raw_desc = "a MAD uroce-conform cannot read";
      return true;
    }
    std::vector<uint8_t> f;
    (void)next_for(nullptr, deadline, &f, /*mads=*/true);
    if (cm_waiting_.empty()) return false;  // the deadline passed
  }
}

bool CaseRun::send_mad(const wire::CmMessage& m) {
  wire::RoceHeaders h = to_dut();
  h.udp.src_port = 0xC001;
  h.bth.opcode = wire::opcode::kUdSendOnly;
  h.bth.dest_qp = wire::kGsiQpn;
  h.bth.psn = mad_psn_++ & 0xFFFFFF;
  h.ext.deth.qkey = wire::kGsiQkey;
  h.ext.deth.src_qp = wire::kGsiQpn;
  std::vector<uint8_t> mad(wire::kMadLen);
  m.emit(mad);
  std::vector<uint8_t> frame(wire::frame_len(h, mad.size()) + 64);
  const size_t n = wire::build_frame(h, mad, frame);
  frame.resize(n);
  if (n == 0 || !link_.send(frame)) return false;
  ++sent;
  return true;
}

Peer* CaseRun::cm_peer(const std::map<std::string, std::string>& kv, bool make, std::string* bad) {
  if (kv.count("as")) cm_.peer = kv.at("as");
  if (cm_.peer.empty()) {
    *bad = "which QP is this connection for? (as=Q on the REQ)";
    return nullptr;
  }
  if (make && !peers_.count(cm_.peer)) {
    Peer p;
    p.qpn = qpn_base_ + static_cast<uint32_t>(peers_.size());
    // A CM message's starting PSN is the one its sender expects to receive: ours (the
    // DUT's first) we choose, the DUT's (our first) its REQ or REP tells.
    p.dpsn0 = static_cast<uint32_t>(num(kv, "dpsn", 0x800)) & 0xFFFFFF;
    p.mtu = static_cast<uint32_t>(num(kv, "mtu", 1024));
    peers_[cm_.peer] = p;
    vars_[cm_.peer + ".peer"] = p.qpn;
    vars_[cm_.peer + ".dpsn0"] = p.dpsn0;
  }
  return peer(cm_.peer, bad);
}

uint8_t CaseRun::mtu_code(uint32_t bytes) {
  for (uint8_t c = 1; c <= 5; ++c)
    if (wire::ib_mtu_bytes(c) == bytes) return c;
  return 3;
}

std::optional<Failure> CaseRun::cm_send(const Step& s) {
  std::string bad;
  auto words = subst_all(s.words, &bad);
  if (!words) return Failure{Verdict::kError, bad};
  const std::string& kind = (*words)[0];
  const auto kv = key_values(*words, 1);
  if (kv.count("again")) {  // the same MAD once more (a retransmission)
    if (!cm_.last_sent || cm_.last_sent->name() != kind)
      return Failure{Verdict::kError, "cm_send " + kind + " again: no " + kind + " was sent before"};
    return send_mad(*cm_.last_sent) ? std::nullopt : std::optional<Failure>(Failure{Verdict::kError, "link"});
  }
  wire::CmMessage m;
  if (kind == "REQ") {
    Peer* p = cm_peer(kv, true, &bad);
    if (!p) return Failure{Verdict::kError, bad};
    wire::CmReq q;
    q.local_comm_id = cm_.local_comm_id;
    q.service_id = wire::ip_service_id(wire::kRdmaPsTcp, static_cast<uint16_t>(num(kv, "port", 7471)));
    q.local_ca_guid = 0x0200000000000001ull;
    q.local_qpn = p->qpn;
    q.responder_resources = static_cast<uint8_t>(num(kv, "rd", 4));
    q.initiator_depth = static_cast<uint8_t>(num(kv, "rd", 4));
    q.remote_cm_response_timeout = 20;
    q.transport_service_type = wire::kCmTransportRc;
    q.starting_psn = p->dpsn0;  // what we expect to receive
    q.local_cm_response_timeout = 20;
    q.retry_count = 7;
    q.pkey = 0xFFFF;
    q.path_mtu = mtu_code(p->mtu);
    q.rnr_retry_count = 7;
    q.max_cm_retries = 15;
    q.primary.local_gid = wire::ipv4_mapped_gid(link_.ip());
    q.primary.remote_gid = wire::ipv4_mapped_gid(dut_ip_);
    q.primary.hop_limit = 64;
    q.primary.subnet_local = true;
    q.primary.local_ack_timeout = static_cast<uint8_t>(num(kv, "timeout", 18));
    q.primary.packet_rate = 3;
    const auto cma = wire::CmaIpHeader::ipv4(static_cast<uint16_t>(num(kv, "sport", 0xC123)), link_.ip(), dut_ip_);
    cma.emit(q.private_data);
    cm_.tid = 0x75726f63650000ull + cm_.local_comm_id;
    m = wire::CmMessage::make(cm_.tid, q);
  } else if (kind == "REP") {
    Peer* p = cm_peer(kv, false, &bad);
    if (!p || !cm_.req) return Failure{Verdict::kError, p ? "cm_send REP: no REQ came before" : bad};
    wire::CmRep r;
    r.local_comm_id = cm_.local_comm_id;
    r.remote_comm_id = cm_.req->local_comm_id;
    r.local_qpn = p->qpn;
    r.starting_psn = p->dpsn0;  // what we expect to receive
    r.responder_resources = cm_.req->initiator_depth;
    r.initiator_depth = cm_.req->responder_resources;
    r.target_ack_delay = 0;
    r.rnr_retry_count = 7;
    r.local_ca_guid = 0x0200000000000001ull;
    m = wire::CmMessage::make(cm_.tid, r);
  } else if (kind == "RTU" || kind == "DREP") {
    wire::CmIdsAndPrivate<wire::cm_attr::kRtu> rtu;
    rtu.local_comm_id = cm_.local_comm_id;
    rtu.remote_comm_id = cm_.remote_comm_id;
    if (kind == "RTU") {
      m = wire::CmMessage::make(cm_.tid, rtu);
    } else {
      wire::CmDrep d;
      d.local_comm_id = cm_.local_comm_id;
      d.remote_comm_id = cm_.remote_comm_id;
      m = wire::CmMessage::make(cm_.dreq_tid, d);
    }
  } else if (kind == "REJ") {
    wire::CmRej r;
    r.local_comm_id = cm_.local_comm_id;
    r.remote_comm_id = cm_.remote_comm_id;
    const std::string msg = kv.count("msg") ? kv.at("msg") : "req";
    r.msg_rejected = msg == "rep" ? wire::CmMsgResponse::kRep : msg == "req" ? wire::CmMsgResponse::kReq
                                                                             : wire::CmMsgResponse::kOther;
    r.reason = static_cast<wire::CmRejReason>(num(kv, "reason", 28));
    m = wire::CmMessage::make(cm_.tid, r);
  } else if (kind == "DREQ") {
    Peer* p = cm_peer(kv, false, &bad);
    if (!p) return Failure{Verdict::kError, bad};
    wire::CmDreq d;
    d.local_comm_id = cm_.local_comm_id;
    d.remote_comm_id = cm_.remote_comm_id;
    d.remote_qpn_eecn = p->dut_qpn;
    m = wire::CmMessage::make(cm_.tid + 0x100, d);
  } else {
    return Failure{Verdict::kError, "cm_send REQ|REP|RTU|REJ|DREQ|DREP"};
  }
  cm_.last_sent = m;
  if (!send_mad(m)) return Failure{Verdict::kError, "the link did not take the MAD"};
  return std::nullopt;
}

std::optional<Failure> CaseRun::cm_expect(const Step& s) {
  std::string bad;
  auto words = subst_all(s.words, &bad);
  if (!words) return Failure{Verdict::kError, bad};
  const std::string& kind = (*words)[0];
  const auto kv = key_values(*words, 1);
  const bool none = kind == "none";
  const int64_t within = num(kv, "within", none ? 100 : 2000);
  const uint64_t deadline =
      now_ns() + (kv.count("fixed") ? static_cast<uint64_t>(within) : scaled_ms(within)) * 1000000;
  const auto skip = kv.count("skip") ? split(kv.at("skip"), '|') : std::vector<std::string>{};
  wire::CmMessage m;
  std::string unreadable;
  for (;;) {
    if (!next_mad(deadline, &m, &unreadable)) {
      if (none) return std::nullopt;
      return Failure{Verdict::kFail, "expected a " + kind + " from the DUT's CM, got nothing"};
    }
    if (!unreadable.empty()) return Failure{Verdict::kFail, "expected " + kind + ", got " + unreadable};
    if (stale(m, kv)) continue;
    if (none) return Failure{Verdict::kFail, "expected no MAD, got " + std::string(m.name())};
    if (m.name() == kind || std::find(skip.begin(), skip.end(), std::string(m.name())) == skip.end()) break;
  }
  const auto differs = [&](const std::string& what) {
    return Failure{Verdict::kFail, "expected " + s.text.substr(s.text.find(kind)) + ", got " +
                                       std::string(m.name()) + " (" + what + ")"};
  };
  if (m.name() != kind) return differs("another message");
  if (const auto* q = m.get<wire::CmReq>()) {
    Peer* p = cm_peer(kv, true, &bad);
    if (!p) return Failure{Verdict::kError, bad};
    // again: a retransmission of the REQ before, the same communication ID and QP.
    if (kv.count("again") && (!cm_.req || q->local_comm_id != cm_.req->local_comm_id ||
                              q->local_qpn != cm_.req->local_qpn))
      return differs("not the same communication ID and QP as the REQ before");
    cm_.req = *q;
    cm_.tid = m.hdr.tid;
    cm_.remote_comm_id = q->local_comm_id;
    p->dut_qpn = q->local_qpn;
    p->psn0 = q->starting_psn;  // what the DUT expects to receive
    if (wire::ib_mtu_bytes(q->path_mtu) != 0) p->mtu = wire::ib_mtu_bytes(q->path_mtu);
    vars_[cm_.peer + ".qpn"] = p->dut_qpn;
    vars_[cm_.peer + ".psn0"] = p->psn0;
    const auto sid = wire::decode_ip_service_id(q->service_id);
    if (kv.count("port") && (!sid || sid->port != num(kv, "port", -1))) return differs("service ID");
    if (q->transport_service_type != wire::kCmTransportRc) return differs("transport type");
    wire::CmaIpHeader h;
    if (sid && (wire::CmaIpHeader::parse(q->private_data, h) != wire::ParseError::kOk || !h.valid() ||
                h.dst_gid() != wire::ipv4_mapped_gid(link_.ip()) || h.src_gid() != wire::ipv4_mapped_gid(dut_ip_)))
      return differs("rdma_cm's address header in the private data names other addresses");
    if (q->primary.remote_gid != wire::ipv4_mapped_gid(link_.ip())) return differs("the path's remote GID");
  } else if (const auto* r = m.get<wire::CmRep>()) {
    Peer* p = cm_peer(kv, false, &bad);
    if (!p) return Failure{Verdict::kError, bad};
    if (r->remote_comm_id != cm_.local_comm_id) return differs("it names another communication ID");
    cm_.remote_comm_id = r->local_comm_id;
    p->dut_qpn = r->local_qpn;
    p->psn0 = r->starting_psn;  // what the DUT expects to receive
    vars_[cm_.peer + ".qpn"] = p->dut_qpn;
    vars_[cm_.peer + ".psn0"] = p->psn0;
    if (kv.count("qpn") && r->local_qpn != static_cast<uint32_t>(num(kv, "qpn", -1))) return differs("QPN");
  } else if (const auto* j = m.get<wire::CmRej>()) {
    if (kv.count("reason") && static_cast<int64_t>(j->reason) != num(kv, "reason", -1))
      return differs("reason " + std::to_string(static_cast<int>(j->reason)));
    const std::string msg = j->msg_rejected == wire::CmMsgResponse::kReq   ? "req"
                            : j->msg_rejected == wire::CmMsgResponse::kRep ? "rep"
                                                                           : "other";
    if (kv.count("msg") && kv.at("msg") != msg) return differs("it rejects a " + msg);
    if (j->remote_comm_id != cm_.local_comm_id) return differs("it names another communication ID");
  } else if (const auto* d = m.get<wire::CmDreq>()) {
    Peer* p = cm_peer(kv, false, &bad);
    if (!p) return Failure{Verdict::kError, bad};
    if (d->remote_comm_id != cm_.local_comm_id) return differs("it names another communication ID");
    if (d->remote_qpn_eecn != p->qpn) return differs("it names another QP");
    cm_.dreq_tid = m.hdr.tid;
  } else if (const auto* t = m.get<wire::CmRtu>()) {
    if (t->remote_comm_id != cm_.local_comm_id || t->local_comm_id != cm_.remote_comm_id)
      return differs("other communication IDs");
  } else if (const auto* e = m.get<wire::CmDrep>()) {
    if (e->remote_comm_id != cm_.local_comm_id || e->local_comm_id != cm_.remote_comm_id)
      return differs("other communication IDs");
  }
  return std::nullopt;
}

bool CaseRun::stale(const wire::CmMessage& m, const std::map<std::string, std::string>& kv) {
  uint32_t remote = 0;
  std::visit(
      [&](const auto& b) {
        if constexpr (requires { b.remote_comm_id; }) remote = b.remote_comm_id;
      },
      m.body);
  if (const auto* q = m.get<wire::CmReq>()) {
    const auto sid = wire::decode_ip_service_id(q->service_id);
    if (kv.count("port") && sid && sid->port != num(kv, "port", -1)) return true;
    return false;
  }
  if (remote != 0 && remote != cm_.local_comm_id) return true;
  return false;
}

}  // namespace uroce::conform

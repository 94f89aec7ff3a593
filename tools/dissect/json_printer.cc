// --json: JSON Lines, one object per frame, then one {"summary": ...} object.
#include <ostream>

#include "dissect/json.h"
#include "dissect/printer.h"

namespace uroce::dissect {

namespace {

using wire::Ext;

std::string_view kind_name(FrameKind k) {
  switch (k) {
    case FrameKind::kRoce: return "roce";
    case FrameKind::kOther: return "other";
    case FrameKind::kMalformed: return "malformed";
  }
  return "?";
}

void write_path(JsonWriter& j, std::string_view key, const wire::CmPath& p) {
  j.begin_object(key);
  j.field("local_lid", p.local_lid);
  j.field("remote_lid", p.remote_lid);
  j.field("local_gid", wire::to_string(p.local_gid));
  j.field("remote_gid", wire::to_string(p.remote_gid));
  j.field("flow_label", p.flow_label);
  j.field("packet_rate", p.packet_rate);
  j.field("traffic_class", p.traffic_class);
  j.field("hop_limit", p.hop_limit);
  j.field("sl", p.sl);
  j.field("subnet_local", p.subnet_local);
  j.field("local_ack_timeout", p.local_ack_timeout);
  j.end_object();
}

void write_service_id(JsonWriter& j, uint64_t sid) {
  j.field("service_id", sid);
  if (const auto ip = wire::decode_ip_service_id(sid)) {
    j.field("port_space", wire::rdma_ps_name(ip->ps));
    j.field("port", ip->port);
  }
}

void write_cma(JsonWriter& j, const wire::CmMessage& m, uint64_t sid) {
  const auto h = cma_header(m);
  if (!h) return;
  j.begin_object("cma");
  j.field("ip_version", h->ip_version);
  j.field("src", addr_string(h->src_gid()));
  j.field("src_port", h->src_port);
  j.field("dst", addr_string(h->dst_gid()));
  j.field("dst_port", wire::decode_ip_service_id(sid)->port);
  j.end_object();
}

void write_ids(JsonWriter& j, uint32_t local, uint32_t remote) {
  j.field("local_comm_id", local);
  j.field("remote_comm_id", remote);
}

/// "cm": the CM message a QP1 datagram carries.
void write_cm(JsonWriter& j, const wire::CmMessage& m) {
  j.begin_object("cm");
  j.field("message", m.name());
  j.field("attr_id", m.attr_id());
  j.field("tid", m.hdr.tid);
  j.field("method", m.hdr.method);
  j.field("class_version", m.hdr.class_version);
  j.field("status", m.hdr.status);
  if (const auto* r = m.get<wire::CmReq>()) {
    j.field("local_comm_id", r->local_comm_id);
    write_service_id(j, r->service_id);
    j.field("local_ca_guid", r->local_ca_guid);
    j.field("local_qkey", r->local_qkey);
    j.field("local_qpn", r->local_qpn);
    j.field("starting_psn", r->starting_psn);
    j.field("responder_resources", r->responder_resources);
    j.field("initiator_depth", r->initiator_depth);
    j.field("transport_service_type", r->transport_service_type);
    j.field("end_to_end_flow_control", r->end_to_end_flow_control);
    j.field("local_cm_response_timeout", r->local_cm_response_timeout);
    j.field("remote_cm_response_timeout", r->remote_cm_response_timeout);
    j.field("retry_count", r->retry_count);
    j.field("rnr_retry_count", r->rnr_retry_count);
    j.field("max_cm_retries", r->max_cm_retries);
    j.field("pkey", r->pkey);
    j.field("path_mtu", r->path_mtu);
    j.field("path_mtu_bytes", wire::ib_mtu_bytes(r->path_mtu));
    j.field("srq", r->srq);
    write_path(j, "primary_path", r->primary);
    if (r->alternate != wire::CmPath{}) write_path(j, "alternate_path", r->alternate);
    write_cma(j, m, r->service_id);
  } else if (const auto* p = m.get<wire::CmRep>()) {
    write_ids(j, p->local_comm_id, p->remote_comm_id);
    j.field("local_qkey", p->local_qkey);
    j.field("local_qpn", p->local_qpn);
    j.field("starting_psn", p->starting_psn);
    j.field("responder_resources", p->responder_resources);
    j.field("initiator_depth", p->initiator_depth);
    j.field("target_ack_delay", p->target_ack_delay);
    j.field("failover_accepted", p->failover_accepted);
    j.field("end_to_end_flow_control", p->end_to_end_flow_control);
    j.field("rnr_retry_count", p->rnr_retry_count);
    j.field("srq", p->srq);
    j.field("local_ca_guid", p->local_ca_guid);
  } else if (const auto* rej = m.get<wire::CmRej>()) {
    write_ids(j, rej->local_comm_id, rej->remote_comm_id);
    j.field("msg_rejected", wire::to_string(rej->msg_rejected));
    j.field("reason", static_cast<uint16_t>(rej->reason));
    j.field("reason_name", wire::to_string(rej->reason));
    j.field("reject_info_len", rej->reject_info_len);
  } else if (const auto* a = m.get<wire::CmMra>()) {
    write_ids(j, a->local_comm_id, a->remote_comm_id);
    j.field("msg_mraed", wire::to_string(a->msg_mraed));
    j.field("service_timeout", a->service_timeout);
  } else if (const auto* d = m.get<wire::CmDreq>()) {
    write_ids(j, d->local_comm_id, d->remote_comm_id);
    j.field("remote_qpn", d->remote_qpn_eecn);
  } else if (const auto* t = m.get<wire::CmRtu>()) {
    write_ids(j, t->local_comm_id, t->remote_comm_id);
  } else if (const auto* e = m.get<wire::CmDrep>()) {
    write_ids(j, e->local_comm_id, e->remote_comm_id);
  } else if (const auto* q = m.get<wire::CmSidrReq>()) {
    j.field("request_id", q->request_id);
    j.field("pkey", q->pkey);
    write_service_id(j, q->service_id);
    write_cma(j, m, q->service_id);
  } else if (const auto* s = m.get<wire::CmSidrRep>()) {
    j.field("request_id", s->request_id);
    j.field("status", static_cast<uint8_t>(s->status));
    j.field("status_name", wire::to_string(s->status));
    j.field("qpn", s->qpn);
    j.field("qkey", s->qkey);
    write_service_id(j, s->service_id);
  }
  j.end_object();
}

void write_headers(JsonWriter& j, const Frame& f) {
  const wire::ParsedPacket& p = f.pkt;
  const wire::RoceHeaders& h = p.hdr;
  if (p.reached >= wire::Layer::kEthernet) {
    j.begin_object("eth");
    j.field("src", wire::to_string(h.eth.src));
    j.field("dst", wire::to_string(h.eth.dst));
    j.field("ethertype", h.eth.ethertype);
    if (h.eth.has_vlan) {
      j.begin_object("vlan");
      j.field("pcp", h.eth.pcp);
      j.field("dei", h.eth.dei);
      j.field("vid", h.eth.vid);
      j.end_object();
    }
    j.end_object();
  }
  if (p.reached >= wire::Layer::kIp) {
    j.begin_object("ip");
    if (h.ipv6) {
      j.field("version", 6);
      j.field("src", addr_string(h.ip6.src));
      j.field("dst", addr_string(h.ip6.dst));
      j.field("traffic_class", h.ip6.traffic_class);
      j.field("dscp", h.ip6.traffic_class >> 2);
      j.field("ecn", h.ip6.traffic_class & 3);
      j.field("flow_label", h.ip6.flow_label);
      j.field("payload_len", h.ip6.payload_len);
      j.field("next_header", h.ip6.next_header);
      j.field("hop_limit", h.ip6.hop_limit);
    } else {
      j.field("version", 4);
      j.field("src", wire::to_string(h.ip4.src));
      j.field("dst", wire::to_string(h.ip4.dst));
      j.field("header_len", h.ip4.header_len());
      j.field("dscp", h.ip4.dscp);
      j.field("ecn", h.ip4.ecn);
      j.field("total_len", h.ip4.total_len);
      j.field("id", h.ip4.ident);
      j.field("df", h.ip4.dont_frag);
      j.field("ttl", h.ip4.ttl);
      j.field("protocol", h.ip4.protocol);
      j.field("checksum", h.ip4.checksum);
    }
    j.end_object();
  }
  if (p.reached >= wire::Layer::kUdp) {
    j.begin_object("udp");
    j.field("src_port", h.udp.src_port);
    j.field("dst_port", h.udp.dst_port);
    j.field("length", h.udp.length);
    j.field("checksum", h.udp.checksum);
    j.end_object();
  }
  if (p.reached < wire::Layer::kBth) return;
  const wire::BthRepr& b = h.bth;
  j.begin_object("bth");
  j.field("opcode", b.opcode);
  if (f.info() != nullptr) {
    j.field("opcode_name", f.info()->name);
    j.field("transport", wire::to_string(f.info()->transport));
    j.field("operation", wire::to_string(f.info()->op));
    j.field("position", wire::to_string(f.info()->pos));
  }
  j.field("se", b.se);
  j.field("mig", b.mig);
  j.field("pad", b.pad_count);
  j.field("tver", b.tver);
  j.field("pkey", b.pkey);
  j.field("fecn", b.fecn);
  j.field("becn", b.becn);
  j.field("dest_qp", b.dest_qp);
  j.field("ack_req", b.ack_req);
  j.field("psn", b.psn);
  j.end_object();

  const wire::ExtHeaders& x = h.ext;
  if (f.has_ext(Ext::kXrceth)) {
    j.begin_object("xrceth");
    j.field("srqn", x.xrceth.srqn);
    j.end_object();
  }
  if (f.has_ext(Ext::kFeth)) {
    j.begin_object("feth");
    j.field("raw", x.feth.raw);
    j.field("selectivity", x.feth.selectivity());
    j.field("placement", x.feth.placement());
    j.end_object();
  }
  if (f.has_ext(Ext::kDeth)) {
    j.begin_object("deth");
    j.field("qkey", x.deth.qkey);
    j.field("src_qp", x.deth.src_qp);
    j.end_object();
  }
  if (f.has_ext(Ext::kReth)) {
    j.begin_object("reth");
    j.field("va", x.reth.va);
    j.field("rkey", x.reth.rkey);
    j.field("dma_len", x.reth.dma_len);
    j.end_object();
  }
  if (f.has_ext(Ext::kAtomicEth)) {
    j.begin_object("atomic_eth");
    j.field("va", x.atomic.va);
    j.field("rkey", x.atomic.rkey);
    j.field("swap_add", x.atomic.swap_add);
    j.field("compare", x.atomic.compare);
    j.end_object();
  }
  if (f.has_ext(Ext::kAeth)) {
    const wire::AethRepr& a = x.aeth;
    j.begin_object("aeth");
    j.field("syndrome", a.syndrome);
    j.field("kind", wire::to_string(a.kind()));
    switch (a.kind()) {
      case wire::AckKind::kAck:
        j.field("credit_code", a.credit_code());
        if (credits_from_code(a.credit_code()) >= 0) j.field("credits", credits_from_code(a.credit_code()));
        break;
      case wire::AckKind::kRnrNak:
        j.field("rnr_timer_code", a.rnr_timer_code());
        j.field("rnr_timer_ns", wire::rnr_timer_ns(a.rnr_timer_code()));
        break;
      case wire::AckKind::kNak:
        j.field("nak_code", a.value());
        j.field("nak", a.value() <= 4 ? wire::to_string(a.nak_code()) : "reserved");
        break;
      case wire::AckKind::kReserved: break;
    }
    j.field("msn", a.msn);
    j.end_object();
  }
  if (f.has_ext(Ext::kAtomicAckEth)) {
    j.begin_object("atomic_ack_eth");
    j.field("orig", x.atomic_ack.orig);
    j.end_object();
  }
  if (f.has_ext(Ext::kImmDt)) {
    j.begin_object("immdt");
    j.field("imm", x.imm.imm);
    j.end_object();
  }
  if (f.has_ext(Ext::kIeth)) {
    j.begin_object("ieth");
    j.field("rkey", x.ieth.rkey);
    j.end_object();
  }
  if (const auto cm = cm_message(f)) write_cm(j, *cm);
}

class JsonPrinter final : public Printer {
 public:
  explicit JsonPrinter(std::ostream& out) : out_(out) {}

  void begin(const CaptureInfo& info) override { path_ = info.path; }

  void packet(const Frame& f, const std::vector<Note>& notes) override {
    j_.clear();
    j_.begin_object();
    j_.field("index", f.index);
    j_.field_raw("time", seconds_string(f.rel_ns));
    j_.field("caplen", f.caplen);
    j_.field("len", f.orig_len);
    j_.field("kind", kind_name(f.kind));
    j_.field("snapped", f.snapped());
    if (f.kind == FrameKind::kOther) {
      j_.field("reason", wire::error_name(f.error));
      j_.field("info", f.brief);
    } else if (f.kind == FrameKind::kMalformed) {
      j_.field("error", wire::error_name(f.error));
      j_.field("error_text", wire::error_text(f.error));
      if (!f.brief.empty()) j_.field("info", f.brief);
    }
    write_headers(j_, f);
    if (f.kind == FrameKind::kRoce) {
      j_.field("payload_len", f.payload_len);
      j_.begin_object("icrc");
      const bool captured = f.error != wire::ParseError::kTruncated;
      j_.field("captured", captured);
      if (captured) {
        j_.field("wire", f.pkt.icrc_wire);
        j_.field("calc", f.pkt.icrc_calc);
        j_.field("ok", f.icrc_ok());
      }
      j_.end_object();
    }
    if (!notes.empty()) {
      j_.begin_array("tracking");
      for (const Note& n : notes) {
        j_.begin_object();
        j_.field("kind", to_string(n.kind));
        j_.field("text", n.text);
        j_.end_object();
      }
      j_.end_array();
    }
    j_.end_object();
    out_ << j_.str() << '\n';
  }

  void end(const CaptureEnd& e) override {
    const Counts& c = e.counts;
    j_.clear();
    j_.begin_object();
    j_.begin_object("summary");
    j_.field("file", path_);
    j_.field("complete", e.complete);
    if (!e.complete) j_.field("error", e.problem);
    j_.field("packets", c.packets);
    j_.field("roce", c.roce);
    j_.field("other", c.other);
    j_.field("malformed", c.malformed);
    j_.field("bad_icrc", c.bad_icrc);
    j_.field("snapped", c.snapped);
    j_.begin_object("opcodes");
    for (size_t op = 0; op < c.opcodes.size(); ++op) {
      if (c.opcodes[op] != 0)
        j_.field(wire::opcode_info(static_cast<uint8_t>(op)).name, c.opcodes[op]);
    }
    j_.end_object();
    j_.begin_object("errors");
    for (size_t err = 0; err < c.errors.size(); ++err) {
      if (c.errors[err] != 0)
        j_.field(wire::error_name(static_cast<wire::ParseError>(err)), c.errors[err]);
    }
    j_.end_object();
    const PathMtu& mtu = e.tracker.mtu();
    j_.begin_object("path_mtu");
    j_.field("bytes", mtu.bytes);
    j_.field("assumed", mtu.assumed);
    j_.field("how", mtu.how);
    j_.end_object();
    j_.field("unmatched_responses", e.tracker.unmatched());
    j_.begin_array("streams");
    for (const RequestStream& s : e.tracker.streams()) write_stream(s);
    j_.end_array();
    j_.end_object();
    j_.end_object();
    out_ << j_.str() << '\n';
  }

 private:
  void write_stream(const RequestStream& s) {
    JsonWriter& j = j_;
    j.begin_object();
    j.field("name", QpTracker::stream_name(s.key));
    j.field("src", addr_string(s.key.src));
    j.field("dst", addr_string(s.key.dst));
    j.field("dest_qp", s.key.qpn);
    j.field("transport", wire::to_string(s.transport));
    if (s.paired) j.field("requester_qp", s.requester_qpn);
    j.field("first_index", s.first_frame);
    j.field("first_psn", s.first_psn.value());
    j.field("last_psn", s.last_psn().value());
    j.field("packets", s.req_packets);
    j.field("payload_bytes", s.req_payload_bytes);
    j.field("wire_bytes", s.req_wire_bytes);
    j.field("new", s.new_packets);
    j.field("retransmitted", s.retransmitted);
    j.field("gaps", s.gaps);
    j.field("missing", s.missing);
    j.field("messages", s.messages);
    j.field("message_order_errors", s.op_seq_errors);
    j.field("responses", s.resp_packets);
    j.field("response_payload_bytes", s.resp_payload_bytes);
    j.field("acks", s.acks);
    j.field("duplicate_acks", s.duplicate_acks);
    j.begin_object("naks");
    for (size_t code = 0; code < s.naks.size(); ++code) {
      if (s.naks[code] == 0) continue;
      j.field(code <= 4 ? wire::to_string(static_cast<wire::NakCode>(code))
                        : std::string_view("reserved"),
              s.naks[code]);
    }
    j.end_object();
    j.field("rnr_naks", s.rnr_naks);
    j.begin_array("rnr_waits");
    for (const RnrEvent& r : s.rnr) {
      j.begin_object();
      j.field("nak_index", r.nak_frame);
      j.field("psn", r.psn.value());
      j.field("timer_code", r.timer_code);
      j.field("timer_ns", wire::rnr_timer_ns(r.timer_code));
      j.field("resent", r.resent);
      if (r.resent) {
        j.field("resend_index", r.resend_frame);
        j.field("wait_ns", r.wait_ns);
      }
      j.end_object();
    }
    j.end_array();
    j.begin_object("reads");
    j.field("requested", s.reads_requested);
    j.field("answered", s.read_matched);
    j.field("complete", s.reads_completed);
    j.field("response_packets", s.read_responses);
    j.end_object();
    j.begin_object("atomics");
    j.field("requested", s.atomics_requested);
    j.field("answered", s.atomic_matched);
    j.field("acks", s.atomic_acks);
    j.end_object();
    j.end_object();
  }

  std::ostream& out_;
  std::string path_;
  JsonWriter j_;
};

}  // namespace

std::unique_ptr<Printer> make_json_printer(std::ostream& out) {
  return std::make_unique<JsonPrinter>(out);
}

}  // namespace uroce::dissect

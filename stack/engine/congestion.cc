// Congestion control: ECN marking, CNPs and DCQCN (dcqcn.h) for RC, UC, XRC and UD QPs.
//
//   notification point (NP)  a packet that reaches one of our QPs marked CE (a switch queue
//                            was filling) is answered with a CNP to the QP that sent it, at
//                            most one per min_time_between_cnps per QP.
//   reaction point (RP)      a CNP for one of our QPs cuts its rate (DCQCN); a pacer spaces
//                            the requester's packets by their wire time at that rate (and,
//                            when the line rate was given by hand, at the line rate before
//                            any cut), and two timers (alpha, rate increase) and a byte
//                            counter bring it back up.
//
// A CNP (IBA annex A17, RoCEv2): BTH opcode 0x81, P_Key 0xFFFF, BECN set, DestQP = the QP that
// sent the marked packet, PSN 0, 16 reserved bytes of zero, ICRC; IP DSCP cnp_dscp, Not-ECT.
#include <algorithm>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {
// How far behind the clock the pacer may start a packet: an engine that came back late (it
// sleeps between passes) sends what it owes in a short burst instead of losing the time.
constexpr uint64_t kPaceSlackNs = 20'000;
// A QP's sending rate is measured over windows this long at least; a measure older than
// kRateStaleNs (the QP went quiet) is not used.
constexpr uint64_t kRateWindowNs = 100'000;
constexpr uint64_t kRateStaleNs = 1'000'000;
}  // namespace

void Engine::cc_init_qp(Qp* qp) {
  for (Timer* t : {&qp->cc.pace_timer, &qp->cc.alpha_timer, &qp->cc.rate_timer}) t->owner = qp;
  qp->cc.pace_timer.kind = kTimerPace;
  qp->cc.alpha_timer.kind = kTimerCcAlpha;
  qp->cc.rate_timer.kind = kTimerCcRate;
  qp->cc.dcqcn = Dcqcn(cfg_.cc.dcqcn);
}

void Engine::cancel_pace(Qp* qp) {
  if (!qp->cc.pace_timer.armed) return;
  timers_.cancel(qp->cc.pace_timer);
  --paced_qps_;
}

void Engine::cc_reset_qp(Qp* qp) {
  cancel_pace(qp);
  timers_.cancel(qp->cc.alpha_timer);
  timers_.cancel(qp->cc.rate_timer);
  qp->cc.dcqcn = Dcqcn(cfg_.cc.dcqcn);
  qp->cc.pace_next_ns = 0;
  qp->cc.sent_window_start_ns = qp->cc.sent_window_bytes = qp->cc.sent_rate_at_ns = 0;
  qp->cc.sent_rate_mbps = 0;
  qp->cc.cnp_sent_any = false;
  qp->cc.cnps_rcvd = 0;
  qp->cc.rate_limit_kbps = qp->cc.burst_bytes = 0;
}

void Engine::notify_congestion(Qp* qp, const ParsedPacket& p) {
  counters_.inc(Counter::rx_ce_marked);
  // Data only: a request, or a READ response (the responder is the one sending the data).
  // An ACK that met a full queue is no sign of this QP's own data causing it.
  if (!p.info->is_request() && p.info->op != Operation::kReadResponse) return;
  if (qp->cc.cnp_sent_any && now_ - qp->cc.cnp_sent_ns < cfg_.cc.min_time_between_cnps_ns) {
    counters_.inc(Counter::cnp_held);
    return;
  }
  // Connected QPs answer their one peer. A UD QP answers whoever sent the datagram: the
  // sender's address and MAC from the packet, its QP from the DETH (the CNPs of one of our
  // UD QPs share its period, whatever their destination).
  RoceHeaders h;
  uint32_t dest_qpn = qp->dest_qpn;
  if (qp->type == IBV_QPT_UD) {
    const RoceHeaders& in = p.hdr;
    dest_qpn = in.ext.deth.src_qp;
    h.eth.dst = in.eth.src;
    h.eth.src = mac_;
    h.eth.has_vlan = cfg_.vlan_id != 0;  // the device's VLAN, as every frame it sends
    h.eth.vid = cfg_.vlan_id;
    h.eth.pcp = in.eth.pcp;
    h.ipv6 = in.ipv6;
    if (in.ipv6) {
      h.ip6.src = in.ip6.dst;
      h.ip6.dst = in.ip6.src;
      h.ip6.hop_limit = 64;
    } else {
      h.ip4.src = in.ip4.dst;
      h.ip4.dst = in.ip4.src;
      h.ip4.ttl = 64;
    }
    // The sender's flow: ECMP takes the CNP its way back (through UDP sockets: one of theirs).
    h.udp.src_port = cfg_.udp_src_ports.empty() ? in.udp.src_port : source_port(qp->qpn, dest_qpn);
  } else {
    h = headers_for(qp->path, qp->qpn, qp->dest_qpn);
  }
  if (h.ipv6) {
    h.ip6.traffic_class = static_cast<uint8_t>(cfg_.cc.cnp_dscp << 2);
  } else {
    h.ip4.dscp = cfg_.cc.cnp_dscp;
    h.ip4.ecn = 0;
  }
  h.bth.opcode = opcode::kCnp;
  h.bth.pkey = 0xFFFF;
  h.bth.becn = true;
  h.bth.psn = 0;
  h.bth.dest_qp = dest_qpn;
  FrameLayout lay;
  Frame* f = build_packet(h, 0, &lay);
  if (f == nullptr) return;
  send_built(f, lay);
  qp->cc.cnp_sent_ns = now_;
  qp->cc.cnp_sent_any = true;
  counters_.inc(Counter::cnp_sent);
}

void Engine::receive_cnp(const ParsedPacket& p) {
  const RoceHeaders& h = p.hdr;
  Qp* qp = qp_by_num(h.bth.dest_qp);
  const Gid src = h.ipv6 ? h.ip6.src : ipv4_mapped_gid(h.ip4.src);
  // Only a connected QP's own peer may slow it down (a CNP from anyone else is a forgery). A
  // UD QP has no one peer: any host it may send to may tell it to slow down, as on RNICs. A
  // responder sends READ responses from RTR on (an XRC target often never leaves it).
  const bool answers = qp != nullptr && (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_XRC_RECV);
  if (qp == nullptr ||
      (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
       !(answers && qp->state == IBV_QPS_RTR)) ||
      (qp->type != IBV_QPT_UD && src != qp->path.dgid)) {
    counters_.inc(Counter::rx_drop_cnp);
    return;
  }
  counters_.inc(Counter::cnp_rcvd);
  ++qp->cc.cnps_rcvd;
  if (!cfg_.cc.ecn) return;  // counted, no reaction
  const bool fresh = qp->cc.sent_rate_at_ns != 0 && now_ - qp->cc.sent_rate_at_ns < kRateStaleNs;
  if (!qp->cc.dcqcn.on_cnp(now_, fresh ? qp->cc.sent_rate_mbps : 0)) return;
  counters_.inc(Counter::cc_rate_cuts);
  timers_.arm(qp->cc.alpha_timer, now_ + cfg_.cc.dcqcn.dce_tcp_rtt_ns);
  timers_.arm(qp->cc.rate_timer, now_ + cfg_.cc.dcqcn.rpg_time_reset_ns);
  trace_rate(qp, VerbsEvent::kRateCut);
}

void Engine::on_cc_timer(Timer& t) {
  Qp* qp = static_cast<Qp*>(t.owner);
  if (t.kind == kTimerPace) {
    --paced_qps_;  // the wheel disarmed it
    schedule(qp);
    return;
  }
  if (!qp->cc.dcqcn.limited()) return;
  if (t.kind == kTimerCcAlpha) {
    qp->cc.dcqcn.on_alpha_timer();
    timers_.arm(qp->cc.alpha_timer, now_ + cfg_.cc.dcqcn.dce_tcp_rtt_ns);
    return;
  }
  qp->cc.dcqcn.on_rate_timer();
  if (qp->cc.dcqcn.limited()) {
    timers_.arm(qp->cc.rate_timer, now_ + cfg_.cc.dcqcn.rpg_time_reset_ns);
    trace_rate(qp, VerbsEvent::kRateTimer);
  } else {
    timers_.cancel(qp->cc.alpha_timer);
    trace_rate(qp, VerbsEvent::kRateLine);
  }
  schedule(qp);  // a faster pace may let a waiting packet go now
}

bool Engine::pace_wait(Qp* qp) {
  if (now_ >= qp->cc.pace_next_ns) return false;
  const bool dcqcn = cfg_.cc.ecn && (qp->cc.dcqcn.limited() || cfg_.cc.pace_at_line_rate);
  if (!dcqcn && qp->cc.rate_limit_kbps == 0) return false;
  if (!qp->cc.pace_timer.armed) {
    timers_.arm(qp->cc.pace_timer, qp->cc.pace_next_ns);
    ++paced_qps_;
  }
  counters_.inc(Counter::cc_paced);
  return true;
}

void Engine::paced(Qp* qp, uint32_t bytes) {
  if (!cfg_.cc.ecn) {
    if (qp->cc.rate_limit_kbps != 0) advance_pace(qp, bytes);
    return;
  }
  // What it really sends: the first cut starts from there.
  if (now_ - qp->cc.sent_window_start_ns >= kRateWindowNs) {
    if (qp->cc.sent_window_start_ns != 0 && now_ - qp->cc.sent_window_start_ns < kRateStaleNs) {
      qp->cc.sent_rate_mbps = static_cast<double>(qp->cc.sent_window_bytes) * 8000.0 /
                           static_cast<double>(now_ - qp->cc.sent_window_start_ns);
      qp->cc.sent_rate_at_ns = now_;
    }
    qp->cc.sent_window_start_ns = now_;
    qp->cc.sent_window_bytes = 0;
  }
  qp->cc.sent_window_bytes += bytes;
  advance_pace(qp, bytes);
  if (!qp->cc.dcqcn.on_bytes(bytes)) return;
  if (qp->cc.dcqcn.limited()) {
    trace_rate(qp, VerbsEvent::kRateBytes);
  } else {
    timers_.cancel(qp->cc.alpha_timer);
    timers_.cancel(qp->cc.rate_timer);
    trace_rate(qp, VerbsEvent::kRateLine);
  }
}

int Engine::modify_rate_limit(Qp* qp, const ibv_qp_rate_limit_attr& a) {
  // As a modify RTS -> RTS with IBV_QP_RATE_LIMIT; a burst or packet size needs a rate.
  if (a.comp_mask != 0 || ((a.max_burst_sz != 0 || a.typical_pkt_sz != 0) && a.rate_limit == 0))
    return EINVAL;
  if ((qp->type != IBV_QPT_RC && qp->type != IBV_QPT_RAW_PACKET) || qp->state != IBV_QPS_RTS)
    return EINVAL;
  if (a.rate_limit != 0 && (a.rate_limit < kRateLimitMinKbps || a.rate_limit > kRateLimitMaxKbps))
    return EINVAL;
  set_rate_limit(qp, a.rate_limit, a.max_burst_sz);
  return 0;
}

void Engine::set_rate_limit(Qp* qp, uint32_t kbps, uint32_t burst_bytes) {
  qp->cc.rate_limit_kbps = kbps;
  qp->cc.burst_bytes = kbps != 0 ? burst_bytes : 0;
  // The new rate counts from now: a packet held for the old one may go at once.
  qp->cc.pace_next_ns = std::min(qp->cc.pace_next_ns, now_);
  trace({VerbsEvent::Kind::kRateLimit, qp->qpn, 0, 0, kbps, static_cast<int>(qp->cc.burst_bytes), 0});
  schedule(qp);
}

void Engine::advance_pace(Qp* qp, uint32_t bytes) {
  // The pacer's clock (it holds packets while DCQCN has cut the rate, or always at the line
  // rate when asked: a burst then leaves at that rate, as through a NIC, not at memory's
  // speed), and at the application's rate limit: the slower of the two. How far behind the
  // clock it may start: the slack, or the time the limit's burst takes (a token bucket of
  // burst_bytes).
  uint64_t wire = cfg_.cc.ecn ? qp->cc.dcqcn.wire_time_ns(bytes) : 0;
  uint64_t slack = kPaceSlackNs;
  if (const uint64_t kbps = qp->cc.rate_limit_kbps; kbps != 0) {
    wire = std::max<uint64_t>(wire, uint64_t{bytes} * 8'000'000 / kbps);
    slack = std::max(slack, uint64_t{qp->cc.burst_bytes} * 8'000'000 / kbps);
  }
  const uint64_t start = std::max(qp->cc.pace_next_ns, now_ > slack ? now_ - slack : 0);
  qp->cc.pace_next_ns = start + wire;
}

void Engine::trace_rate(const Qp* qp, int cause) const {
  if (tracer_ == nullptr) return;
  VerbsEvent e;
  e.kind = VerbsEvent::Kind::kRate;
  e.qpn = qp->qpn;
  e.opcode = cause;
  e.length = static_cast<uint32_t>(qp->cc.dcqcn.rate_mbps());
  e.psn = static_cast<uint32_t>(qp->cc.dcqcn.target_mbps());
  e.status = static_cast<int>(qp->cc.dcqcn.alpha() * 1024);
  tracer_->event(e);
}

size_t Engine::cc_limited_qps(CcQpStats* out, size_t max) const {
  size_t n = 0;
  for (const auto& q : qps_) {
    if (n == max) break;
    if (q == nullptr || !q->cc.dcqcn.limited()) continue;
    out[n++] = {q->qpn,
                static_cast<uint32_t>(q->cc.dcqcn.rate_mbps()),
                static_cast<uint32_t>(q->cc.dcqcn.target_mbps()),
                static_cast<uint32_t>(q->cc.dcqcn.alpha() * 1024),
                q->cc.cnps_rcvd,
                q->cc.dcqcn.cuts()};
  }
  return n;
}

}  // namespace uroce

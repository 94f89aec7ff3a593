// Requester: turns send WQEs into packets. Segments each message by the path MTU into
// first/middle/last/only packets, assigns PSNs, sets AckReq, respects the send window,
// max_rd_atomic and fences, and re-sends from a given PSN when the completer asks
// (go-back-N). UC and UD WQEs complete as soon as they are on the wire.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {

uint32_t packets_for(uint32_t length, uint32_t mtu) {
  return length == 0 ? 1 : (length + mtu - 1) / mtu;
}

/// The PSNs a WQE takes: one per packet of a SEND or WRITE, one per response packet of a
/// READ (the responder numbers them), one for an atomic.
uint32_t psn_span(const SendWqe& w, uint32_t mtu) {
  return w.info().one_psn ? 1 : packets_for(w.length, mtu);
}

/// The BTH opcode for packet `idx` of `n` of a SEND or RDMA WRITE on an RC, UC or XRC QP.
uint8_t data_opcode(ibv_qp_type type, const WrOpInfo& op, uint32_t idx, uint32_t n) {
  const bool first = idx == 0, last = idx + 1 == n;
  return opcode_base(type) | (n == 1 ? op.bth_only
                              : first ? op.bth_first
                              : last  ? op.bth_last
                                      : op.bth_middle);
}

}  // namespace

bool Engine::prepare_wqe(Qp* qp, SendWqe& w) {
  // Check every local buffer once, before the first packet (the per-packet copy checks again,
  // cheaply, in case an MR went away). READ and atomic results are written: LOCAL_WRITE.
  if (w.is_inline) return true;
  const WrKind k = w.info().kind;
  const int need = k == WrKind::kRead || k == WrKind::kAtomic ? IBV_ACCESS_LOCAL_WRITE : 0;
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    uint8_t* host;
    if (w.sge[i].length != 0 &&
        mrs_.check(w.sge[i].lkey, qp->pd, w.sge[i].addr, w.sge[i].length, need, &host) !=
            mem::AccessError::kOk)
      return false;
  }
  return true;
}

bool Engine::gather(Qp* qp, const SendWqe& w, uint32_t offset, Frame* f, FrameLayout* lay,
                    uint32_t len) {
  uint8_t* dst = f->data + lay->payload_off;
  uint32_t crc = lay->crc;
  if (w.is_inline) {
    const Bytes src(w.inline_data.data() + offset, len);
    std::memcpy(dst, src.data(), len);
    crc = wire::crc32(crc, src);
  } else if (!copy_from_sges(qp->pd, w.sge.data(), w.num_sge, offset, dst, len, &crc)) {
    return false;
  }
  wire::payload_crc(*lay, crc, len);
  return true;
}

bool Engine::send_packet(Qp* qp, SendWqe& w) {
  RoceHeaders h = qp->tx_template;
  BthRepr& b = h.bth;
  uint32_t payload = 0;
  uint32_t offset = 0;
  bool last = true;
  Psn psn = w.first_psn + static_cast<int32_t>(w.sent);
  switch (static_cast<int>(w.opcode)) {  // (FLUSH is not in rdma-core 44's enum)
    case IBV_WR_RDMA_READ: {
      // A READ resumes where its responses stopped: va and length skip what arrived.
      const uint32_t done_bytes = w.read_done * qp->mtu;
      psn = w.first_psn + static_cast<int32_t>(w.read_done);
      b.opcode = opcode_base(qp->type) | opcode::kRcReadRequest;
      h.ext.reth = {w.remote_addr + done_bytes, w.rkey, w.length - done_bytes};
      break;
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      b.opcode = opcode_base(qp->type) | (w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP
                                              ? opcode::kRcCompareSwap
                                              : opcode::kRcFetchAdd);
      // FETCH_ADD: the add value is in Swap/Add Data, Compare Data is unused (0, as rxe).
      h.ext.atomic = {w.remote_addr, w.rkey,
                      w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? w.swap : w.compare_add,
                      w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? w.compare_add : 0};
      break;
    case IBV_WR_ATOMIC_WRITE:
      b.opcode = w.info().bth_only;  // RC only: no transport bits to add
      h.ext.reth = {w.remote_addr, w.rkey, 8};
      payload = 8;
      break;
    case UROCE_WR_FLUSH:
      b.opcode = w.info().bth_only;  // RC only
      h.ext.feth.raw = static_cast<uint32_t>(w.flush_level << 4 | w.flush_type);
      h.ext.reth = {w.remote_addr, w.rkey, w.flush_len};
      break;
    default: {
      const uint32_t idx = w.sent;
      offset = idx * qp->mtu;
      payload = std::min(qp->mtu, w.length - offset);
      last = idx + 1 == w.npkts;
      b.opcode = data_opcode(qp->type, w.info(), idx, w.npkts);
      const OpcodeInfo& info = opcode_info(b.opcode);
      if (info.has(Ext::kReth)) h.ext.reth = {w.remote_addr, w.rkey, w.length};
      if (info.has(Ext::kImmDt)) h.ext.imm.imm = __builtin_bswap32(w.imm_or_inv);
      if (info.has(Ext::kIeth)) h.ext.ieth.rkey = w.imm_or_inv;
      b.se = last && (w.send_flags & IBV_SEND_SOLICITED) &&
             (w.opcode != IBV_WR_RDMA_WRITE);
      break;
    }
  }
  b.psn = psn.value();
  h.ext.xrceth.srqn = w.xrc_srqn;  // XRC: every request packet names the target's SRQ
  if (is_reliable(qp->type)) {
    // Ask for an ACK at the end of every message, now and then inside long ones, and on the
    // packet that fills the congestion window (nothing more goes out until an ACK comes).
    b.ack_req = last || ++qp->req.pkts_since_ackreq >= cfg_.ack_every ||
                (psn + 1) - qp->comp.psn >= static_cast<int32_t>(qp->comp.cwnd);
    if (b.ack_req) qp->req.pkts_since_ackreq = 0;
  }

  FrameLayout lay;
  Frame* f = build_packet(h, payload, &lay);
  if (f == nullptr) return false;
  if (payload != 0 && !gather(qp, w, offset, f, &lay, payload)) {
    port_.free_frame(f);
    fail_send(qp, w, IBV_WC_LOC_PROT_ERR);
    return false;
  }
  if (psn - qp->req.max_sent_psn <= 0 && qp->req.sent_any) counters_.inc(Counter::retransmitted_pkts);
  if (!qp->req.sent_any || psn - qp->req.max_sent_psn > 0) qp->req.max_sent_psn = psn;
  qp->req.sent_any = true;
  // The rewind's first packet is out: the completer no longer needs to tell its NAKs apart.
  if (qp->req.state == Requester::State::kRetryPending) set_req_state(qp, Requester::State::kReady);
  send_built(f, lay);
  paced(qp, static_cast<uint32_t>(lay.len));
  qp->cc.requester_turn = false;

  if (w.info().one_packet) {
    w.sent = w.npkts;
  } else {
    ++w.sent;
  }
  if (w.sent >= w.npkts) w.state = WqeState::kSent;
  return true;
}

void Engine::ud_send(Qp* qp, SendWqe& w) {
  RoceHeaders h = headers_for(w.ah->path, qp->qpn, w.remote_qpn);
  // ECN-capable, as the connected QPs' packets (fill_template), unless the address handle's
  // traffic class chose the ECN bits itself. Not multicast: its receivers send no CNPs, and
  // a switch would mark the group's datagrams instead of dropping them, unanswered.
  if (cfg_.cc.ecn && (w.ah->path.traffic_class & 3) == 0 && !is_multicast_gid(w.ah->path.dgid)) {
    if (h.ipv6) {
      h.ip6.traffic_class |= kEcnEct0;
    } else {
      h.ip4.ecn = kEcnEct0;
    }
  }
  h.bth.opcode = w.opcode == IBV_WR_SEND_WITH_IMM ? opcode::kUdSendOnlyImm : opcode::kUdSendOnly;
  h.bth.se = (w.send_flags & IBV_SEND_SOLICITED) != 0;
  h.bth.psn = qp->req.psn.value();
  // A Q_Key with the high bit set means "use the QP's own Q_Key" (IBA 10.2.5).
  const uint32_t qkey = (w.remote_qkey & 0x80000000u) ? qp->qkey : w.remote_qkey;
  h.ext.deth = {qkey, 0, qp->qpn};
  h.ext.imm.imm = __builtin_bswap32(w.imm_or_inv);
  FrameLayout lay;
  Frame* f = build_packet(h, w.length, &lay);
  if (f == nullptr) return;
  if (!gather(qp, w, 0, f, &lay, w.length)) {
    port_.free_frame(f);
    w.state = WqeState::kDone;
    w.status = IBV_WC_LOC_PROT_ERR;
    return;
  }
  send_built(f, lay);
  paced(qp, static_cast<uint32_t>(lay.len));
  ++qp->req.psn;
  w.state = WqeState::kDone;
}

bool Engine::requester_step(Qp* qp, uint32_t* budget) {
  if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) return false;
  take_pending_internal(qp);
  if (!qp->sq_pending.empty()) {
    schedule(qp);  // the queue was busy (a poster holds it): come back
  }
  if (qp->req.state == Requester::State::kRnrWait) return false;  // the RNR timer reschedules us

  bool more = false;
  while (qp->req.cursor != qp->sq.tail_index()) {
    if (*budget == 0) {
      more = true;
      break;
    }
    SendWqe& w = qp->sq.at_abs(qp->req.cursor);
    if (w.state == WqeState::kDone) {  // acknowledged while we were going back
      ++qp->req.cursor;
      continue;
    }
    if (qp->req.cursor == qp->req.assigned_end) {
      // A new WQE: may it start now?
      if (qp->state == IBV_QPS_SQD) break;  // draining: no new work
      if (w.is_local()) {
        // A bind or local invalidate: carried out here, in order with the work before it (a
        // fenced bind waits for the READs and atomics before it, as a fenced SEND does). A
        // local invalidate waits until everything before it has completed, as rxe's does:
        // work posted earlier may still be using the window.
        if ((w.send_flags & IBV_SEND_FENCE) && qp->req.rd_atomic_outstanding > 0) break;
        if (w.info().waits_for_all_before && qp->sq.head_index() != qp->req.cursor) break;
        ++qp->req.assigned_end;
        ++qp->req.cursor;
        if (!run_local_op(qp, w)) return false;  // the QP is in error
        retire_sq(qp);
        continue;
      }
      if (is_reliable(qp->type)) {
        // All the PSNs it will take, a READ's response packets included.
        const uint32_t n = psn_span(w, qp->mtu);
        if (qp->req.psn - qp->comp.psn + static_cast<int32_t>(n) >
                static_cast<int32_t>(cfg_.tx_window) &&
            qp->req.psn != qp->comp.psn)
          break;  // window full: ACKs will reschedule us
        if (w.uses_rd_atomic() && qp->req.rd_atomic_outstanding >= qp->max_rd_atomic) break;
        if ((w.send_flags & IBV_SEND_FENCE) && qp->req.rd_atomic_outstanding > 0) break;
      }
      // A UD QP's datagrams are held to its rate too (DCQCN per QP, whoever they go to), a
      // raw QP's frames to its rate limit.
      if ((qp->type == IBV_QPT_UD ||
           (qp->type == IBV_QPT_RAW_PACKET && qp->cc.rate_limit_kbps != 0)) &&
          pace_wait(qp))
        break;  // the pace timer wakes us
      if (!prepare_wqe(qp, w)) {
        ++qp->req.assigned_end;
        ++qp->req.cursor;
        fail_send(qp, w, IBV_WC_LOC_PROT_ERR);
        return false;
      }
      // A datagram or a raw frame: one packet, done once it is out.
      if (qp->type == IBV_QPT_UD || qp->type == IBV_QPT_RAW_PACKET) {
        if (qp->type == IBV_QPT_UD) {
          ud_send(qp, w);
        } else if (!raw_send(qp, w)) {
          more = true;  // out of frames
          break;
        }
        ++qp->req.assigned_end;
        ++qp->req.cursor;
        --*budget;
        retire_sq(qp);
        continue;
      }
      w.first_psn = qp->req.psn;
      w.npkts = psn_span(w, qp->mtu);
      w.sent = 0;
      w.state = WqeState::kSending;
      qp->req.psn += static_cast<int32_t>(w.npkts);
      if (w.uses_rd_atomic()) ++qp->req.rd_atomic_outstanding;
      ++qp->req.assigned_end;
    }
    if (is_reliable(qp->type)) {
      // Congestion window: the oldest unacknowledged packet may always go.
      const Psn next = w.first_psn + (w.uses_rd_atomic() ? 0 : static_cast<int32_t>(w.sent));
      if (next != qp->comp.psn && next - qp->comp.psn >= static_cast<int32_t>(qp->comp.cwnd))
        break;  // ACKs reopen it and reschedule us
    }
    if (pace_wait(qp)) break;  // DCQCN or a rate limit holds it: the pace timer wakes us
    if (!send_packet(qp, w)) {
      if (qp->state == IBV_QPS_ERR) return false;
      more = true;  // out of frames: try again next poll
      break;
    }
    --*budget;
    if (w.state == WqeState::kSent) {
      ++qp->req.cursor;
      if (qp->type == IBV_QPT_UC) {
        w.state = WqeState::kDone;  // UC: complete once it is on the wire
        retire_sq(qp);
      }
    }
    if (is_reliable(qp->type) && !qp->comp.retransmit_timer.armed) arm_retransmit(qp);
  }
  if (qp->state == IBV_QPS_SQD && !qp->req.drained_notified &&
      qp->sq.head_index() == qp->req.assigned_end) {
    qp->req.drained_notified = true;
    if (qp->en_sqd_async_notify) post_event(IBV_EVENT_SQ_DRAINED, qp);
  }
  return more;
}

void Engine::pop_internal(Qp* qp, ibv_wc_status st) {
  SendWqe done = qp->sq.front();
  done.status = st;
  qp->sq.pop();
  qp->sq_internal.fetch_sub(1, std::memory_order_relaxed);
  tm_internal_done(qp, done);
}

void Engine::retire_sq(Qp* qp) {
  while (!qp->sq.empty() && qp->sq.head_index() < qp->req.assigned_end) {
    SendWqe& w = qp->sq.front();
    if (w.state != WqeState::kDone) break;
    if (w.internal != SendWqe::Internal::kNone) {  // the device's own (tag matching)
      pop_internal(qp, w.status);
      continue;
    }
    const bool report = w.signaled || w.status != IBV_WC_SUCCESS;
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = w.status;
    wc.opcode = w.info().wc_opcode;
    wc.byte_len = w.length;
    wc.qp_num = qp->qpn;
    // The slot is free before the completion is visible: an application that polls it on
    // another thread and posts at once (perftest keeps exactly tx_depth WRs posted) must
    // find room, or its post fails with ENOMEM.
    qp->sq.pop();
    if (report) push_cqe(qp->send_cq, wc, qp);
  }
  if (qp->req.cursor < qp->sq.head_index()) qp->req.cursor = qp->sq.head_index();
}

bool Engine::run_local_op(Qp* qp, SendWqe& w) {
  if (w.opcode == IBV_WR_BIND_MW) {
    if (!mrs_.bind(w.bind, qp->pd, qp->qpn)) {
      fail_send(qp, w, IBV_WC_MW_BIND_ERR);
      return false;
    }
  } else if (!mrs_.invalidate(w.imm_or_inv, qp->pd, 0)) {  // IBV_WR_LOCAL_INV
    fail_send(qp, w, IBV_WC_LOC_QP_OP_ERR);
    return false;
  }
  w.state = WqeState::kDone;
  w.status = IBV_WC_SUCCESS;
  return true;
}

void Engine::release_rd_atomic(Qp* qp, const SendWqe& w) {
  if (w.uses_rd_atomic() && qp->req.rd_atomic_outstanding > 0) --qp->req.rd_atomic_outstanding;
}

// ---- What other rooms ask of the requester ---------------------------------------------------

void Engine::set_req_state(Qp* qp, Requester::State s) {
  move_role(qp, Role::kRequester, qp->req.state, s, qp->req.retry_psn);
}

void Engine::init_requester(Qp* qp) {
  qp->req.rnr_timer.owner = qp;
  qp->req.rnr_timer.kind = kTimerRnr;
}

void Engine::reset_requester(Qp* qp) {
  timers_.cancel(qp->req.rnr_timer);
  set_req_state(qp, Requester::State::kReady);
  qp->req.cursor = qp->req.assigned_end = 0;
  qp->req.rd_atomic_outstanding = 0;
  qp->req.pkts_since_ackreq = 0;
}

void Engine::flush_requester(Qp* qp) {
  while (!qp->sq.empty()) {
    SendWqe& w = qp->sq.front();
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.status = w.state == WqeState::kDone ? w.status : IBV_WC_WR_FLUSH_ERR;
    wc.opcode = w.info().wc_opcode;
    wc.qp_num = qp->qpn;
    if (wc.status == IBV_WC_WR_FLUSH_ERR) counters_.inc(Counter::flushed_wqes);
    // Successful WQEs still owed a completion keep their signalling; errors always complete.
    // The slot is freed before the completion shows (as in retire_sq).
    const bool report = wc.status != IBV_WC_SUCCESS || w.signaled;
    if (w.internal != SendWqe::Internal::kNone) {  // the device's own: its buffer's completion
      pop_internal(qp, wc.status);
      continue;
    }
    qp->sq.pop();
    if (report) push_cqe(qp->send_cq, wc, nullptr);
  }
  qp->req.cursor = qp->req.assigned_end = qp->sq.head_index();
  qp->req.rd_atomic_outstanding = 0;
  // The device's own work that never reached the queue: its buffers complete flushed.
  std::vector<SendWqe> pending;
  pending.swap(qp->sq_pending);
  for (SendWqe& w : pending) {
    w.status = IBV_WC_WR_FLUSH_ERR;
    tm_internal_done(qp, w);
  }
}

void Engine::start_send_psn(Qp* qp, Psn psn) {
  qp->req.psn = psn;
  completer_start_psn(qp, psn);
}

void Engine::restart_drain(Qp* qp) { qp->req.drained_notified = false; }

void Engine::rewind_requester(Qp* qp, Psn psn) {
  for (uint64_t i = qp->sq.head_index(); i < qp->req.assigned_end; ++i) {
    SendWqe& w = qp->sq.at_abs(i);
    if (w.state == WqeState::kDone || w.last_psn() - psn < 0) continue;
    qp->req.cursor = i;
    w.sent = w.uses_rd_atomic() ? 0 : static_cast<uint32_t>(std::max(0, psn - w.first_psn));
    w.state = WqeState::kSending;
    for (uint64_t j = i + 1; j < qp->req.assigned_end; ++j) {
      SendWqe& later = qp->sq.at_abs(j);
      if (later.state == WqeState::kDone) continue;
      later.sent = 0;
      later.state = WqeState::kSending;
    }
    qp->req.pkts_since_ackreq = 0;
    qp->req.retry_psn = psn;
    // An RNR wait keeps holding it; the rewind is taken when the wait is over.
    if (qp->req.state != Requester::State::kRnrWait)
      set_req_state(qp, Requester::State::kRetryPending);
    schedule(qp);
    break;
  }
}

void Engine::requester_partly_acked(Qp* qp, uint64_t index, Psn upto) {
  // A go-back-N need not re-send the packets of the message being sent that are acknowledged.
  SendWqe& w = qp->sq.at_abs(index);
  if (index == qp->req.cursor && !w.uses_rd_atomic() && upto - w.first_psn > 0 &&
      static_cast<uint32_t>(upto - w.first_psn) > w.sent)
    w.sent = static_cast<uint32_t>(upto - w.first_psn);
}

void Engine::requester_skip_to(Qp* qp, uint64_t index) {
  if (qp->req.cursor < index) qp->req.cursor = index;
}

void Engine::hold_requester_for_rnr(Qp* qp, uint64_t ns) {
  set_req_state(qp, Requester::State::kRnrWait);
  timers_.arm(qp->req.rnr_timer, now_ + ns);
}

void Engine::on_rnr_timeout(Qp* qp) {
  // The wait is over: the rewind the RNR NAK asked for is taken now.
  set_req_state(qp, Requester::State::kRetryPending);
  if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) return;
  trace({VerbsEvent::Kind::kRnrResend, qp->qpn, 0, 0, 0, 0, qp->comp.psn.value()});
  schedule(qp);
  arm_retransmit(qp);
}

}  // namespace uroce

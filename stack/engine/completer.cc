// Completer: the requester's other half. Processes ACKs, NAKs, RNR NAKs, READ responses and
// atomic ACKs (IBA 9.7.5): retires acknowledged WQEs in order, writes READ and atomic results
// into local buffers, runs the retransmission timer (4.096 us * 2^timeout) and the RNR wait,
// goes back N on a PSN sequence error, and turns remote errors into completions.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {
/// First not-done WQE at or after the front, as an absolute index.
uint64_t first_open(Qp* qp) {
  uint64_t i = qp->sq.head_index();
  while (i < qp->req.assigned_end && qp->sq.at_abs(i).state == WqeState::kDone) ++i;
  return i;
}
}  // namespace

void Engine::arm_retransmit(Qp* qp) {
  const bool outstanding = qp->req.psn != qp->comp.psn;
  if (qp->timeout == 0 || !outstanding || qp->req.state == Requester::State::kRnrWait ||
      (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)) {
    timers_.cancel(qp->comp.retransmit_timer);
    return;
  }
  // IBA 9.7.6.1.3: the local ACK timeout is 4.096 us * 2^timeout.
  timers_.arm(qp->comp.retransmit_timer, now_ + (uint64_t{4096} << qp->timeout));
}

void Engine::complete_send(Qp* qp, SendWqe& w) {
  release_rd_atomic(qp, w);
  w.state = WqeState::kDone;
  w.status = IBV_WC_SUCCESS;
}

void Engine::fail_send(Qp* qp, SendWqe& w, ibv_wc_status st) {
  release_rd_atomic(qp, w);
  w.state = WqeState::kDone;
  w.status = st;
  retire_sq(qp);  // WQEs before it complete normally, then this one with its error
  enter_error(qp);
}

void Engine::widen_cwnd(Qp* qp, Psn upto) {
  // Slow start: one more packet of window per newly acknowledged packet, up to tx_window.
  if (const int32_t acked = upto - qp->comp.psn; acked > 0)
    qp->comp.cwnd = std::min(cfg_.tx_window, qp->comp.cwnd + static_cast<uint32_t>(acked));
}

void Engine::ack_upto(Qp* qp, Psn upto) {
  // Everything with PSN < upto has been executed by the responder.
  bool progress = false;
  for (uint64_t i = qp->sq.head_index(); i < qp->req.assigned_end; ++i) {
    SendWqe& w = qp->sq.at_abs(i);
    if (w.state == WqeState::kDone) continue;
    if (w.last_psn() - upto >= 0) {
      requester_partly_acked(qp, i, upto);
      break;
    }
    if (w.uses_rd_atomic()) {
      // A later PSN was acknowledged but this READ/ATOMIC's response never came: it was
      // lost. Ask again (an "implicit NAK", IBA 9.7.5.1.4).
      counters_.inc(Counter::implicit_naks);
      retry_from(qp, w.first_psn + static_cast<int32_t>(w.read_done));
      break;
    }
    complete_send(qp, w);
    progress = true;
  }
  if (upto - qp->comp.psn > 0) {
    widen_cwnd(qp, upto);
    qp->comp.psn = upto;
    progress = true;
  }
  // A READ/ATOMIC completed by its response is done but not yet retired.
  if (!qp->sq.empty() && qp->sq.front().state == WqeState::kDone) progress = true;
  if (progress) {
    note_progress(qp);
    retire_sq(qp);
    requester_skip_to(qp, first_open(qp));
    arm_retransmit(qp);
    schedule(qp);  // the window may have opened
  }
}

void Engine::retry_from(Qp* qp, Psn psn) {
  rewind_requester(qp, psn);  // go back N
  arm_retransmit(qp);
}

void Engine::note_progress(Qp* qp) {
  // Forward progress refills both retry counts: each bounds the retries of one message.
  qp->comp.retry_left = qp->retry_cnt;
  qp->comp.rnr_retry_left = qp->rnr_retry;
  qp->comp.round = Completer::Round::kNone;
}

bool Engine::retry_on_gap(Qp* qp) {
  // The first gap or NAK after progress goes back at once and spends a retry. While that
  // round has made no progress, one more gap/NAK may go back again, free, in each timeout
  // period; further ones wait for the timer, which spends. So every retry_cnt round is a
  // timeout's worth of chances, not half of one: on a link damaging a fifth of the frames,
  // a re-asked READ whose response lost its first packet (gap: retry) and then whose new
  // request was lost (timeout: retry) spent two rounds in one period, and rping's retry_cnt
  // 7 ran out (docs/transport.md, "Reordering"). rxe's completer waits for the timer
  // instead of the free one (its started_retry).
  if (qp->comp.round == Completer::Round::kNone) {
    if (!spend_retry(qp)) return false;
    qp->comp.round = Completer::Round::kStarted;
    return true;
  }
  if (qp->comp.round == Completer::Round::kExtraUsed) return false;
  qp->comp.round = Completer::Round::kExtraUsed;
  return true;
}

bool Engine::spend_retry(Qp* qp) {
  // retry_cnt counts the retries allowed without forward progress (note_progress refills it).
  if (qp->comp.retry_left > 0) {
    --qp->comp.retry_left;
    return true;
  }
  const uint64_t i = first_open(qp);
  if (i < qp->req.assigned_end) {
    counters_.inc(Counter::retry_exceeded);
    fail_send(qp, qp->sq.at_abs(i), IBV_WC_RETRY_EXC_ERR);
  }
  return false;
}

void Engine::on_retransmit_timeout(Qp* qp) {
  if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) return;
  if (qp->req.psn == qp->comp.psn) return;
  counters_.inc(Counter::retransmit_timeouts);
  if (!spend_retry(qp)) return;
  trace({VerbsEvent::Kind::kRetransmitTimeout, qp->qpn, 0, 0, 0, 0, qp->comp.psn.value()});
  qp->comp.round = Completer::Round::kStarted;
  set_comp_state(qp, Completer::State::kAcking);  // what we waited for did not come: ask again
  qp->comp.cwnd = kMinCwnd;
  retry_from(qp, qp->comp.psn);
}

bool Engine::scatter(Qp* qp, const SendWqe& w, uint32_t offset, const uint8_t* src,
                     uint32_t len) {
  return copy_to_sges(qp->pd, w.sge.data(), w.num_sge, offset, src, len);
}

void Engine::completer(Qp* qp, const ParsedPacket& p) {
  if (!is_reliable(qp->type)) return;
  const Psn psn(p.hdr.bth.psn);
  const OpcodeInfo& info = *p.info;

  // A response must be for a PSN we have sent and not yet seen acknowledged.
  if (psn - qp->req.psn >= 0) {
    counters_.inc(Counter::rx_drop_unexpected_resp);
    return;
  }

  if (info.op == Operation::kAck) {
    const AethRepr& a = p.hdr.ext.aeth;
    if (psn - qp->comp.psn < -1) return;  // an old, duplicate ACK
    switch (a.kind()) {
      case AckKind::kAck: ack_upto(qp, psn + 1); return;
      case AckKind::kRnrNak: {
        counters_.inc(Counter::rnr_naks_rcvd);
        ack_upto(qp, psn);
        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) return;
        if (qp->comp.rnr_retry_left == 0) {
          const uint64_t i = first_open(qp);
          if (i < qp->req.assigned_end) {
            counters_.inc(Counter::rnr_retry_exceeded);
            fail_send(qp, qp->sq.at_abs(i), IBV_WC_RNR_RETRY_EXC_ERR);
          }
          return;
        }
        if (qp->rnr_retry != 7) --qp->comp.rnr_retry_left;  // 7 means retry forever
        rewind_requester(qp, psn);
        // Wait at least the responder's timer value before sending again.
        hold_requester_for_rnr(qp, rnr_timer_ns(a.rnr_timer_code()));
        timers_.cancel(qp->comp.retransmit_timer);
        return;
      }
      case AckKind::kNak: {
        ack_upto(qp, psn);  // a NAK acknowledges everything before its PSN
        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) return;
        if (a.nak_code() == NakCode::kPsnSeqError) {
          counters_.inc(Counter::seq_naks_rcvd);
          // Already going back to exactly this PSN (e.g. the responder NAKs the rest of a
          // message it just RNR-NAKed): one retry is enough.
          if (qp->req.state == Requester::State::kRnrWait ||
              (qp->req.state == Requester::State::kRetryPending && qp->req.retry_psn == psn))
            return;
          qp->comp.cwnd = std::max(kMinCwnd, qp->comp.cwnd / 2);
          if (retry_on_gap(qp)) retry_from(qp, psn);
          return;
        }
        counters_.inc(Counter::error_naks_rcvd);
        ibv_wc_status st = IBV_WC_REM_OP_ERR;
        if (a.nak_code() == NakCode::kInvalidRequest) st = IBV_WC_REM_INV_REQ_ERR;
        if (a.nak_code() == NakCode::kRemoteAccessError) st = IBV_WC_REM_ACCESS_ERR;
        const uint64_t i = first_open(qp);
        if (i < qp->req.assigned_end) fail_send(qp, qp->sq.at_abs(i), st);
        return;
      }
      case AckKind::kReserved: counters_.inc(Counter::rx_drop_unexpected_resp); return;
    }
    return;
  }

  // READ response or ATOMIC ACKNOWLEDGE: find the READ/ATOMIC it answers. Everything before
  // it with a lower PSN is implicitly acknowledged.
  for (uint64_t i = qp->sq.head_index(); i < qp->req.assigned_end; ++i) {
    SendWqe& w = qp->sq.at_abs(i);
    if (w.state == WqeState::kDone) continue;
    if (!w.uses_rd_atomic()) {
      if (w.last_psn() - psn < 0) continue;  // acknowledged below
      counters_.inc(Counter::rx_drop_unexpected_resp);
      return;
    }
    const Psn expected = w.first_psn + static_cast<int32_t>(w.read_done);
    if (psn - expected < 0) {
      if (w.last_psn() - psn < 0) continue;  // (cannot happen: in-range check below)
      return;  // a duplicate response
    }
    if (psn != expected) {
      // A response went missing (a PSN gap inside the READ, or this READ/ATOMIC's response
      // lost and a later one arrived): ask again from the expected PSN, once. The rest of
      // the old response stream that is still in flight is ignored until it arrives.
      if (qp->comp.state == Completer::State::kGap && qp->comp.resp_gap_psn == expected) return;
      ack_upto(qp, w.first_psn);
      counters_.inc(psn - w.last_psn() > 0 ? Counter::implicit_naks : Counter::seq_naks_rcvd);
      if (!retry_on_gap(qp)) return;
      qp->comp.resp_gap_psn = expected;
      set_comp_state(qp, Completer::State::kGap);
      retry_from(qp, expected);
      return;
    }
    set_comp_state(qp, Completer::State::kAcking);
    ack_upto(qp, w.first_psn);
    if (qp->state == IBV_QPS_ERR) return;
    if (info.op == Operation::kAtomicAck) {
      if (w.info().kind != WrKind::kAtomic) {
        fail_send(qp, w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      const uint64_t orig = p.hdr.ext.atomic_ack.orig;
      uint8_t buf[8];
      std::memcpy(buf, &orig, 8);  // the original value, in host order, like a load
      if (!scatter(qp, w, 0, buf, 8)) {
        fail_send(qp, w, IBV_WC_LOC_PROT_ERR);
        return;
      }
    } else if (w.info().kind == WrKind::kAtomicWrite || w.info().kind == WrKind::kFlush) {
      // Their answer: a READ RESPONSE ONLY without data (IBA 1.5, as rxe sends it).
      if (!p.payload.empty() || info.pos != Position::kOnly) {
        fail_send(qp, w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      widen_cwnd(qp, psn + 1);
      qp->comp.psn = psn + 1;
      note_progress(qp);
    } else {
      if (w.opcode != IBV_WR_RDMA_READ) {
        fail_send(qp, w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      // Segment sizes: every segment but the last carries a full MTU. (A READ asked again
      // from the middle gets a new response message starting with FIRST/ONLY at that PSN, and
      // stragglers of the old one may still arrive: both are fine where the PSN fits.)
      const uint32_t offset = w.read_done * qp->mtu;
      const uint32_t want = std::min(qp->mtu, w.length - std::min(w.length, offset));
      const bool last_seg = w.read_done + 1 == w.npkts;
      if (p.payload.size() != want || last_seg != info.ends_message()) {
        fail_send(qp, w, IBV_WC_BAD_RESP_ERR);
        return;
      }
      if (!scatter(qp, w, offset, p.payload.data(), want)) {
        fail_send(qp, w, IBV_WC_LOC_PROT_ERR);
        return;
      }
      ++w.read_done;
      widen_cwnd(qp, psn + 1);  // a response segment acknowledges its PSN, as an ACK does
      qp->comp.psn = psn + 1;
      note_progress(qp);
      if (!last_seg) {
        arm_retransmit(qp);
        return;
      }
    }
    complete_send(qp, w);
    ack_upto(qp, psn + 1);
    return;
  }
  counters_.inc(Counter::rx_drop_unexpected_resp);
}

// ---- What other rooms ask of the completer ---------------------------------------------------

void Engine::set_comp_state(Qp* qp, Completer::State s) {
  move_role(qp, Role::kCompleter, qp->comp.state, s, qp->comp.resp_gap_psn);
}

void Engine::init_completer(Qp* qp) {
  qp->comp.retransmit_timer.owner = qp;
  qp->comp.retransmit_timer.kind = kTimerRetransmit;
  qp->comp.cwnd = cfg_.tx_window;
}

void Engine::reset_completer(Qp* qp) {
  timers_.cancel(qp->comp.retransmit_timer);
  set_comp_state(qp, Completer::State::kAcking);
  qp->comp.cwnd = cfg_.tx_window;
  qp->comp.round = Completer::Round::kNone;
}

void Engine::completer_start_psn(Qp* qp, Psn psn) { qp->comp.psn = psn; }

void Engine::refill_retries(Qp* qp) {
  qp->comp.retry_left = qp->retry_cnt;
  qp->comp.rnr_retry_left = qp->rnr_retry;
}

}  // namespace uroce

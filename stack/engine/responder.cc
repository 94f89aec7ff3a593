// Responder: executes incoming requests (IBA 9.7.4). Checks the PSN against the expected PSN
// (in order: execute; duplicate: re-ACK or replay a READ/ATOMIC from saved state; ahead: one
// PSN-sequence-error NAK), the opcode sequence, lengths, R_Keys and access rights — and only
// then touches memory. Sends ACKs (coalesced per poll), READ responses segmented by the MTU,
// atomic ACKs, RNR NAKs and error NAKs; delivers receive completions.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {

uint32_t packets_for(uint32_t length, uint32_t mtu) {
  return length == 0 ? 1 : (length + mtu - 1) / mtu;
}

/// Result of copying payload into the receive WQE.
enum class CopyResult { kOk, kTooLong, kBadKey };

}  // namespace

bool Engine::take_rwqe(Qp* qp) {
  if (qp->resp.have_rwqe) return true;
  if (qp->srq != nullptr) {
    Srq* srq = qp->srq;
    if (srq->ring.empty()) return false;
    qp->resp.rwqe = srq->ring.front();
    srq->ring.pop();
    if (srq->limit != 0 && srq->ring.size() < srq->limit) {
      srq->limit = 0;  // the limit event fires once, then must be re-armed
      post_event(IBV_EVENT_SRQ_LIMIT_REACHED, nullptr, nullptr, srq);
    }
  } else {
    if (qp->rq.empty()) return false;
    qp->resp.rwqe = qp->rq.front();
    qp->rq.pop();
  }
  qp->resp.have_rwqe = true;
  qp->resp.rwqe_offset = 0;
  return true;
}

bool Engine::copy_to_rwqe(Qp* qp, const uint8_t* src, uint32_t len) {
  if (!copy_to_sges(qp->pd, qp->resp.rwqe.sge.data(), qp->resp.rwqe.num_sge, qp->resp.rwqe_offset, src, len))
    return false;
  qp->resp.rwqe_offset += len;
  return true;
}

void Engine::complete_recv(Qp* qp, const ParsedPacket& p, ibv_wc_status st) {
  ibv_wc wc{};
  wc.wr_id = qp->resp.rwqe.wr_id;
  wc.status = st;
  wc.opcode = p.info->op == Operation::kWrite ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  wc.byte_len = p.info->op == Operation::kWrite ? qp->resp.write_len : qp->resp.rwqe_offset;
  wc.qp_num = qp->qpn;
  wc.src_qp = qp->type == IBV_QPT_UD ? p.hdr.ext.deth.src_qp : qp->dest_qpn;
  wc.pkey_index = qp->pkey_index;
  if (st == IBV_WC_SUCCESS) {
    if (p.info->has(Ext::kImmDt)) {
      wc.wc_flags |= IBV_WC_WITH_IMM;
      wc.imm_data = __builtin_bswap32(p.hdr.ext.imm.imm);  // network order, as verbs wants
    }
    if (p.info->has(Ext::kIeth)) {
      wc.wc_flags |= IBV_WC_WITH_INV;
      wc.invalidated_rkey = p.hdr.ext.ieth.rkey;
    }
    if (qp->type == IBV_QPT_UD) wc.wc_flags |= IBV_WC_GRH;
  }
  wc.sl = qp->path.sl;
  if (qp->type == IBV_QPT_UD) {
    // A RoCE UD completion says which network header came, in `sl` as mlx5 reports it (there
    // is no other field for it in ibv_wc): bit 3 set for RoCEv2 (UDP), bits 2:0 the L3 type,
    // 2 for IPv4 and 1 for IPv6. UCX reads it to find the destination address inside the
    // GRH area; rxe leaves it 0, and UCX 1.13 then drops every IPv4 datagram.
    wc.sl = p.hdr.ipv6 ? kWcSlRoceV2Ipv6 : kWcSlRoceV2Ipv4;
  }
  qp->resp.have_rwqe = false;
  push_cqe(qp->recv_cq, wc, qp);
}

void Engine::complete_recv_error(Qp* qp, uint64_t wr_id, ibv_wc_status st) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = st;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = qp->qpn;
  if (st == IBV_WC_WR_FLUSH_ERR) counters_.inc(Counter::flushed_wqes);
  Cq* cq = qp->recv_cq;
  if (qp->srq != nullptr && qp->srq->tm) {
    // A tag-matching SRQ's completions are its CQ's; a tagged buffer's say so.
    if (qp->srq->cq != nullptr) cq = qp->srq->cq;
    if (qp->resp.tm == Responder::Tm::kEager || qp->resp.tm == Responder::Tm::kRndv)
      wc.opcode = IBV_WC_TM_RECV;
  }
  push_cqe(cq, wc, nullptr);
}

void Engine::no_receive_wqe(Qp* qp, Psn psn) {
  if (is_reliable(qp->type)) {
    // Ask the requester to come back later (RNR NAK, IBA 9.7.5.2.8); ePSN stays put.
    send_nak(qp, AethRepr::make_rnr_nak(qp->min_rnr_timer), psn, Counter::rnr_naks_sent);
  } else {
    // UC: the message is lost.
    counters_.inc(Counter::rx_drop_uc_msg);
    set_resp_state(qp, Responder::State::kIdle);
    qp->resp.epsn = psn + 1;
  }
}

void Engine::send_ack(Qp* qp, uint8_t syndrome, Psn psn) { send_ack(qp, syndrome, psn, qp->resp.msn); }

void Engine::send_ack(Qp* qp, uint8_t syndrome, Psn psn, uint32_t msn) {
  RoceHeaders h = qp->tx_template;
  h.bth.opcode = opcode_base(qp->type) | opcode::kRcAck;
  h.bth.psn = psn.value();
  h.ext.aeth = {syndrome, msn & 0xFFFFFF};
  FrameLayout lay;
  Frame* f = build_packet(h, 0, &lay);
  if (f == nullptr) return;  // the requester's timer will recover
  send_built(f, lay);
  if (!tx_batch_.empty() && tx_batch_.back() == f) ++tx_batch_acks_;  // (not looped back)
}

void Engine::queue_ack(Qp* qp, Psn psn) {
  qp->resp.ack_pending = true;
  qp->resp.ack_psn = psn;
  qp->resp.ack_msn = qp->resp.msn;
  schedule(qp);
}

void Engine::send_nak(Qp* qp, uint8_t syndrome, Psn psn, Counter c) {
  counters_.inc(c);
  // An ACK queued for an earlier PSN goes first, to keep the order. One for a later PSN
  // (a request executed while an older READ was still being answered, now refused mid-stream)
  // must not: it would acknowledge the READ implicitly, and the requester would then take this
  // NAK for an old duplicate and wait forever.
  if (qp->resp.ack_pending && qp->resp.ack_psn - psn >= 0) qp->resp.ack_pending = false;
  if (qp->resp.ack_pending && qp->resp.res_sending == 0) {
    send_ack(qp, AethRepr::make_ack(), qp->resp.ack_psn, qp->resp.ack_msn);
    counters_.inc(Counter::acks_sent);
    qp->resp.ack_pending = false;
  }
  send_ack(qp, syndrome, psn);
}

void Engine::responder_error(Qp* qp, NakCode code, Psn psn, ibv_wc_status local_status) {
  // RC: NAK the request, complete an in-progress receive with the local error, and move
  // the QP to the error state (IBA class C/D responder errors).
  Counter c = Counter::inv_req_naks_sent;
  if (code == NakCode::kRemoteAccessError) c = Counter::access_naks_sent;
  if (code == NakCode::kRemoteOpError) c = Counter::rem_op_naks_sent;
  send_nak(qp, AethRepr::make_nak(code), psn, c);
  flush_tx();
  if (qp->resp.have_rwqe) {
    qp->resp.have_rwqe = false;
    complete_recv_error(qp, qp->resp.rwqe.wr_id, local_status);
  }
  set_resp_state(qp, Responder::State::kIdle);
  enter_error(qp);
}

bool Engine::claim_res(Qp* qp) {
  // A new READ or atomic takes the oldest slot. It is busy only while that slot's first
  // answer is still going out: the requester then has max_dest_rd_atomic + 1 outstanding.
  // A replay there answers a duplicate of an older request, which the requester no longer
  // waits for (it may not have more than max_dest_rd_atomic outstanding, and this request is
  // one): the replay is dropped. Keeping it made a stale duplicate, delivered just before
  // the next READ (reordering), turn that READ into a NAK invalid request (rping at 5 %
  // reordering, docs/transport.md).
  RdAtomicRes& res = qp->resp.res[qp->resp.res_next];
  if (!res.sending) return true;
  if (!res.replay) return false;
  res.sending = false;
  --qp->resp.res_sending;
  counters_.inc(Counter::replays_dropped);
  return true;
}

RdAtomicRes* Engine::find_res(Qp* qp, Psn psn) {
  for (uint32_t i = 0; i < qp->max_dest_rd_atomic; ++i) {
    RdAtomicRes& r = qp->resp.res[i];
    if (r.valid && psn - r.first_psn >= 0 && psn - r.first_psn < static_cast<int32_t>(r.npkts))
      return &r;
  }
  return nullptr;
}

bool Engine::bind_xrc_srq(Qp* qp, const ParsedPacket& p) {
  const uint32_t n = p.hdr.ext.xrceth.srqn;
  if (qp->resp.state != Responder::State::kIdle) {
    // Every packet of a message names the SRQ its first one did.
    if (qp->srq != nullptr && qp->srq->handle == n) return true;
    responder_error(qp, NakCode::kInvalidRequest, Psn(p.hdr.bth.psn), IBV_WC_REM_INV_REQ_ERR);
    return false;
  }
  Srq* srq = nullptr;
  for (const auto& s : srqs_)
    if (s->handle == n && s->xrcd == qp->xrcd && s->xrcd != nullptr) srq = s.get();
  if (srq == nullptr) {
    // No such SRQ in the target's domain: a remote access error (IBA 9.7.5.2.7), as rxe's
    // XRC patches and RNICs answer it; the target QP enters the error state.
    counters_.inc(Counter::xrc_bad_srqn);
    qp->srq = nullptr;
    qp->recv_cq = nullptr;
    qp->resp.have_rwqe = false;
    responder_error(qp, NakCode::kRemoteAccessError, Psn(p.hdr.bth.psn), IBV_WC_REM_ACCESS_ERR);
    post_event(IBV_EVENT_QP_ACCESS_ERR, qp);
    return false;
  }
  qp->srq = srq;
  qp->pd = srq->pd;  // whose keys this message's WRITE/READ/atomic and receive buffers use
  qp->recv_cq = srq->cq;
  return true;
}

void Engine::responder(Qp* qp, const ParsedPacket& p) {
  const Psn psn(p.hdr.bth.psn);
  const int32_t d = psn - qp->resp.epsn;
  if (is_reliable(qp->type)) {
    if (d > 0) {
      // Ahead of the expected PSN: something was lost. One NAK per gap (IBA 9.7.5.2.2).
      counters_.inc(Counter::out_of_seq_requests);
      if (!qp->resp.seq_nak_sent) {
        qp->resp.seq_nak_sent = true;
        send_nak(qp, AethRepr::make_nak(NakCode::kPsnSeqError), qp->resp.epsn, Counter::seq_naks_sent);
      }
      return;
    }
    if (d < 0) {
      duplicate_request(qp, p);
      return;
    }
    qp->resp.seq_nak_sent = false;
    if (qp->type == IBV_QPT_XRC_RECV && !bind_xrc_srq(qp, p)) return;
  } else if (d < 0) {
    // UC: older than expected. A UC sender never sends a PSN twice, so this is a copy the
    // link made or a packet a later one overtook: taking it (as rxe does, for a first or only
    // packet) would hand the application a message twice or out of order. Dropped; the
    // message in progress goes on.
    counters_.inc(Counter::rx_drop_uc_stale);
    return;
  } else if (d != 0) {
    // UC: a gap loses the message in progress; a new message may start at any later PSN.
    counters_.inc(Counter::rx_drop_uc_msg);
    set_resp_state(qp, Responder::State::kIdle);
    qp->resp.rwqe_offset = 0;
    qp->resp.epsn = psn;
    if (!p.info->starts_message()) {
      qp->resp.epsn = psn + 1;
      return;
    }
  }
  execute_request(qp, p);
}

void Engine::execute_request(Qp* qp, const ParsedPacket& p) {
  const OpcodeInfo& info = *p.info;
  const Psn psn(p.hdr.bth.psn);
  const bool rc = is_reliable(qp->type);
  const uint32_t len = static_cast<uint32_t>(p.payload.size());

  // UC drops a bad packet (and the rest of its message); RC NAKs it and enters error.
  auto reject = [&](NakCode code, ibv_wc_status local) {
    if (rc) {
      responder_error(qp, code, psn, local);
    } else {
      counters_.inc(Counter::rx_drop_uc_msg);
      set_resp_state(qp, Responder::State::kIdle);
      qp->resp.rwqe_offset = 0;
      qp->resp.epsn = psn + 1;
    }
  };

  // Opcode sequence: inside a message only its middle/last may come; outside, a first/only.
  const Responder::State st = qp->resp.state;
  const bool seq_ok =
      st == Responder::State::kIdle
          ? info.starts_message()
          : info.op == (st == Responder::State::kInSend ? Operation::kSend : Operation::kWrite) &&
                !info.starts_message();
  if (!seq_ok) {
    reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
    return;
  }
  // Lengths: first and middle packets carry exactly one MTU; last 1..MTU; only 0..MTU.
  if (info.has_payload &&
      ((!info.ends_message() && len != qp->mtu) || len > qp->mtu ||
       (info.pos == Position::kLast && len == 0))) {
    reject(NakCode::kInvalidRequest, IBV_WC_LOC_LEN_ERR);
    return;
  }

  switch (info.op) {
    case Operation::kSend: {
      // A tag-matching SRQ decides by the message's header where it goes (tag_matching.cc).
      const bool tm = qp->srq != nullptr && qp->srq->tm != nullptr;
      if (info.starts_message() && !(tm ? tm_begin(qp, p) : take_rwqe(qp))) {
        no_receive_wqe(qp, psn);
        return;
      }
      // A FIRST packet opens the message (an ONLY one is over before anything could tell).
      if (!info.ends_message()) set_resp_state(qp, Responder::State::kInSend);
      // Tag matching: an eager match's header is not data; a rendezvous header is all there
      // is (its data is read from the sender).
      const uint32_t skip = !tm                                      ? 0
                            : qp->resp.tm == Responder::Tm::kRndv    ? len
                            : info.starts_message()                  ? std::min(len, qp->resp.tm_skip)
                                                                     : 0;
      if (skip < len && !copy_to_rwqe(qp, p.payload.data() + skip, len - skip)) {
        const bool too_long = qp->resp.rwqe_offset + len > [&] {
          uint64_t cap = 0;
          for (uint32_t i = 0; i < qp->resp.rwqe.num_sge; ++i) cap += qp->resp.rwqe.sge[i].length;
          return cap;
        }();
        reject(too_long ? NakCode::kInvalidRequest : NakCode::kRemoteOpError,
               too_long ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR);
        return;
      }
      if (info.ends_message()) {
        if (info.has(Ext::kIeth)) {
          // Only a type 2 window bound to this very QP may be invalidated by its peer (IBA
          // 10.6.7.2; fast-registration MRs, the other kind, do not exist here). An MR, a
          // type 1 window, another QP's window or a stale key: the request is invalid, and
          // what the key names stays exactly as it was.
          if (!mrs_.invalidate(p.hdr.ext.ieth.rkey, qp->pd, qp->qpn)) {
            counters_.inc(Counter::inv_rkey_refused);
            reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
            return;
          }
          counters_.inc(Counter::windows_invalidated);
        }
        set_resp_state(qp, Responder::State::kIdle);
        qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
        if (tm) {
          tm_complete(qp, p);
        } else {
          complete_recv(qp, p, IBV_WC_SUCCESS);
        }
      }
      break;
    }
    case Operation::kWrite: {
      // WRITE with immediate consumes a receive WQE at its last packet: make sure there is
      // one before changing anything, so a retransmitted last packet finds the same state.
      if (info.has_imm() && !take_rwqe(qp)) {
        no_receive_wqe(qp, psn);
        return;
      }
      uint8_t* host = nullptr;  // where this packet's bytes go, checked just now
      if (info.starts_message()) {
        // The QP must allow remote writes (the R_Key is checked below, packet by packet).
        if (p.hdr.ext.reth.dma_len != 0 && !(qp->access & IBV_ACCESS_REMOTE_WRITE)) {
          reject(NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
          return;
        }
        if (!info.ends_message()) set_resp_state(qp, Responder::State::kInWrite);
        qp->resp.write_rkey = p.hdr.ext.reth.rkey;
        qp->resp.write_va = p.hdr.ext.reth.va;
        qp->resp.write_left = qp->resp.write_len = p.hdr.ext.reth.dma_len;
        if (qp->resp.write_len != 0) {
          // The whole range once, so that nothing is written of a WRITE that cannot fit.
          // An on-demand MR's pages are faulted in packet by packet (below), as an RNIC
          // faults only what it writes: a peer's one small packet announcing 4 GiB must
          // not make us commit 4 GiB.
          if (mrs_.check_remote(qp->resp.write_rkey, qp->pd, qp->qpn, qp->resp.write_va, qp->resp.write_len,
                                IBV_ACCESS_REMOTE_WRITE, &host,
                                /*fault_in=*/false) != mem::AccessError::kOk) {
            reject(NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
            return;
          }
          host = nullptr;  // the first packet's bytes are checked (and faulted in) below
        }
      }
      if (len > qp->resp.write_left) {
        reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
        return;
      }
      if (len != 0) {
        // A later packet's bytes, against the MR as it is now: deregistered (or re-registered)
        // since the first packet means a remote access error, and nothing written.
        if (host == nullptr &&
            mrs_.check_remote(qp->resp.write_rkey, qp->pd, qp->qpn, qp->resp.write_va, len,
                              IBV_ACCESS_REMOTE_WRITE, &host) != mem::AccessError::kOk) {
          counters_.inc(Counter::access_revoked);
          reject(NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
          return;
        }
        std::memcpy(host, p.payload.data(), len);
      }
      qp->resp.write_va += len;
      qp->resp.write_left -= len;
      if (info.ends_message()) {
        if (qp->resp.write_left != 0) {
          reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
          return;
        }
        set_resp_state(qp, Responder::State::kIdle);
        qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
        if (info.has_imm()) {
          qp->resp.rwqe_offset = 0;
          complete_recv(qp, p, IBV_WC_SUCCESS);
        }
      }
      break;
    }
    case Operation::kReadRequest: {
      const RethRepr& r = p.hdr.ext.reth;
      if (r.dma_len != 0) {
        uint8_t* host;
        if (!(qp->access & IBV_ACCESS_REMOTE_READ) ||
            mrs_.check_remote(r.rkey, qp->pd, qp->qpn, r.va, r.dma_len, IBV_ACCESS_REMOTE_READ,
                              &host, /*fault_in=*/false) != mem::AccessError::kOk) {
          reject(NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
          return;
        }
      }
      if (!claim_res(qp)) {
        // The requester has more READs/atomics outstanding than max_dest_rd_atomic allows.
        reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
        return;
      }
      RdAtomicRes& res = qp->resp.res[qp->resp.res_next];
      qp->resp.res_next = (qp->resp.res_next + 1) % qp->max_dest_rd_atomic;
      const uint32_t n = packets_for(r.dma_len, qp->mtu);
      qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
      res = RdAtomicRes{true, false, psn, n, r.va, r.rkey, r.dma_len, 0, 0, true, false, qp->pd};
      ++qp->resp.res_sending;
      qp->resp.epsn = psn + static_cast<int32_t>(n);  // a READ uses one PSN per response packet
      schedule(qp);
      return;
    }
    case Operation::kCompareSwap:
    case Operation::kFetchAdd: {
      const AtomicEthRepr& a = p.hdr.ext.atomic;
      uint8_t* host = nullptr;
      if (!(qp->access & IBV_ACCESS_REMOTE_ATOMIC) ||
          mrs_.check_remote(a.rkey, qp->pd, qp->qpn, a.va, 8, IBV_ACCESS_REMOTE_ATOMIC, &host) !=
              mem::AccessError::kOk) {
        reject(NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
        return;
      }
      // Aligned for the peer (the iova) and for us (the host address: ibv_reg_mr_iova2 may
      // map an aligned iova onto an unaligned buffer, where an atomic op is not atomic).
      if ((a.va & 7) != 0 || (reinterpret_cast<uintptr_t>(host) & 7) != 0) {
        reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
        return;
      }
      if (!claim_res(qp)) {
        reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
        return;
      }
      RdAtomicRes& res = qp->resp.res[qp->resp.res_next];
      qp->resp.res_next = (qp->resp.res_next + 1) % qp->max_dest_rd_atomic;
      auto* target = reinterpret_cast<uint64_t*>(host);
      uint64_t orig;
      if (info.op == Operation::kCompareSwap) {
        orig = a.compare;
        __atomic_compare_exchange_n(target, &orig, a.swap_add, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
      } else {
        orig = __atomic_fetch_add(target, a.swap_add, __ATOMIC_SEQ_CST);
      }
      qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
      res = RdAtomicRes{true, true, psn, 1, a.va, a.rkey, 8, orig, 0, true, false, qp->pd};
      ++qp->resp.res_sending;
      qp->resp.epsn = psn + 1;
      schedule(qp);
      return;
    }
    case Operation::kAtomicWrite: {
      const RethRepr& r = p.hdr.ext.reth;
      uint8_t* host = nullptr;
      if (!(qp->access & IBV_ACCESS_REMOTE_WRITE) ||
          mrs_.check_remote(r.rkey, qp->pd, qp->qpn, r.va, 8, IBV_ACCESS_REMOTE_WRITE, &host) !=
              mem::AccessError::kOk) {
        reject(NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
        return;
      }
      if ((r.va & 7) != 0 || (reinterpret_cast<uintptr_t>(host) & 7) != 0 || r.dma_len != 8 ||
          !claim_res(qp)) {
        reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
        return;
      }
      uint64_t v;
      std::memcpy(&v, p.payload.data(), 8);
      __atomic_store_n(reinterpret_cast<uint64_t*>(host), v, __ATOMIC_SEQ_CST);
      answer_with_empty_read_response(qp, psn);
      return;
    }
    case Operation::kFlush: {
      // FLUSH (IBA 1.5 oA19): what was written to the range (FETH selectivity 0: the RETH's
      // range; 1: the whole MR or window) made visible to every later reader (placement bit
      // 0, global visibility) and durable (bit 1, persistence). Host memory is coherent: a
      // fence makes it visible. Durable: msync(MS_SYNC) of the range, which writes a file's
      // pages (an MR over a file mapping, e.g. DAX on persistent memory) to their device;
      // only such an MR may have IBV_ACCESS_FLUSH_PERSISTENT (mem::region_errno). The QP
      // and the MR need the right for each placement asked for, as rxe checks them: the
      // QP's lack is an invalid request, the MR's a remote access error.
      const RethRepr& r = p.hdr.ext.reth;
      const FethRepr& f = p.hdr.ext.feth;
      int need = 0;
      if (f.placement() & UROCE_FLUSH_GLOBAL) need |= UROCE_ACCESS_FLUSH_GLOBAL;
      if (f.placement() & UROCE_FLUSH_PERSISTENT) need |= UROCE_ACCESS_FLUSH_PERSISTENT;
      if (need == 0 || (f.placement() & ~3u) != 0 || f.selectivity() > 1 ||
          (qp->access & static_cast<unsigned>(need)) != static_cast<unsigned>(need)) {
        reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
        return;
      }
      uint64_t va = r.va, flen = r.dma_len;
      if (f.selectivity() == 1) {  // the whole region the key names
        if (const mem::Mr* m = mrs_.find(r.rkey); m != nullptr) {
          va = m->iova;
          flen = m->length;
        } else if (const mem::Mw* w = mrs_.find_mw(r.rkey); w != nullptr) {
          va = w->base;
          flen = w->length;
        }
      }
      uint8_t* host = nullptr;
      if (mrs_.check_remote(r.rkey, qp->pd, qp->qpn, va, flen, need, &host,
                            /*fault_in=*/false) != mem::AccessError::kOk) {
        reject(NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR);
        return;
      }
      if (!claim_res(qp)) {
        reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
        return;
      }
      // A full barrier (a locked read-modify-write; ThreadSanitizer has no bare fences).
      static std::atomic<uint64_t> flush_barrier{0};
      flush_barrier.fetch_add(1, std::memory_order_seq_cst);
      if ((f.placement() & 2) && flen != 0) {
        const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
        const uintptr_t from = reinterpret_cast<uintptr_t>(host) & ~(page - 1);
        const uintptr_t to = reinterpret_cast<uintptr_t>(host) + flen;
        if (msync(reinterpret_cast<void*>(from), to - from, MS_SYNC) != 0) {
          reject(NakCode::kRemoteOpError, IBV_WC_REM_OP_ERR);  // the write-back failed
          return;
        }
      }
      counters_.inc(Counter::flushes);
      answer_with_empty_read_response(qp, psn);
      return;
    }
    default:
      reject(NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR);
      return;
  }
  qp->resp.epsn = psn + 1;
  if (rc && p.hdr.bth.ack_req) queue_ack(qp, psn);
}

void Engine::answer_with_empty_read_response(Qp* qp, Psn psn) {
  // ATOMIC WRITE and FLUSH are answered as a READ of nothing: a READ RESPONSE ONLY without
  // data, from a resource (in order with READ responses before it; a duplicate replays it).
  RdAtomicRes& res = qp->resp.res[qp->resp.res_next];
  qp->resp.res_next = (qp->resp.res_next + 1) % qp->max_dest_rd_atomic;
  qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
  res = RdAtomicRes{true, false, psn, 1, 0, 0, 0, 0, 0, true, false, qp->pd};
  ++qp->resp.res_sending;
  qp->resp.epsn = psn + 1;
  schedule(qp);
}

void Engine::duplicate_request(Qp* qp, const ParsedPacket& p) {
  counters_.inc(Counter::dup_requests);
  const Psn psn(p.hdr.bth.psn);
  switch (p.info->op) {
    case Operation::kReadRequest: {
      // Replay from saved state, honouring the duplicate's own (possibly smaller) range.
      RdAtomicRes* r = find_res(qp, psn);
      if (r == nullptr || r->atomic) return;
      // Checked again as if new: the QP's access flags or the MR may have changed since
      // (deregistered, say). Refused: a remote access NAK, as rxe answers a replay whose MR
      // is gone, so that the requester learns it instead of retrying until it gives up.
      const RethRepr& reth = p.hdr.ext.reth;
      if (reth.dma_len != 0) {
        uint8_t* host;
        if (!(qp->access & IBV_ACCESS_REMOTE_READ) ||
            mrs_.check_remote(reth.rkey, r->pd, qp->qpn, reth.va, reth.dma_len,
                              IBV_ACCESS_REMOTE_READ, &host,
                              /*fault_in=*/false) != mem::AccessError::kOk) {
          responder_error(qp, NakCode::kRemoteAccessError, psn, IBV_WC_WR_FLUSH_ERR);
          return;
        }
      }
      if (!r->sending) ++qp->resp.res_sending;
      r->first_psn = psn;
      r->npkts = packets_for(reth.dma_len, qp->mtu);
      r->va = reth.va;
      r->rkey = reth.rkey;
      r->length = reth.dma_len;
      r->next = 0;
      r->sending = true;
      r->replay = true;
      counters_.inc(Counter::dup_reads_replayed);
      schedule(qp);
      return;
    }
    case Operation::kAtomicWrite:
    case Operation::kFlush: {
      // Not executed again: the empty READ response replayed (dropped if its resource went
      // to a newer request, as rxe does).
      RdAtomicRes* r = find_res(qp, psn);
      if (r == nullptr || r->atomic || r->length != 0 || r->first_psn != psn) return;
      if (!r->sending) ++qp->resp.res_sending;
      r->next = 0;
      r->sending = true;
      r->replay = true;
      counters_.inc(Counter::dup_atomics_replayed);
      schedule(qp);
      return;
    }
    case Operation::kCompareSwap:
    case Operation::kFetchAdd: {
      // Never execute twice: answer with the saved original value.
      RdAtomicRes* r = find_res(qp, psn);
      if (r == nullptr || !r->atomic || r->first_psn != psn) return;
      if (!r->sending) ++qp->resp.res_sending;
      r->sending = true;
      r->replay = true;
      counters_.inc(Counter::dup_atomics_replayed);
      schedule(qp);
      return;
    }
    default: {
      // SEND / WRITE already executed: acknowledge again so the requester moves on. The ACK
      // covers what came since, but never a READ or atomic request after the duplicate: an
      // ACK does not answer those (their responses do), and the kernel's rxe completes a READ
      // without its data when an ACK carries exactly the READ's PSN (seen in interop: rping
      // at 5 % loss, a duplicate SEND arriving after the next READ request).
      // Every duplicate is answered, AckReq or not, as rxe does (one ACK per burst: queued
      // ACKs coalesce). A go-back-N round whose AckReq packet is lost otherwise tells the
      // requester nothing of the progress its other packets made, and it times out again
      // (rping at 5 % of every kind of damage ran out of retries so: docs/transport.md).
      Psn ack = qp->resp.epsn - 1;
      for (uint32_t i = 0; i < qp->max_dest_rd_atomic; ++i) {
        const RdAtomicRes& r = qp->resp.res[i];
        if (r.valid && r.first_psn - psn > 0 && ack - r.first_psn >= 0) ack = r.first_psn - 1;
      }
      queue_ack(qp, ack);
      return;
    }
  }
}

bool Engine::send_read_response(Qp* qp, RdAtomicRes& r) {
  const uint32_t i = r.next;
  const uint32_t offset = i * qp->mtu;
  const uint32_t len = std::min(qp->mtu, r.length - std::min(r.length, offset));
  uint8_t* host = nullptr;
  if (len != 0 && mrs_.check_remote(r.rkey, r.pd, qp->qpn, r.va + offset, len,
                                    IBV_ACCESS_REMOTE_READ, &host) != mem::AccessError::kOk) {
    // The MR was deregistered (or changed) since the request was checked: not one more
    // byte of it goes out. NAK this response's PSN; the requester's READ fails with a
    // remote access error.
    counters_.inc(Counter::access_revoked);
    r.sending = false;
    --qp->resp.res_sending;
    responder_error(qp, NakCode::kRemoteAccessError, r.first_psn + static_cast<int32_t>(i),
                    IBV_WC_WR_FLUSH_ERR);  // a receive in progress is another message's
    return false;
  }
  RoceHeaders h = qp->tx_template;
  h.bth.opcode = opcode_base(qp->type) | (r.npkts == 1  ? opcode::kRcReadResponseOnly
                                            : i == 0      ? opcode::kRcReadResponseFirst
                                            : i + 1 == r.npkts ? opcode::kRcReadResponseLast
                                                               : opcode::kRcReadResponseMiddle);
  h.bth.psn = (r.first_psn + static_cast<int32_t>(i)).value();
  // The MSN as it stands now, for a first answer and a replay alike (rxe and rdmavt do the
  // same; a requester completes READs by PSN).
  h.ext.aeth = {AethRepr::make_ack(), qp->resp.msn & 0xFFFFFF};
  FrameLayout lay;
  Frame* f = build_packet(h, len, &lay);
  if (f == nullptr) return false;
  if (len != 0) {
    std::memcpy(f->data + lay.payload_off, host, len);
    wire::payload_crc(lay, wire::crc32(lay.crc, Bytes(host, len)), len);  // from the MR
  }
  send_built(f, lay);
  paced(qp, static_cast<uint32_t>(lay.len));  // a READ response is this QP's data too
  if (qp->cc.dcqcn.limited()) qp->cc.requester_turn = true;
  if (++r.next == r.npkts) {
    r.sending = false;
    --qp->resp.res_sending;
  }
  return true;
}

void Engine::send_atomic_ack(Qp* qp, const RdAtomicRes& r) {
  RoceHeaders h = qp->tx_template;
  h.bth.opcode = opcode_base(qp->type) | opcode::kRcAtomicAck;
  h.bth.psn = r.first_psn.value();
  h.ext.aeth = {AethRepr::make_ack(), qp->resp.msn & 0xFFFFFF};
  h.ext.atomic_ack.orig = r.atomic_orig;
  FrameLayout lay;
  Frame* f = build_packet(h, 0, &lay);
  if (f == nullptr) return;
  send_built(f, lay);
}

bool Engine::responder_step(Qp* qp, uint32_t* budget) {
  if (!is_reliable(qp->type) || qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET)
    return false;
  // Responses go out in PSN order: always the pending resource with the lowest PSN.
  while (qp->resp.res_sending > 0 && *budget > 0) {
    RdAtomicRes* next = nullptr;
    for (uint32_t i = 0; i < qp->max_dest_rd_atomic; ++i) {
      RdAtomicRes& r = qp->resp.res[i];
      if (r.sending && (next == nullptr || r.first_psn - next->first_psn < 0)) next = &r;
    }
    if (next == nullptr) {
      qp->resp.res_sending = 0;
      break;
    }
    // A READ response stream is held to the QP's rate like its requests (DCQCN's reaction
    // point: the CNP for it comes from the requester, which receives the data); the pace
    // timer brings the QP back (nothing to do until then: not rescheduled).
    if (!next->atomic && pace_wait(qp)) return false;
    if (next->atomic) {
      send_atomic_ack(qp, *next);
      next->sending = false;
      --qp->resp.res_sending;
    } else if (!send_read_response(qp, *next)) {
      if (qp->state == IBV_QPS_ERR) return false;  // refused mid-stream (NAKed)
      if (next->sending) return true;              // out of frames: later
    }
    --*budget;
  }
  if (qp->resp.res_sending > 0) return true;
  if (qp->resp.ack_pending) {
    send_ack(qp, AethRepr::make_ack(), qp->resp.ack_psn, qp->resp.ack_msn);
    counters_.inc(Counter::acks_sent);
    qp->resp.ack_pending = false;
  }
  return false;
}

void Engine::ud_receive(Qp* qp, const ParsedPacket& p) {
  if (!take_rwqe(qp)) {
    counters_.inc(Counter::rx_drop_ud_no_recv);
    return;
  }
  // The first 40 bytes of a UD receive buffer hold the GRH: for RoCEv2 over IPv6 the IPv6
  // header itself; over IPv4, 20 undefined bytes (zeroed) followed by the IPv4 header.
  uint8_t grh[40] = {};
  if (p.hdr.ipv6) {
    p.hdr.ip6.emit(MutBytes(grh, 40));
  } else {
    uint8_t ip[Ipv4View::kMaxLen];
    p.hdr.ip4.emit(MutBytes(ip, sizeof ip));
    std::memcpy(grh + 20, ip, 20);
  }
  const uint32_t len = static_cast<uint32_t>(p.payload.size());
  if (len > qp->mtu || !copy_to_rwqe(qp, grh, 40) || !copy_to_rwqe(qp, p.payload.data(), len)) {
    complete_recv(qp, p, IBV_WC_LOC_LEN_ERR);
    return;
  }
  complete_recv(qp, p, IBV_WC_SUCCESS);
}

// A datagram for a multicast group (IBA 10.5: DQPN 0xFFFFFF, a UD SEND): a copy for every QP
// of this device attached to the group that can receive it, each checking its own Q_Key.
void Engine::mcast_receive(const ParsedPacket& p) {
  const RoceHeaders& h = p.hdr;
  const Gid group = h.ipv6 ? h.ip6.dst : ipv4_mapped_gid(h.ip4.dst);
  auto g = std::find_if(mcast_.begin(), mcast_.end(),
                        [&](const McGroup& m) { return m.gid == group; });
  if (g == mcast_.end() || h.eth.dst != multicast_mac(group)) {
    counters_.inc(Counter::rx_drop_wrong_dst);  // a group nobody here joined
    return;
  }
  if (p.info->transport != Transport::kUd || h.bth.dest_qp != kMulticastQpn) {
    counters_.inc(Counter::rx_drop_qp_type);  // only UD datagrams are multicast
    return;
  }
  if (!pkey_matches(h.bth.pkey)) {
    counters_.inc(Counter::rx_drop_bad_pkey);
    return;
  }
  counters_.inc(Counter::rx_roce);
  for (Qp* qp : g->qps) {
    if (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
        qp->state != IBV_QPS_SQE) {
      counters_.inc(Counter::rx_drop_qp_state);
    } else if (h.ext.deth.qkey != qp->qkey) {
      counters_.inc(Counter::rx_drop_bad_qkey);
    } else {
      counters_.inc(Counter::rx_mcast);
      ud_receive(qp, p);
    }
  }
}

// ---- What other rooms ask of the responder ---------------------------------------------------

void Engine::set_resp_state(Qp* qp, Responder::State s) {
  move_role(qp, Role::kResponder, qp->resp.state, s, qp->resp.epsn);
}

void Engine::reset_responder(Qp* qp) {
  set_resp_state(qp, Responder::State::kIdle);
  qp->resp.have_rwqe = false;
  qp->resp.res.assign(qp->resp.res.size(), RdAtomicRes{});
  qp->resp.res_next = qp->resp.res_sending = 0;
  qp->resp.ack_pending = false;
}

void Engine::flush_responder(Qp* qp) {
  if (qp->srq == nullptr) {
    while (!qp->rq.empty()) {
      complete_recv_error(qp, qp->rq.front().wr_id, IBV_WC_WR_FLUSH_ERR);
      qp->rq.pop();
    }
  }
  if (qp->resp.have_rwqe) {
    // A receive WQE taken for a message that never finished.
    qp->resp.have_rwqe = false;
    complete_recv_error(qp, qp->resp.rwqe.wr_id, IBV_WC_WR_FLUSH_ERR);
  }
  set_resp_state(qp, Responder::State::kIdle);
  for (auto& r : qp->resp.res) r.sending = false;
  qp->resp.res_sending = 0;
  qp->resp.ack_pending = false;
}

void Engine::start_recv_psn(Qp* qp, Psn psn) {
  qp->resp.epsn = psn;
  qp->resp.msn = 0;
  qp->resp.seq_nak_sent = false;
}

void Engine::size_rd_atomic_res(Qp* qp) {
  // Resources in use stay where they are (a change in SQD keeps the ones below the new
  // count; the IBA lets a QP shrink this only while no READ is outstanding).
  qp->resp.res.resize(qp->max_dest_rd_atomic);
  qp->resp.res_next %= qp->max_dest_rd_atomic;
}

void Engine::forget_srq(Qp* qp, const Srq* srq) {
  // XRC targets hold no reference, only the SRQ of the message they are receiving: that
  // message is lost (its WQE went with the SRQ), the next one looks its SRQ up again.
  if (qp->srq == srq) {
    qp->srq = nullptr;
    qp->pd = nullptr;
    qp->recv_cq = nullptr;
    qp->resp.have_rwqe = false;
    set_resp_state(qp, Responder::State::kIdle);
  }
  for (RdAtomicRes& r : qp->resp.res) {  // a READ answered (or to replay) under its PD: gone
    if (!r.valid || r.pd != srq->pd) continue;
    if (r.sending) --qp->resp.res_sending;
    r = RdAtomicRes{};
  }
}

}  // namespace uroce

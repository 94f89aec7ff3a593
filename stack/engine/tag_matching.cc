// Tag matching (IBV_SRQT_TM): the matching of MPI's point-to-point messages to posted receives,
// done by the device as ConnectX does it for rdma-core's TM verbs.
//
// A tag-matching SRQ has two receive lists: tagged buffers that ibv_post_srq_ops added (ADD
// with a tag, a mask and buffers; DEL; SYNC), matched in the order they were added, and the
// ordinary receive WQEs of ibv_post_srq_recv for what matches none. A SEND to a QP on such an
// SRQ begins with a 16-byte tag-matching header (struct ibv_tmh: opcode, app context, tag):
//   - NO_TAG: to an ordinary receive, whole; IBV_WC_TM_NO_TAG.
//   - EAGER whose tag matches a tagged buffer (msg_tag & mask == tag & mask): the data behind
//     the header into that buffer; IBV_WC_TM_RECV with TM_MATCH | TM_DATA_VALID, the buffer's
//     recv_wr_id and the tag.
//   - RNDV (the header followed by struct ibv_rvh: the sender's address, R_Key, length) that
//     matches: IBV_WC_TM_RECV with TM_MATCH at once; the device READs the data from the sender
//     into the buffer itself, then completes it (TM_DATA_VALID) and sends the sender a FIN
//     (a SEND of a header with opcode FIN and the tag).
//   - Anything else, or any tagged message while software has not caught up with the
//     device's unexpected count (matching is off until a SYNC reports the count): to an
//     ordinary receive, whole, IBV_WC_TM_RECV without flags, and the unexpected count grows.
// Completions of a TM SRQ go to its CQ (IBV_WC_EX_WITH_TM_INFO reads their tag).
#include <endian.h>
#include <infiniband/tm_types.h>

#include <algorithm>
#include <cstring>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {

uint64_t be64_at(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return be64toh(v);
}
uint32_t be32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return be32toh(v);
}

}  // namespace

int Engine::post_srq_ops(Srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad) {
  for (; wr != nullptr; wr = wr->next) {
    int err = srq == nullptr || !srq->tm ? EINVAL : 0;
    ibv_wc wc{};
    wc.wr_id = wr->wr_id;
    if (err == 0) {
      Srq::TagList& tl = *srq->tm;
      switch (wr->opcode) {
        case IBV_WR_TAG_ADD: {
          const auto& a = wr->tm.add;
          auto free = std::find_if(tl.entries.begin(), tl.entries.end(),
                                   [](const Srq::TagList::Entry& e) { return !e.used; });
          if (a.num_sge < 0 || static_cast<uint32_t>(a.num_sge) > srq->max_sge ||
              (a.num_sge > 0 && a.sg_list == nullptr)) {
            err = EINVAL;
          } else if (free == tl.entries.end()) {
            err = ENOMEM;
          } else {
            free->used = true;
            ++free->gen;
            free->seq = tl.next_seq++;
            free->tag = a.tag;
            free->mask = a.mask;
            free->wqe = RecvWqe{};
            free->wqe.wr_id = a.recv_wr_id;
            free->wqe.num_sge = static_cast<uint32_t>(a.num_sge);
            for (int i = 0; i < a.num_sge; ++i)
              free->wqe.sge[static_cast<size_t>(i)] = {a.sg_list[i].addr, a.sg_list[i].length,
                                                       a.sg_list[i].lkey};
            wr->tm.handle = (free->gen & 0xFFFFFF) << 8 |
                            (static_cast<uint32_t>(free - tl.entries.begin()) + 1);
            wc.opcode = IBV_WC_TM_ADD;
            // Matching is off until software reports the unexpected count: say so.
            if (tl.unexpected != tl.synced) wc.wc_flags |= IBV_WC_TM_SYNC_REQ;
          }
          break;
        }
        case IBV_WR_TAG_DEL: {
          const uint32_t h = wr->tm.handle, i = h & 0xFF;
          Srq::TagList::Entry* e = i >= 1 && i <= tl.entries.size() ? &tl.entries[i - 1] : nullptr;
          wc.opcode = IBV_WC_TM_DEL;
          if (e == nullptr || (e->gen & 0xFFFFFF) != h >> 8) {
            err = EINVAL;  // no buffer ever had this handle
          } else if (!e->used) {
            wc.status = IBV_WC_TM_ERR;  // consumed by a message (or deleted) already
          } else {
            e->used = false;
          }
          break;
        }
        case IBV_WR_TAG_SYNC: wc.opcode = IBV_WC_TM_SYNC; break;
        default: err = EINVAL; break;
      }
      // Any operation may carry software's unexpected count: matching resumes once it
      // agrees with the device's.
      if (err == 0 && (wr->flags & IBV_OPS_TM_SYNC)) tl.synced = wr->tm.unexpected_cnt;
    }
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      return err;
    }
    // Signaled, or failed (an error always completes).
    if ((wr->flags & IBV_OPS_SIGNALED) || wc.status != IBV_WC_SUCCESS) push_cqe(srq->cq, wc, nullptr);
  }
  return 0;
}

bool Engine::tm_begin(Qp* qp, const ParsedPacket& p) {
  Responder& r = qp->resp;
  if (r.have_rwqe) return true;  // decided already (a buffer is held for this message)
  Srq::TagList& tl = *qp->srq->tm;
  const Bytes pl = p.payload;
  uint8_t op = 0xFF;
  uint64_t tag = 0;
  if (pl.size() >= sizeof(ibv_tmh)) {
    op = pl[0];
    tag = be64_at(pl.data() + 8);
  }
  Srq::TagList::Entry* match = nullptr;
  const bool rndv_whole = pl.size() >= sizeof(ibv_tmh) + sizeof(ibv_rvh);
  if ((op == IBV_TMH_EAGER || (op == IBV_TMH_RNDV && rndv_whole)) && tl.unexpected == tl.synced) {
    for (Srq::TagList::Entry& e : tl.entries)
      if (e.used && (tag & e.mask) == (e.tag & e.mask) && (match == nullptr || e.seq < match->seq))
        match = &e;
  }
  r.tm_skip = 0;
  r.tm_tag = 0;
  if (match != nullptr) {
    match->used = false;
    r.rwqe = match->wqe;
    r.have_rwqe = true;
    r.rwqe_offset = 0;
    r.tm_tag = tag;
    if (op == IBV_TMH_EAGER) {
      r.tm = Responder::Tm::kEager;
      r.tm_skip = sizeof(ibv_tmh);
    } else {
      r.tm = Responder::Tm::kRndv;
      const uint8_t* rvh = pl.data() + sizeof(ibv_tmh);
      r.rndv_va = be64_at(rvh);
      r.rndv_rkey = be32_at(rvh + 8);
      r.rndv_len = be32_at(rvh + 12);
    }
    counters_.inc(Counter::tm_matched);
    return true;
  }
  if (!take_rwqe(qp)) return false;  // nothing changed: the RNR NAK brings it back
  r.tm = op == IBV_TMH_NO_TAG ? Responder::Tm::kNoTag : Responder::Tm::kUnexpected;
  if (r.tm == Responder::Tm::kUnexpected) {
    ++tl.unexpected;
    counters_.inc(Counter::tm_unexpected);
  }
  return true;
}

void Engine::tm_complete(Qp* qp, const ParsedPacket& p) {
  Responder& r = qp->resp;
  Cq* cq = qp->srq->cq != nullptr ? qp->srq->cq : qp->recv_cq;
  ibv_wc wc{};
  wc.wr_id = r.rwqe.wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_TM_RECV;
  wc.byte_len = r.rwqe_offset;
  wc.qp_num = qp->qpn;
  wc.src_qp = qp->dest_qpn;
  wc.pkey_index = qp->pkey_index;
  if (p.info->has(Ext::kImmDt)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = __builtin_bswap32(p.hdr.ext.imm.imm);
  }
  uint64_t tag = 0;
  switch (r.tm) {
    case Responder::Tm::kNoTag: wc.opcode = IBV_WC_TM_NO_TAG; break;
    case Responder::Tm::kEager:
      wc.wc_flags |= IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
      tag = r.tm_tag;
      break;
    case Responder::Tm::kRndv: {
      wc.wc_flags |= IBV_WC_TM_MATCH;
      wc.byte_len = 0;
      tag = r.tm_tag;
      uint64_t room = 0;
      for (uint32_t i = 0; i < r.rwqe.num_sge; ++i) room += r.rwqe.sge[i].length;
      if (r.rndv_len > room) {
        // The sender's data does not fit the buffer: its completion says so, nothing is read.
        ibv_wc err = wc;
        err.status = IBV_WC_LOC_LEN_ERR;
        err.wc_flags = 0;
        push_cqe(cq, wc, qp, tag);
        push_cqe(cq, err, qp, tag);
        r.have_rwqe = false;
        r.tm = Responder::Tm::kNone;
        return;
      }
      // The data: the device READs it from the sender into the buffer (then FIN).
      SendWqe w;
      w.opcode = IBV_WR_RDMA_READ;
      w.remote_addr = r.rndv_va;
      w.rkey = r.rndv_rkey;
      w.length = r.rndv_len;
      w.num_sge = r.rwqe.num_sge;
      w.sge = r.rwqe.sge;
      w.internal = SendWqe::Internal::kRndvRead;
      w.tm_wr_id = r.rwqe.wr_id;
      w.tm_tag = r.tm_tag;
      post_internal(qp, w);
      break;
    }
    default: break;  // unexpected: an ordinary receive, no flags, no tag
  }
  r.have_rwqe = false;
  r.tm = Responder::Tm::kNone;
  push_cqe(cq, wc, qp, tag);
}

void Engine::tm_internal_done(Qp* qp, const SendWqe& w) {
  if (w.internal != SendWqe::Internal::kRndvRead) return;  // a FIN: nothing more to do
  Cq* cq = qp->srq != nullptr && qp->srq->cq != nullptr ? qp->srq->cq : qp->recv_cq;
  ibv_wc wc{};
  wc.wr_id = w.tm_wr_id;
  wc.status = w.status;
  wc.opcode = IBV_WC_TM_RECV;
  wc.byte_len = w.length;
  wc.qp_num = qp->qpn;
  wc.src_qp = qp->dest_qpn;
  if (w.status == IBV_WC_SUCCESS) wc.wc_flags = IBV_WC_TM_DATA_VALID;
  push_cqe(cq, wc, qp);  // (the tag came with the match's completion, as ConnectX gives it)
  if (w.status != IBV_WC_SUCCESS || qp->state == IBV_QPS_ERR) return;
  // The sender's buffer may go now: tell it (a SEND of a header with opcode FIN).
  SendWqe fin;
  fin.opcode = IBV_WR_SEND;
  fin.is_inline = true;
  fin.length = sizeof(ibv_tmh);
  fin.inline_data[0] = IBV_TMH_FIN;
  const uint64_t be_tag = htobe64(w.tm_tag);
  std::memcpy(fin.inline_data.data() + 8, &be_tag, 8);
  fin.internal = SendWqe::Internal::kRndvFin;
  post_internal(qp, fin);
}

}  // namespace uroce

// Posting: ibv_post_send(3), ibv_post_recv(3) and ibv_post_srq_recv(3). These run on the
// application's threads without the engine lock: each takes its queue's producer lock, checks
// the work request (engine/work_request.h says what each opcode allows), writes the WQE into
// the ring and rings the doorbell (docs/threading.md).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {

RecvWqe to_recv_wqe(const ibv_recv_wr& wr) {
  RecvWqe r;
  r.wr_id = wr.wr_id;
  r.num_sge = static_cast<uint32_t>(wr.num_sge);
  for (int i = 0; i < wr.num_sge; ++i)
    r.sge[static_cast<size_t>(i)] = {wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  return r;
}

}  // namespace

// ---- Posting ----------------------------------------------------------------------------------

int Engine::check_send_wr(const Qp* qp, const ibv_send_wr* wr, uint64_t* total) const {
  // Runs on the posting thread: only the QP's fixed properties and its published state.
  const ibv_qp_state st = qp->post_state.load(std::memory_order_acquire);
  if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR) return EINVAL;
  const WrOpInfo& op = wr_info(wr->opcode);
  if (!wr_allowed(qp->type, wr->opcode)) return EINVAL;
  *total = 0;
  if (wr->opcode == IBV_WR_BIND_MW) {
    // IBV_WR_BIND_MW binds type 2 windows; type 1 windows have ibv_bind_mw (verbs.h).
    const ibv_mw* mw = wr->bind_mw.mw;
    const ibv_mw_bind_info& b = wr->bind_mw.bind_info;
    if (mw == nullptr || mw->type != IBV_MW_TYPE_2 || b.mr == nullptr) return EINVAL;
    return 0;
  }
  if (wr->opcode == IBV_WR_LOCAL_INV) return 0;
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge) return EINVAL;
  *total = 0;
  for (int i = 0; i < wr->num_sge; ++i) *total += wr->sg_list[i].length;
  // IBV_SEND_INLINE is ignored where it cannot apply (a READ's SGEs are written into).
  const bool is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0 && op.inline_ok;
  if (*total > (1ull << 31)) return EINVAL;
  if (op.fixed_length != 0 && *total != op.fixed_length) return EINVAL;
  // ATOMIC WRITE's 8 bytes may come inline whatever max_inline_data says (ibv_wr_atomic_write
  // passes them by value).
  if (is_inline && op.fixed_length == 0 && *total > qp->cap.max_inline_data) return EINVAL;
  if (qp->type == IBV_QPT_UD && (wr->wr.ud.ah == nullptr || *total > qp->mtu)) return EINVAL;
  return 0;
}

int Engine::post_send(Qp* qp, const ibv_send_wr* wr, const ibv_send_wr** bad, bool all_or_none) {
  const ibv_send_wr* const first = wr;
  int err = 0;
  std::lock_guard<std::mutex> producer(qp->sq_mu);
  if (all_or_none) {  // ibv_wr_complete: either the whole batch is posted or none of it
    size_t n = 0;
    uint64_t total = 0;
    for (const ibv_send_wr* x = wr; x != nullptr; x = x->next, ++n) {
      if (int e = check_send_wr(qp, x, &total); e != 0) {
        if (bad != nullptr) *bad = x;
        return e;
      }
    }
    if (n > qp->sq.capacity() - qp->sq.size()) {
      if (bad != nullptr) *bad = wr;
      return ENOMEM;
    }
  }
  for (; wr != nullptr; wr = wr->next) {
    uint64_t total = 0;
    err = check_send_wr(qp, wr, &total);
    if (err == 0 && qp->sq.full()) err = ENOMEM;
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      break;
    }
    trace({VerbsEvent::Kind::kPostSend, qp->qpn, wr->wr_id, wr->opcode,
           static_cast<uint32_t>(total), 0, 0});
    SendWqe& w = qp->sq.next_slot();
    w = SendWqe{};
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.send_flags = wr->send_flags;
    w.imm_or_inv = wr->imm_data;
    w.signaled = qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    switch (wr->opcode) {
      case IBV_WR_BIND_MW: {
        const ibv_mw_bind_info& b = wr->bind_mw.bind_info;
        w.bind = {wr->bind_mw.mw->rkey, wr->bind_mw.rkey, b.mr->lkey, b.addr, b.length,
                  static_cast<int>(b.mw_access_flags), false};
        w.imm_or_inv = 0;
        qp->sq.commit();
        continue;
      }
      case IBV_WR_LOCAL_INV:
        qp->sq.commit();  // imm_or_inv holds invalidate_rkey
        continue;
      case IBV_WR_ATOMIC_CMP_AND_SWP:
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
        w.remote_addr = wr->wr.atomic.remote_addr;
        w.rkey = wr->wr.atomic.rkey;
        w.compare_add = wr->wr.atomic.compare_add;
        w.swap = wr->wr.atomic.swap;
        break;
      default:
        w.remote_addr = wr->wr.rdma.remote_addr;
        w.rkey = wr->wr.rdma.rkey;
        break;
    }
    if (qp->type == IBV_QPT_XRC_SEND) w.xrc_srqn = wr->qp_type.xrc.remote_srqn & 0xFFFFFF;
    if (qp->type == IBV_QPT_UD) {
      w.ah = to_ah(wr->wr.ud.ah);
      w.remote_qpn = wr->wr.ud.remote_qpn;
      w.remote_qkey = wr->wr.ud.remote_qkey;  // the high bit is resolved when sent
    }
    w.length = static_cast<uint32_t>(total);
    w.is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0 && w.info().inline_ok;
    if (w.is_inline) {
      uint32_t off = 0;
      for (int i = 0; i < wr->num_sge; ++i) {
        if (wr->sg_list[i].length == 0) continue;  // its address may be null (UCX's are)
        std::memcpy(w.inline_data.data() + off,
                    reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
        off += wr->sg_list[i].length;
      }
    } else {
      w.num_sge = static_cast<uint32_t>(wr->num_sge);
      for (int i = 0; i < wr->num_sge; ++i)
        w.sge[static_cast<size_t>(i)] = {wr->sg_list[i].addr, wr->sg_list[i].length,
                                         wr->sg_list[i].lkey};
    }
    qp->sq.commit();
  }
  // The WRs ahead of a failing one stay posted: they must go out too.
  if (wr != first) ring_doorbell(qp);
  return err;
}

int Engine::post_bind_mw(Qp* qp, uint64_t wr_id, unsigned send_flags,
                         const mem::BindRequest& b) {
  {
    std::lock_guard<std::mutex> producer(qp->sq_mu);
    const ibv_qp_state st = qp->post_state.load(std::memory_order_acquire);
    if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR ||
        !wr_allowed(qp->type, IBV_WR_BIND_MW))
      return EINVAL;
    if (qp->sq.full()) return ENOMEM;
    SendWqe& w = qp->sq.next_slot();
    w = SendWqe{};
    w.wr_id = wr_id;
    w.opcode = IBV_WR_BIND_MW;
    w.send_flags = send_flags;
    w.signaled = qp->sq_sig_all || (send_flags & IBV_SEND_SIGNALED);
    w.bind = b;
    w.bind.type1 = true;
    qp->sq.commit();
  }
  ring_doorbell(qp);
  return 0;
}

int Engine::post_recv(Qp* qp, const ibv_recv_wr* wr, const ibv_recv_wr** bad) {
  const ibv_recv_wr* const first = wr;
  int err = 0;
  std::lock_guard<std::mutex> producer(qp->rq_mu);
  const ibv_qp_state st = qp->post_state.load(std::memory_order_acquire);
  for (; wr != nullptr; wr = wr->next) {
    if (st == IBV_QPS_RESET || qp->srq != nullptr || is_xrc(qp->type)) err = EINVAL;
    else if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_recv_sge)
      err = EINVAL;
    else if (qp->rq.full()) err = ENOMEM;
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      break;
    }
    if (tracer_ != nullptr) {
      uint64_t bytes = 0;
      for (int i = 0; i < wr->num_sge; ++i) bytes += wr->sg_list[i].length;
      trace({VerbsEvent::Kind::kPostRecv, qp->qpn, wr->wr_id, 0, static_cast<uint32_t>(bytes), 0, 0});
    }
    qp->rq.push(to_recv_wqe(*wr));
  }
  // Always: the QP may enter ERR while this runs (the engine then flushes what it finds on
  // the doorbell), and a state read here cannot tell.
  if (wr != first) ring_doorbell(qp);
  return err;
}

int Engine::post_srq_recv(Srq* srq, const ibv_recv_wr* wr, const ibv_recv_wr** bad) {
  std::lock_guard<std::mutex> producer(srq->mu);
  for (; wr != nullptr; wr = wr->next) {
    int err = 0;
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > srq->max_sge) err = EINVAL;
    else if (srq->ring.full()) err = ENOMEM;
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      return err;
    }
    srq->ring.push(to_recv_wqe(*wr));
  }
  return 0;
}

}  // namespace uroce

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

namespace {

/// Whether the application may post `k` + 1 more WQEs (the slots kept for the device's own
/// work are not its).
bool app_room(const Qp* qp, size_t k = 0) {
  const size_t queued = qp->sq.size(), internal = qp->sq_internal.load(std::memory_order_relaxed);
  const size_t apps = queued > internal ? queued - internal : 0;
  return apps + k + qp->sq_reserved < qp->sq.capacity();
}

}  // namespace

int Engine::check_wr(const Qp* qp, const WrShape& s) const {
  // Runs on the posting thread: only the QP's fixed properties and its published state.
  const ibv_qp_state st = qp->post_state.load(std::memory_order_acquire);
  if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR) return EINVAL;
  const WrOpInfo& op = wr_info(s.opcode);
  if (!wr_allowed(qp->type, s.opcode)) return EINVAL;
  if (s.opcode == IBV_WR_BIND_MW) {
    // IBV_WR_BIND_MW binds type 2 windows; type 1 windows have ibv_bind_mw (verbs.h).
    if (s.bind_mw == nullptr || s.bind_mw->type != IBV_MW_TYPE_2 || s.bind_mr == nullptr)
      return EINVAL;
    return 0;
  }
  if (op.kind == WrKind::kLocal) return 0;
  if (op.kind == WrKind::kFlush) {
    // No local data; a placement type (visibility, persistence or both) and a selectivity
    // level (a range or the whole MR) as ibv_wr_flush(3) has them. ibv_post_send's
    // ibv_send_wr has no place for them: FLUSH goes through ibv_wr_flush only.
    const bool range = s.flush_level == UROCE_FLUSH_RANGE;
    if (s.num_sge != 0 || s.total != 0 || s.flush_type == 0 ||
        (s.flush_type & ~(UROCE_FLUSH_GLOBAL | UROCE_FLUSH_PERSISTENT)) != 0 ||
        s.flush_level > UROCE_FLUSH_MR || (range && s.flush_len > UINT32_MAX))
      return EINVAL;
    return 0;
  }
  if (s.num_sge < 0 || static_cast<uint32_t>(s.num_sge) > qp->cap.max_send_sge) return EINVAL;
  // IBV_SEND_INLINE is ignored where it cannot apply (a READ's SGEs are written into).
  const bool is_inline = s.inline_asked && op.inline_ok;
  if (s.total > (1ull << 31)) return EINVAL;
  if (op.fixed_length != 0 && s.total != op.fixed_length) return EINVAL;
  // ATOMIC WRITE's 8 bytes may come inline whatever max_inline_data says (ibv_wr_atomic_write
  // passes them by value).
  if (is_inline && op.fixed_length == 0 && s.total > qp->cap.max_inline_data) return EINVAL;
  if (qp->type == IBV_QPT_UD && (!s.has_ah || s.total > qp->mtu)) return EINVAL;
  // A raw frame: at least its Ethernet header, at most what the port carries.
  if (qp->type == IBV_QPT_RAW_PACKET && (s.total < 14 || s.total > qp->mtu)) return EINVAL;
  return 0;
}

namespace {

Engine::WrShape shape_of(const ibv_send_wr& wr) {
  Engine::WrShape s;
  s.opcode = wr.opcode;
  s.num_sge = wr.num_sge;
  if (wr.opcode == IBV_WR_BIND_MW) {
    s.bind_mw = wr.bind_mw.mw;
    s.bind_mr = wr.bind_mw.bind_info.mr;
  } else if (wr.opcode != IBV_WR_LOCAL_INV && wr.num_sge > 0) {
    for (int i = 0; i < wr.num_sge; ++i) s.total += wr.sg_list[i].length;
  }
  s.inline_asked = (wr.send_flags & IBV_SEND_INLINE) != 0;
  s.has_ah = wr.wr.ud.ah != nullptr;
  return s;
}

/// What post_send writes into a send queue slot for `wr` (checked: check_wr said 0).
void fill_wqe(const Qp* qp, const ibv_send_wr& wr, uint64_t total, SendWqe& w) {
  w = SendWqe{};
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.send_flags = wr.send_flags;
  w.imm_or_inv = wr.imm_data;
  w.signaled = qp->sq_sig_all || (wr.send_flags & IBV_SEND_SIGNALED);
  switch (wr.opcode) {
    case IBV_WR_BIND_MW: {
      const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
      w.bind = {wr.bind_mw.mw->rkey, wr.bind_mw.rkey, b.mr->lkey, b.addr, b.length,
                static_cast<int>(b.mw_access_flags), false};
      w.imm_or_inv = 0;
      return;
    }
    case IBV_WR_LOCAL_INV: return;  // imm_or_inv holds invalidate_rkey
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      w.remote_addr = wr.wr.atomic.remote_addr;
      w.rkey = wr.wr.atomic.rkey;
      w.compare_add = wr.wr.atomic.compare_add;
      w.swap = wr.wr.atomic.swap;
      break;
    default:
      w.remote_addr = wr.wr.rdma.remote_addr;
      w.rkey = wr.wr.rdma.rkey;
      break;
  }
  if (qp->type == IBV_QPT_XRC_SEND) w.xrc_srqn = wr.qp_type.xrc.remote_srqn & 0xFFFFFF;
  if (qp->type == IBV_QPT_UD) {
    w.ah = to_ah(wr.wr.ud.ah);
    w.remote_qpn = wr.wr.ud.remote_qpn;
    w.remote_qkey = wr.wr.ud.remote_qkey;  // the high bit is resolved when sent
  }
  w.length = static_cast<uint32_t>(total);
  w.is_inline = (wr.send_flags & IBV_SEND_INLINE) != 0 && w.info().inline_ok;
  if (w.is_inline) {
    uint32_t off = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      if (wr.sg_list[i].length == 0) continue;  // its address may be null (UCX's are)
      std::memcpy(w.inline_data.data() + off, reinterpret_cast<const void*>(wr.sg_list[i].addr),
                  wr.sg_list[i].length);
      off += wr.sg_list[i].length;
    }
  } else {
    w.num_sge = static_cast<uint32_t>(wr.num_sge);
    for (int i = 0; i < wr.num_sge; ++i)
      w.sge[static_cast<size_t>(i)] = {wr.sg_list[i].addr, wr.sg_list[i].length,
                                       wr.sg_list[i].lkey};
  }
}

/// The shape of a WQE the ibv_wr_* builder filled in place.
Engine::WrShape shape_of(const SendWqe& w) {
  Engine::WrShape s;
  s.opcode = w.opcode;
  s.num_sge = static_cast<int>(w.num_sge);
  s.total = w.length;
  s.inline_asked = w.is_inline || (w.send_flags & IBV_SEND_INLINE) != 0;
  s.has_ah = w.ah != nullptr;
  s.flush_type = w.flush_type;
  s.flush_level = w.flush_level;
  s.flush_len = w.flush_len;
  return s;
}

}  // namespace

int Engine::post_send(Qp* qp, const ibv_send_wr* wr, const ibv_send_wr** bad) {
  const ibv_send_wr* const first = wr;
  int err = 0;
  std::lock_guard<std::mutex> producer(qp->sq_mu);
  for (; wr != nullptr; wr = wr->next) {
    const WrShape s = shape_of(*wr);
    err = check_wr(qp, s);
    if (err == 0 && !app_room(qp)) err = ENOMEM;
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      break;
    }
    trace({VerbsEvent::Kind::kPostSend, qp->qpn, wr->wr_id, wr->opcode,
           static_cast<uint32_t>(s.total), 0, 0});
    fill_wqe(qp, *wr, s.total, qp->sq.next_slot());
    qp->sq.commit();
  }
  // The WRs ahead of a failing one stay posted: they must go out too.
  if (wr != first) ring_doorbell(qp);
  return err;
}

SendWqe* Engine::stage_wqe(Qp* qp, size_t k) {
  if (!app_room(qp, k)) return nullptr;
  SendWqe& w = qp->sq.next_slot(k);
  w = SendWqe{};
  return &w;
}

int Engine::commit_wqes(Qp* qp, size_t n) {
  // All or nothing (ibv_wr_post(3): nothing is executed unless ibv_wr_complete succeeds). A
  // staged BIND_MW was checked when it was staged: its window and MR are pointers the WQE
  // does not keep.
  for (size_t k = 0; k < n; ++k) {
    const SendWqe& w = qp->sq.next_slot(k);
    if (w.opcode == IBV_WR_BIND_MW) continue;
    if (int e = check_wr(qp, shape_of(w)); e != 0) return e;
  }
  for (size_t k = 0; k < n; ++k) {
    const SendWqe& w = qp->sq.next_slot(k);
    trace({VerbsEvent::Kind::kPostSend, qp->qpn, w.wr_id, w.opcode, w.length, 0, 0});
  }
  qp->sq.commit(n);
  ring_doorbell(qp);
  return 0;
}

int Engine::post_flush(Qp* qp, const FlushWr& f) {
  std::lock_guard<std::mutex> producer(qp->sq_mu);
  SendWqe* w = stage_wqe(qp, 0);
  if (w == nullptr) return ENOMEM;
  w->wr_id = f.wr_id;
  w->opcode = static_cast<ibv_wr_opcode>(UROCE_WR_FLUSH);
  w->send_flags = IBV_SEND_SIGNALED;
  w->signaled = true;
  w->remote_addr = f.va;
  w->rkey = f.rkey;
  w->flush_len = f.len;
  w->flush_type = f.type;
  w->flush_level = f.level;
  return commit_wqes(qp, 1);
}

int Engine::post_bind_mw(Qp* qp, uint64_t wr_id, unsigned send_flags,
                         const mem::BindRequest& b) {
  {
    std::lock_guard<std::mutex> producer(qp->sq_mu);
    const ibv_qp_state st = qp->post_state.load(std::memory_order_acquire);
    if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR ||
        !wr_allowed(qp->type, IBV_WR_BIND_MW))
      return EINVAL;
    if (!app_room(qp)) return ENOMEM;
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

void Engine::post_internal(Qp* qp, const SendWqe& w) {
  qp->sq_pending.push_back(w);  // (grows to the most ever waiting, then stays)
  take_pending_internal(qp);
  schedule(qp);
}

void Engine::take_pending_internal(Qp* qp) {
  if (qp->sq_pending.empty() || !qp->sq_mu.try_lock()) return;
  size_t n = 0;
  for (; n < qp->sq_pending.size() && !qp->sq.full(); ++n) {
    qp->sq.next_slot() = qp->sq_pending[n];
    qp->sq.commit();
    qp->sq_internal.fetch_add(1, std::memory_order_relaxed);
  }
  qp->sq_mu.unlock();
  qp->sq_pending.erase(qp->sq_pending.begin(), qp->sq_pending.begin() + static_cast<std::ptrdiff_t>(n));
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

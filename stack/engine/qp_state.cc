// The QP state table: which (state, next state) transitions ibv_modify_qp(3) allows for each
// QP type and with which attributes (IBA 10.3.1, table 91), carrying a modify out, querying,
// and what entering RESET and ERR does to the three roles (each resets or flushes its own).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {

// ---- The QP state transition table ------------------------------------------------------
// For each (current, next) state and QP type: the attributes that must be in the mask and
// those that may be. Transitions not listed are invalid. Every transition to RESET or ERR
// is valid with no attributes.
struct Transition {
  ibv_qp_state from, to;
  int req_ud, req_uc, req_rc;
  int opt_ud, opt_uc, opt_rc;
};

constexpr int kRtsOptUd = IBV_QP_CUR_STATE | IBV_QP_QKEY;
constexpr int kRtsOptUc =
    IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
constexpr int kRtsOptRc = kRtsOptUc | IBV_QP_MIN_RNR_TIMER;

constexpr Transition kTransitions[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0, 0, 0},
    {IBV_QPS_INIT, IBV_QPS_INIT, 0, 0, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR, 0, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_PKEY_INDEX | IBV_QP_QKEY, IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN, IBV_QP_SQ_PSN,
     IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
         IBV_QP_MAX_QP_RD_ATOMIC,
     kRtsOptUd, kRtsOptUc, kRtsOptRc},
    {IBV_QPS_RTS, IBV_QPS_RTS, 0, 0, 0, kRtsOptUd, kRtsOptUc, kRtsOptRc},
    {IBV_QPS_RTS, IBV_QPS_SQD, 0, 0, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY,
     IBV_QP_EN_SQD_ASYNC_NOTIFY},
    {IBV_QPS_SQD, IBV_QPS_RTS, 0, 0, 0, kRtsOptUd, kRtsOptUc, kRtsOptRc},
    {IBV_QPS_SQD, IBV_QPS_SQD, 0, 0, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
     IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
         IBV_QP_PATH_MIG_STATE,
     IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
         IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
         IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPS_SQE, IBV_QPS_RTS, 0, 0, -1, IBV_QP_CUR_STATE | IBV_QP_QKEY,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS, 0},
};

/// A raw-packet QP has no transport: it takes a port on its way to INIT and nothing else
/// (the kernel's table for IB_QPT_RAW_PACKET; SQD is not one of its states). Whether the
/// transition exists, and the attributes it needs and allows.
bool raw_transition(ibv_qp_state from, ibv_qp_state to, int* req, int* opt) {
  *req = *opt = 0;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    *req = IBV_QP_PORT;
    return true;
  }
  if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    *opt = IBV_QP_PORT;
    return true;
  }
  return (from == IBV_QPS_INIT && to == IBV_QPS_RTR) || (from == IBV_QPS_RTR && to == IBV_QPS_RTS) ||
         (from == IBV_QPS_RTS && to == IBV_QPS_RTS);
}

}  // namespace

int Engine::check_modify(const Qp* qp, const ibv_qp_attr* attr, int mask) const {
  // IBV_QP_CUR_STATE must name the state the QP is in; like any other attribute it is only
  // accepted where the table lists it (the transitions into RTS).
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != qp->state) return EINVAL;
  const ibv_qp_state cur = qp->state;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (next > IBV_QPS_ERR) return EINVAL;
  // A rate limit (kbit/s, 0 = none): on the way into RTS and in RTS, on the QP types the
  // kernel's table gives it to (RC, raw packet), within packet_pacing_caps.
  if (mask & IBV_QP_RATE_LIMIT) {
    if ((qp->type != IBV_QPT_RC && qp->type != IBV_QPT_RAW_PACKET) || next != IBV_QPS_RTS ||
        (cur != IBV_QPS_RTR && cur != IBV_QPS_RTS) ||
        (attr->rate_limit != 0 &&
         (attr->rate_limit < kRateLimitMinKbps || attr->rate_limit > kRateLimitMaxKbps)))
      return EINVAL;
  }
  const int attrs = mask & ~(IBV_QP_STATE | IBV_QP_RATE_LIMIT);

  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
    // Any state may go to RESET, any state but RESET to ERR; neither takes attributes.
    if (cur == IBV_QPS_RESET && next == IBV_QPS_ERR) return EINVAL;
    return attrs == 0 ? 0 : EINVAL;
  }
  int req = 0, opt = 0;
  if (qp->type == IBV_QPT_RAW_PACKET) {
    if (!raw_transition(cur, next, &req, &opt) || (attrs & req) != req || (attrs & ~(req | opt)))
      return EINVAL;
    return (mask & IBV_QP_PORT) && attr->port_num != 1 ? EINVAL : 0;
  }
  const Transition* tr = nullptr;
  for (const Transition& t : kTransitions)
    if (t.from == cur && t.to == next) tr = &t;
  if (tr == nullptr) return EINVAL;
  switch (qp->type) {
    case IBV_QPT_UD: req = tr->req_ud; opt = tr->opt_ud; break;
    case IBV_QPT_UC: req = tr->req_uc; opt = tr->opt_uc; break;
    default: req = tr->req_rc; opt = tr->opt_rc; break;
  }
  // XRC: RC's table, less what an end without a receive side (initiator) or without a send
  // side (target) has no use for.
  if (qp->type == IBV_QPT_XRC_SEND) {
    if (req > 0) req &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    opt &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  } else if (qp->type == IBV_QPT_XRC_RECV && cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    req = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  }
  if (req < 0) return EINVAL;  // transition not defined for this QP type
  if ((attrs & req) != req) return EINVAL;  // a required one is missing
  if (attrs & ~(req | opt)) return EINVAL;  // one that is not allowed

  // Values.
  if ((mask & IBV_QP_ALT_PATH)) return EOPNOTSUPP;  // no automatic path migration
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) &&
      (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > cfg_.active_mtu))
    return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && attr->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > cfg_.max_rd_atomic) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > cfg_.max_rd_atomic)
    return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > 0xFFFFFF) return EINVAL;
  // ON_DEMAND is an MR's property; programs that use one set for both (rdma-core's suite
  // does) have it ignored, as RNICs ignore it. The FLUSH rights are a QP's too (rxe's).
  if ((mask & IBV_QP_ACCESS_FLAGS) &&
      (attr->qp_access_flags & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_ON_DEMAND | UROCE_ACCESS_FLUSH_GLOBAL |
                                 UROCE_ACCESS_FLUSH_PERSISTENT)))
    return EINVAL;
  if (mask & IBV_QP_AV) {
    Path p;
    if (int e = av_errno(attr->ah_attr, gids_.size(), resolve_path(attr->ah_attr, &p)); e != 0)
      return e;
  }
  return 0;
}

int Engine::modify_qp(Qp* qp, ibv_qp_attr* attr, int mask) {
  if (qp == nullptr || attr == nullptr) return EINVAL;
  if (mask & ~((IBV_QP_RATE_LIMIT << 1) - 1)) return EINVAL;
  if (mask & IBV_QP_CAP) return EINVAL;
  if (int e = check_modify(qp, attr, mask); e != 0) return e;

  // Attributes first (all checked above: nothing below can fail).
  if (mask & IBV_QP_PKEY_INDEX) qp->pkey_index = attr->pkey_index;
  if (mask & IBV_QP_PORT) qp->port_num = attr->port_num;
  if (mask & IBV_QP_QKEY) qp->qkey = attr->qkey;
  if (mask & IBV_QP_ACCESS_FLAGS) qp->access = attr->qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) {
    qp->path_mtu = attr->path_mtu;
    qp->mtu = mtu_bytes(attr->path_mtu);
  }
  if (mask & IBV_QP_TIMEOUT) qp->timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) qp->retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) qp->rnr_retry = attr->rnr_retry;
  if (mask & (IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY)) refill_retries(qp);
  if (mask & IBV_QP_MIN_RNR_TIMER) qp->min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->max_rd_atomic = std::max<uint8_t>(attr->max_rd_atomic, 1);
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    qp->max_dest_rd_atomic = std::max<uint8_t>(attr->max_dest_rd_atomic, 1);
    size_rd_atomic_res(qp);
  }
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) qp->en_sqd_async_notify = attr->en_sqd_async_notify;
  if (mask & IBV_QP_RATE_LIMIT) set_rate_limit(qp, attr->rate_limit, 0);
  if (mask & IBV_QP_DEST_QPN) qp->dest_qpn = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) start_recv_psn(qp, Psn(attr->rq_psn));
  if (mask & IBV_QP_SQ_PSN) start_send_psn(qp, Psn(attr->sq_psn));
  if (mask & IBV_QP_AV) {
    qp->ah_attr = attr->ah_attr;
    resolve_path(attr->ah_attr, &qp->path);
  }
  if (mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) fill_template(qp);

  if (!(mask & IBV_QP_STATE) || attr->qp_state == qp->state) {
    if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR) flush_qp(qp);
    return 0;
  }
  const ibv_qp_state next = attr->qp_state;
  switch (next) {
    case IBV_QPS_RESET: reset_qp(qp); break;
    case IBV_QPS_ERR: enter_error(qp); break;
    case IBV_QPS_RTS:
      set_state(qp, IBV_QPS_RTS);
      restart_drain(qp);
      schedule(qp);  // posted WQEs (e.g. queued while in SQD) may go now
      break;
    case IBV_QPS_SQD:
      set_state(qp, IBV_QPS_SQD);
      restart_drain(qp);
      schedule(qp);  // drain check happens in the requester
      break;
    default: set_state(qp, next); break;
  }
  return 0;
}

int Engine::query_qp(const Qp* qp, ibv_qp_attr* a, int, ibv_qp_init_attr* init) const {
  if (qp == nullptr || a == nullptr) return EINVAL;
  *a = ibv_qp_attr{};
  a->qp_state = a->cur_qp_state = qp->state;
  a->path_mtu = qp->path_mtu;
  a->path_mig_state = IBV_MIG_MIGRATED;
  a->qkey = qp->qkey;
  a->rq_psn = qp->resp.epsn.value();
  a->sq_psn = qp->req.psn.value();
  a->dest_qp_num = qp->dest_qpn;
  a->qp_access_flags = static_cast<unsigned>(qp->access);
  a->cap = qp->cap;
  a->ah_attr = qp->ah_attr;
  a->pkey_index = qp->pkey_index;
  a->en_sqd_async_notify = qp->en_sqd_async_notify;
  a->sq_draining = qp->state == IBV_QPS_SQD && qp->sq.head_index() != qp->req.assigned_end;
  a->max_rd_atomic = qp->max_rd_atomic;
  a->max_dest_rd_atomic = qp->max_dest_rd_atomic;
  a->min_rnr_timer = qp->min_rnr_timer;
  a->port_num = qp->port_num;
  a->timeout = qp->timeout;
  a->retry_cnt = qp->retry_cnt;
  a->rnr_retry = qp->rnr_retry;
  if (init != nullptr) {
    *init = ibv_qp_init_attr{};
    init->send_cq = qp->send_cq != nullptr ? &qp->send_cq->ibv : nullptr;
    init->recv_cq = qp->recv_cq != nullptr && !is_xrc(qp->type) ? &qp->recv_cq->ibv : nullptr;
    init->srq = qp->srq != nullptr && !is_xrc(qp->type) ? &qp->srq->ibv : nullptr;
    init->qp_type = qp->type;
    init->cap = qp->cap;
    init->sq_sig_all = qp->sq_sig_all;
  }
  return 0;
}

void Engine::clean_cq(Cq* cq, uint32_t qpn) {
  std::lock_guard<std::mutex> consumers(cq->mu);  // with the engine's: both sides of the ring
  const size_t n = cq->ring.size();
  for (size_t i = 0; i < n; ++i) {  // rotate through once, keeping other QPs' completions
    const Cq::Entry e = cq->ring.front();
    cq->ring.pop();
    if (e.wc.qp_num != qpn) cq->ring.push(e);
  }
}

void Engine::set_state(Qp* qp, ibv_qp_state st) {
  if (st != qp->state) trace({VerbsEvent::Kind::kQpState, qp->qpn, 0, 0, 0, st, 0});
  qp->state = st;
  qp->ibv.state = st;
  qp->post_state.store(st, std::memory_order_release);
}

void Engine::reset_qp(Qp* qp) {
  cc_reset_qp(qp);
  {
    // Both sides of both queues: posters are kept out while the rings empty (and they find
    // the QP in RESET afterwards, where posting is refused).
    std::scoped_lock producers(qp->sq_mu, qp->rq_mu);
    set_state(qp, IBV_QPS_RESET);
    qp->last_wqe_reached = qp->comm_est_raised = false;
    qp->sq.clear();
    qp->rq.clear();
    qp->sq_internal.store(0, std::memory_order_relaxed);
  }
  qp->sq_pending.clear();
  // A reset QP starts afresh: completions it left in its CQs (flushed WRs of the error it
  // was reset from) go too, as RNICs clean their CQs on this transition (mlx5's cq_clean).
  if (qp->send_cq != nullptr) clean_cq(qp->send_cq, qp->qpn);
  if (qp->recv_cq != nullptr && qp->recv_cq != qp->send_cq && qp->type != IBV_QPT_XRC_RECV)
    clean_cq(qp->recv_cq, qp->qpn);  // (see destroy_qp)
  if (qp->type == IBV_QPT_XRC_RECV) {  // no message in progress: no SRQ of its own
    qp->srq = nullptr;
    qp->pd = nullptr;
    qp->recv_cq = nullptr;
  }
  reset_requester(qp);
  reset_completer(qp);
  reset_responder(qp);
  qp->flush_pending = false;
}

void Engine::enter_error(Qp* qp) {
  // Everything outstanding completes with IBV_WC_WR_FLUSH_ERR (in the engine's next pass, so
  // that an error completion being generated right now goes first).
  set_state(qp, IBV_QPS_ERR);
  timers_.cancel(qp->comp.retransmit_timer);  // nothing is retried or paced in ERR
  timers_.cancel(qp->req.rnr_timer);
  cancel_pace(qp);
  qp->flush_pending = true;
  schedule(qp);
}

void Engine::flush_qp(Qp* qp) {
  qp->flush_pending = false;
  flush_requester(qp);
  flush_responder(qp);
  if (qp->srq != nullptr && !is_xrc(qp->type) && !qp->last_wqe_reached) {
    // IBA 11.6.3: a QP on an SRQ that entered the error state takes no more WQEs from it.
    // Programs wait for this event before destroying such a QP (ibv_create_srq(3)).
    qp->last_wqe_reached = true;
    post_event(IBV_EVENT_QP_LAST_WQE_REACHED, qp);
  }
}

}  // namespace uroce

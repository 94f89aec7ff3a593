// The verbs front: creating, modifying and destroying objects, posting work requests.
// Argument checks and errno values follow rdma-core's man pages (ibv_modify_qp(3),
// ibv_post_send(3), ...) and the QP state transition table of the IBA spec (10.3.1).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

namespace {

uint32_t mtu_bytes(ibv_mtu m) { return 128u << static_cast<unsigned>(m); }

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

}  // namespace

namespace {

/// Drops the queued async events `gone` matches: their object is being destroyed, and nobody
/// may be handed an event that points at a freed object (ibv_get_async_event(3) makes destroy
/// wait for them; an engine that never blocks forgets them instead).
template <typename Pred>
void drop_events(Ring<AsyncEvent>& events, Pred gone) {
  const size_t n = events.size();
  for (size_t i = 0; i < n; ++i) {
    const AsyncEvent ev = events.front();
    events.pop();
    if (!gone(ev)) events.push(ev);
  }
}

/// The errno for an address vector (create_ah, modify_qp with IBV_QP_AV): EINVAL for one that
/// can never be valid (no such port or source GID, no GRH: RoCE addresses by GID), otherwise
/// EHOSTUNREACH when the destination could not be resolved to a neighbour.
int av_errno(const ibv_ah_attr& ah, size_t gid_count, bool resolved) {
  if (ah.port_num != 1 || !ah.is_global || ah.grh.sgid_index >= gid_count) return EINVAL;
  return resolved ? 0 : EHOSTUNREACH;
}

RecvWqe to_recv_wqe(const ibv_recv_wr& wr) {
  RecvWqe r;
  r.wr_id = wr.wr_id;
  r.num_sge = static_cast<uint32_t>(wr.num_sge);
  for (int i = 0; i < wr.num_sge; ++i)
    r.sge[static_cast<size_t>(i)] = {wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  return r;
}

}  // namespace

// ---- PD, MR -------------------------------------------------------------------------------

mem::Pd* Engine::alloc_pd() {
  if (pds_.size() >= cfg_.max_pd) {
    errno = ENOMEM;
    return nullptr;
  }
  auto pd = std::make_unique<mem::Pd>();
  pd->handle = next_handle_++;
  pds_.push_back(std::move(pd));
  return pds_.back().get();
}

int Engine::dealloc_pd(mem::Pd* pd) {
  auto it = std::find_if(pds_.begin(), pds_.end(), [pd](const auto& p) { return p.get() == pd; });
  if (it == pds_.end()) return EINVAL;
  if (pd->users != 0) return EBUSY;
  pds_.erase(it);
  return 0;
}

mem::Mr* Engine::reg_mr(mem::Pd* pd, void* addr, size_t length, int access) {
  return reg_mr_iova(pd, addr, length, reinterpret_cast<uint64_t>(addr), access);
}

namespace {
/// 0, or the errno for access flags this engine cannot register.
int access_errno(int access) {
  // IBV_ACCESS_HUGETLB is on-demand paging's hint that the range is huge pages: nothing to
  // do here, where pages are never pinned.
  constexpr int kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING |
                             IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB;
  if (!(access & ~kSupported)) return 0;
  // Zero-based MRs of host memory: only device memory's (reg_dm_mr) are.
  return (access & IBV_ACCESS_ZERO_BASED) ? EOPNOTSUPP : EINVAL;
}
}  // namespace

mem::Mr* Engine::reg_dm_mr(mem::Pd* pd, void* host, size_t length, int access) {
  const int rest = access & ~IBV_ACCESS_ZERO_BASED;
  if (!(access & IBV_ACCESS_ZERO_BASED) || (rest & IBV_ACCESS_ON_DEMAND)) {
    errno = EINVAL;
    return nullptr;
  }
  if (int e = access_errno(rest); e != 0) {
    errno = e;
    return nullptr;
  }
  return mrs_.reg(pd, host, length, 0, rest);
}

mem::Mr* Engine::reg_mr_iova(mem::Pd* pd, void* addr, size_t length, uint64_t iova,
                             int access, mem::Pages pages) {
  if (int e = access_errno(access); e != 0) {
    errno = e;
    return nullptr;
  }
  return mrs_.reg(pd, addr, length, iova, access, pages);
}

int Engine::prefault_mr(const mem::Pd* pd, const void* addr, size_t length, int access) {
  if (int e = access_errno(access); e != 0) return e;
  return mem::region_errno(pd, addr, length, access);
}

int Engine::advise_mr(const mem::Pd* pd, ibv_advise_mr_advice advice,
                      const ibv_sge& sge) const {
  const mem::Mr* mr = mrs_.find(sge.lkey);
  if (mr == nullptr) return mrs_.find_mw(sge.lkey) != nullptr ? EINVAL : EFAULT;
  if (mr->pd != pd) return EPERM;
  if (!(mr->access & IBV_ACCESS_ON_DEMAND)) return EINVAL;
  const bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  if (write && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) return EPERM;
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {  // only the range is checked
    const uint64_t va = sge.addr;
    return va < mr->iova || va - mr->iova > mr->length || sge.length > mr->length - (va - mr->iova)
               ? EFAULT
               : 0;
  }
  uint8_t* host = nullptr;  // check() faults an on-demand range in
  return mrs_.check(sge.lkey, pd, sge.addr, sge.length, write ? IBV_ACCESS_LOCAL_WRITE : 0,
                    &host) == mem::AccessError::kOk
             ? 0
             : EFAULT;
}

int Engine::rereg_mr(mem::Mr* mr, mem::Pd* pd, void* addr, size_t length, uint64_t iova,
                     int access, mem::Pages pages) {
  if (int e = access_errno(access); e != 0) return e;
  return mrs_.modify(mr, pd, addr, length, iova, access, pages);
}

int Engine::dereg_mr(mem::Mr* mr) { return mrs_.dereg(mr); }

mem::Mw* Engine::alloc_mw(mem::Pd* pd, ibv_mw_type type) { return mrs_.alloc_mw(pd, type); }

int Engine::dealloc_mw(mem::Mw* mw) { return mrs_.dealloc_mw(mw); }

// ---- CQ, SRQ, AH ------------------------------------------------------------------------------

Cq* Engine::create_cq(int cqe) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > cfg_.max_cqe) {
    errno = EINVAL;
    return nullptr;
  }
  if (cqs_.size() >= cfg_.max_cq) {
    errno = ENOMEM;
    return nullptr;
  }
  auto cq = std::make_unique<Cq>();
  cq->handle = next_handle_++;
  cq->ring = Ring<ibv_wc>(static_cast<size_t>(cqe));
  cq->ibv.cqe = cqe;  // the CQ's actual size, as ibv_create_cq(3) reports it
  cqs_.push_back(std::move(cq));
  return cqs_.back().get();
}

int Engine::resize_cq(Cq* cq, int cqe) {
  if (cq == nullptr || cqe < 1 || static_cast<uint32_t>(cqe) > cfg_.max_cqe) return EINVAL;
  std::lock_guard<std::mutex> consumers(cq->mu);  // with the engine's: both sides of the ring
  if (static_cast<size_t>(cqe) < cq->ring.size()) return EINVAL;  // would lose completions
  cq->ring.resize(static_cast<size_t>(cqe));
  cq->ibv.cqe = cqe;
  return 0;
}

int Engine::destroy_cq(Cq* cq) {
  auto it = std::find_if(cqs_.begin(), cqs_.end(), [cq](const auto& c) { return c.get() == cq; });
  if (it == cqs_.end()) return EINVAL;
  if (cq->users != 0) return EBUSY;
  drop_events(events_, [cq](const AsyncEvent& e) { return e.cq == cq; });
  cqs_.erase(it);
  return 0;
}

Xrcd* Engine::create_xrcd() {
  auto x = std::make_unique<Xrcd>();
  x->handle = next_handle_++;
  xrcds_.push_back(std::move(x));
  return xrcds_.back().get();
}

int Engine::destroy_xrcd(Xrcd* xrcd) {
  auto it = std::find_if(xrcds_.begin(), xrcds_.end(),
                         [xrcd](const auto& x) { return x.get() == xrcd; });
  if (it == xrcds_.end()) return EINVAL;
  if (xrcd->users != 0) return EBUSY;
  xrcds_.erase(it);
  return 0;
}

Srq* Engine::create_srq(mem::Pd* pd, ibv_srq_init_attr* attr, Xrcd* xrcd, Cq* cq) {
  if ((xrcd != nullptr) != (cq != nullptr) || (xrcd != nullptr && next_handle_ > 0xFFFFFF)) {
    errno = EINVAL;
    return nullptr;
  }
  if (pd == nullptr || attr == nullptr || attr->attr.max_wr == 0 ||
      attr->attr.max_wr > cfg_.max_srq_wr || attr->attr.max_sge > cfg_.max_sge ||
      attr->attr.srq_limit > attr->attr.max_wr) {
    errno = EINVAL;
    return nullptr;
  }
  if (srqs_.size() >= cfg_.max_srq) {
    errno = ENOMEM;
    return nullptr;
  }
  auto srq = std::make_unique<Srq>();
  srq->handle = next_handle_++;
  srq->pd = pd;
  srq->ring = Ring<RecvWqe>(attr->attr.max_wr);
  srq->max_sge = std::max<uint32_t>(attr->attr.max_sge, 1);
  srq->limit = attr->attr.srq_limit;
  srq->xrcd = xrcd;
  srq->cq = cq;
  ++pd->users;
  if (xrcd != nullptr) {
    ++xrcd->users;
    ++cq->users;
  }
  srqs_.push_back(std::move(srq));
  return srqs_.back().get();
}

int Engine::modify_srq(Srq* srq, ibv_srq_attr* attr, int mask) {
  if (srq == nullptr || attr == nullptr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)))
    return EINVAL;
  // Posters stay out from the check to the copy (both sides of the ring held).
  std::lock_guard<std::mutex> producers(srq->mu);
  // Everything is checked before anything changes (ibv_modify_srq(3)).
  size_t max_wr = srq->ring.capacity();
  if (mask & IBV_SRQ_MAX_WR) {
    // Resizing (query_device reports IBV_DEVICE_SRQ_RESIZE): never below what is posted.
    if (attr->max_wr == 0 || attr->max_wr > cfg_.max_srq_wr || attr->max_wr < srq->ring.size())
      return EINVAL;
    max_wr = attr->max_wr;
  }
  const uint32_t limit = (mask & IBV_SRQ_LIMIT) ? attr->srq_limit : srq->limit;
  if (limit > max_wr) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) srq->ring.resize(max_wr);
  srq->limit = limit;  // a limit set here arms the limit event
  return 0;
}

int Engine::query_srq(Srq* srq, ibv_srq_attr* attr) const {
  attr->max_wr = static_cast<uint32_t>(srq->ring.capacity());
  attr->max_sge = srq->max_sge;
  attr->srq_limit = srq->limit;
  return 0;
}

int Engine::destroy_srq(Srq* srq) {
  auto it =
      std::find_if(srqs_.begin(), srqs_.end(), [srq](const auto& s) { return s.get() == srq; });
  if (it == srqs_.end()) return EINVAL;
  if (srq->users != 0) return EBUSY;
  drop_events(events_, [srq](const AsyncEvent& e) { return e.srq == srq; });
  if (srq->xrcd != nullptr) {
    for (auto& q : qps_) {
      if (!q || q->type != IBV_QPT_XRC_RECV) continue;
      forget_srq(q.get(), srq);
    }
    --srq->xrcd->users;
    --srq->cq->users;
  }
  --srq->pd->users;
  srqs_.erase(it);
  return 0;
}

Ah* Engine::create_ah(mem::Pd* pd, const ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr || attr->port_num != 1) {
    errno = EINVAL;
    return nullptr;
  }
  if (ahs_.size() >= cfg_.max_ah) {
    errno = ENOMEM;
    return nullptr;
  }
  auto ah = std::make_unique<Ah>();
  if (int e = av_errno(*attr, gids_.size(), resolve_path(*attr, &ah->path)); e != 0) {
    errno = e;
    return nullptr;
  }
  ah->pd = pd;
  ah->attr = *attr;
  ++pd->users;
  ahs_.push_back(std::move(ah));
  return ahs_.back().get();
}

int Engine::destroy_ah(Ah* ah) {
  auto it = std::find_if(ahs_.begin(), ahs_.end(), [ah](const auto& a) { return a.get() == ah; });
  if (it == ahs_.end()) return EINVAL;
  --ah->pd->users;
  ahs_.erase(it);
  return 0;
}

// ---- QP -------------------------------------------------------------------------------------

Qp* Engine::qp_by_num(uint32_t qpn) {
  if (qpn < cfg_.first_qpn || qpn - cfg_.first_qpn >= qps_.size()) return nullptr;
  return qps_[qpn - cfg_.first_qpn].get();
}

Qp* Engine::create_qp(mem::Pd* pd, ibv_qp_init_attr* a, Xrcd* xrcd) {
  if (a == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_qp_type type = a->qp_type;
  if (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD && !is_xrc(type)) {
    errno = EOPNOTSUPP;  // raw packet, driver QPs
    return nullptr;
  }
  // An XRC target has a domain and nothing else; an initiator a PD and a send CQ only.
  const bool tgt = type == IBV_QPT_XRC_RECV, ini = type == IBV_QPT_XRC_SEND;
  if (tgt ? xrcd == nullptr
          : (pd == nullptr || a->send_cq == nullptr || (!ini && a->recv_cq == nullptr))) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_init_attr xa;
  if (is_xrc(type)) {  // what does not apply is ignored, as the kernel does
    xa = *a;
    xa.recv_cq = nullptr;
    xa.srq = nullptr;
    xa.cap.max_recv_wr = xa.cap.max_recv_sge = 0;
    if (tgt) {
      xa.send_cq = nullptr;
      xa.cap = ibv_qp_cap{};
      pd = nullptr;
    }
    a = &xa;
  }
  // ibv_create_qp(3): only RC and UD QPs may be associated with an SRQ.
  if (a->srq != nullptr && a->qp_type == IBV_QPT_UC) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_qp_cap& c = a->cap;
  if (c.max_send_wr > cfg_.max_qp_wr || c.max_send_sge > cfg_.max_sge ||
      c.max_inline_data > cfg_.max_inline ||
      (a->srq == nullptr && (c.max_recv_wr > cfg_.max_qp_wr || c.max_recv_sge > cfg_.max_sge))) {
    errno = EINVAL;
    return nullptr;
  }
  if (qp_count_ >= cfg_.max_qp) {
    errno = ENOMEM;
    return nullptr;
  }
  // QPNs go round the engine's whole span, as an RNIC hands them out: a destroyed QP's
  // number comes back only after every other one was used, so frames still in flight for it
  // find no QP (dropped, counted) instead of its successor.
  size_t slot = next_qpn_slot_;
  while (slot < qps_.size() && qps_[slot]) slot = (slot + 1) % cfg_.qpn_span;
  next_qpn_slot_ = (slot + 1) % cfg_.qpn_span;
  auto qp = std::make_unique<Qp>();
  qp->qpn = cfg_.first_qpn + static_cast<uint32_t>(slot);
  qp->type = a->qp_type;
  qp->pd = pd;
  qp->xrcd = tgt ? xrcd : nullptr;
  qp->send_cq = a->send_cq != nullptr ? to_cq(a->send_cq) : nullptr;
  qp->recv_cq = a->recv_cq != nullptr ? to_cq(a->recv_cq) : nullptr;
  qp->srq = a->srq != nullptr ? to_srq(a->srq) : nullptr;
  qp->sq_sig_all = a->sq_sig_all != 0;
  qp->cap = c;
  qp->cap.max_send_sge = std::max<uint32_t>(c.max_send_sge, tgt ? 0 : 1);
  qp->cap.max_recv_sge = std::max<uint32_t>(c.max_recv_sge, is_xrc(type) ? 0 : 1);
  // Inline data is kept in the WQE's own fixed buffer: every QP can take the device's whole
  // max_inline, so that is what is granted and reported back (rdma-core's providers round
  // up too: rxe to at least 16 bytes per send SGE, mlx5 to the WQE size). A program that asks
  // for 0 and sends 16 bytes inline (rdma_xclient) works, as on rxe.
  qp->cap.max_inline_data = tgt ? 0 : cfg_.max_inline;
  if (qp->type == IBV_QPT_UD) {
    // UD has no path MTU attribute: a datagram may be as large as the port's active MTU.
    qp->path_mtu = cfg_.active_mtu;
    qp->mtu = mtu_bytes(cfg_.active_mtu);
  }
  qp->sq = Ring<SendWqe>(c.max_send_wr);
  if (qp->srq == nullptr) qp->rq = Ring<RecvWqe>(c.max_recv_wr);
  init_requester(qp.get());
  init_completer(qp.get());
  cc_init_qp(qp.get());
  qp->ibv.qp_num = qp->qpn;
  qp->ibv.qp_type = a->qp_type;
  qp->ibv.state = IBV_QPS_RESET;
  if (tgt) {
    ++xrcd->users;
  } else {
    ++pd->users;
    ++qp->send_cq->users;
    if (qp->recv_cq != nullptr) ++qp->recv_cq->users;
  }
  if (qp->srq != nullptr) ++qp->srq->users;
  if (slot >= qps_.size()) qps_.resize(slot + 1);  // grows up to qpn_span, never shrinks
  qps_[slot] = std::move(qp);
  ++qp_count_;
  return qps_[slot].get();
}

int Engine::destroy_qp(Qp* qp) {
  if (qp == nullptr || qp_by_num(qp->qpn) != qp) return EINVAL;
  timers_.cancel(qp->comp.retransmit_timer);
  timers_.cancel(qp->req.rnr_timer);
  cc_reset_qp(qp);
  // Drop it from the active list.
  const size_t n = active_.size();
  for (size_t i = 0; i < n; ++i) {
    Qp* q = active_.front();
    active_.pop();
    if (q != qp) active_.push(q);
  }
  drop_events(events_, [qp](const AsyncEvent& e) { return e.qp == qp; });
  {
    std::lock_guard<std::mutex> lock(doorbell_mu_);
    std::erase(doorbells_, qp);
  }
  // Its completions go with it: a later QP with the same number must not inherit them. Not an
  // XRC target's: it has no CQ, and the receives it delivered belong to its SRQs' CQs (as on
  // RNICs, which clean only a QP's own CQs).
  if (qp->send_cq != nullptr) clean_cq(qp->send_cq, qp->qpn);
  if (qp->recv_cq != nullptr && qp->recv_cq != qp->send_cq && qp->type != IBV_QPT_XRC_RECV)
    clean_cq(qp->recv_cq, qp->qpn);
  mrs_.release_qp(qp->qpn);  // its type 2 windows: no later QP may use them
  for (size_t i = mcast_.size(); i-- > 0;) {
    const Gid gid = mcast_[i].gid;  // detaching may erase the entry
    detach_mcast(qp, gid);
  }
  if (qp->type == IBV_QPT_XRC_RECV) {
    --qp->xrcd->users;  // its srq/pd/recv_cq are only the current message's: not counted
  } else {
    --qp->pd->users;
    --qp->send_cq->users;
    if (qp->recv_cq != nullptr) --qp->recv_cq->users;
    if (qp->srq != nullptr) --qp->srq->users;
  }
  qps_[qp->qpn - cfg_.first_qpn].reset();
  --qp_count_;
  return 0;
}

int Engine::attach_mcast(Qp* qp, const Gid& gid) {
  if (qp == nullptr || qp_by_num(qp->qpn) != qp || qp->type != IBV_QPT_UD ||
      !is_multicast_gid(gid))
    return EINVAL;
  auto g = std::find_if(mcast_.begin(), mcast_.end(),
                        [&](const McGroup& m) { return m.gid == gid; });
  if (g == mcast_.end()) {
    if (mcast_.size() >= cfg_.max_mcast_grp) return ENOMEM;
    g = mcast_.insert(mcast_.end(), McGroup{gid, {}});
    if (group_change_) group_change_(gid, true);
  }
  if (std::find(g->qps.begin(), g->qps.end(), qp) != g->qps.end()) return 0;  // already
  if (g->qps.size() >= cfg_.max_mcast_qp_attach) return ENOMEM;
  g->qps.push_back(qp);
  return 0;
}

int Engine::detach_mcast(Qp* qp, const Gid& group) {
  const Gid gid = group;  // a copy: `group` may be a group's own entry, erased below
  auto g = std::find_if(mcast_.begin(), mcast_.end(),
                        [&](const McGroup& m) { return m.gid == gid; });
  if (qp == nullptr || g == mcast_.end()) return EINVAL;
  auto q = std::find(g->qps.begin(), g->qps.end(), qp);
  if (q == g->qps.end()) return EINVAL;
  g->qps.erase(q);
  if (g->qps.empty()) {
    mcast_.erase(g);
    if (group_change_) group_change_(gid, false);
  }
  return 0;
}

int Engine::check_modify(const Qp* qp, const ibv_qp_attr* attr, int mask) const {
  // IBV_QP_CUR_STATE must name the state the QP is in; like any other attribute it is only
  // accepted where the table lists it (the transitions into RTS).
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != qp->state) return EINVAL;
  const ibv_qp_state cur = qp->state;
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if (next > IBV_QPS_ERR) return EINVAL;
  const int attrs = mask & ~IBV_QP_STATE;

  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
    // Any state may go to RESET, any state but RESET to ERR; neither takes attributes.
    if (cur == IBV_QPS_RESET && next == IBV_QPS_ERR) return EINVAL;
    return attrs == 0 ? 0 : EINVAL;
  }
  const Transition* tr = nullptr;
  for (const Transition& t : kTransitions)
    if (t.from == cur && t.to == next) tr = &t;
  if (tr == nullptr) return EINVAL;
  int req = 0, opt = 0;
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
  // does) have it ignored, as RNICs ignore it.
  if ((mask & IBV_QP_ACCESS_FLAGS) &&
      (attr->qp_access_flags & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_ON_DEMAND)))
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
  if (mask & (IBV_QP_RATE_LIMIT | IBV_QP_CAP)) return mask & IBV_QP_CAP ? EINVAL : EOPNOTSUPP;
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
    const ibv_wc wc = cq->ring.front();
    cq->ring.pop();
    if (wc.qp_num != qpn) cq->ring.push(wc);
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
  }
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
  timers_.cancel(qp->cc.pace_timer);
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

// Object lifecycle: PDs, MRs and windows, CQs, XRC domains, SRQs, AHs and QPs are created,
// changed and destroyed here, with the errno values rdma-core's man pages give
// (ibv_alloc_pd(3), ibv_reg_mr(3), ibv_create_qp(3), ...).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/engine.h"

namespace uroce {

using namespace wire;

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
                             IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB |
                             UROCE_ACCESS_FLUSH_GLOBAL | UROCE_ACCESS_FLUSH_PERSISTENT;
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
  cq->ring = Ring<Cq::Entry>(static_cast<size_t>(cqe));
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

Srq* Engine::create_srq(mem::Pd* pd, ibv_srq_init_attr* attr, Xrcd* xrcd, Cq* cq,
                        const ibv_tm_cap* tm) {
  // An XRC SRQ has a domain and a CQ; a tag-matching one a CQ and its list's size.
  if ((xrcd != nullptr || tm != nullptr) != (cq != nullptr) || (xrcd != nullptr && tm != nullptr) ||
      (xrcd != nullptr && next_handle_ > 0xFFFFFF) ||
      (tm != nullptr && (tm->max_num_tags == 0 || tm->max_num_tags > kTmMaxTags))) {
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
  if (tm != nullptr) {
    srq->tm = std::make_unique<Srq::TagList>();
    srq->tm->entries.resize(tm->max_num_tags);
  }
  ++pd->users;
  if (xrcd != nullptr) ++xrcd->users;
  if (cq != nullptr) ++cq->users;
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
  }
  if (srq->cq != nullptr) --srq->cq->users;
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

Qp* Engine::create_qp(mem::Pd* pd, ibv_qp_init_attr* a, Xrcd* xrcd, bool rss) {
  if (a == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_qp_type type = a->qp_type;
  // Raw-packet QPs need a port that carries Ethernet frames (not the UDP port).
  if (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD && !is_xrc(type) &&
      (type != IBV_QPT_RAW_PACKET || !port_.raw_frames())) {
    errno = EOPNOTSUPP;  // driver QPs
    return nullptr;
  }
  // An XRC target has a domain and nothing else; an initiator a PD and a send CQ only.
  const bool tgt = type == IBV_QPT_XRC_RECV, ini = type == IBV_QPT_XRC_SEND;
  // (An RSS QP has neither queue: its WQs have the CQs.)
  if (tgt ? xrcd == nullptr
          : (pd == nullptr ||
             (!rss && (a->send_cq == nullptr || (!ini && a->recv_cq == nullptr))))) {
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
  } else if (qp->type == IBV_QPT_RAW_PACKET) {
    // A raw frame may be as long as the port and the interface carry (Ethernet header in).
    qp->mtu = std::min(port_.max_frame_len(), wire_frame_max_);
  }
  // With a tag-matching SRQ the device may post a rendezvous READ and FIN of its own for
  // each message: slots for them beside the application's.
  if (qp->srq != nullptr && qp->srq->tm) qp->sq_reserved = kTmInternalWqes;
  qp->sq = Ring<SendWqe>(c.max_send_wr + qp->sq_reserved);
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
    if (qp->send_cq != nullptr) ++qp->send_cq->users;
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
  if (qp->flows != 0 || qp->wq_tables != 0) return EBUSY;  // its flows, the tables using it
  if (qp->rss)
    for (const auto& t : rwq_tables_)
      if (&t->wqs == qp->rss->wqs) --t->users;
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
    if (qp->send_cq != nullptr) --qp->send_cq->users;
    if (qp->recv_cq != nullptr) --qp->recv_cq->users;
    if (qp->srq != nullptr) --qp->srq->users;
  }
  qps_[qp->qpn - cfg_.first_qpn].reset();
  --qp_count_;
  return 0;
}

int Engine::attach_mcast(Qp* qp, const Gid& gid) {
  if (cfg_.max_mcast_grp == 0) return EOPNOTSUPP;
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

}  // namespace uroce

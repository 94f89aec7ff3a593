// Verbs objects on top of the engine: PD, MR, device memory, completion channels and their
// events, CQ, SRQ, AH, QP. The data path (post, poll, notify) is datapath.cc.
//
// Control verbs hold the runtime's engine lock. Every object is recorded in the context that
// made it, so that ibv_close_device can destroy what the application left. docs/threading.md
// has the model.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "verbs/provider.h"

namespace uroce::verbs {
// An imported object (ibv_import_pd / _mr / _dm) is a second handle of the importing context
// on the same engine object; it keeps the original from being destroyed (a PD through its
// users, the others through `imports`) until it is unimported or its group closes.
struct UPd {
  ibv_pd ibv;
  mem::Pd* pd;
  bool parent_domain;  // a parent domain: a second handle on `pd` (which it keeps busy)
  bool imported;       // ibv_import_pd's: a handle on `pd` (which it keeps busy)
};
struct UDm {
  ibv_dm ibv;
  uint8_t* mem;     // the emulated device memory: host memory of this process
  uint64_t length;
  uint64_t charged;  // what it counts against kDeviceMemoryBytes (length, aligned)
  uint32_t mrs;     // MRs registered on it (under the engine lock): it cannot be freed
  bool dead;        // being freed (under the engine lock): no new MR on it
  UDm* imported_from;  // ibv_import_dm's: the device memory it names (mem, length: its)
  uint32_t imports;    // handles imported on this one (under the group's obj_mu)
};
struct UMr {
  ibv_mr ibv;
  mem::Mr* mr;
  UDm* dm;  // the device memory it registers, or null
  UMr* imported_from;  // ibv_import_mr's: the registration it names
  uint32_t imports;    // handles imported on this one (under the group's obj_mu)
};
struct UMw {
  ibv_mw ibv;
  mem::Mw* mw;
};
/// What a completion channel's pipe carries: the CQ, and its handle number to tell it from a
/// later CQ at the same address (writes of this size to a pipe are atomic).
struct CqEvent {
  ibv_cq* cq;
  uint32_t handle;
};
struct UChannel {
  ibv_comp_channel ibv;
  int wfd;  // write end of the pipe whose read end is ibv.fd (non-blocking)
  int cqs;  // CQs using it (under the owning context's obj_mu)
};

}  // namespace uroce::verbs

using namespace uroce;
using namespace uroce::verbs;

namespace {

mem::Pd* pd_of(ibv_pd* p) { return reinterpret_cast<UPd*>(p)->pd; }

/// Records / forgets an object in the set of the context that made it.
template <typename T>
void own(ibv_context* c, std::unordered_set<T*> ContextState::*set, T* obj) {
  ContextState* s = state_of(c);
  std::lock_guard<std::mutex> lock(s->obj_mu);
  (s->*set).insert(obj);
}
template <typename T>
void disown(ibv_context* c, std::unordered_set<T*> ContextState::*set, T* obj) {
  ContextState* s = state_of(c);
  std::lock_guard<std::mutex> lock(s->obj_mu);
  (s->*set).erase(obj);
}

/// ibv_destroy_* waits until the application has acknowledged every event it has read
/// about the object (as with rdma-core's kernel providers, which count an event when it is
/// read), so that no event in its hands names freed memory. Events still unread when the
/// object goes are dropped by the reader (it finds the object gone from its context).
void wait_acked(pthread_mutex_t* m, pthread_cond_t* cv, const uint32_t* completed,
                const uint32_t* read) {
  pthread_mutex_lock(m);
  while (*completed != *read) pthread_cond_wait(cv, m);
  pthread_mutex_unlock(m);
}

/// ibv_modify_qp and ibv_create_ah are synchronous: resolve the destination's MAC first,
/// waiting for ARP / neighbour discovery (up to its 3 s of retries) without holding the lock
/// so the progress thread can receive the answer.
int resolve_dest(Runtime* rt, const ibv_ah_attr& ah) {
  if (!ah.is_global) return 0;  // the engine answers EINVAL for a missing GRH
  wire::Gid gid;
  std::memcpy(gid.data(), ah.grh.dgid.raw, 16);
  wire::MacAddr mac;
  NeighborState st;
  {
    EngineLock lock(rt);
    st = rt->engine->resolve(gid, &mac);
  }
  while (st == NeighborState::kIncomplete) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EngineLock lock(rt);
    st = rt->engine->neighbor_state(gid, &mac);
  }
  return st == NeighborState::kReachable ? 0 : EHOSTUNREACH;
}


int destroy_qp(ibv_qp* qp, bool wait) {
  Runtime* rt = runtime_of(qp->context);
  Qp* q = reinterpret_cast<Qp*>(qp);  // the handle itself, not what it names
  if (q->real != nullptr) return close_opened_qp(q);
  {
    EngineLock lock(rt);
    if (rt->engine->qp_by_num(q->qpn) != q || q->closing) return EINVAL;
    if (q->flows != 0) return EBUSY;  // its flow rules first, as with the kernel's verbs
    q->closing = true;  // ibv_open_qp finds it no more
  }
  // Forget it first: events read from now on are dropped; then wait for the ones read before.
  disown(qp->context, &ContextState::qps, q);
  if (wait) wait_acked(&qp->mutex, &qp->cond, &qp->events_completed, &q->async_events_read);
  // An XRC target others opened: this handle closes, the QP stays theirs (the last of their
  // handles frees it, close_opened_qp).
  bool keep;
  {
    EngineLock lock(rt);
    keep = q->opens != 0;
    q->creator_closed = true;
  }
  if (!keep) uroce::verbs::free_qp(rt, q);
  return 0;
}


int destroy_srq(ibv_srq* srq, bool wait) {
  Runtime* rt = runtime_of(srq->context);
  Srq* q = to_srq(srq);
  {
    EngineLock lock(rt);
    if (q->users != 0) return EBUSY;
  }
  disown(srq->context, &ContextState::srqs, q);  // first: see destroy_qp
  if (wait) wait_acked(&srq->mutex, &srq->cond, &srq->events_completed, &q->async_events_read);
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  EngineLock lock(rt);
  return rt->engine->destroy_srq(q);
}

int destroy_cq(ibv_cq* cq, bool wait) {
  Runtime* rt = runtime_of(cq->context);
  Cq* c = to_cq(cq);
  {
    EngineLock lock(rt);
    if (c->users != 0) return EBUSY;  // before anything is torn down
    std::lock_guard<std::mutex> nlock(rt->notify_mu);
    std::erase(rt->armed, c);  // no more completion events for it
    c->notify_armed = false;
  }
  {
    // Forget it first (see destroy_qp): events read from now on are dropped.
    ContextState* s = state_of(cq->context);
    std::lock_guard<std::mutex> lock(s->obj_mu);
    s->cqs.erase(c);
    if (cq->channel != nullptr) --reinterpret_cast<UChannel*>(cq->channel)->cqs;
  }
  if (wait) {
    // Every completion event and async event the application read, acknowledged.
    pthread_mutex_lock(&cq->mutex);
    while (cq->comp_events_completed != c->comp_events_read ||
           cq->async_events_completed != c->async_events_read)
      pthread_cond_wait(&cq->cond, &cq->mutex);
    pthread_mutex_unlock(&cq->mutex);
  }
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  EngineLock lock(rt);
  return rt->engine->destroy_cq(c);
}

int destroy_ah(ibv_ah* ah) {
  Runtime* rt = runtime_of(ah->context);
  ibv_context* c = ah->context;
  {
    EngineLock lock(rt);
    if (int e = rt->engine->destroy_ah(to_ah(ah)); e != 0) return e;
  }
  disown(c, &ContextState::ahs, to_ah(ah));
  return 0;
}

/// An imported MR's or DM's handle (U: UMr, UDm) let go of: the object stays.
template <typename U>
void unimport(ibv_context* c, std::unordered_set<U*> ContextState::*set, U* u) {
  if (u->imported_from == nullptr) return;  // not an imported one: left alone
  {
    std::lock_guard<std::mutex> lock(state_of(c)->obj_mu);
    --u->imported_from->imports;
    (state_of(c)->*set).erase(u);
  }
  delete u;
}

/// Destroying an MR or a DM through `u`: an imported handle destroys what it names with
/// `destroy` (ibv_import_mr(3)), then goes; an original with imported handles is EBUSY.
/// Returns -1 when `u` is an original free to go (the caller destroys it), else the result.
template <typename U>
int destroy_imported(ibv_context* c, std::unordered_set<U*> ContextState::*set, U* u,
                     int (*destroy)(U*)) {
  std::mutex& mu = state_of(c)->obj_mu;
  U* from = u->imported_from;
  if (from == nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    return u->imports != 0 ? EBUSY : -1;  // imported handles name it
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    if (from->imports > 1) return EBUSY;  // other imported handles name it
    from->imports = 0;
  }
  if (int e = destroy(from); e != 0) {
    std::lock_guard<std::mutex> lock(mu);
    from->imports = 1;
    return e;
  }
  disown(c, set, u);
  delete u;
  return 0;
}

/// The group's MR or DM (not an imported handle) that `handle` names; null if none (obj_mu held).
template <typename U>
U* original_by_handle(const std::unordered_set<U*>& set, uint32_t handle) {
  for (U* o : set)
    if (o->imported_from == nullptr && o->ibv.handle == handle) return o;
  return nullptr;
}

void unimport_mr(ibv_mr* mr) { unimport(mr->context, &ContextState::mrs, reinterpret_cast<UMr*>(mr)); }

int dereg_mr(ibv_mr* mr) {
  Runtime* rt = runtime_of(mr->context);
  if (int e = destroy_imported(mr->context, &ContextState::mrs, reinterpret_cast<UMr*>(mr),
                               +[](UMr* o) { return dereg_mr(&o->ibv); });
      e >= 0)
    return e;
  {
    EngineLock lock(rt);
    if (int e = rt->engine->dereg_mr(reinterpret_cast<UMr*>(mr)->mr); e != 0) return e;
    if (UDm* dm = reinterpret_cast<UMr*>(mr)->dm; dm != nullptr) --dm->mrs;
  }
  disown(mr->context, &ContextState::mrs, reinterpret_cast<UMr*>(mr));
  delete reinterpret_cast<UMr*>(mr);
  return 0;
}

void unimport_pd(ibv_pd* pd) {
  auto* u = reinterpret_cast<UPd*>(pd);
  if (!u->imported) return;  // not an imported one: left alone
  {
    EngineLock lock(runtime_of(pd->context));
    --u->pd->users;
  }
  disown(pd->context, &ContextState::pds, u);
  delete u;
}

int dealloc_pd(ibv_pd* pd) {
  Runtime* rt = runtime_of(pd->context);
  auto* u = reinterpret_cast<UPd*>(pd);
  if (u->imported) {
    // An imported handle: the PD it names goes (ibv_import_pd(3)), then the handle.
    UPd* from = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_of(pd->context)->obj_mu);
      for (UPd* o : state_of(pd->context)->pds)
        if (o->pd == u->pd && !o->imported && !o->parent_domain) from = o;
    }
    {
      EngineLock lock(rt);
      --u->pd->users;
    }
    if (int e = from != nullptr ? dealloc_pd(&from->ibv) : EBUSY; e != 0) {
      EngineLock lock(rt);
      ++u->pd->users;
      return e;
    }
    disown(pd->context, &ContextState::pds, u);
    delete u;
    return 0;
  }
  {
    EngineLock lock(rt);
    if (u->parent_domain) {
      // Objects made through the parent domain hold the PD itself, not the wrapper; as in
      // rdma-core the application destroys them first (ibv_alloc_parent_domain(3)).
      --u->pd->users;
    } else if (int e = rt->engine->dealloc_pd(pd_of(pd)); e != 0) {
      return e;
    }
  }
  disown(pd->context, &ContextState::pds, reinterpret_cast<UPd*>(pd));
  delete reinterpret_cast<UPd*>(pd);
  return 0;
}

int destroy_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<UChannel*>(channel);
  ContextState* s = state_of(channel->context);
  {
    std::lock_guard<std::mutex> lock(s->obj_mu);
    if (ch->cqs != 0) return EBUSY;
    s->channels.erase(ch);
  }
  close(ch->ibv.fd);
  close(ch->wfd);
  delete ch;
  return 0;
}

template <typename T>
std::vector<T*> snapshot(ContextState* s, std::unordered_set<T*> ContextState::*set) {
  std::lock_guard<std::mutex> lock(s->obj_mu);
  return {(s->*set).begin(), (s->*set).end()};
}

// ---- Device memory (ibv_alloc_dm(3)), emulated in host memory -------------------------------
//
// An RNIC's on-chip memory saves the PCIe round trip to host memory; a software RNIC has no
// such thing, so uroce's is host memory with the same rules: at most kDeviceMemoryBytes per
// device and process, reached only through ibv_memcpy_to/from_dm (4-byte aligned offset and
// length, as mlx5 requires) and zero-based MRs (ibv_reg_dm_mr). It is as fast as any
// other memory here: the point is that programs written for it run.

int dm_copy_errno(const UDm* dm, uint64_t offset, size_t length) {
  if ((offset | length) % 4 != 0) return EINVAL;
  if (offset > dm->length || length > dm->length - offset) return EFAULT;
  return 0;
}

int op_memcpy_to_dm(ibv_dm* ibv, uint64_t offset, const void* host, size_t length) {
  auto* dm = reinterpret_cast<UDm*>(ibv);
  if (int e = dm_copy_errno(dm, offset, length); e != 0) return e;
  if (length != 0) std::memcpy(dm->mem + offset, host, length);
  return 0;
}

int op_memcpy_from_dm(void* host, ibv_dm* ibv, uint64_t offset, size_t length) {
  auto* dm = reinterpret_cast<UDm*>(ibv);
  if (int e = dm_copy_errno(dm, offset, length); e != 0) return e;
  if (length != 0) std::memcpy(host, dm->mem + offset, length);
  return 0;
}

ibv_dm* op_alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  constexpr uint32_t kMaxLogAlign = 12;  // a page
  if (attr == nullptr || attr->comp_mask != 0 || attr->length == 0 ||
      attr->length > kDeviceMemoryBytes || attr->log_align_req > kMaxLogAlign) {
    errno = EINVAL;
    return nullptr;
  }
  const size_t align = std::max<size_t>(64, size_t{1} << attr->log_align_req);
  const uint64_t charged = (attr->length + align - 1) / align * align;
  Runtime* rt = runtime_of(context);
  uint64_t used = rt->dm_in_use.load();
  do {
    if (charged > kDeviceMemoryBytes - used) {
      errno = ENOMEM;
      return nullptr;
    }
  } while (!rt->dm_in_use.compare_exchange_weak(used, used + charged));
  auto* dm = new (std::nothrow) UDm{};
  void* mem = dm != nullptr ? std::aligned_alloc(align, charged) : nullptr;
  if (mem == nullptr) {
    delete dm;
    rt->dm_in_use -= charged;
    errno = ENOMEM;
    return nullptr;
  }
  std::memset(mem, 0, charged);
  static std::atomic<uint32_t> next_handle{1};
  dm->ibv.context = context;
  dm->ibv.memcpy_to_dm = op_memcpy_to_dm;
  dm->ibv.memcpy_from_dm = op_memcpy_from_dm;
  dm->ibv.handle = next_handle++;
  dm->mem = static_cast<uint8_t*>(mem);
  dm->length = attr->length;
  dm->charged = charged;
  own(context, &ContextState::dms, dm);
  return &dm->ibv;
}

void unimport_dm(ibv_dm* ibv) { unimport(ibv->context, &ContextState::dms, reinterpret_cast<UDm*>(ibv)); }

int free_dm(ibv_dm* ibv) {
  auto* dm = reinterpret_cast<UDm*>(ibv);
  Runtime* rt = runtime_of(ibv->context);
  if (int e = destroy_imported(ibv->context, &ContextState::dms, dm,
                               +[](UDm* o) { return free_dm(&o->ibv); });
      e >= 0)
    return e;
  {
    EngineLock lock(rt);
    if (dm->mrs != 0 || dm->dead) return dm->dead ? EINVAL : EBUSY;  // MRs still name it
    dm->dead = true;  // from here no ibv_reg_dm_mr takes it
  }
  disown(ibv->context, &ContextState::dms, dm);
  rt->dm_in_use -= dm->charged;
  std::free(dm->mem);
  delete dm;
  return 0;
}

/// Makes the ibv_mr for a registration that `reg` does on the engine (under its lock): null
/// with errno when either fails. `dm`: the device memory it registers, or null.
template <typename Reg>
ibv_mr* new_mr(ibv_pd* pd, void* addr, size_t length, UDm* dm, Reg reg) {
  auto* u = new (std::nothrow) UMr{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  {
    Runtime* rt = runtime_of(pd->context);
    EngineLock lock(rt);
    u->mr = reg(*rt->engine);
    if (u->mr != nullptr && dm != nullptr) ++dm->mrs;
  }
  if (u->mr == nullptr) {
    delete u;
    return nullptr;
  }
  u->dm = dm;
  u->ibv.context = pd->context;
  u->ibv.pd = pd;
  u->ibv.addr = addr;
  u->ibv.length = length;
  u->ibv.handle = u->mr->key;
  u->ibv.lkey = u->ibv.rkey = u->mr->key;
  own(pd->context, &ContextState::mrs, u);
  return &u->ibv;
}

/// Optional access bits (relaxed ordering and the like) may be ignored by any device.
int required_access(unsigned int access) {
  return static_cast<int>(access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE));
}

ibv_mr* op_reg_dm_mr(ibv_pd* pd, ibv_dm* ibv, uint64_t offset, size_t length,
                     unsigned int access) {
  auto* dm = reinterpret_cast<UDm*>(ibv);
  if (pd->context != ibv->context) {
    errno = EINVAL;
    return nullptr;
  }
  if (dm->imported_from != nullptr) dm = dm->imported_from;  // it counts the MRs
  if ( offset > dm->length || length > dm->length - offset) {
    errno = EINVAL;
    return nullptr;
  }
  // Zero-based: SGEs and peers address it from 0, and its ibv_mr's addr is null.
  return new_mr(pd, nullptr, length, dm, [&](Engine& e) -> mem::Mr* {
    if (dm->dead) {  // ibv_free_dm is under way
      errno = EINVAL;
      return nullptr;
    }
    return e.reg_dm_mr(pd_of(pd), dm->mem + offset, length, required_access(access));
  });
}

// ibv_advise_mr(3): prefetching on-demand MRs. Every page is the CPU's here, so PREFETCH and
// PREFETCH_WRITE fault the range in (as the first access would) and PREFETCH_NO_FAULT, which
// only shows the device what the CPU has, checks the range. Synchronous either way, so
// IBV_ADVISE_MR_FLAG_FLUSH changes nothing.
int op_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg,
                 uint32_t num_sge) {
  if ((flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) != 0 || sg == nullptr ||
      num_sge == 0)
    return EINVAL;
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  Runtime* rt = runtime_of(pd->context);
  EngineLock lock(rt);
  for (uint32_t i = 0; i < num_sge; ++i)
    if (int e = rt->engine->advise_mr(pd_of(pd), advice, sg[i]); e != 0) return e;
  return 0;
}

}  // namespace

namespace uroce::verbs {
void free_qp(Runtime* rt, Qp* q) {
  void* ext = q->ext;
  pthread_mutex_destroy(&q->ibv.mutex);  // the engine frees the QP: everything in it goes first
  pthread_cond_destroy(&q->ibv.cond);
  {
    EngineLock lock(rt);
    rt->engine->destroy_qp(q);  // cannot fail: the caller found it
  }
  free_qp_ext(ext);
}

// ---- Creation shared with the extended verbs (ext.cc, xrc.cc) ----------------------------------

ibv_qp* create_qp_in(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* attr, Xrcd* xrcd) {
  if (attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  // An XRC target has its domain and nothing else; an initiator no receive side.
  const bool tgt = attr->qp_type == IBV_QPT_XRC_RECV, xrc = tgt || attr->qp_type == IBV_QPT_XRC_SEND;
  // Every object a QP uses belongs to the QP's own context (as with the kernel's verbs).
  if (tgt ? (xrcd == nullptr || xrcd->ibv.context != ctx)
          : (pd == nullptr || pd->context != ctx || attr->send_cq == nullptr ||
             attr->send_cq->context != ctx ||
             (!xrc && (attr->recv_cq == nullptr || attr->recv_cq->context != ctx ||
                       (attr->srq != nullptr && attr->srq->context != ctx))))) {
    errno = EINVAL;
    return nullptr;
  }
  Runtime* rt = runtime_of(ctx);
  Qp* qp;
  {
    EngineLock lock(rt);
    qp = rt->engine->create_qp(tgt ? nullptr : pd_of(pd), attr, xrcd);
  }
  if (qp == nullptr) return nullptr;
  ibv_qp& q = qp->ibv;
  q.context = ctx;
  q.qp_context = attr->qp_context;
  q.pd = tgt ? nullptr : pd;
  q.send_cq = tgt ? nullptr : attr->send_cq;
  q.recv_cq = xrc ? nullptr : attr->recv_cq;
  q.srq = xrc ? nullptr : attr->srq;
  q.handle = qp->qpn;
  q.qp_num = qp->qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  attr->cap = qp->cap;  // what was granted
  own(ctx, &ContextState::qps, qp);
  return &q;
}

ibv_srq* create_srq_in(ibv_pd* pd, ibv_srq_init_attr* attr, Xrcd* xrcd, ibv_cq* cq,
                       const ibv_tm_cap* tm) {
  if ((xrcd != nullptr && xrcd->ibv.context != pd->context) ||
      (cq != nullptr && cq->context != pd->context)) {
    errno = EINVAL;
    return nullptr;
  }
  Runtime* rt = runtime_of(pd->context);
  Srq* srq;
  {
    EngineLock lock(rt);
    srq = rt->engine->create_srq(pd_of(pd), attr, xrcd, cq != nullptr ? to_cq(cq) : nullptr, tm);
  }
  if (srq == nullptr) return nullptr;
  srq->ibv.context = pd->context;
  srq->ibv.srq_context = attr->srq_context;
  srq->ibv.pd = pd;
  srq->ibv.handle = srq->handle;
  pthread_mutex_init(&srq->ibv.mutex, nullptr);
  pthread_cond_init(&srq->ibv.cond, nullptr);
  own(pd->context, &ContextState::srqs, srq);
  return &srq->ibv;
}

// ---- Flow steering (ibv_create_flow(3)) for raw-packet QPs: the rules are the engine's -----

struct UFlow {
  ibv_flow ibv;  // first: the handle handed out
  Engine::RawFlow* rule;
};

ibv_flow* op_create_flow(ibv_qp* qp, ibv_flow_attr* attr) {
  if (qp == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* u = new (std::nothrow) UFlow{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  Runtime* rt = runtime_of(qp->context);
  {
    EngineLock lock(rt);
    // A QP being destroyed (destroy_qp found it without rules) takes no new one.
    if (to_qp(qp)->closing) {
      errno = EINVAL;
    } else {
      u->rule = rt->engine->create_flow(to_qp(qp), attr);
    }
  }
  if (u->rule == nullptr) {
    const int e = errno;
    delete u;
    errno = e;
    return nullptr;
  }
  u->ibv.context = qp->context;
  u->ibv.handle = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(u->rule) >> 4);
  own(qp->context, &ContextState::flows, u);
  return &u->ibv;
}

int op_destroy_flow(ibv_flow* flow) {
  if (flow == nullptr) return EINVAL;
  auto* u = reinterpret_cast<UFlow*>(flow);
  {
    ContextState* s = state_of(flow->context);
    std::lock_guard<std::mutex> lock(s->obj_mu);
    if (s->flows.erase(u) == 0) return EINVAL;
  }
  Runtime* rt = runtime_of(flow->context);
  {
    EngineLock lock(rt);
    rt->engine->destroy_flow(u->rule);
  }
  delete u;
  return 0;
}

// ---- RSS: receive work queues (ibv_create_wq(3)), their indirection tables
// (ibv_create_rwq_ind_table(3)) and the QPs hashing over them. A WQ is the engine's raw QP
// with a receive queue only; its number is that QP's.

struct UWq {
  ibv_wq ibv;  // first
  Qp* qp;
  uint32_t async_events_read = 0;  // IBV_EVENT_WQ_FATAL read (under ibv.mutex)
};

struct UTable {
  ibv_rwq_ind_table ibv;  // first
  Engine::RwqTable* t;
};

int op_post_wq_recv(ibv_wq* wq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Runtime* rt = runtime_of(wq->context);
  Qp* qp = reinterpret_cast<UWq*>(wq)->qp;
  const ibv_recv_wr* b = nullptr;
  const int rc = rt->engine->post_recv(qp, wr, &b);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_recv_wr*>(b);
  if (qp->post_state.load(std::memory_order_acquire) == IBV_QPS_ERR) rt->drive(true);
  return rc;
}

ibv_wq* op_create_wq(ibv_context* ctx, ibv_wq_init_attr* attr) {
  if (attr == nullptr || attr->wq_type != IBV_WQT_RQ || attr->pd == nullptr ||
      attr->cq == nullptr || attr->pd->context != ctx || attr->cq->context != ctx ||
      (attr->comp_mask & ~uint32_t{IBV_WQ_INIT_ATTR_FLAGS})) {
    errno = EINVAL;
    return nullptr;
  }
  if ((attr->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && attr->create_flags != 0) {
    errno = EOPNOTSUPP;  // VLAN stripping, FCS scatter, delay drop, end padding
    return nullptr;
  }
  auto* u = new (std::nothrow) UWq{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  Runtime* rt = runtime_of(ctx);
  {
    EngineLock lock(rt);
    u->qp = rt->engine->create_wq(pd_of(attr->pd), to_cq(attr->cq), attr->max_wr, attr->max_sge);
  }
  if (u->qp == nullptr) {
    const int e = errno;
    delete u;
    errno = e;
    return nullptr;
  }
  attr->max_wr = u->qp->cap.max_recv_wr;
  attr->max_sge = u->qp->cap.max_recv_sge;
  ibv_wq& w = u->ibv;
  w.context = ctx;
  w.pd = attr->pd;
  w.cq = attr->cq;
  w.wq_num = u->qp->qpn;
  w.handle = u->qp->qpn;
  w.state = IBV_WQS_RESET;
  w.wq_type = IBV_WQT_RQ;
  w.post_recv = op_post_wq_recv;  // (ibv_create_wq sets up the mutex, condition, context)
  // Its async events (IBV_EVENT_WQ_FATAL) name the ibv_wq: the engine's QP points back.
  u->qp->ibv.context = ctx;
  u->qp->ibv.qp_context = &u->ibv;
  own(ctx, &ContextState::wqs, u);
  return &u->ibv;
}

int op_modify_wq(ibv_wq* wq, ibv_wq_attr* attr) {
  if (wq == nullptr || attr == nullptr) return EINVAL;
  constexpr uint32_t kKnown = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS;
  if (attr->attr_mask & ~kKnown) return EINVAL;
  if ((attr->attr_mask & IBV_WQ_ATTR_FLAGS) && attr->flags_mask != 0) return EOPNOTSUPP;
  Runtime* rt = runtime_of(wq->context);
  Qp* qp = reinterpret_cast<UWq*>(wq)->qp;
  EngineLock lock(rt);
  if ((attr->attr_mask & IBV_WQ_ATTR_CURR_STATE) && attr->curr_wq_state != Engine::wq_state(qp))
    return EINVAL;
  if (attr->attr_mask & IBV_WQ_ATTR_STATE) {
    if (int e = rt->engine->modify_wq(qp, attr->wq_state); e != 0) return e;
    wq->state = Engine::wq_state(qp);
  }
  return 0;
}

int destroy_wq(ibv_wq* wq, bool wait) {
  if (wq == nullptr) return EINVAL;
  auto* u = reinterpret_cast<UWq*>(wq);
  Runtime* rt = runtime_of(wq->context);
  {
    ContextState* s = state_of(wq->context);
    std::lock_guard<std::mutex> objs(s->obj_mu);
    if (s->wqs.count(u) == 0) return EINVAL;
    EngineLock lock(rt);
    if (int e = rt->engine->destroy_wq(u->qp); e != 0) return e;  // EBUSY: in a table
    s->wqs.erase(u);
  }
  // Events read about it are acknowledged before it goes (see destroy_qp).
  if (wait) wait_acked(&wq->mutex, &wq->cond, &wq->events_completed, &u->async_events_read);
  pthread_mutex_destroy(&wq->mutex);
  pthread_cond_destroy(&wq->cond);
  delete u;
  return 0;
}

int op_destroy_wq(ibv_wq* wq) { return destroy_wq(wq, true); }

// An indirection table of up to 2^kMaxLogTable WQs.
constexpr uint32_t kMaxLogTable = 10;

ibv_rwq_ind_table* op_create_rwq_ind_table(ibv_context* ctx, ibv_rwq_ind_table_init_attr* attr) {
  if (attr == nullptr || attr->comp_mask != 0 || attr->log_ind_tbl_size > kMaxLogTable ||
      attr->ind_tbl == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  std::vector<Qp*> wqs(size_t{1} << attr->log_ind_tbl_size);
  for (size_t i = 0; i < wqs.size(); ++i) {
    ibv_wq* w = attr->ind_tbl[i];
    if (w == nullptr || w->context != ctx) {
      errno = EINVAL;
      return nullptr;
    }
    wqs[i] = reinterpret_cast<UWq*>(w)->qp;
  }
  auto* u = new (std::nothrow) UTable{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  Runtime* rt = runtime_of(ctx);
  {
    EngineLock lock(rt);
    u->t = rt->engine->create_rwq_table(wqs);
  }
  if (u->t == nullptr) {
    const int e = errno;
    delete u;
    errno = e;
    return nullptr;
  }
  static std::atomic<int> next_num{1};
  u->ibv.context = ctx;
  u->ibv.ind_tbl_num = u->ibv.ind_tbl_handle = next_num.fetch_add(1);
  own(ctx, &ContextState::rwq_tables, u);
  return &u->ibv;
}

int op_destroy_rwq_ind_table(ibv_rwq_ind_table* table) {
  if (table == nullptr) return EINVAL;
  auto* u = reinterpret_cast<UTable*>(table);
  Runtime* rt = runtime_of(table->context);
  {
    ContextState* s = state_of(table->context);
    std::lock_guard<std::mutex> objs(s->obj_mu);
    if (s->rwq_tables.count(u) == 0) return EINVAL;
    EngineLock lock(rt);
    if (int e = rt->engine->destroy_rwq_table(u->t); e != 0) return e;  // EBUSY: a QP uses it
    s->rwq_tables.erase(u);
  }
  delete u;
  return 0;
}

ibv_qp* create_rss_qp_in(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  if (attr->qp_type != IBV_QPT_RAW_PACKET || attr->pd == nullptr || attr->pd->context != ctx ||
      attr->rwq_ind_tbl == nullptr || attr->rwq_ind_tbl->context != ctx) {
    errno = EINVAL;
    return nullptr;
  }
  Runtime* rt = runtime_of(ctx);
  Qp* qp;
  {
    EngineLock lock(rt);
    qp = rt->engine->create_rss_qp(pd_of(attr->pd), reinterpret_cast<UTable*>(attr->rwq_ind_tbl)->t,
                                   attr->rx_hash_conf);
  }
  if (qp == nullptr) return nullptr;
  ibv_qp& q = qp->ibv;
  q.context = ctx;
  q.qp_context = attr->qp_context;
  q.pd = attr->pd;
  q.handle = q.qp_num = qp->qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = IBV_QPT_RAW_PACKET;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  attr->cap = qp->cap;
  own(ctx, &ContextState::qps, qp);
  return &q;
}

namespace {
/// ibv_modify_qp_rate_limit(3): the pacer holds the QP to it (engine/congestion.cc).
int op_modify_qp_rate_limit(ibv_qp* qp, ibv_qp_rate_limit_attr* attr) {
  if (attr == nullptr) return EINVAL;
  Runtime* rt = runtime_of(qp->context);
  EngineLock lock(rt);
  return rt->engine->modify_rate_limit(to_qp(qp), *attr);
}
}  // namespace

void install_memory_ops(Context* ctx) {
  ctx->vctx.modify_qp_rate_limit = op_modify_qp_rate_limit;
  ctx->vctx.ibv_create_flow = op_create_flow;
  ctx->vctx.ibv_destroy_flow = op_destroy_flow;
  ctx->vctx.create_wq = op_create_wq;
  ctx->vctx.modify_wq = op_modify_wq;
  ctx->vctx.destroy_wq = op_destroy_wq;
  ctx->vctx.create_rwq_ind_table = op_create_rwq_ind_table;
  ctx->vctx.destroy_rwq_ind_table = op_destroy_rwq_ind_table;
  ctx->vctx.alloc_dm = op_alloc_dm;
  ctx->vctx.free_dm = free_dm;
  ctx->vctx.reg_dm_mr = op_reg_dm_mr;
  ctx->vctx.advise_mr = op_advise_mr;
}

void deliver_cq_events(Runtime* rt) {
  // Completion channels: a CQ armed with ibv_req_notify_cq gets one event on its next
  // completion. The channel's write end never blocks.
  std::lock_guard<std::mutex> lock(rt->notify_mu);
  for (size_t i = 0; i < rt->armed.size();) {
    Cq* cq = rt->armed[i];
    if (cq->notify_gen.load(std::memory_order_acquire) == cq->notify_seen) {
      ++i;
      continue;
    }
    cq->notify_armed = false;
    rt->armed[i] = rt->armed.back();
    rt->armed.pop_back();
    auto* ch = reinterpret_cast<UChannel*>(cq->ibv.channel);
    CqEvent ev;
    std::memset(&ev, 0, sizeof ev);  // no uninitialised padding into the pipe
    ev.cq = &cq->ibv;
    ev.handle = cq->handle;
    // A full pipe means the application stopped reading events: this one is dropped.
    if (ch != nullptr && write(ch->wfd, &ev, sizeof ev) != sizeof ev) {
    }
  }
}

EventObject event_object(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR: return EventObject::kCq;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: return EventObject::kSrq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: return EventObject::kQp;
    case IBV_EVENT_WQ_FATAL: return EventObject::kWq;
    default: return EventObject::kNone;
  }
}

bool count_async_read(ibv_context* c, const ibv_async_event& ev, uint32_t id) {
  ContextState* s = state_of(c);
  std::lock_guard<std::mutex> lock(s->obj_mu);
  auto count = [](pthread_mutex_t* m, uint32_t* n) {
    pthread_mutex_lock(m);
    ++*n;
    pthread_mutex_unlock(m);
  };
  switch (event_object(ev.event_type)) {
    case EventObject::kCq: {
      Cq* cq = to_cq(ev.element.cq);
      if (s->cqs.count(cq) == 0 || cq->handle != id) return false;
      count(&cq->ibv.mutex, &cq->async_events_read);
      return true;
    }
    case EventObject::kSrq: {
      Srq* srq = to_srq(ev.element.srq);
      if (s->srqs.count(srq) == 0 || srq->handle != id) return false;
      count(&srq->ibv.mutex, &srq->async_events_read);
      return true;
    }
    case EventObject::kQp: {
      // Not to_qp: the QP may be gone (looked up first, then read); events name the QP itself.
      Qp* qp = reinterpret_cast<Qp*>(ev.element.qp);
      if (s->qps.count(qp) == 0 || qp->qpn != id) return false;
      count(&qp->ibv.mutex, &qp->async_events_read);
      return true;
    }
    case EventObject::kWq: {
      auto* wq = reinterpret_cast<UWq*>(ev.element.wq);
      if (s->wqs.count(wq) == 0 || wq->qp->qpn != id) return false;
      count(&wq->ibv.mutex, &wq->async_events_read);
      return true;
    }
    case EventObject::kNone: return true;  // port and device events name no object
  }
  return true;
}

void destroy_context_objects(ContextState* s) {
  // Imported handles first: they keep what they name busy.
  for (UMr* m : snapshot(s, &ContextState::mrs))
    if (m->imported_from != nullptr) unimport_mr(&m->ibv);
  for (UDm* d : snapshot(s, &ContextState::dms))
    if (d->imported_from != nullptr) unimport_dm(&d->ibv);
  for (UPd* p : snapshot(s, &ContextState::pds))
    if (p->imported) unimport_pd(&p->ibv);
  for (UFlow* f : snapshot(s, &ContextState::flows)) op_destroy_flow(&f->ibv);  // hold QPs
  // Dependents first: QPs hold CQs, SRQs and PDs; windows hold MRs; SRQs, AHs, windows and
  // MRs hold PDs.
  for (Qp* h : snapshot(s, &ContextState::opened_qps)) close_opened_qp(h);
  for (Qp* q : snapshot(s, &ContextState::qps)) destroy_qp(&q->ibv, false);
  for (UTable* t : snapshot(s, &ContextState::rwq_tables)) op_destroy_rwq_ind_table(&t->ibv);
  for (UWq* w : snapshot(s, &ContextState::wqs)) destroy_wq(&w->ibv, false);
  for (Srq* q : snapshot(s, &ContextState::srqs)) destroy_srq(&q->ibv, false);
  for (Ah* a : snapshot(s, &ContextState::ahs)) destroy_ah(&a->ibv);
  for (UMw* w : snapshot(s, &ContextState::mws)) dealloc_mw(&w->ibv);  // before their MRs
  for (UMr* m : snapshot(s, &ContextState::mrs)) dereg_mr(&m->ibv);
  for (UDm* d : snapshot(s, &ContextState::dms)) free_dm(&d->ibv);  // after their MRs
  close_context_xrcds(s);  // after their SRQs and target QPs
  for (Cq* c : snapshot(s, &ContextState::cqs)) destroy_cq(&c->ibv, false);
  for (UPd* p : snapshot(s, &ContextState::pds))  // parent domains before their PDs
    if (p->parent_domain) dealloc_pd(&p->ibv);
  for (UPd* p : snapshot(s, &ContextState::pds)) dealloc_pd(&p->ibv);
  for (UChannel* c : snapshot(s, &ContextState::channels)) destroy_channel(&c->ibv);
}
}  // namespace uroce::verbs

extern "C" {

// ---- PD and MR -----------------------------------------------------------------------------

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  Runtime* rt = runtime_of(context);
  auto* u = new (std::nothrow) UPd{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  {
    EngineLock lock(rt);
    u->pd = rt->engine->alloc_pd();
  }
  if (u->pd == nullptr) {
    delete u;
    return nullptr;
  }
  u->ibv.context = context;
  u->ibv.handle = u->pd->handle;
  own(context, &ContextState::pds, u);
  return &u->ibv;
}

int ibv_dealloc_pd(ibv_pd* pd) { return dealloc_pd(pd); }

// ibv_import_pd(3), ibv_import_mr(3), ibv_import_dm(3): a handle of `context` (one made by
// ibv_import_device, or any context of the same group) on an object of its group, found by
// the handle number the original has. EINVAL when the group has no such object.
ibv_pd* ibv_import_pd(ibv_context* context, uint32_t handle) {
  ContextState* s = state_of(context);
  auto* u = new (std::nothrow) UPd{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> objs(s->obj_mu);  // then the engine's, as everywhere
    EngineLock lock(runtime_of(context));
    for (UPd* o : s->pds)
      if (!o->imported && !o->parent_domain && o->ibv.handle == handle) u->pd = o->pd;
    if (u->pd != nullptr) {
      ++u->pd->users;
      u->imported = true;
      u->ibv.context = context;
      u->ibv.handle = handle;
      s->pds.insert(u);
      return &u->ibv;
    }
  }
  delete u;
  errno = EINVAL;
  return nullptr;
}

void ibv_unimport_pd(ibv_pd* pd) { unimport_pd(pd); }

ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t handle) {
  ContextState* s = state_of(pd->context);
  std::lock_guard<std::mutex> objs(s->obj_mu);
  UMr* from = original_by_handle(s->mrs, handle);
  if (from == nullptr || pd_of(from->ibv.pd) != pd_of(pd)) {  // none, or on another PD
    errno = EINVAL;
    return nullptr;
  }
  auto* u = new (std::nothrow) UMr{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  u->mr = from->mr;
  u->dm = from->dm;
  u->imported_from = from;
  ++from->imports;
  u->ibv.context = pd->context;
  u->ibv.pd = pd;
  u->ibv.addr = nullptr;  // as rdma-core's: the importer knows where its memory is
  u->ibv.length = from->ibv.length;
  u->ibv.handle = handle;
  u->ibv.lkey = from->ibv.lkey;
  u->ibv.rkey = from->ibv.rkey;
  s->mrs.insert(u);
  return &u->ibv;
}

void ibv_unimport_mr(ibv_mr* mr) { unimport_mr(mr); }

ibv_dm* ibv_import_dm(ibv_context* context, uint32_t handle) {
  ContextState* s = state_of(context);
  std::lock_guard<std::mutex> objs(s->obj_mu);
  UDm* from = original_by_handle(s->dms, handle);
  if (from == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* u = new (std::nothrow) UDm{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  u->ibv = from->ibv;
  u->ibv.context = context;
  u->mem = from->mem;
  u->length = from->length;
  u->imported_from = from;
  ++from->imports;
  s->dms.insert(u);
  return &u->ibv;
}

void ibv_unimport_dm(ibv_dm* dm) { unimport_dm(dm); }

}  // extern "C"

namespace uroce::verbs {
// ibv_alloc_parent_domain(3): a PD to make objects with. uroce's queues live in its own
// memory, so the custom allocators are accepted and never called (allowed: a provider uses
// them only for the buffers it chooses to); thread domains are not supported.
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  Runtime* rt = runtime_of(pd->context);
  auto* u = new (std::nothrow) UMw{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  {
    EngineLock lock(rt);
    u->mw = rt->engine->alloc_mw(pd_of(pd), type);
  }
  if (u->mw == nullptr) {
    delete u;
    return nullptr;
  }
  u->ibv.context = pd->context;
  u->ibv.pd = pd;
  u->ibv.rkey = u->mw->key;
  u->ibv.handle = u->mw->key >> 8;  // what names the window for its whole life
  u->ibv.type = type;
  own(pd->context, &ContextState::mws, u);
  return &u->ibv;
}

int dealloc_mw(ibv_mw* mw) {
  Runtime* rt = runtime_of(mw->context);
  {
    EngineLock lock(rt);
    if (int e = rt->engine->dealloc_mw(reinterpret_cast<UMw*>(mw)->mw); e != 0) return e;
  }
  disown(mw->context, &ContextState::mws, reinterpret_cast<UMw*>(mw));
  delete reinterpret_cast<UMw*>(mw);
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnown =
      IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (attr == nullptr || attr->pd == nullptr || attr->pd->context != context ||
      (attr->comp_mask & ~kKnown) || reinterpret_cast<UPd*>(attr->pd)->parent_domain) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->td != nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto* u = new (std::nothrow) UPd{};
  if (u == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  u->pd = pd_of(attr->pd);
  u->parent_domain = true;
  {
    EngineLock lock(runtime_of(context));
    ++u->pd->users;  // the PD outlives its parent domains
  }
  u->ibv.context = context;
  u->ibv.handle = u->pd->handle;
  own(context, &ContextState::pds, u);
  return &u->ibv;
}

bool is_parent_domain(ibv_pd* pd) { return reinterpret_cast<UPd*>(pd)->parent_domain; }
}  // namespace uroce::verbs

extern "C" {

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  // The arguments are checked and every page faulted in before the device lock is taken:
  // registering a GiB takes a quarter of a million page faults, and no QP's traffic may wait
  // for that (docs/threading.md: no long system call under a lock).
  const int acc = required_access(access);
  if (int e = Engine::prefault_mr(pd_of(pd), addr, length, acc); e != 0) {
    errno = e;
    return nullptr;
  }
  return new_mr(pd, addr, length, nullptr, [&](Engine& e) {
    return e.reg_mr_iova(pd_of(pd), addr, length, iova, acc, mem::Pages::kChecked);
  });
}

ibv_mr* (ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr),
                          static_cast<unsigned>(access));
}

ibv_mr* (ibv_reg_mr_iova)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned>(access));
}

int ibv_dereg_mr(ibv_mr* mr) { return dereg_mr(mr); }

// ibv_rereg_mr(3): the region gets a new translation, PD and/or access rights and keeps its
// keys (peers that were given the R_Key go on using it, with the new rights).
int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || flags == 0 ||
      ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (addr == nullptr || length == 0)) ||
      (access != 0 && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) ||
      ((flags & IBV_REREG_MR_CHANGE_PD) && (pd == nullptr || pd->context != mr->context))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (reinterpret_cast<UMr*>(mr)->dm != nullptr) {  // device memory is not re-registered
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  mem::Mr* m = reinterpret_cast<UMr*>(mr)->mr;
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  const bool translate = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  void* new_addr = translate ? addr : mr->addr;
  const size_t new_len = translate ? length : mr->length;
  const unsigned optional = IBV_ACCESS_OPTIONAL_RANGE;
  // The MR's access changes only here, and a program does not rereg one MR from two threads
  // at once: read without the lock, so that the new region's pages are faulted in before it.
  const int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS)
                             ? static_cast<int>(static_cast<unsigned>(access) & ~optional)
                             : m->access;
  if (int e = Engine::prefault_mr(pd_of(new_pd), new_addr, new_len, new_access); e != 0) {
    errno = e;
    return IBV_REREG_MR_ERR_CMD;
  }
  Runtime* rt = runtime_of(mr->context);
  EngineLock lock(rt);
  // A new translation is addressed by its virtual address, as ibv_reg_mr's.
  const uint64_t iova = translate ? reinterpret_cast<uint64_t>(new_addr) : m->iova;
  if (int e = rt->engine->rereg_mr(m, pd_of(new_pd), new_addr, new_len, iova, new_access,
                                   mem::Pages::kChecked);
      e != 0) {
    errno = e;
    return IBV_REREG_MR_ERR_CMD;
  }
  mr->pd = new_pd;
  mr->addr = new_addr;
  mr->length = new_len;
  return 0;
}

// ---- Completion channels and CQs -------------------------------------------------------------

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);  // the engine's side never blocks
  auto* ch = new UChannel{};
  ch->ibv.context = context;
  ch->ibv.fd = fds[0];
  ch->ibv.refcnt = 0;
  ch->wfd = fds[1];
  own(context, &ContextState::channels, ch);
  return &ch->ibv;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) { return destroy_channel(channel); }

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  if (comp_vector != 0 || (channel != nullptr && channel->context != context)) {
    errno = EINVAL;  // num_comp_vectors is 1; a channel serves its own context
    return nullptr;
  }
  Runtime* rt = runtime_of(context);
  Cq* cq;
  {
    EngineLock lock(rt);
    cq = rt->engine->create_cq(cqe);
  }
  if (cq == nullptr) return nullptr;
  ibv_cq& c = cq->ibv;
  c.context = context;
  c.channel = channel;
  c.cq_context = cq_context;
  c.handle = cq->handle;
  c.cqe = cqe;
  pthread_mutex_init(&c.mutex, nullptr);
  pthread_cond_init(&c.cond, nullptr);
  {
    ContextState* s = state_of(context);
    std::lock_guard<std::mutex> lock(s->obj_mu);
    s->cqs.insert(cq);
    if (channel != nullptr) ++reinterpret_cast<UChannel*>(channel)->cqs;
  }
  return &c;
}

int ibv_destroy_cq(ibv_cq* cq) { return destroy_cq(cq, true); }

int ibv_resize_cq(ibv_cq* cq, int cqe) {
  Runtime* rt = runtime_of(cq->context);
  EngineLock lock(rt);
  return rt->engine->resize_cq(to_cq(cq), cqe);
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  ContextState* s = state_of(channel->context);
  // The application is about to sleep until a completion: receiving is the progress
  // thread's job now, at once (not after its nap), and the CPU is free for it to stay awake
  // a little after each message (a parked thread takes a wake-up per frame).
  Runtime* rt = runtime_of(channel->context);
  if (rt->progress.policy.app_sleeps() || rt->progress.parked.load()) rt->kick();
  for (;;) {
    CqEvent ev{};
    const ssize_t n = read(channel->fd, &ev, sizeof ev);
    if (n != sizeof ev) {
      if (n >= 0) errno = EIO;
      return -1;
    }
    // An event for a CQ destroyed since is dropped (the kernel drops them at destroy), also
    // when a new CQ has its address: the engine's handle numbers are never reused.
    ibv_cq* handle = ev.cq;
    std::lock_guard<std::mutex> lock(s->obj_mu);
    if (s->cqs.count(to_cq(handle)) == 0 || to_cq(handle)->handle != ev.handle) continue;
    pthread_mutex_lock(&handle->mutex);
    ++to_cq(handle)->comp_events_read;
    pthread_mutex_unlock(&handle->mutex);
    *cq = handle;
    *cq_context = handle->cq_context;
    return 0;
  }
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// ---- SRQ -----------------------------------------------------------------------------------------

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  return create_srq_in(pd, attr, nullptr, nullptr);
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  Runtime* rt = runtime_of(srq->context);
  EngineLock lock(rt);
  return rt->engine->modify_srq(to_srq(srq), attr, mask);
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  Runtime* rt = runtime_of(srq->context);
  EngineLock lock(rt);
  return rt->engine->query_srq(to_srq(srq), attr);
}

int ibv_destroy_srq(ibv_srq* srq) { return destroy_srq(srq, true); }

// ---- AH ------------------------------------------------------------------------------------------

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  Runtime* rt = runtime_of(pd->context);
  if (int e = resolve_dest(rt, *attr); e != 0) {
    errno = e;
    return nullptr;
  }
  Ah* ah;
  {
    EngineLock lock(rt);
    ah = rt->engine->create_ah(pd_of(pd), attr);
  }
  if (ah == nullptr) return nullptr;
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
  own(pd->context, &ContextState::ahs, ah);
  return &ah->ibv;
}
int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                        ibv_ah_attr* ah_attr) {
  // RoCE always carries a GRH: build the reply's address from it (for RoCEv2 over IPv4 the
  // 40-byte area holds the IPv4 header in its last 20 bytes).
  if (!(wc->wc_flags & IBV_WC_GRH) || grh == nullptr) return EINVAL;
  *ah_attr = ibv_ah_attr{};
  ah_attr->port_num = port_num;
  ah_attr->is_global = 1;
  ah_attr->sl = 0;  // a UD completion's sl is the packet type (kWcSlRoceV2Ipv4), no priority
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  const uint8_t* ip4 = raw + 20;
  wire::Gid peer, self;
  uint8_t tclass = 0;
  if ((ip4[0] >> 4) == 4) {
    peer = wire::ipv4_mapped_gid({ip4[12], ip4[13], ip4[14], ip4[15]});
    self = wire::ipv4_mapped_gid({ip4[16], ip4[17], ip4[18], ip4[19]});
    tclass = ip4[1];
  } else {
    std::memcpy(peer.data(), grh->sgid.raw, 16);
    std::memcpy(self.data(), grh->dgid.raw, 16);
    tclass = static_cast<uint8_t>((__builtin_bswap32(grh->version_tclass_flow) >> 20) & 0xff);
  }
  std::memcpy(ah_attr->grh.dgid.raw, peer.data(), 16);
  ah_attr->grh.traffic_class = tclass;
  ah_attr->grh.hop_limit = 64;
  // The source GID index: the entry of ours the peer addressed.
  Runtime* rt = runtime_of(context);
  EngineLock lock(rt);
  for (int i = 0; i < rt->engine->gid_count(); ++i) {
    ibv_gid g;
    if (rt->engine->query_gid(port_num, i, &g) == 0 && std::memcmp(g.raw, self.data(), 16) == 0) {
      ah_attr->grh.sgid_index = static_cast<uint8_t>(i);
      return 0;
    }
  }
  return EINVAL;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (int e = ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr); e != 0) {
    errno = e;
    return nullptr;
  }
  return ibv_create_ah(pd, &attr);
}

int ibv_destroy_ah(ibv_ah* ah) { return destroy_ah(ah); }

// ---- QP ------------------------------------------------------------------------------------------

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return create_qp_in(pd->context, pd, attr, nullptr);
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  Runtime* rt = runtime_of(qp->context);
  if (mask & IBV_QP_AV) {
    if (int e = resolve_dest(rt, attr->ah_attr); e != 0) return e;
  }
  EngineLock lock(rt);
  const int rc = rt->engine->modify_qp(to_qp(qp), attr, mask);
  // The handle's state as rdma-core keeps it (an opened handle's too; the engine updates the
  // QP's own).
  if (rc == 0 && (mask & IBV_QP_STATE)) qp->state = attr->qp_state;
  return rc;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  Runtime* rt = runtime_of(qp->context);
  EngineLock lock(rt);
  const int rc = rt->engine->query_qp(to_qp(qp), attr, mask, init);
  if (rc == 0 && init != nullptr) {
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
  }
  return rc;
}

int ibv_destroy_qp(ibv_qp* qp) { return destroy_qp(qp, true); }

}  // extern "C"

// XRC in the provider: ibv_open_xrcd / ibv_close_xrcd, XRC SRQs (ibv_create_srq_ex,
// ibv_get_srq_num) and the context ops that reach them. The QPs are in ext.cc
// (op_create_qp_ex) and objects.cc (create_qp_in); the transport is the engine's.
//
// One process runs one engine per device, so an XRC domain is shared the way ibv_open_xrcd(3)
// describes only among the opens of one context: a second process opening the same file gets
// a domain of its own. ibv_open_qp(3) opens a target QP of the domain in this process: the
// handle is a Qp of its own naming the target (Qp::real); modify and query reach the
// target; the target lives until its last handle, the creator's included, is destroyed.
// Async events about the target go to its creator's handle only.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <mutex>

#include "verbs/provider.h"

namespace uroce::verbs {
namespace {

Xrcd* to_xrcd(ibv_xrcd* x) { return reinterpret_cast<Xrcd*>(x); }

ibv_xrcd* op_open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* a) {
  if (a->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
    errno = EINVAL;
    return nullptr;
  }
  XrcdRec rec;
  if (a->fd != -1) {
    struct stat st;
    if (fstat(a->fd, &st) != 0) {
      errno = EBADF;
      return nullptr;
    }
    rec.keyed = true;
    rec.dev = st.st_dev;
    rec.ino = st.st_ino;
  }
  // The table's lock is held throughout, the engine's taken inside it (no path takes them the
  // other way round): two opens of one file make one domain, and a close cannot free a
  // domain an open is joining.
  ContextState* s = state_of(ctx);
  std::lock_guard<std::mutex> lock(s->obj_mu);
  if (rec.keyed) {
    for (XrcdRec& r : s->xrcds) {
      if (!r.keyed || r.dev != rec.dev || r.ino != rec.ino) continue;
      if ((a->oflags & O_CREAT) && (a->oflags & O_EXCL)) {
        errno = EINVAL;  // it exists
        return nullptr;
      }
      ++r.opens;
      return &r.xrcd->ibv;
    }
    if (!(a->oflags & O_CREAT)) {
      errno = EAGAIN;  // none for this file yet (the kernel's answer too)
      return nullptr;
    }
  }
  Runtime* rt = runtime_of(ctx);
  {
    EngineLock engine(rt);
    rec.xrcd = rt->engine->create_xrcd();
  }
  rec.xrcd->ibv.context = ctx;
  rec.opens = 1;
  s->xrcds.push_back(rec);
  return &rec.xrcd->ibv;
}

/// Closes one open of `x`: the last one destroys the domain (EBUSY while its SRQs or target
/// QPs exist).
int close_xrcd_in(ContextState* s, Xrcd* x) {
  std::lock_guard<std::mutex> lock(s->obj_mu);  // as in op_open_xrcd
  auto it = std::find_if(s->xrcds.begin(), s->xrcds.end(),
                         [x](const XrcdRec& r) { return r.xrcd == x; });
  if (it == s->xrcds.end()) return EINVAL;
  if (it->opens > 1) {
    --it->opens;
    return 0;
  }
  int r;
  {
    EngineLock engine(s->rt);
    r = s->rt->engine->destroy_xrcd(x);
  }
  if (r == 0) s->xrcds.erase(it);
  return r;
}

int op_close_xrcd(ibv_xrcd* x) { return close_xrcd_in(state_of(x->context), to_xrcd(x)); }

ibv_srq* op_create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* a) {
  if (a->comp_mask >= IBV_SRQ_INIT_ATTR_RESERVED) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_srq_type type =
      (a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? a->srq_type : IBV_SRQT_BASIC;
  // XRC: a domain and a CQ; tag matching (tag_matching.cc): a CQ and the list's size.
  const bool xrc = type == IBV_SRQT_XRC, tm = type == IBV_SRQT_TM;
  const bool has_cq = (a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) && a->cq != nullptr;
  if ((type != IBV_SRQT_BASIC && !xrc && !tm) || !(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
      a->pd == nullptr || a->pd->context != ctx ||
      (xrc && (!(a->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || a->xrcd == nullptr || !has_cq)) ||
      (tm && (!(a->comp_mask & IBV_SRQ_INIT_ATTR_TM) || !has_cq)) ||
      (!tm && (a->comp_mask & IBV_SRQ_INIT_ATTR_TM))) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq_init_attr basic{};
  basic.srq_context = a->srq_context;
  basic.attr = a->attr;
  ibv_srq* srq = create_srq_in(a->pd, &basic, xrc ? to_xrcd(a->xrcd) : nullptr,
                               xrc || tm ? a->cq : nullptr, tm ? &a->tm_cap : nullptr);
  if (srq != nullptr) a->attr = basic.attr;
  return srq;
}

// ibv_post_srq_ops(3): a tag-matching SRQ's list operations (the engine's, under its lock: they
// complete at once).
int op_post_srq_ops(ibv_srq* srq, ibv_ops_wr* op, ibv_ops_wr** bad) {
  if (srq == nullptr || op == nullptr) return EINVAL;
  Runtime* rt = runtime_of(srq->context);
  EngineLock engine(rt);
  return rt->engine->post_srq_ops(to_srq(srq), op, bad);
}

int op_get_srq_num(ibv_srq* srq, uint32_t* num) {
  *num = to_srq(srq)->handle;
  return 0;
}

// ibv_open_qp(3): another handle to an XRC target QP of `a->xrcd`, found by its number.
ibv_qp* op_open_qp(ibv_context* ctx, ibv_qp_open_attr* a) {
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (a == nullptr || (a->comp_mask & kNeeded) != kNeeded ||
      a->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED || a->qp_type != IBV_QPT_XRC_RECV ||
      a->xrcd == nullptr || a->xrcd->context != ctx) {
    errno = EINVAL;
    return nullptr;
  }
  auto h = std::make_unique<Qp>();
  Runtime* rt = runtime_of(ctx);
  {
    EngineLock engine(rt);
    Qp* real = rt->engine->qp_by_num(a->qp_num);
    if (real == nullptr || real->type != IBV_QPT_XRC_RECV || real->xrcd != to_xrcd(a->xrcd) ||
        real->closing) {
      errno = EINVAL;  // the kernel's answer for a number its domain does not have
      return nullptr;
    }
    ++real->opens;
    h->real = real;
    h->qpn = real->qpn;
    h->type = IBV_QPT_XRC_RECV;
    h->ibv.state = real->state;
  }
  ibv_qp& q = h->ibv;
  q.context = ctx;
  q.qp_context = (a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? a->qp_context : nullptr;
  q.handle = q.qp_num = h->qpn;
  q.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  ContextState* s = state_of(ctx);
  std::lock_guard<std::mutex> lock(s->obj_mu);
  s->opened_qps.insert(h.get());
  return &h.release()->ibv;
}

}  // namespace

int close_opened_qp(Qp* h) {
  ContextState* s = state_of(h->ibv.context);
  {
    std::lock_guard<std::mutex> lock(s->obj_mu);
    if (s->opened_qps.erase(h) == 0) return EINVAL;
  }
  Qp* real = h->real;
  Runtime* rt = runtime_of(h->ibv.context);
  bool last = false;
  {
    EngineLock engine(rt);
    last = --real->opens == 0 && real->creator_closed;
  }
  pthread_mutex_destroy(&h->ibv.mutex);
  pthread_cond_destroy(&h->ibv.cond);
  delete h;
  if (last) free_qp(rt, real);  // its creator went first: the last handle takes it
  return 0;
}

void install_xrc_ops(Context* ctx) {
  ctx->vctx.open_qp = op_open_qp;
  ctx->vctx.open_xrcd = op_open_xrcd;
  ctx->vctx.close_xrcd = op_close_xrcd;
  ctx->vctx.create_srq_ex = op_create_srq_ex;
  ctx->vctx.get_srq_num = op_get_srq_num;
  ctx->vctx.post_srq_ops = op_post_srq_ops;
}

void close_context_xrcds(ContextState* s) {
  std::vector<Xrcd*> open;
  {
    std::lock_guard<std::mutex> lock(s->obj_mu);
    for (const XrcdRec& r : s->xrcds) open.push_back(r.xrcd);
  }
  for (Xrcd* x : open) {
    while (close_xrcd_in(s, x) == 0) {
      std::lock_guard<std::mutex> lock(s->obj_mu);
      if (std::none_of(s->xrcds.begin(), s->xrcds.end(),
                       [x](const XrcdRec& r) { return r.xrcd == x; }))
        break;
    }
  }
}

}  // namespace uroce::verbs

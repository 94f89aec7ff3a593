// Verbs objects and the data path on top of the engine: PD, MR, completion channels, CQ,
// SRQ, AH, QP, and the context ops that verbs.h's inline ibv_post_send / ibv_post_recv /
// ibv_poll_cq / ibv_req_notify_cq call. Every engine call holds the device lock.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "verbs/provider.h"

using namespace uroce;
using namespace uroce::verbs;

namespace {

struct UPd {
  ibv_pd ibv;
  mem::Pd* pd;
};
struct UMr {
  ibv_mr ibv;
  mem::Mr* mr;
};
struct UChannel {
  ibv_comp_channel ibv;
  int wfd;  // write end of the pipe whose read end is ibv.fd
  int cqs;  // CQs using it
};

ContextState* state_of(ibv_context* c) { return to_context(c)->state; }
mem::Pd* pd_of(ibv_pd* p) { return reinterpret_cast<UPd*>(p)->pd; }

/// ibv_modify_qp and ibv_create_ah are synchronous: resolve the destination's MAC first,
/// waiting for ARP / neighbour discovery (up to its 3 s of retries) without holding the lock
/// so the progress thread can receive the answer.
int resolve_dest(ContextState* s, const ibv_ah_attr& ah) {
  if (!ah.is_global) return 0;  // the engine answers EINVAL for a missing GRH
  wire::Gid gid;
  std::memcpy(gid.data(), ah.grh.dgid.raw, 16);
  wire::MacAddr mac;
  NeighborState st;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    st = s->engine->resolve(gid, &mac);
  }
  while (st == NeighborState::kIncomplete) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard<std::mutex> lock(s->mu);
    st = s->engine->neighbor_state(gid, &mac);
  }
  return st == NeighborState::kReachable ? 0 : EHOSTUNREACH;
}

/// Completion channels: a CQ armed with ibv_req_notify_cq gets one event on its next
/// completion. Called with the device lock held.
void deliver_cq_events(ContextState* s) {
  for (size_t i = 0; i < s->armed.size();) {
    Cq* cq = s->armed[i];
    if (cq->notify_gen == cq->notify_seen) {
      ++i;
      continue;
    }
    cq->notify_armed = false;
    s->armed[i] = s->armed.back();
    s->armed.pop_back();
    auto* ch = reinterpret_cast<UChannel*>(cq->ibv.channel);
    ibv_cq* handle = &cq->ibv;
    if (ch != nullptr && write(ch->wfd, &handle, sizeof handle) != sizeof handle) {
      // The pipe is full only if the application stopped reading events: drop this one.
    }
  }
}

// ---- Context ops (data path) ------------------------------------------------------------

int op_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  ContextState* s = state_of(cq->context);
  const uint64_t now = now_ns();
  s->last_app_poll.store(now, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s->mu);
  s->engine->poll(now);  // a busy-polling application drives the engine itself
  deliver_cq_events(s);
  return s->engine->poll_cq(to_cq(cq), n, wc);
}

int op_req_notify_cq(ibv_cq* cq, int) {
  // solicited_only is treated like "any completion": an extra wake-up is always allowed.
  ContextState* s = state_of(cq->context);
  std::lock_guard<std::mutex> lock(s->mu);
  Cq* c = to_cq(cq);
  c->notify_seen = c->notify_gen;
  if (!c->notify_armed) {
    c->notify_armed = true;
    s->armed.push_back(c);
  }
  return 0;
}

int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  ContextState* s = state_of(qp->context);
  std::lock_guard<std::mutex> lock(s->mu);
  const ibv_send_wr* b = nullptr;
  const int rc = s->engine->post_send(to_qp(qp), wr, &b);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_send_wr*>(b);
  s->engine->poll(now_ns());  // send now rather than at the progress thread's next turn
  return rc;
}

int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  ContextState* s = state_of(qp->context);
  std::lock_guard<std::mutex> lock(s->mu);
  const ibv_recv_wr* b = nullptr;
  const int rc = s->engine->post_recv(to_qp(qp), wr, &b);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_recv_wr*>(b);
  return rc;
}

int op_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  ContextState* s = state_of(srq->context);
  std::lock_guard<std::mutex> lock(s->mu);
  const ibv_recv_wr* b = nullptr;
  const int rc = s->engine->post_srq_recv(to_srq(srq), wr, &b);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_recv_wr*>(b);
  return rc;
}

}  // namespace

namespace uroce::verbs {
void install_data_ops(ibv_context_ops* o) {
  o->poll_cq = op_poll_cq;
  o->req_notify_cq = op_req_notify_cq;
  o->post_send = op_post_send;
  o->post_recv = op_post_recv;
  o->post_srq_recv = op_post_srq_recv;
}
void progress_hook(ContextState* s) { deliver_cq_events(s); }
}  // namespace uroce::verbs

extern "C" {

// ---- PD and MR -----------------------------------------------------------------------------

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  ContextState* s = state_of(context);
  std::lock_guard<std::mutex> lock(s->mu);
  mem::Pd* pd = s->engine->alloc_pd();
  if (pd == nullptr) return nullptr;
  auto* u = new UPd{};
  u->ibv.context = context;
  u->ibv.handle = pd->handle;
  u->pd = pd;
  return &u->ibv;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  ContextState* s = state_of(pd->context);
  std::lock_guard<std::mutex> lock(s->mu);
  if (int e = s->engine->dealloc_pd(pd_of(pd)); e != 0) return e;
  delete reinterpret_cast<UPd*>(pd);
  return 0;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  // Optional access bits (relaxed ordering and the like) may be ignored by any device.
  const int acc = static_cast<int>(access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE));
  ContextState* s = state_of(pd->context);
  std::lock_guard<std::mutex> lock(s->mu);
  mem::Mr* mr = s->engine->reg_mr_iova(pd_of(pd), addr, length, iova, acc);
  if (mr == nullptr) return nullptr;
  auto* u = new UMr{};
  u->ibv.context = pd->context;
  u->ibv.pd = pd;
  u->ibv.addr = addr;
  u->ibv.length = length;
  u->ibv.handle = mr->key;
  u->ibv.lkey = u->ibv.rkey = mr->key;
  u->mr = mr;
  return &u->ibv;
}

ibv_mr* (ibv_reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr),
                          static_cast<unsigned>(access));
}

ibv_mr* (ibv_reg_mr_iova)(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned>(access));
}

int ibv_dereg_mr(ibv_mr* mr) {
  ContextState* s = state_of(mr->context);
  std::lock_guard<std::mutex> lock(s->mu);
  if (int e = s->engine->dereg_mr(reinterpret_cast<UMr*>(mr)->mr); e != 0) return e;
  delete reinterpret_cast<UMr*>(mr);
  return 0;
}

// ---- Completion channels and CQs -------------------------------------------------------------

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* ch = new UChannel{};
  ch->ibv.context = context;
  ch->ibv.fd = fds[0];
  ch->ibv.refcnt = 0;
  ch->wfd = fds[1];
  return &ch->ibv;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<UChannel*>(channel);
  if (ch->cqs != 0) return EBUSY;
  close(ch->ibv.fd);
  close(ch->wfd);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  if (comp_vector != 0) {
    errno = EINVAL;  // num_comp_vectors is 1
    return nullptr;
  }
  ContextState* s = state_of(context);
  std::lock_guard<std::mutex> lock(s->mu);
  Cq* cq = s->engine->create_cq(cqe);
  if (cq == nullptr) return nullptr;
  ibv_cq& c = cq->ibv;
  c.context = context;
  c.channel = channel;
  c.cq_context = cq_context;
  c.handle = cq->handle;
  c.cqe = cqe;
  pthread_mutex_init(&c.mutex, nullptr);
  pthread_cond_init(&c.cond, nullptr);
  if (channel != nullptr) ++reinterpret_cast<UChannel*>(channel)->cqs;
  return &c;
}

int ibv_destroy_cq(ibv_cq* cq) {
  ContextState* s = state_of(cq->context);
  std::lock_guard<std::mutex> lock(s->mu);
  ibv_comp_channel* ch = cq->channel;
  Cq* c = to_cq(cq);
  for (size_t i = 0; i < s->armed.size(); ++i) {
    if (s->armed[i] == c) {
      s->armed[i] = s->armed.back();
      s->armed.pop_back();
      break;
    }
  }
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  if (int e = s->engine->destroy_cq(c); e != 0) return e;
  if (ch != nullptr) --reinterpret_cast<UChannel*>(ch)->cqs;
  return 0;
}

int ibv_resize_cq(ibv_cq*, int) { return EOPNOTSUPP; }

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  ibv_cq* handle = nullptr;
  const ssize_t n = read(channel->fd, &handle, sizeof handle);
  if (n != sizeof handle) {
    if (n >= 0) errno = EIO;
    return -1;
  }
  *cq = handle;
  *cq_context = handle->cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// ---- SRQ -----------------------------------------------------------------------------------------

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  ContextState* s = state_of(pd->context);
  std::lock_guard<std::mutex> lock(s->mu);
  Srq* srq = s->engine->create_srq(pd_of(pd), attr);
  if (srq == nullptr) return nullptr;
  srq->ibv.context = pd->context;
  srq->ibv.srq_context = attr->srq_context;
  srq->ibv.pd = pd;
  srq->ibv.handle = srq->handle;
  pthread_mutex_init(&srq->ibv.mutex, nullptr);
  pthread_cond_init(&srq->ibv.cond, nullptr);
  return &srq->ibv;
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  ContextState* s = state_of(srq->context);
  std::lock_guard<std::mutex> lock(s->mu);
  return s->engine->modify_srq(to_srq(srq), attr, mask);
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  ContextState* s = state_of(srq->context);
  std::lock_guard<std::mutex> lock(s->mu);
  return s->engine->query_srq(to_srq(srq), attr);
}

int ibv_destroy_srq(ibv_srq* srq) {
  ContextState* s = state_of(srq->context);
  std::lock_guard<std::mutex> lock(s->mu);
  return s->engine->destroy_srq(to_srq(srq));
}

// ---- AH ------------------------------------------------------------------------------------------

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  ContextState* s = state_of(pd->context);
  if (int e = resolve_dest(s, *attr); e != 0) {
    errno = e;
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(s->mu);
  Ah* ah = s->engine->create_ah(pd_of(pd), attr);
  if (ah == nullptr) return nullptr;
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
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
  ah_attr->sl = wc->sl;
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
  ContextState* s = to_context(context)->state;
  std::lock_guard<std::mutex> lock(s->mu);
  for (int i = 0; i < s->engine->gid_count(); ++i) {
    ibv_gid g;
    if (s->engine->query_gid(port_num, i, &g) == 0 && std::memcmp(g.raw, self.data(), 16) == 0) {
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

int ibv_destroy_ah(ibv_ah* ah) {
  ContextState* s = state_of(ah->context);
  std::lock_guard<std::mutex> lock(s->mu);
  return s->engine->destroy_ah(to_ah(ah));
}

// ---- QP ------------------------------------------------------------------------------------------

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ContextState* s = state_of(pd->context);
  std::lock_guard<std::mutex> lock(s->mu);
  Qp* qp = s->engine->create_qp(pd_of(pd), attr);
  if (qp == nullptr) return nullptr;
  ibv_qp& q = qp->ibv;
  q.context = pd->context;
  q.qp_context = attr->qp_context;
  q.pd = pd;
  q.send_cq = attr->send_cq;
  q.recv_cq = attr->recv_cq;
  q.srq = attr->srq;
  q.handle = qp->qpn;
  q.qp_num = qp->qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  attr->cap = qp->cap;  // what was granted
  return &q;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  ContextState* s = state_of(qp->context);
  if (mask & IBV_QP_AV) {
    if (int e = resolve_dest(s, attr->ah_attr); e != 0) return e;
  }
  std::lock_guard<std::mutex> lock(s->mu);
  const int rc = s->engine->modify_qp(to_qp(qp), attr, mask);
  qp->state = to_qp(qp)->state;
  return rc;
}

int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  ContextState* s = state_of(qp->context);
  std::lock_guard<std::mutex> lock(s->mu);
  const int rc = s->engine->query_qp(to_qp(qp), attr, mask, init);
  if (rc == 0 && init != nullptr) {
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
  }
  return rc;
}

int ibv_destroy_qp(ibv_qp* qp) {
  ContextState* s = state_of(qp->context);
  std::lock_guard<std::mutex> lock(s->mu);
  void* ext = to_qp(qp)->ext;
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  const int rc = s->engine->destroy_qp(to_qp(qp));
  if (rc == 0) free_qp_ext(ext);
  return rc;
}

}  // extern "C"

// uroce's librdmacm.so.1: rdma-core's rdma_cma.h API (and its symbol versions, see
// librdmacm.map) on top of the connection manager that uroce's libibverbs.so.1 runs next to
// its engine (uroce_cm_abi.h). It plays the part of rdma-core's librdmacm: the structures
// the application sees, the QP state changes around connect / accept / disconnect, the
// synchronous mode (an id without a channel), rdma_getaddrinfo and rdma_create_ep. The
// kernel's rdma_ucm part (ports, MADs, timers) is the provider's.
//
// rsockets are in rsocket.cc.
//
// Not supported (EOPNOTSUPP): ECE.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "verbs/uroce_cm_abi.h"

namespace {

/// A multicast group an id joined (rdma_join_multicast).
struct McPriv {
  sockaddr_storage addr{};
  ibv_gid mgid{};           // the group's GID: ::ffff:a.b.c.d, or the IPv6 address
  void* context = nullptr;  // handed back in the JOIN event's private_data
  bool sendonly = false;    // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: no QP attached
  bool attached = false;    // the id's QP was attached when the JOIN event was read
};

struct IdPriv {
  rdma_cm_id id{};  // first: an rdma_cm_id* converts back
  uint64_t handle = 0;
  bool sync = false;  // made without a channel: calls wait for their events
  std::mutex mu;
  std::condition_variable cv;
  int events_got = 0, events_acked = 0;
  bool connect_error = false;
  uint8_t initiator_depth = 0, responder_resources = 0;
  ibv_sa_path_rec path{};
  ibv_qp_init_attr qp_init{};  // rdma_create_ep on a passive id: QPs for its requests
  bool has_qp_init = false;
  bool own_cqs = false;
  std::vector<McPriv> mcs;  // under mu
};

struct EventPriv {
  rdma_cm_event ev{};  // first
  IdPriv* counted = nullptr;
  uint8_t pdata[224];
};

IdPriv* priv(rdma_cm_id* id) { return reinterpret_cast<IdPriv*>(id); }

/// Never returns: what a thread blocked on a file that can no longer deliver anything does.
[[noreturn]] void block_forever() {
  std::mutex m;
  std::unique_lock<std::mutex> lock(m);
  std::condition_variable never;
  for (;;) never.wait(lock);
}

int fail(int e) {
  errno = e;
  return -1;
}

std::mutex g_mu;
std::vector<ibv_context*>* g_ctxs = nullptr;  // every device, opened once
std::unordered_map<uint64_t, IdPriv*>* g_ids = new std::unordered_map<uint64_t, IdPriv*>;

bool init() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_ctxs != nullptr) return true;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return false;
  auto* v = new std::vector<ibv_context*>;
  for (int i = 0; i < n; ++i)
    if (ibv_context* c = ibv_open_device(list[i])) v->push_back(c);
  ibv_free_device_list(list);
  if (v->empty()) {
    delete v;
    errno = ENODEV;
    return false;
  }
  g_ctxs = v;
  return true;
}

ibv_context** ctxs() { return g_ctxs->data(); }
int nctx() { return static_cast<int>(g_ctxs->size()); }

/// The device's protection domain that librdmacm gives every id on it (id->pd, as rdma-core
/// does once an id has its device): one per device, made when the first id needs it, kept
/// for the process's life. Programs use it without making one (pyverbs' CMID.pd, an AH or an
/// MR before any QP); rdma_create_qp without a PD puts the QP in it.
ibv_pd* default_pd(ibv_context* verbs) {
  if (verbs == nullptr) return nullptr;
  static std::mutex mu;
  static auto* pds = new std::vector<std::pair<ibv_context*, ibv_pd*>>;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [c, pd] : *pds)
    if (c == verbs) return pd;
  ibv_pd* pd = ibv_alloc_pd(verbs);
  if (pd != nullptr) pds->emplace_back(verbs, pd);
  return pd;
}

/// The id with handle `h`, with an event counted against it (so that rdma_destroy_id waits for
/// its acknowledgement), or null if the id is being destroyed. Finding and counting happen
/// under one lock: a destroy that has taken the id out of g_ids sees every count made.
IdPriv* take_event(uint64_t h) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_ids->find(h);
  if (it == g_ids->end()) return nullptr;
  IdPriv* p = it->second;
  std::lock_guard<std::mutex> plock(p->mu);
  ++p->events_got;
  return p;
}

__be16 port_of(const sockaddr* sa) {  // network order, 0 for no address
  if (sa->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(sa)->sin_port;
  if (sa->sa_family == AF_INET6) return reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port;
  return 0;
}

/// The GID of an IP address: IPv4 as ::ffff:a.b.c.d.
ibv_gid gid_of(const sockaddr* sa) {
  ibv_gid g{};
  if (sa->sa_family == AF_INET) {
    g.raw[10] = g.raw[11] = 0xff;
    std::memcpy(&g.raw[12], &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    std::memcpy(g.raw, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
  }
  return g;
}

/// The group `p` joined at address `sa` (by its GID: an IPv4 address and its IPv4-mapped
/// IPv6 form are one group), or end().
std::vector<McPriv>::iterator find_mc(IdPriv* p, const sockaddr* sa) {
  const ibv_gid g = gid_of(sa);
  return std::find_if(p->mcs.begin(), p->mcs.end(),
                      [&](const McPriv& m) { return std::memcmp(m.mgid.raw, g.raw, 16) == 0; });
}

socklen_t sa_len(const sockaddr* sa) {
  return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

void set_ibaddr(rdma_cm_id* id) {
  id->route.addr.addr.ibaddr.sgid = gid_of(&id->route.addr.src_addr);
  id->route.addr.addr.ibaddr.dgid = gid_of(&id->route.addr.dst_addr);
  id->route.addr.addr.ibaddr.pkey = htons(0xFFFF);
}

IdPriv* new_id(rdma_event_channel* ch, void* context, rdma_port_space ps, ibv_qp_type type,
               uint64_t handle) {
  auto* p = new IdPriv;
  p->id.channel = ch;
  p->id.context = context;
  p->id.ps = ps;
  p->id.qp_type = type;
  p->handle = handle;
  std::lock_guard<std::mutex> lock(g_mu);
  (*g_ids)[handle] = p;
  return p;
}

int modify_init(rdma_cm_id* id, ibv_qp* qp) {
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_INIT;
  if (int r = uroce_cm_init_qp_attr(priv(id)->handle, &a, &mask); r != 0) return fail(r);
  if (int r = ibv_modify_qp(qp, &a, mask); r != 0) return fail(r);
  return 0;
}

int modify_rtr(rdma_cm_id* id, uint8_t resp_res) {
  if (id->qp == nullptr) return 0;
  if (modify_init(id, id->qp) != 0) return -1;
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_RTR;
  if (int r = uroce_cm_init_qp_attr(priv(id)->handle, &a, &mask); r != 0) return fail(r);
  if (resp_res != RDMA_MAX_RESP_RES) a.max_dest_rd_atomic = resp_res;
  if (int r = ibv_modify_qp(id->qp, &a, mask); r != 0) return fail(r);
  return 0;
}

int modify_rts(rdma_cm_id* id, uint8_t init_depth) {
  if (id->qp == nullptr) return 0;
  ibv_qp_attr a{};
  int mask = 0;
  a.qp_state = IBV_QPS_RTS;
  if (int r = uroce_cm_init_qp_attr(priv(id)->handle, &a, &mask); r != 0) return fail(r);
  if (init_depth != RDMA_MAX_INIT_DEPTH) a.max_rd_atomic = init_depth;
  if (int r = ibv_modify_qp(id->qp, &a, mask); r != 0) return fail(r);
  return 0;
}

void modify_err(rdma_cm_id* id) {
  if (id->qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
}

int init_ud_qp(rdma_cm_id* id, ibv_qp* qp) {
  if (modify_init(id, qp) != 0) return -1;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  if (int r = ibv_modify_qp(qp, &a, IBV_QP_STATE); r != 0) return fail(r);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN); r != 0) return fail(r);
  return 0;
}

/// Device limits for the READ depths (as librdmacm clamps them).
void device_depths(ibv_context* verbs, uint8_t* init_depth, uint8_t* resp_res) {
  ibv_device_attr a{};
  if (verbs == nullptr || ibv_query_device(verbs, &a) != 0) return;
  *init_depth = static_cast<uint8_t>(std::min<int>(*init_depth, a.max_qp_init_rd_atom));
  *resp_res = static_cast<uint8_t>(std::min<int>(*resp_res, a.max_qp_rd_atom));
}

/// rdma_conn_param's numbers in the connection manager's form (the private data travels
/// beside them); the CM's defaults when there is none. The id's QP, if it has one, names
/// itself: its number and whether it has an SRQ.
uroce_cm_param cm_param(const rdma_cm_id* id, const rdma_conn_param* cp) {
  uroce_cm_param c;
  if (cp != nullptr) {
    c.responder_resources = cp->responder_resources;
    c.initiator_depth = cp->initiator_depth;
    c.flow_control = cp->flow_control;
    c.retry_count = cp->retry_count;
    c.rnr_retry_count = cp->rnr_retry_count;
    c.srq = cp->srq;
    c.qp_num = cp->qp_num;
  }
  if (id->qp != nullptr) {
    c.qp_num = id->qp->qp_num;
    c.srq = id->qp->srq != nullptr;
  }
  return c;
}

/// The JOIN event of a group is being read: as librdmacm, the id's QP is attached to it now
/// (unless the join was send-only), and the event carries the join's context. An attach that
/// fails turns it into MULTICAST_ERROR.
void joined(IdPriv* p, rdma_cm_event* ev, const sockaddr_storage* group) {
  std::lock_guard<std::mutex> lock(p->mu);
  auto m = find_mc(p, reinterpret_cast<const sockaddr*>(group));
  if (m == p->mcs.end()) return;  // left meanwhile
  ev->param.ud.private_data = m->context;
  ev->param.ud.private_data_len = 0;
  if (p->id.qp == nullptr || m->sendonly || m->attached) return;
  if (int r = ibv_attach_mcast(p->id.qp, &m->mgid, 0); r != 0) {
    ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
    ev->status = -r;
    return;
  }
  m->attached = true;
}

/// Synchronous ids: waits for the event a call started, acknowledges it; 0 if it is `want`.
int sync_wait(rdma_cm_id* id, rdma_cm_event_type want) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(id->channel, &ev) != 0) return -1;
  const rdma_cm_event_type got = ev->event;
  const int status = ev->status;
  rdma_ack_cm_event(ev);
  if (got != want) return fail(status < 0 ? -status : ECONNREFUSED);
  return 0;
}

}  // namespace

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  if (!init()) return nullptr;
  const int fd = uroce_cm_channel_create();
  if (fd < 0) return nullptr;
  auto* ch = new rdma_event_channel;
  ch->fd = fd;
  return ch;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  // The 4-byte struct is kept (fd -1), not freed: programs such as rping destroy the channel
  // while their event thread is on its way back into rdma_get_cm_event, which then waits
  // on (block_forever) instead of reading freed memory or failing the program. The number
  // goes first (atomically: that thread reads it), so that a reader that finds the channel
  // gone also finds -1.
  uroce_cm_channel_destroy(__atomic_exchange_n(&channel->fd, -1, __ATOMIC_ACQ_REL));
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                   rdma_port_space ps) {
  if (id == nullptr) return fail(EINVAL);
  if (!init()) return -1;
  ibv_qp_type type;
  switch (ps) {
    case RDMA_PS_TCP:
    case RDMA_PS_IB: type = IBV_QPT_RC; break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB: type = IBV_QPT_UD; break;
    default: return fail(EINVAL);
  }
  bool sync = false;
  if (channel == nullptr) {
    channel = rdma_create_event_channel();
    if (channel == nullptr) return -1;
    sync = true;
  }
  const uint64_t h = uroce_cm_create_id(channel->fd, ps, type);
  if (h == 0) {
    const int e = errno;
    if (sync) rdma_destroy_event_channel(channel);
    return fail(e);
  }
  IdPriv* p = new_id(channel, context, ps, type, h);
  p->sync = sync;
  *id = &p->id;
  return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  {
    // No event is counted against the id from here on (take_event)...
    std::lock_guard<std::mutex> lock(g_mu);
    g_ids->erase(p->handle);
  }
  {
    // ...and, as librdmacm, it waits until every event reported on it has been acknowledged.
    std::unique_lock<std::mutex> lock(p->mu);
    p->cv.wait(lock, [p] { return p->events_acked >= p->events_got; });
  }
  for (const McPriv& m : p->mcs)  // groups not left: the QP leaves them with the id
    if (m.attached && id->qp != nullptr) ibv_detach_mcast(id->qp, &m.mgid, 0);
  uroce_cm_destroy_id(p->handle);
  if (p->sync) rdma_destroy_event_channel(id->channel);
  delete p;
  return 0;
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  sockaddr_storage bound{};
  ibv_context* verbs = nullptr;
  if (int r = uroce_cm_bind(priv(id)->handle, ctxs(), nctx(), addr, &bound, &verbs); r != 0)
    return fail(r);
  std::memcpy(&id->route.addr.src_storage, &bound, sizeof bound);
  id->verbs = verbs;
  id->port_num = verbs != nullptr ? 1 : 0;
  if (id->pd == nullptr) id->pd = default_pd(verbs);
  return 0;
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  if (id == nullptr || dst_addr == nullptr) return fail(EINVAL);
  const sockaddr* src = src_addr;
  if (src == nullptr && id->route.addr.src_addr.sa_family != 0) src = &id->route.addr.src_addr;
  sockaddr_storage bound{};
  ibv_context* verbs = nullptr;
  if (int r = uroce_cm_resolve_addr(priv(id)->handle, ctxs(), nctx(), src, dst_addr,
                                    timeout_ms, &bound, &verbs);
      r != 0)
    return fail(r);
  std::memcpy(&id->route.addr.src_storage, &bound, sizeof bound);
  std::memset(&id->route.addr.dst_storage, 0, sizeof id->route.addr.dst_storage);
  std::memcpy(&id->route.addr.dst_storage, dst_addr, sa_len(dst_addr));
  id->verbs = verbs;
  id->port_num = 1;
  if (id->pd == nullptr) id->pd = default_pd(verbs);
  set_ibaddr(id);
  if (priv(id)->sync) return sync_wait(id, RDMA_CM_EVENT_ADDR_RESOLVED);
  return 0;
}

int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  (void)timeout_ms;
  if (id == nullptr) return fail(EINVAL);
  if (int r = uroce_cm_resolve_route(priv(id)->handle); r != 0) return fail(r);
  if (priv(id)->sync) return sync_wait(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
  return 0;
}

int rdma_listen(rdma_cm_id* id, int backlog) {
  if (id == nullptr) return fail(EINVAL);
  if (int r = uroce_cm_listen(priv(id)->handle, ctxs(), nctx(), backlog); r != 0)
    return fail(r);
  return 0;
}

int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr || id->verbs == nullptr) return fail(EINVAL);
  if (id->qp != nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr) {
    if (id->pd == nullptr) id->pd = default_pd(id->verbs);
    if (id->pd == nullptr) return -1;
    attr->pd = id->pd;
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (attr->pd->context != id->verbs) return fail(EINVAL);
  if (attr->send_cq == nullptr) attr->send_cq = id->send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = id->recv_cq;
  // No CQs given: the id gets its own, each with a completion channel, as librdmacm makes
  // them (rdma_verbs.h's rdma_get_send_comp / rdma_get_recv_comp wait on those).
  auto own_cq = [id, p](uint32_t depth, ibv_comp_channel** ch, ibv_cq** cq) {
    *ch = ibv_create_comp_channel(id->verbs);
    if (*ch == nullptr) return false;
    *cq = ibv_create_cq(id->verbs, static_cast<int>(std::max(depth, 1u)), id, *ch, 0);
    p->own_cqs = true;
    return *cq != nullptr;
  };
  if (attr->send_cq == nullptr) {
    if (!own_cq(attr->cap.max_send_wr, &id->send_cq_channel, &id->send_cq)) return -1;
    attr->send_cq = id->send_cq;
  }
  if (attr->recv_cq == nullptr && attr->srq == nullptr) {
    if (!own_cq(attr->cap.max_recv_wr, &id->recv_cq_channel, &id->recv_cq)) return -1;
    attr->recv_cq = id->recv_cq;
  }
  if (attr->srq == nullptr) attr->srq = id->srq;
  attr->qp_type = attr->qp_type == 0 ? id->qp_type : attr->qp_type;
  ibv_qp* qp = ibv_create_qp_ex(id->verbs, attr);
  if (qp == nullptr) return -1;
  const int r = qp->qp_type == IBV_QPT_UD ? init_ud_qp(id, qp) : modify_init(id, qp);
  if (r != 0) {
    const int e = errno;
    ibv_destroy_qp(qp);
    return fail(e);
  }
  id->qp = qp;
  id->send_cq = attr->send_cq;
  id->recv_cq = attr->recv_cq;
  return 0;
}

int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || qp_init_attr == nullptr) return fail(EINVAL);
  ibv_qp_init_attr_ex a{};
  std::memcpy(&a, qp_init_attr, sizeof *qp_init_attr);
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd != nullptr ? pd : id->pd;
  if (a.pd == nullptr) a.comp_mask = 0;
  if (rdma_create_qp_ex(id, &a) != 0) return -1;
  qp_init_attr->cap = a.cap;
  return 0;
}

void rdma_destroy_qp(rdma_cm_id* id) {
  if (id == nullptr || id->qp == nullptr) return;
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  IdPriv* p = priv(id);
  if (p->own_cqs) {
    if (id->send_cq != nullptr) ibv_destroy_cq(id->send_cq);
    if (id->recv_cq != nullptr && id->recv_cq != id->send_cq) ibv_destroy_cq(id->recv_cq);
    if (id->send_cq_channel != nullptr) ibv_destroy_comp_channel(id->send_cq_channel);
    if (id->recv_cq_channel != nullptr) ibv_destroy_comp_channel(id->recv_cq_channel);
    id->send_cq = id->recv_cq = nullptr;
    id->send_cq_channel = id->recv_cq_channel = nullptr;
    p->own_cqs = false;
  }
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  uroce_cm_param c = cm_param(id, conn_param);
  if (conn_param == nullptr) c.responder_resources = c.initiator_depth = 0xFF;
  device_depths(id->verbs, &c.initiator_depth, &c.responder_resources);
  const void* pdata = conn_param != nullptr ? conn_param->private_data : nullptr;
  const uint8_t len = conn_param != nullptr ? conn_param->private_data_len : 0;
  p->initiator_depth = c.initiator_depth;
  p->responder_resources = c.responder_resources;
  if (int r = uroce_cm_connect(p->handle, &c, pdata, len); r != 0) return fail(r);
  if (p->sync)
    return sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);
  return 0;
}

int rdma_establish(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  if (modify_rtr(id, RDMA_MAX_RESP_RES) != 0 || modify_rts(id, RDMA_MAX_INIT_DEPTH) != 0)
    return -1;
  if (int r = uroce_cm_establish(priv(id)->handle); r != 0) return fail(r);
  return 0;
}

int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  if (id == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  uroce_cm_param c = cm_param(id, conn_param);
  // The depths: what the request offered, capped by the device, unless the caller names
  // its own (RDMA_MAX_* asks for the request's).
  uint8_t init_depth = p->initiator_depth, resp_res = p->responder_resources;
  device_depths(id->verbs, &init_depth, &resp_res);
  if (conn_param != nullptr && conn_param->initiator_depth != RDMA_MAX_INIT_DEPTH)
    init_depth = conn_param->initiator_depth;
  if (conn_param != nullptr && conn_param->responder_resources != RDMA_MAX_RESP_RES)
    resp_res = conn_param->responder_resources;
  c.initiator_depth = init_depth;
  c.responder_resources = resp_res;
  const void* pdata = conn_param != nullptr ? conn_param->private_data : nullptr;
  const uint8_t len = conn_param != nullptr ? conn_param->private_data_len : 0;
  if (id->qp_type == IBV_QPT_UD) {
    c.qkey = RDMA_UDP_QKEY;
  } else if (modify_rtr(id, resp_res) != 0 || modify_rts(id, init_depth) != 0) {
    const int e = errno;
    modify_err(id);
    return fail(e);
  }
  if (int r = uroce_cm_accept(p->handle, &c, pdata, len); r != 0) {
    modify_err(id);
    return fail(r);
  }
  if (p->sync && id->qp_type != IBV_QPT_UD) return sync_wait(id, RDMA_CM_EVENT_ESTABLISHED);
  return 0;
}

int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  if (id == nullptr) return fail(EINVAL);
  if (int r = uroce_cm_reject(priv(id)->handle, private_data, private_data_len); r != 0)
    return fail(r);
  return 0;
}

int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  return rdma_reject(id, private_data, private_data_len);
}

int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  if (id == nullptr) return fail(EINVAL);
  if (int r = uroce_cm_notify(priv(id)->handle, event); r != 0) return fail(r);
  return 0;
}

int rdma_disconnect(rdma_cm_id* id) {
  if (id == nullptr) return fail(EINVAL);
  if (id->qp_type != IBV_QPT_UD) modify_err(id);
  if (int r = uroce_cm_disconnect(priv(id)->handle); r != 0) return fail(r);
  return 0;
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return fail(EINVAL);
  for (;;) {
    // A channel destroyed before or during the call (the application's other thread did it):
    // wait on, as a read of the kernel's rdma_cm file does once it was begun.
    const int fd = __atomic_load_n(&channel->fd, __ATOMIC_ACQUIRE);
    if (fd < 0) block_forever();
    uroce_cm_event rec;
    if (int r = uroce_cm_get_event(fd, &rec); r != 0) {
      if (r == EBADF && __atomic_load_n(&channel->fd, __ATOMIC_ACQUIRE) < 0) block_forever();
      return fail(r);
    }
    auto* e = new EventPriv;
    rdma_cm_event& ev = e->ev;
    ev.event = static_cast<rdma_cm_event_type>(rec.event);
    ev.status = rec.status;
    std::memcpy(e->pdata, rec.private_data, rec.private_data_len);
    IdPriv* p = nullptr;
    if (rec.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      IdPriv* l = take_event(rec.listen_handle);
      if (l == nullptr) {
        uroce_cm_destroy_id(rec.handle);
        delete e;
        continue;
      }
      p = new_id(l->id.channel, l->id.context, l->id.ps, l->id.qp_type, rec.handle);
      p->id.verbs = rec.verbs;
      p->id.pd = default_pd(rec.verbs);
      p->id.port_num = 1;
      std::memcpy(&p->id.route.addr.src_storage, &rec.src, sizeof rec.src);
      std::memcpy(&p->id.route.addr.dst_storage, &rec.dst, sizeof rec.dst);
      set_ibaddr(&p->id);
      p->initiator_depth = rec.param.initiator_depth;
      p->responder_resources = rec.param.responder_resources;
      ev.listen_id = &l->id;
      e->counted = l;
      if (l->has_qp_init) {  // rdma_create_ep's passive id: the request gets its QP now
        ibv_qp_init_attr a = l->qp_init;
        rdma_create_qp(&p->id, l->id.pd, &a);
      }
    } else {
      p = take_event(rec.handle);
      if (p == nullptr) {
        delete e;
        continue;
      }
      e->counted = p;
    }
    ev.id = &p->id;
    rdma_cm_id* id = &p->id;
    switch (rec.event) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        std::memcpy(&id->route.addr.src_storage, &rec.src, sizeof rec.src);
        set_ibaddr(id);
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        ibv_sa_path_rec& r = p->path;
        r = {};
        r.sgid = id->route.addr.addr.ibaddr.sgid;
        r.dgid = id->route.addr.addr.ibaddr.dgid;
        r.pkey = htons(0xFFFF);
        r.hop_limit = 64;
        r.reversible = 1;
        r.numb_path = 1;
        ibv_port_attr pa{};
        if (id->verbs != nullptr && ibv_query_port(id->verbs, 1, &pa) == 0) r.mtu = pa.active_mtu;
        r.mtu_selector = 2;
        r.rate_selector = 2;
        r.rate = 3;
        r.packet_life_time_selector = 2;
        r.packet_life_time = 13;
        id->route.path_rec = &r;
        id->route.num_paths = 1;
        break;
      }
      case RDMA_CM_EVENT_CONNECT_RESPONSE:
        if (id->qp != nullptr) {
          // As librdmacm: the QP goes to RTR and RTS, the RTU goes out, and the
          // application hears ESTABLISHED.
          if (modify_rtr(id, RDMA_MAX_RESP_RES) == 0 && modify_rts(id, RDMA_MAX_INIT_DEPTH) == 0 &&
              uroce_cm_establish(p->handle) == 0) {
            ev.event = RDMA_CM_EVENT_ESTABLISHED;
          } else {
            ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
            ev.status = -errno;
            p->connect_error = true;
            modify_err(id);
          }
        }
        break;
      case RDMA_CM_EVENT_REJECTED:
      case RDMA_CM_EVENT_UNREACHABLE:
        modify_err(id);
        break;
      default:
        break;
    }
    if (id->qp_type == IBV_QPT_UD) {
      ev.param.ud.private_data = rec.private_data_len > 0 ? e->pdata : nullptr;
      ev.param.ud.private_data_len = rec.private_data_len;
      ev.param.ud.ah_attr = rec.ah_attr;
      ev.param.ud.qp_num = rec.param.qp_num;
      ev.param.ud.qkey = rec.param.qkey;
      if (rec.event == RDMA_CM_EVENT_MULTICAST_JOIN) joined(p, &ev, &rec.dst);
    } else {
      ev.param.conn.private_data = rec.private_data_len > 0 ? e->pdata : nullptr;
      ev.param.conn.private_data_len = rec.private_data_len;
      ev.param.conn.responder_resources = rec.param.responder_resources;
      ev.param.conn.initiator_depth = rec.param.initiator_depth;
      ev.param.conn.flow_control = rec.param.flow_control;
      ev.param.conn.retry_count = rec.param.retry_count;
      ev.param.conn.rnr_retry_count = rec.param.rnr_retry_count;
      ev.param.conn.srq = rec.param.srq;
      ev.param.conn.qp_num = rec.param.qp_num;
    }
    // A connection request is counted against its listener, not the new id, which the
    // program may destroy before it acknowledges the event: only the id it is counted
    // against points back at it (and the acknowledgement clears that).
    if (e->counted == p) {
      std::lock_guard<std::mutex> lock(p->mu);  // an acknowledgement may be clearing it
      id->event = &ev;
    }
    *event = &ev;
    return 0;
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return fail(EINVAL);
  auto* e = reinterpret_cast<EventPriv*>(event);
  if (IdPriv* p = e->counted) {
    // Before the acknowledgement counts: from then on rdma_destroy_id may free the id. (A
    // connection request's new id is not p, and may be gone already: it is not read.)
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->id.event == event) p->id.event = nullptr;
    ++p->events_acked;
    p->cv.notify_all();
  }
  delete e;
  return 0;
}

__be16 rdma_get_src_port(rdma_cm_id* id) { return port_of(&id->route.addr.src_addr); }

__be16 rdma_get_dst_port(rdma_cm_id* id) { return port_of(&id->route.addr.dst_addr); }

ibv_context** rdma_get_devices(int* num_devices) {
  if (!init()) return nullptr;
  auto** list = static_cast<ibv_context**>(calloc(g_ctxs->size() + 1, sizeof(ibv_context*)));
  if (list == nullptr) return nullptr;
  std::copy(g_ctxs->begin(), g_ctxs->end(), list);
  if (num_devices != nullptr) *num_devices = nctx();
  return list;
}

void rdma_free_devices(ibv_context** list) { free(list); }

const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval, size_t optlen) {
  if (id == nullptr || optval == nullptr) return fail(EINVAL);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        if (int r = uroce_cm_set_option(priv(id)->handle, optname,
                                        *static_cast<uint8_t*>(optval));
            r != 0)
          return fail(r);
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return fail(EINVAL);
        return 0;  // accepted; ports are reserved with plain kernel sockets
      default:
        return fail(ENOSYS);
    }
  }
  return fail(ENOSYS);  // RDMA_OPTION_IB_PATH: RoCE has no SA path records
}

int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  if (id == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  bool made = false;
  if (channel == nullptr) {
    channel = rdma_create_event_channel();
    if (channel == nullptr) return -1;
    made = true;
  }
  {
    std::unique_lock<std::mutex> lock(p->mu);
    p->cv.wait(lock, [p] { return p->events_acked >= p->events_got; });
  }
  if (int r = uroce_cm_migrate_id(p->handle, channel->fd); r != 0) {
    if (made) rdma_destroy_event_channel(channel);
    return fail(r);
  }
  if (p->sync) rdma_destroy_event_channel(id->channel);
  id->channel = channel;
  p->sync = made;
  return 0;
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return fail(EINVAL);
  if (int r = uroce_cm_init_qp_attr(priv(id)->handle, qp_attr, qp_attr_mask); r != 0)
    return fail(r);
  return 0;
}

// ---- rdma_getaddrinfo and the endpoint calls ---------------------------------------------------

namespace {
/// A heap copy of `len` bytes of address `a` (rdma_freeaddrinfo frees it), or nullptr.
sockaddr* copy_addr(const sockaddr* a, socklen_t len) {
  if (a == nullptr || len == 0 || len > sizeof(sockaddr_storage)) return nullptr;
  auto* sa = static_cast<sockaddr*>(calloc(1, sizeof(sockaddr_storage)));
  if (sa != nullptr) std::memcpy(sa, a, len);
  return sa;
}
}  // namespace

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                     rdma_addrinfo** res) {
  // As rdma-core's: a node or service is resolved; without both, the hints' addresses are
  // the answer (libfabric asks that way); with neither nor hints there is nothing to answer.
  if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr))
    return fail(EINVAL);
  const int flags = hints != nullptr ? hints->ai_flags : 0;
  addrinfo* ai = nullptr;
  if (node != nullptr || service != nullptr) {
    addrinfo h{};
    h.ai_socktype = SOCK_STREAM;
    if (hints != nullptr) h.ai_family = hints->ai_family;
    if (flags & RAI_PASSIVE) h.ai_flags |= AI_PASSIVE;
    if (flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
    if (int r = getaddrinfo(node, service, &h, &ai); r != 0) {
      errno = r == EAI_SYSTEM ? errno : EADDRNOTAVAIL;
      return r;
    }
  }
  auto* out = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (out == nullptr) {
    if (ai != nullptr) freeaddrinfo(ai);
    return fail(ENOMEM);
  }
  out->ai_flags = flags;
  out->ai_qp_type = hints != nullptr && hints->ai_qp_type != 0 ? hints->ai_qp_type : IBV_QPT_RC;
  out->ai_port_space = hints != nullptr && hints->ai_port_space != 0
                           ? hints->ai_port_space
                           : (out->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP);
  bool ok = true;
  if (ai != nullptr) {
    out->ai_family = ai->ai_family;
    sockaddr* sa = copy_addr(ai->ai_addr, ai->ai_addrlen);
    ok = sa != nullptr;
    if (flags & RAI_PASSIVE) {
      out->ai_src_addr = sa;
      out->ai_src_len = ai->ai_addrlen;
    } else {
      out->ai_dst_addr = sa;
      out->ai_dst_len = ai->ai_addrlen;
    }
    freeaddrinfo(ai);
  } else {
    out->ai_family = hints->ai_family;
    if (hints->ai_dst_len != 0) {
      out->ai_dst_addr = copy_addr(hints->ai_dst_addr, hints->ai_dst_len);
      out->ai_dst_len = hints->ai_dst_len;
      ok = out->ai_dst_addr != nullptr;
    }
  }
  // A source address in the hints is kept when the node did not give one.
  if (ok && out->ai_src_len == 0 && hints != nullptr && hints->ai_src_len != 0) {
    out->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
    out->ai_src_len = hints->ai_src_len;
    ok = out->ai_src_addr != nullptr;
  }
  if (ok && out->ai_family == AF_UNSPEC) {
    const sockaddr* a = out->ai_src_addr != nullptr ? out->ai_src_addr : out->ai_dst_addr;
    if (a != nullptr) out->ai_family = a->sa_family;
  }
  if (!ok) {
    rdma_freeaddrinfo(out);
    return fail(hints != nullptr && (hints->ai_src_len > sizeof(sockaddr_storage) ||
                                     hints->ai_dst_len > sizeof(sockaddr_storage))
                    ? EINVAL
                    : ENOMEM);
  }
  *res = out;
  return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                   ibv_qp_init_attr* qp_init_attr) {
  if (id == nullptr || res == nullptr) return fail(EINVAL);
  rdma_cm_id* cm = nullptr;
  if (rdma_create_id(nullptr, &cm, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) != 0)
    return -1;
  auto undo = [cm] {
    const int e = errno;
    rdma_destroy_id(cm);
    return fail(e);
  };
  if (res->ai_flags & RAI_PASSIVE) {
    if (rdma_bind_addr(cm, res->ai_src_addr) != 0) return undo();
    if (qp_init_attr != nullptr) {
      priv(cm)->qp_init = *qp_init_attr;
      priv(cm)->has_qp_init = true;
      cm->pd = pd;
    }
    *id = cm;
    return 0;
  }
  if (rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return undo();
  if (rdma_resolve_route(cm, 2000) != 0) return undo();
  if (qp_init_attr != nullptr && rdma_create_qp(cm, pd, qp_init_attr) != 0) return undo();
  *id = cm;
  return 0;
}

void rdma_destroy_ep(rdma_cm_id* id) {
  if (id == nullptr) return;
  if (id->qp != nullptr) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  if (listen == nullptr || id == nullptr) return fail(EINVAL);
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(listen->channel, &ev) != 0) return -1;
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      *id = ev->id;
      rdma_ack_cm_event(ev);
      return 0;
    }
    rdma_ack_cm_event(ev);
  }
}

// ---- Not supported -------------------------------------------------------------------------------

int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  if (id == nullptr || attr == nullptr || id->verbs == nullptr) return fail(EINVAL);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr) {
    attr->pd = id->pd;
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  ibv_srq* srq = ibv_create_srq_ex(id->verbs, attr);
  if (srq == nullptr) return -1;
  id->srq = srq;
  return 0;
}

int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (id == nullptr || attr == nullptr) return fail(EINVAL);
  ibv_srq_init_attr_ex a{};
  a.srq_context = attr->srq_context;
  a.attr = attr->attr;
  a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  a.srq_type = IBV_SRQT_BASIC;
  a.pd = pd != nullptr ? pd : id->pd;
  if (rdma_create_srq_ex(id, &a) != 0) return -1;
  attr->attr = a.attr;
  return 0;
}

void rdma_destroy_srq(rdma_cm_id* id) {
  if (id == nullptr || id->srq == nullptr) return;
  ibv_destroy_srq(id->srq);
  id->srq = nullptr;
}

// ---- Multicast: UD datagrams to a group (RoCEv2: an IPv4 or IPv6 multicast address) ---------

int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) {
  constexpr uint32_t kNeeded = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  if (id == nullptr || attr == nullptr || (attr->comp_mask & kNeeded) != kNeeded ||
      attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED || attr->addr == nullptr ||
      (attr->addr->sa_family != AF_INET && attr->addr->sa_family != AF_INET6))
    return fail(EINVAL);
  IdPriv* p = priv(id);
  McPriv m;
  std::memcpy(&m.addr, attr->addr, sa_len(attr->addr));
  m.mgid = gid_of(attr->addr);
  m.context = context;
  m.sendonly = attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (find_mc(p, attr->addr) != p->mcs.end()) return fail(EADDRINUSE);  // joined already
    p->mcs.push_back(m);
  }
  if (int r = uroce_cm_join_multicast(p->handle, attr->addr); r != 0) {
    std::lock_guard<std::mutex> lock(p->mu);
    if (auto it = find_mc(p, attr->addr); it != p->mcs.end()) p->mcs.erase(it);
    return fail(r);
  }
  return p->sync ? sync_wait(id, RDMA_CM_EVENT_MULTICAST_JOIN) : 0;
}

int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  rdma_cm_join_mc_attr_ex attr{};
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  attr.addr = addr;
  return rdma_join_multicast_ex(id, &attr, context);
}

int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  if (id == nullptr || addr == nullptr) return fail(EINVAL);
  IdPriv* p = priv(id);
  McPriv m;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    auto it = find_mc(p, addr);
    if (it == p->mcs.end()) return fail(EADDRNOTAVAIL);
    m = *it;
    p->mcs.erase(it);
  }
  // The last QP of the device to leave also leaves the group on the interface (IGMP / MLD).
  if (m.attached && id->qp != nullptr) ibv_detach_mcast(id->qp, &m.mgid, 0);
  return 0;
}


// ---- Not supported: ECE ------------------------------------------------------------------------

int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }
int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }

}  // extern "C"

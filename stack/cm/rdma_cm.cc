// The connection manager's rdma_cm half: ids and their addresses (bind, address and route
// resolution over the engine's neighbour table), listening, multicast joins, the attributes
// rdma_init_qp_attr gives, the events the owner hears, and poll(), which drives both halves.
// The CM protocol itself (REQ ... DREP, SIDR) is stack/cm/ib_cm.cc.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/cm.h"
#include "cm/cm_id.h"

namespace uroce::cm {

using wire::Gid;

bool Endpoint::wildcard() const {
  static const Gid zero{};
  return ip == zero || ip == wire::ipv4_mapped_gid({0, 0, 0, 0});
}

bool Endpoint::loopback() const {
  static const Gid v6_loopback = [] {
    Gid g{};
    g[15] = 1;
    return g;
  }();
  return ip == v6_loopback || (wire::is_ipv4_mapped(ip) && ip[12] == 127);
}

const char* state_name(State s) {
  switch (s) {
    case State::kIdle: return "idle";
    case State::kAddrQuery: return "resolving address";
    case State::kAddrResolved: return "address resolved";
    case State::kRouteResolved: return "route resolved";
    case State::kListen: return "listening";
    case State::kReqSent: return "REQ sent";
    case State::kRepReceived: return "REP received";
    case State::kReqReceived: return "REQ received";
    case State::kRepSent: return "REP sent";
    case State::kEstablished: return "established";
    case State::kDreqSent: return "DREQ sent";
    case State::kDreqReceived: return "DREQ received";
    case State::kTimewait: return "time wait";
    case State::kSidrSent: return "SIDR_REQ sent";
    case State::kClosed: return "closed";
  }
  return "?";
}

ConnectionManager::ConnectionManager(Engine& engine, Sink sink, NewHandle new_handle,
                                     uint64_t seed, const Timing& timing)
    : engine_(engine),
      sink_(std::move(sink)),
      new_handle_(std::move(new_handle)),
      timing_(timing),
      rng_(seed) {
  tid_hi_ = static_cast<uint32_t>(rng_());
  engine_.set_gsi_open(true);
}

ConnectionManager::~ConnectionManager() { engine_.set_gsi_open(false); }

ConnectionManager::Id* ConnectionManager::find(uint64_t handle) const {
  auto it = ids_.find(handle);
  return it == ids_.end() ? nullptr : it->second.get();
}

ConnectionManager::Id* ConnectionManager::listener_for(uint16_t ps, uint16_t port,
                                                       const Gid& dst) const {
  Id* wild = nullptr;
  Id* host = nullptr;
  // A listener bound to a loopback address (127.0.0.1, say) takes requests to any loopback
  // address of this device: on the udp port on loopback each process has a 127.0.0.x of its
  // own, and its programs listen on 127.0.0.1 (docs/udp.md). From this host only, as the
  // kernel's loopback listeners.
  const bool to_loopback = Endpoint{dst, port}.loopback() && engine_.gid_index(dst) >= 0;
  for (const auto& [h, id] : ids_) {
    if (id->state != State::kListen || id->ps != ps || id->src.port != port) continue;
    if (id->src.ip == dst) return id.get();
    if (to_loopback && id->src.loopback() && id->src.ipv6() == !wire::is_ipv4_mapped(dst))
      host = id.get();
    // A wildcard listener takes either family, as the kernel's (AF_INET6 without AFONLY).
    if (id->src.wildcard()) wild = id.get();
  }
  return host != nullptr ? host : wild;
}

void ConnectionManager::emit(const Id& id, int type, int status, const uint8_t* pdata,
                             uint8_t len, uint64_t listen_handle) {
  Event e;
  e.handle = id.handle;
  e.listen_handle = listen_handle;
  e.type = type;
  e.status = status;
  e.param = id.param;
  e.param.qp_num = id.remote_qpn;
  e.param.qkey = id.remote_qkey;
  e.src = id.src;
  e.dst = id.dst;
  if (id.type == IBV_QPT_UD && id.have_path) {
    e.ah.is_global = 1;
    e.ah.port_num = 1;
    std::memcpy(e.ah.grh.dgid.raw, id.dst.ip.data(), 16);
    e.ah.grh.sgid_index = id.path.sgid_index;
    e.ah.grh.hop_limit = 64;
    e.ah.grh.traffic_class = id.tos;
  }
  len = std::min<uint8_t>(len, static_cast<uint8_t>(e.pdata.size()));
  if (pdata != nullptr && len > 0) std::memcpy(e.pdata.data(), pdata, len);
  e.pdata_len = pdata != nullptr ? len : 0;
  sink(e);
}

void ConnectionManager::set_state(Id& id, State s) { id.state = s; }

void ConnectionManager::arm(Id& id, uint64_t at) {
  id.deadline = at;
  next_deadline_ = std::min(next_deadline_, at);
}

void ConnectionManager::recompute_deadline() {
  next_deadline_ = UINT64_MAX;
  for (const auto& [h, id] : ids_) next_deadline_ = std::min(next_deadline_, id->deadline);
}

int ConnectionManager::create(uint64_t handle, uint16_t ps, ibv_qp_type type) {
  if (find(handle) != nullptr) return EEXIST;
  auto id = std::make_unique<Id>();
  id->handle = handle;
  id->ps = ps;
  id->type = type;
  id->resend_timeout = timing_.cm_response_timeout;
  ids_.emplace(handle, std::move(id));
  return 0;
}

void ConnectionManager::sink(const Event& e) {
  ++sinking_;
  sink_(e);
  --sinking_;
}

void ConnectionManager::destroy_doomed() {
  std::vector<uint64_t> doomed;
  doomed.swap(doomed_);
  for (uint64_t h : doomed) destroy(h);
}

void ConnectionManager::destroy(uint64_t handle) {
  if (sinking_ > 0) {  // from inside the sink: the caller of emit() may still hold the id
    doomed_.push_back(handle);
    return;
  }
  Id* id = find(handle);
  if (id == nullptr) return;
  tell_peer_gone(*id);
  by_comm_id_.erase(id->local_comm_id);
  ids_.erase(handle);
  recompute_deadline();
}

size_t ConnectionManager::shutdown() {
  std::vector<uint64_t> handles;
  size_t told = 0;
  for (const auto& [h, id] : ids_) {
    handles.push_back(h);
    switch (id->state) {
      case State::kReqReceived: case State::kReqSent: case State::kRepReceived:
      case State::kRepSent: case State::kEstablished: case State::kDreqReceived:
        ++told;
        break;
      default:
        break;
    }
  }
  for (uint64_t h : handles) destroy(h);
  return told;
}

int ConnectionManager::bind(uint64_t handle, const Endpoint& src) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kIdle) return EINVAL;
  if (!src.wildcard() && !src.loopback() && engine_.gid_index(src.ip) < 0) return EADDRNOTAVAIL;
  id->src = src;
  id->bound = true;
  return 0;
}

int ConnectionManager::resolve_addr(uint64_t handle, const Endpoint& src, const Endpoint& dst,
                                    int timeout_ms) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kIdle && id->state != State::kAddrResolved) return EINVAL;
  if (dst.wildcard()) return EADDRNOTAVAIL;
  if (src.wildcard() || engine_.gid_index(src.ip) < 0) return EADDRNOTAVAIL;
  id->src = src;
  id->dst = dst;
  id->bound = true;
  id->have_path = false;
  // From a device on loopback to a loopback address it does not have: the rendezvous says
  // which process that is (poll()).
  id->asks_rendezvous = rendezvous_ && src.loopback() && dst.loopback() &&
                        src.ipv6() == dst.ipv6() && engine_.gid_index(dst.ip) < 0;
  wire::MacAddr mac;
  if (!id->asks_rendezvous) engine_.resolve(dst.ip, &mac);
  set_state(*id, State::kAddrQuery);
  arm(*id, engine_.now() + static_cast<uint64_t>(std::max(timeout_ms, 1)) * 1'000'000);
  next_deadline_ = engine_.now();  // look at the neighbour at the next poll
  return 0;
}

int ConnectionManager::resolve_route(uint64_t handle) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kAddrResolved) return EINVAL;
  // RoCE has no path record to ask for: the route is the neighbour the address resolved to.
  if (!path_for(*id)) {
    emit(*id, kRouteError, -EHOSTUNREACH);
    return 0;
  }
  set_state(*id, State::kRouteResolved);
  emit(*id, kRouteResolved, 0);
  return 0;
}

int ConnectionManager::join_multicast(uint64_t handle, const wire::Gid& group) {
  Id* id = find(handle);
  if (id == nullptr || id->type != IBV_QPT_UD || !wire::is_multicast_gid(group)) return EINVAL;
  if (!engine_.multicast()) return EOPNOTSUPP;  // a port without multicast (the udp port)
  if (id->state != State::kIdle && id->state != State::kAddrResolved &&
      id->state != State::kRouteResolved)
    return EINVAL;
  const int sgid = engine_.gid_index(id->src.ip);
  if (!id->bound || sgid < 0) return EINVAL;  // no local address on this device
  if (id->src.ipv6() != !wire::is_ipv4_mapped(group)) return EAFNOSUPPORT;
  Event e;
  e.handle = id->handle;
  e.type = kMulticastJoin;
  e.param.qp_num = wire::kMulticastQpn;
  e.param.qkey = kRdmaUdpQkey;
  e.src = id->src;
  e.dst = Endpoint{group, 0};
  e.ah.is_global = 1;
  e.ah.port_num = 1;
  std::memcpy(e.ah.grh.dgid.raw, group.data(), 16);
  e.ah.grh.sgid_index = static_cast<uint8_t>(sgid);
  e.ah.grh.hop_limit = 64;
  sink(e);
  return 0;
}

bool ConnectionManager::path_for(Id& id) {
  Path p;
  if (!engine_.path_between(id.src.ip, id.dst.ip, &p)) return false;
  p.traffic_class = id.tos;
  id.path = p;
  id.have_path = true;
  return true;
}

int ConnectionManager::listen(uint64_t handle, int backlog) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  const int room = backlog > 0 ? backlog : 1024;  // 0 or less: the default, as rdma_cm's
  if (id->state == State::kListen) {
    id->backlog = room;
    return 0;
  }
  if (id->state != State::kIdle || !id->bound) return EINVAL;
  id->backlog = room;
  set_state(*id, State::kListen);
  return 0;
}

int ConnectionManager::init_qp_attr(uint64_t handle, ibv_qp_attr* attr, int* mask) const {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  const ibv_qp_state want = attr->qp_state;
  *attr = {};
  attr->qp_state = want;
  switch (want) {
    case IBV_QPS_INIT:
      attr->pkey_index = 0;
      attr->port_num = 1;
      if (id->type == IBV_QPT_UD) {
        attr->qkey = kRdmaUdpQkey;
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
      } else {
        attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        if (id->param.responder_resources > 0)
          attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      if (id->type == IBV_QPT_UD) {
        *mask = IBV_QP_STATE;
        return 0;
      }
      if (!id->have_path || id->remote_qpn == 0) return EINVAL;
      attr->ah_attr.is_global = 1;
      attr->ah_attr.port_num = 1;
      std::memcpy(attr->ah_attr.grh.dgid.raw, id->dst.ip.data(), 16);
      attr->ah_attr.grh.sgid_index = id->path.sgid_index;
      attr->ah_attr.grh.hop_limit = 64;
      attr->ah_attr.grh.traffic_class = id->tos;
      attr->path_mtu = id->mtu;
      attr->dest_qp_num = id->remote_qpn;
      attr->rq_psn = id->local_psn;
      *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (id->type == IBV_QPT_RC) {
        attr->max_dest_rd_atomic = id->param.responder_resources;
        attr->min_rnr_timer = 0;  // 655.36 ms, as the kernel's CM gives (cm_init_qp_rtr_attr)
        *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      return 0;
    case IBV_QPS_RTS:
      attr->sq_psn = id->type == IBV_QPT_UD ? 0 : id->remote_psn;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (id->type == IBV_QPT_RC) {
        attr->timeout = id->ack_timeout;
        attr->retry_cnt = id->param.retry_count;
        attr->rnr_retry = id->param.rnr_retry_count;
        attr->max_rd_atomic = id->param.initiator_depth;
        *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      return 0;
    default:
      *mask = IBV_QP_STATE;
      return 0;
  }
}

void ConnectionManager::set_tos(uint64_t handle, uint8_t tos) {
  if (Id* id = find(handle)) id->tos = tos;
}

void ConnectionManager::set_ack_timeout(uint64_t handle, uint8_t t) {
  if (Id* id = find(handle)) id->ack_timeout = std::min<uint8_t>(t, 31);
}

State ConnectionManager::state(uint64_t handle) const {
  Id* id = find(handle);
  return id == nullptr ? State::kClosed : id->state;
}

int ConnectionManager::sgid_index(uint64_t handle) const {
  Id* id = find(handle);
  if (id == nullptr) return -1;
  return engine_.gid_index(id->src.ip);
}

bool ConnectionManager::addresses(uint64_t handle, Endpoint* src, Endpoint* dst) const {
  Id* id = find(handle);
  if (id == nullptr) return false;
  *src = id->src;
  *dst = id->dst;
  return true;
}

size_t ConnectionManager::poll() {
  size_t work = 0;
  destroy_doomed();  // given up on by a sink called outside poll()
  GsiMad m;
  while (engine_.pop_mad(&m)) {
    on_mad(m);
    ++work;
  }
  destroy_doomed();
  const uint64_t now = engine_.now();
  if (now < next_deadline_) return work;
  // Timers and resolutions.
  std::vector<uint64_t> due;
  for (const auto& [h, id] : ids_) {
    if (id->state == State::kAddrQuery && id->asks_rendezvous) {
      if (const auto ip = rendezvous_(id->ps, id->dst.port)) {
        id->asks_rendezvous = false;
        id->dst.ip = *ip;
        wire::MacAddr mac;
        engine_.resolve(*ip, &mac);
      } else if (id->deadline <= now) {
        // Nobody listens on that port on this host: as a connection refused.
        id->deadline = UINT64_MAX;
        id->asks_rendezvous = false;
        set_state(*id, State::kIdle);
        emit(*id, kAddrError, -ECONNREFUSED);
        ++work;
        continue;
      } else {
        continue;  // asked again at the next look (every millisecond, below)
      }
    }
    if (id->state == State::kAddrQuery) {
      wire::MacAddr mac;
      const NeighborState ns = engine_.neighbor_state(id->dst.ip, &mac);
      const bool self = engine_.gid_index(id->dst.ip) >= 0;
      if (ns == NeighborState::kReachable || self) {
        id->deadline = UINT64_MAX;
        set_state(*id, State::kAddrResolved);
        path_for(*id);
        emit(*id, kAddrResolved, 0);
        ++work;
        continue;
      }
      if (ns == NeighborState::kFailed && id->deadline != UINT64_MAX) {
        id->deadline = UINT64_MAX;
        set_state(*id, State::kIdle);
        emit(*id, kAddrError, -EHOSTUNREACH);
        ++work;
        continue;
      }
    }
    if (id->deadline <= now) due.push_back(h);
  }
  for (uint64_t h : due) {
    if (Id* id = find(h)) {
      id->deadline = UINT64_MAX;
      on_timeout(*id);
      ++work;
    }
  }
  destroy_doomed();
  recompute_deadline();
  // Resolutions under way are looked at again soon (the engine's ARP retries drive them).
  for (const auto& [h, id] : ids_)
    if (id->state == State::kAddrQuery) next_deadline_ = std::min(next_deadline_, now + 1'000'000);
  return work;
}

}  // namespace uroce::cm

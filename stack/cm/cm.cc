#include "cm/cm.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "wire/bth.h"
#include "wire/cm_mad.h"

namespace uroce::cm {

using wire::Gid;

namespace {
constexpr uint8_t kTransportRc = wire::kCmTransportRc, kTransportUc = wire::kCmTransportUc;
constexpr uint32_t kRdmaUdpQkey = 0x01234567;
constexpr uint8_t kDefaultAckTimeout = 14;  // ~67 ms: the QP's local ACK timeout
using wire::CmMsgResponse;
using wire::CmRejReason;

}  // namespace

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

struct ConnectionManager::Id {
  uint64_t handle = 0;
  uint16_t ps = 0;
  ibv_qp_type type = IBV_QPT_RC;
  State state = State::kIdle;
  Endpoint src, dst;
  bool bound = false;
  int backlog = 0;
  // Resolution and the path.
  Path path;
  bool have_path = false;
  uint64_t deadline = UINT64_MAX;  // a timer (resend, resolution, time wait)
  // The connection.
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint64_t tid = 0;            // of the exchange in progress
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // A REQ's or REP's starting PSN is the PSN its sender's QP expects to receive first (the
  // kernel's ib_cm: the active side sends from the REP's PSN, the passive from the REQ's).
  uint32_t local_psn = 0;      // ours: our QP's first receive PSN, the peer's first send PSN
  uint32_t remote_psn = 0;     // the peer's: its first receive PSN, our first send PSN
  ibv_mtu mtu = IBV_MTU_1024;
  ConnParam param;             // ours (after negotiation)
  uint8_t remote_response_timeout = 20;
  uint8_t ack_timeout = kDefaultAckTimeout;
  uint8_t tos = 0;
  uint8_t retries_left = 0;
  uint8_t resend_timeout = 18;
  uint64_t listen_handle = 0;  // passive: the listener it came from
  std::array<uint8_t, wire::kCmDataLen> last{};  // the message to resend
  uint16_t last_attr = 0;
  uint64_t last_tid = 0;
  bool has_last = false;
};

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

ConnectionManager::Id* ConnectionManager::by_local_comm_id(uint32_t c) const {
  auto it = by_comm_id_.find(c);
  return it == by_comm_id_.end() ? nullptr : it->second;
}

ConnectionManager::Id* ConnectionManager::by_remote(uint32_t remote, const Gid& peer) const {
  for (const auto& [h, id] : ids_)
    if (id->remote_comm_id == remote && id->dst.ip == peer && id->state != State::kListen &&
        id->state != State::kIdle)
      return id.get();
  return nullptr;
}

ConnectionManager::Id* ConnectionManager::listener_for(uint16_t ps, uint16_t port,
                                                       const Gid& dst) const {
  Id* wild = nullptr;
  for (const auto& [h, id] : ids_) {
    if (id->state != State::kListen || id->ps != ps || id->src.port != port) continue;
    if (id->src.ip == dst) return id.get();
    // A wildcard listener takes either family, as the kernel's (AF_INET6 without AFONLY).
    if (id->src.wildcard()) wild = id.get();
  }
  return wild;
}

uint32_t ConnectionManager::new_comm_id() {
  for (;;) {
    const auto c = static_cast<uint32_t>(rng_());
    if (c != 0 && by_comm_id_.find(c) == by_comm_id_.end()) return c;
  }
}

uint64_t ConnectionManager::new_tid() {
  return static_cast<uint64_t>(tid_hi_) << 32 | ++tid_lo_;
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
  sink_(e);
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

// ---- Verbs ------------------------------------------------------------------------------------

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

void ConnectionManager::destroy(uint64_t handle) {
  Id* id = find(handle);
  if (id == nullptr) return;
  switch (id->state) {
    case State::kReqReceived:
      // A request the application never answered: the peer hears a consumer reject.
      reject_for(handle, nullptr, 0, CmRejReason::kConsumerReject);
      break;
    case State::kReqSent:
    case State::kRepReceived:
    case State::kRepSent: {
      std::array<uint8_t, wire::kCmDataLen> d{};
      wire::CmRej rej;
      rej.local_comm_id = id->local_comm_id;
      rej.remote_comm_id = id->remote_comm_id;
      rej.msg_rejected = id->state == State::kRepSent ? CmMsgResponse::kOther : CmMsgResponse::kRep;
      if (id->state == State::kReqSent) rej.msg_rejected = CmMsgResponse::kOther;
      rej.reason = CmRejReason::kTimeout;
      rej.emit(d);
      if (path_for(*id)) send(*id, wire::cm_attr::kRej, d.data(), id->tid);
      ++stats_.rejects_sent;
      break;
    }
    case State::kEstablished:
      disconnect(handle);
      break;
    case State::kDreqReceived:
      disconnect(handle);  // the DREP
      break;
    default:
      break;
  }
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
  wire::MacAddr mac;
  engine_.resolve(dst.ip, &mac);
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
  sink_(e);
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

int ConnectionManager::connect(uint64_t handle, const ConnParam& p, const uint8_t* pdata,
                               uint8_t len) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kRouteResolved) return EINVAL;
  if (!id->have_path && !path_for(*id)) return EHOSTUNREACH;
  id->param = p;
  // The counts are 3-bit fields: larger values are taken as 7, as the kernel's rdma_cm caps
  // them (cma_connect_ib), so the QP is moved to RTS with what the REQ carried.
  id->param.retry_count = std::min<uint8_t>(p.retry_count, 7);
  id->param.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  id->local_comm_id = new_comm_id();
  by_comm_id_[id->local_comm_id] = id;
  id->tid = new_tid();
  std::array<uint8_t, wire::kCmDataLen> d{};
  uint16_t attr = 0;
  const wire::CmaIpHeader ip = wire::CmaIpHeader::from_gids(id->src.port, id->src.ip, id->dst.ip);
  if (id->type == IBV_QPT_UD) {
    wire::CmSidrReq r;
    r.request_id = id->local_comm_id;
    r.pkey = 0xFFFF;
    r.service_id = wire::ip_service_id(id->ps, id->dst.port);
    if (len > r.private_data.size() - wire::CmaIpHeader::kLen) return EINVAL;
    ip.emit(r.private_data);
    if (len > 0) std::memcpy(r.private_data.data() + wire::CmaIpHeader::kLen, pdata, len);
    r.emit(d);
    attr = wire::cm_attr::kSidrReq;
    set_state(*id, State::kSidrSent);
  } else {
    wire::CmReq r;
    r.local_comm_id = id->local_comm_id;
    r.service_id = wire::ip_service_id(id->ps, id->dst.port);
    r.local_ca_guid = engine_.node_guid();
    r.local_qpn = p.qp_num;
    r.responder_resources = p.responder_resources;
    r.initiator_depth = p.initiator_depth;
    r.remote_cm_response_timeout = timing_.cm_response_timeout;
    // The time both sides give a MAD of this connection for an answer (a DREQ too).
    id->remote_response_timeout = r.remote_cm_response_timeout;
    r.transport_service_type = id->type == IBV_QPT_UC ? kTransportUc : kTransportRc;
    r.end_to_end_flow_control = p.flow_control != 0;
    id->local_psn = static_cast<uint32_t>(rng_()) & 0xFFFFFF;
    r.starting_psn = id->local_psn;
    r.local_cm_response_timeout = timing_.cm_response_timeout;
    r.retry_count = id->param.retry_count;
    r.pkey = 0xFFFF;
    ibv_port_attr pa{};
    engine_.query_port(1, &pa);
    id->mtu = pa.active_mtu;
    r.path_mtu = static_cast<uint8_t>(id->mtu);
    r.rnr_retry_count = id->param.rnr_retry_count;
    r.max_cm_retries = timing_.max_cm_retries;
    r.srq = p.srq != 0;
    // RoCE has no LIDs: the permissive LID, as the kernel's CM sends.
    r.primary.local_lid = 0xFFFF;
    r.primary.remote_lid = 0xFFFF;
    r.primary.local_gid = id->src.ip;
    r.primary.remote_gid = id->dst.ip;
    r.primary.traffic_class = id->tos;
    r.primary.hop_limit = 64;
    // 0 = the port's current rate: no static rate limit on the peer's QP (the kernel's rdma_cm
    // sends 0 too unless the netdev reports 10 Gb/s or more).
    r.primary.packet_rate = 0;
    r.primary.local_ack_timeout = id->ack_timeout;
    if (len > r.private_data.size() - wire::CmaIpHeader::kLen) return EINVAL;
    ip.emit(r.private_data);
    if (len > 0) std::memcpy(r.private_data.data() + wire::CmaIpHeader::kLen, pdata, len);
    r.emit(d);
    attr = wire::cm_attr::kReq;
    set_state(*id, State::kReqSent);
  }
  send_kept(*id, attr, d);
  resend_until_answered(*id, timing_.cm_response_timeout);
  return 0;
}

int ConnectionManager::accept(uint64_t handle, const ConnParam& p, const uint8_t* pdata,
                              uint8_t len) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kReqReceived) return EINVAL;
  std::array<uint8_t, wire::kCmDataLen> d{};
  if (id->type == IBV_QPT_UD) {
    wire::CmSidrRep r;
    r.request_id = id->remote_comm_id;
    r.status = wire::SidrStatus::kValid;
    r.qpn = p.qp_num;
    r.service_id = wire::ip_service_id(id->ps, id->src.port);
    r.qkey = p.qkey != 0 ? p.qkey : kRdmaUdpQkey;
    if (len > r.private_data.size()) return EINVAL;
    if (len > 0) std::memcpy(r.private_data.data(), pdata, len);
    r.emit(d);
    send(*id, wire::cm_attr::kSidrRep, d.data(), id->tid);
    // SIDR has no further exchange: the id is done.
    set_state(*id, State::kClosed);
    return 0;
  }
  id->param.responder_resources = p.responder_resources;
  id->param.initiator_depth = p.initiator_depth;
  id->param.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);  // as for connect
  id->param.srq = p.srq;
  id->param.qp_num = p.qp_num;
  wire::CmRep r;
  r.local_comm_id = id->local_comm_id;
  r.remote_comm_id = id->remote_comm_id;
  r.local_qpn = p.qp_num;
  r.starting_psn = id->local_psn;
  r.responder_resources = p.responder_resources;
  r.initiator_depth = p.initiator_depth;
  r.target_ack_delay = 15;
  r.failover_accepted = 3;  // not supported
  r.end_to_end_flow_control = p.flow_control != 0;
  r.rnr_retry_count = id->param.rnr_retry_count;
  r.srq = p.srq != 0;
  r.local_ca_guid = engine_.node_guid();
  if (len > r.private_data.size()) return EINVAL;
  if (len > 0) std::memcpy(r.private_data.data(), pdata, len);
  r.emit(d);
  send_kept(*id, wire::cm_attr::kRep, d);
  set_state(*id, State::kRepSent);
  resend_until_answered(*id, id->remote_response_timeout);
  return 0;
}

int ConnectionManager::reject(uint64_t handle, const uint8_t* pdata, uint8_t len,
                              uint16_t reason) {
  return reject_for(handle, pdata, len, static_cast<CmRejReason>(reason));
}

int ConnectionManager::reject_for(uint64_t handle, const uint8_t* pdata, uint8_t len,
                                  wire::CmRejReason reason) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kReqReceived) return EINVAL;
  std::array<uint8_t, wire::kCmDataLen> d{};
  if (id->type == IBV_QPT_UD) {
    wire::CmSidrRep r;
    r.request_id = id->remote_comm_id;
    r.status = wire::SidrStatus::kRejected;
    r.service_id = wire::ip_service_id(id->ps, id->src.port);
    if (len > r.private_data.size()) return EINVAL;
    if (len > 0) std::memcpy(r.private_data.data(), pdata, len);
    r.emit(d);
    send(*id, wire::cm_attr::kSidrRep, d.data(), id->tid);
  } else {
    wire::CmRej r;
    r.local_comm_id = id->local_comm_id;
    r.remote_comm_id = id->remote_comm_id;
    r.msg_rejected = CmMsgResponse::kReq;
    r.reason = reason;
    if (len > r.private_data.size()) return EINVAL;
    if (len > 0) std::memcpy(r.private_data.data(), pdata, len);
    r.emit(d);
    send(*id, wire::cm_attr::kRej, d.data(), id->tid);
    ++stats_.rejects_sent;
  }
  set_state(*id, State::kClosed);
  return 0;
}

int ConnectionManager::establish(uint64_t handle) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kRepReceived) return EINVAL;
  std::array<uint8_t, wire::kCmDataLen> d{};
  wire::CmRtu r;
  r.local_comm_id = id->local_comm_id;
  r.remote_comm_id = id->remote_comm_id;
  r.emit(d);
  send_kept(*id, wire::cm_attr::kRtu, d);  // sent again if the REP comes again (RTU lost)
  set_state(*id, State::kEstablished);
  return 0;
}

int ConnectionManager::notify_established(uint64_t handle) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kRepSent) return 0;
  // The RTU was lost but the peer's traffic shows it got our REP.
  set_state(*id, State::kEstablished);
  id->deadline = UINT64_MAX;
  emit(*id, kEstablished, 0);
  return 0;
}

int ConnectionManager::disconnect(uint64_t handle) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  std::array<uint8_t, wire::kCmDataLen> d{};
  switch (id->state) {
    case State::kEstablished:
    case State::kRepSent:
    case State::kRepReceived: {
      wire::CmDreq r;
      r.local_comm_id = id->local_comm_id;
      r.remote_comm_id = id->remote_comm_id;
      r.remote_qpn_eecn = id->remote_qpn;
      r.emit(d);
      id->tid = new_tid();
      send_kept(*id, wire::cm_attr::kDreq, d);
      set_state(*id, State::kDreqSent);
      resend_until_answered(*id, id->remote_response_timeout);
      return 0;
    }
    case State::kDreqReceived: {
      wire::CmDrep r;
      r.local_comm_id = id->local_comm_id;
      r.remote_comm_id = id->remote_comm_id;
      r.emit(d);
      send_kept(*id, wire::cm_attr::kDrep, d);
      enter_timewait(*id);
      return 0;
    }
    case State::kDreqSent:
    case State::kTimewait:
      return 0;  // under way, or done
    default:
      return EINVAL;
  }
}

void ConnectionManager::send_kept(Id& id, uint16_t attr,
                                  const std::array<uint8_t, wire::kCmDataLen>& d) {
  id.last = d;
  id.last_attr = attr;
  id.last_tid = id.tid;
  id.has_last = true;
  send(id, attr, d.data(), id.tid);
}

void ConnectionManager::resend_until_answered(Id& id, uint8_t timeout) {
  id.retries_left = timing_.max_cm_retries;
  id.resend_timeout = timeout;
  arm(id, engine_.now() + wire::cm_timeout_ns(timeout));
}

void ConnectionManager::enter_timewait(Id& id) {
  set_state(id, State::kTimewait);
  arm(id, engine_.now() + timing_.timewait_ns);
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
        attr->min_rnr_timer = 12;  // 0.64 ms
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

// ---- Sending ------------------------------------------------------------------------------------

bool ConnectionManager::send(Id& id, uint16_t attr, const uint8_t* cm_data, uint64_t tid) {
  if (!id.have_path && !path_for(id)) return false;
  return send_to(id.path, attr, cm_data, tid);
}

bool ConnectionManager::send_to(const Path& path, uint16_t attr, const uint8_t* cm_data,
                                uint64_t tid) {
  std::array<uint8_t, wire::kMadLen> mad{};
  wire::MadHeader h;
  h.tid = tid;
  h.attr_id = attr;
  h.emit(mad);
  std::memcpy(mad.data() + wire::MadHeader::kLen, cm_data, wire::kCmDataLen);
  if (engine_.send_mad(path, 1, Engine::kGsiQkey, 0xFFFF, mad.data(), mad.size()) != 0)
    return false;
  ++stats_.mads_tx;
  return true;
}

void ConnectionManager::reply_rej(const GsiMad& m, uint64_t tid, uint32_t remote_comm_id,
                                  CmMsgResponse msg, CmRejReason reason) {
  Path p;
  if (!engine_.path_between(m.dgid, m.sgid, &p)) return;
  std::array<uint8_t, wire::kCmDataLen> d{};
  wire::CmRej r;
  r.remote_comm_id = remote_comm_id;
  r.msg_rejected = msg;
  r.reason = reason;
  r.emit(d);
  send_to(p, wire::cm_attr::kRej, d.data(), tid);
  ++stats_.rejects_sent;
}

// ---- Receiving ----------------------------------------------------------------------------------

size_t ConnectionManager::poll() {
  size_t work = 0;
  GsiMad m;
  while (engine_.pop_mad(&m)) {
    on_mad(m);
    ++work;
  }
  const uint64_t now = engine_.now();
  if (now < next_deadline_) return work;
  // Timers and resolutions.
  std::vector<uint64_t> due;
  for (const auto& [h, id] : ids_) {
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
  recompute_deadline();
  // Resolutions under way are looked at again soon (the engine's ARP retries drive them).
  for (const auto& [h, id] : ids_)
    if (id->state == State::kAddrQuery) next_deadline_ = std::min(next_deadline_, now + 1'000'000);
  return work;
}

void ConnectionManager::on_timeout(Id& id) {
  switch (id.state) {
    case State::kAddrQuery:
      set_state(id, State::kIdle);
      emit(id, kAddrError, -ETIMEDOUT);
      return;
    case State::kReqSent:
    case State::kRepSent:
    case State::kDreqSent:
    case State::kSidrSent:
      if (id.retries_left > 0 && id.has_last) {
        --id.retries_left;
        ++stats_.resent;
        send(id, id.last_attr, id.last.data(), id.last_tid);
        arm(id, engine_.now() + wire::cm_timeout_ns(id.resend_timeout));
        return;
      }
      ++stats_.timeouts;
      if (id.state == State::kDreqSent) {
        enter_timewait(id);
        emit(id, kDisconnected, 0);
      } else if (id.state == State::kRepSent) {
        // No RTU and no traffic: the connection failed (the kernel reports it the same way).
        set_state(id, State::kClosed);
        emit(id, kConnectError, -ETIMEDOUT);
      } else {
        set_state(id, State::kClosed);
        emit(id, kUnreachable, -ETIMEDOUT);
      }
      return;
    case State::kTimewait:
      set_state(id, State::kClosed);
      by_comm_id_.erase(id.local_comm_id);
      return;
    default:
      return;
  }
}

void ConnectionManager::on_mad(const GsiMad& m) {
  ++stats_.mads_rx;
  wire::MadHeader h;
  if (m.len < wire::kMadLen || wire::MadHeader::parse({m.data.data(), m.len}, h) !=
                                   wire::ParseError::kOk ||
      h.base_version != 1 || h.mgmt_class != wire::kMgmtClassCm || h.class_version != 2) {
    ++stats_.drop_malformed;
    return;
  }
  if (engine_.gid_index(m.dgid) < 0) {
    ++stats_.drop_malformed;
    return;
  }
  const uint8_t* d = m.data.data() + wire::MadHeader::kLen;
  switch (h.attr_id) {
    case wire::cm_attr::kReq: on_req(m, h.tid, d); break;
    case wire::cm_attr::kRep: on_rep(m, h.tid, d); break;
    case wire::cm_attr::kRtu: on_rtu(m, d); break;
    case wire::cm_attr::kRej: on_rej(m, d); break;
    case wire::cm_attr::kMra: on_mra(m, d); break;
    case wire::cm_attr::kDreq: on_dreq(m, h.tid, d); break;
    case wire::cm_attr::kDrep: on_drep(m, d); break;
    case wire::cm_attr::kSidrReq: on_sidr_req(m, h.tid, d); break;
    case wire::cm_attr::kSidrRep: on_sidr_rep(m, d); break;
    default: ++stats_.drop_malformed; break;
  }
}

void ConnectionManager::on_req(const GsiMad& m, uint64_t tid, const uint8_t* d) {
  wire::CmReq r;
  if (!parse_cm(d, &r)) return;
  // A REQ we have seen: answer again with what we answered (our REP was lost), else ignore.
  if (Id* dup = by_remote(r.local_comm_id, m.sgid)) {
    ++stats_.drop_duplicate;
    if (dup->state == State::kRepSent && dup->has_last)
      send(*dup, dup->last_attr, dup->last.data(), dup->last_tid);
    return;
  }
  const auto sid = wire::decode_ip_service_id(r.service_id);
  if (!sid) {
    ++stats_.drop_not_ours;
    return;
  }
  const uint16_t ps = sid->ps, port = sid->port;
  wire::CmaIpHeader ip;
  const bool have_ip =
      wire::CmaIpHeader::parse(r.private_data, ip) == wire::ParseError::kOk && ip.valid();
  Id* l = listener_for(ps, port, m.dgid);
  if (l == nullptr) {
    // Not ours. Another process on this interface may listen there: the owner of the
    // listener set decides (the verbs provider tells us through unowned_).
    ++stats_.drop_not_ours;
    if (unowned_ && unowned_(ps, port, m.dgid))
      reply_rej(m, tid, r.local_comm_id, CmMsgResponse::kReq, CmRejReason::kInvalidServiceId);
    return;
  }
  if (backlog_full(*l)) return;
  if (r.transport_service_type != (l->type == IBV_QPT_UC ? kTransportUc : kTransportRc)) {
    reply_rej(m, tid, r.local_comm_id, CmMsgResponse::kReq, CmRejReason::kInvalidTransportType);
    return;
  }
  const uint64_t h = new_handle_();
  if (h == 0) return;
  auto id = std::make_unique<Id>();
  Id& n = *id;
  n.handle = h;
  n.ps = ps;
  n.type = l->type;
  n.listen_handle = l->handle;
  n.src = {m.dgid, port};
  n.dst = {m.sgid, have_ip ? ip.src_port : static_cast<uint16_t>(0)};
  n.bound = true;
  n.tid = tid;
  n.local_comm_id = new_comm_id();
  n.remote_comm_id = r.local_comm_id;
  n.remote_qpn = r.local_qpn;
  n.remote_psn = r.starting_psn;
  // Ours now: the application moves its QP to RTS (init_qp_attr) before it accepts.
  n.local_psn = static_cast<uint32_t>(rng_()) & 0xFFFFFF;
  // How long the active side may take to answer us (our REP): its local response timeout.
  n.remote_response_timeout = r.local_cm_response_timeout;
  n.ack_timeout = l->ack_timeout;
  n.tos = l->tos;
  ibv_port_attr pa{};
  engine_.query_port(1, &pa);
  n.mtu = static_cast<ibv_mtu>(std::clamp<int>(r.path_mtu, IBV_MTU_256, pa.active_mtu));
  // From our side: the peer's initiator depth is what we must answer, and the reverse.
  n.param.responder_resources = r.initiator_depth;
  n.param.initiator_depth = r.responder_resources;
  n.param.flow_control = r.end_to_end_flow_control;
  n.param.retry_count = r.retry_count;
  n.param.rnr_retry_count = r.rnr_retry_count;
  n.param.srq = r.srq;
  engine_.learn_peer(m.sgid, m.smac);
  if (!path_for(n)) return;
  n.path.traffic_class = n.tos;
  set_state(n, State::kReqReceived);
  by_comm_id_[n.local_comm_id] = &n;
  ids_.emplace(h, std::move(id));
  const size_t hdr = have_ip ? wire::CmaIpHeader::kLen : 0;
  emit(n, kConnectRequest, 0, r.private_data.data() + hdr,
       static_cast<uint8_t>(r.private_data.size() - hdr), l->handle);
}

ConnectionManager::Id* ConnectionManager::matched(const GsiMad& m, uint32_t ours,
                                                   std::optional<uint32_t> theirs) {
  Id* id = by_local_comm_id(ours);
  if (id == nullptr || id->dst.ip != m.sgid || (theirs && id->remote_comm_id != *theirs)) {
    ++stats_.drop_unmatched;
    return nullptr;
  }
  return id;
}

bool ConnectionManager::backlog_full(const Id& listener) {
  // A full backlog drops the request without an answer, so that the peer's resend may find
  // room (the kernel's ib_cm does the same when rdma_cm cannot queue the event).
  size_t waiting = 0;
  for (const auto& [h, id] : ids_)
    waiting += id->listen_handle == listener.handle && id->state == State::kReqReceived;
  if (waiting < static_cast<size_t>(listener.backlog)) return false;
  ++stats_.drop_backlog;
  return true;
}

void ConnectionManager::on_rep(const GsiMad& m, uint64_t tid, const uint8_t* d) {
  (void)tid;
  wire::CmRep r;
  if (!parse_cm(d, &r)) return;
  Id* id = matched(m, r.remote_comm_id);
  if (id == nullptr) return;
  if (id->state == State::kEstablished && id->remote_comm_id == r.local_comm_id) {
    // Our RTU was lost: send it again.
    ++stats_.drop_duplicate;
    if (id->has_last && id->last_attr == wire::cm_attr::kRtu)
      send(*id, id->last_attr, id->last.data(), id->last_tid);
    return;
  }
  if (id->state != State::kReqSent) {
    ++stats_.drop_duplicate;
    return;
  }
  id->deadline = UINT64_MAX;
  id->remote_comm_id = r.local_comm_id;
  id->remote_qpn = r.local_qpn;
  id->remote_psn = r.starting_psn;
  // Ours from the peer's answer: it serves as many READs as its responder resources.
  id->param.initiator_depth = std::min(id->param.initiator_depth, r.responder_resources);
  id->param.responder_resources = std::min(id->param.responder_resources, r.initiator_depth);
  id->param.rnr_retry_count = r.rnr_retry_count;
  id->param.srq = r.srq;
  set_state(*id, State::kRepReceived);
  emit(*id, kConnectResponse, 0, r.private_data.data(),
       static_cast<uint8_t>(std::min<size_t>(r.private_data.size(), 224)));
}

void ConnectionManager::on_rtu(const GsiMad& m, const uint8_t* d) {
  wire::CmRtu r;
  if (!parse_cm(d, &r)) return;
  Id* id = matched(m, r.remote_comm_id, r.local_comm_id);
  if (id == nullptr) return;
  if (id->state != State::kRepSent) {
    ++stats_.drop_duplicate;
    return;
  }
  id->deadline = UINT64_MAX;
  set_state(*id, State::kEstablished);
  emit(*id, kEstablished, 0, r.private_data.data(),
       static_cast<uint8_t>(r.private_data.size()));
}

void ConnectionManager::on_rej(const GsiMad& m, const uint8_t* d) {
  wire::CmRej r;
  if (!parse_cm(d, &r)) return;
  Id* id = matched(m, r.remote_comm_id);
  if (id == nullptr) return;
  // A REJ for our REQ carries no comm ID of the peer's yet; later ones must match.
  if (id->state != State::kReqSent && id->remote_comm_id != r.local_comm_id) {
    ++stats_.drop_unmatched;
    return;
  }
  ++stats_.rejects_rcvd;
  switch (id->state) {
    case State::kReqSent:
    case State::kRepReceived:
    case State::kRepSent:
      id->deadline = UINT64_MAX;
      set_state(*id, State::kClosed);
      // A timeout reject is reported as unreachable, as rdma_cm does.
      emit(*id, r.reason == CmRejReason::kTimeout ? kUnreachable : kRejected,
           static_cast<int>(r.reason),
           r.private_data.data(), static_cast<uint8_t>(r.private_data.size()));
      return;
    case State::kEstablished:
    case State::kDreqSent:
      id->deadline = UINT64_MAX;
      enter_timewait(*id);
      emit(*id, kDisconnected, 0);
      return;
    default:
      ++stats_.drop_duplicate;
      return;
  }
}

void ConnectionManager::on_mra(const GsiMad& m, const uint8_t* d) {
  wire::CmMra r;
  if (!parse_cm(d, &r)) return;
  Id* id = matched(m, r.remote_comm_id);
  if (id == nullptr) return;
  // The peer needs longer: wait its service timeout (plus ours) before sending again.
  if (id->state == State::kReqSent || id->state == State::kRepSent) {
    id->resend_timeout = std::max(id->resend_timeout, r.service_timeout);
    arm(*id, engine_.now() + wire::cm_timeout_ns(id->resend_timeout) +
                 wire::cm_timeout_ns(r.service_timeout));
  }
}

void ConnectionManager::on_dreq(const GsiMad& m, uint64_t tid, const uint8_t* d) {
  wire::CmDreq r;
  if (!parse_cm(d, &r)) return;
  Id* id = matched(m, r.remote_comm_id, r.local_comm_id);
  if (id == nullptr) return;
  id->tid = tid;
  switch (id->state) {
    case State::kRepSent:
    case State::kEstablished:
      id->deadline = UINT64_MAX;
      set_state(*id, State::kDreqReceived);
      emit(*id, kDisconnected, 0);
      return;
    case State::kDreqSent:
      // Both sides disconnect at once: answer, and we are done.
      id->deadline = UINT64_MAX;
      set_state(*id, State::kDreqReceived);
      disconnect(id->handle);  // DREP, time wait
      emit(*id, kDisconnected, 0);
      return;
    case State::kTimewait: {
      // Our DREP was lost: send it again.
      ++stats_.drop_duplicate;
      std::array<uint8_t, wire::kCmDataLen> out{};
      wire::CmDrep rep;
      rep.local_comm_id = id->local_comm_id;
      rep.remote_comm_id = id->remote_comm_id;
      rep.emit(out);
      send(*id, wire::cm_attr::kDrep, out.data(), tid);
      return;
    }
    default:
      ++stats_.drop_duplicate;
      return;
  }
}

void ConnectionManager::on_drep(const GsiMad& m, const uint8_t* d) {
  wire::CmDrep r;
  if (!parse_cm(d, &r)) return;
  Id* id = matched(m, r.remote_comm_id, r.local_comm_id);
  if (id == nullptr) return;
  if (id->state != State::kDreqSent) {
    ++stats_.drop_duplicate;
    return;
  }
  id->deadline = UINT64_MAX;
  enter_timewait(*id);
  emit(*id, kDisconnected, 0);
}

void ConnectionManager::on_sidr_req(const GsiMad& m, uint64_t tid, const uint8_t* d) {
  wire::CmSidrReq r;
  if (!parse_cm(d, &r)) return;
  const auto sid = wire::decode_ip_service_id(r.service_id);
  if (!sid) {
    ++stats_.drop_not_ours;
    return;
  }
  const uint16_t ps = sid->ps, port = sid->port;
  Id* l = listener_for(ps, port, m.dgid);
  if (l == nullptr || l->type != IBV_QPT_UD) {
    ++stats_.drop_not_ours;
    if (unowned_ && unowned_(ps, port, m.dgid)) {
      Path p;
      if (!engine_.path_between(m.dgid, m.sgid, &p)) return;
      std::array<uint8_t, wire::kCmDataLen> out{};
      wire::CmSidrRep rep;
      rep.request_id = r.request_id;
      rep.status = wire::SidrStatus::kServiceIdNotSupported;
      rep.service_id = r.service_id;
      rep.emit(out);
      send_to(p, wire::cm_attr::kSidrRep, out.data(), tid);
    }
    return;
  }
  if (by_remote(r.request_id, m.sgid) != nullptr) {
    ++stats_.drop_duplicate;
    return;
  }
  if (backlog_full(*l)) return;
  wire::CmaIpHeader ip;
  const bool have_ip =
      wire::CmaIpHeader::parse(r.private_data, ip) == wire::ParseError::kOk && ip.valid();
  const uint64_t h = new_handle_();
  if (h == 0) return;
  auto id = std::make_unique<Id>();
  Id& n = *id;
  n.handle = h;
  n.ps = ps;
  n.type = IBV_QPT_UD;
  n.listen_handle = l->handle;
  n.src = {m.dgid, port};
  n.dst = {m.sgid, have_ip ? ip.src_port : static_cast<uint16_t>(0)};
  n.bound = true;
  n.tid = tid;
  n.remote_comm_id = r.request_id;
  n.remote_qpn = 0;  // not carried: the server learns it from the client's first datagram
  engine_.learn_peer(m.sgid, m.smac);
  if (!path_for(n)) return;
  set_state(n, State::kReqReceived);
  ids_.emplace(h, std::move(id));
  const size_t hdr = have_ip ? wire::CmaIpHeader::kLen : 0;
  emit(n, kConnectRequest, 0, r.private_data.data() + hdr,
       static_cast<uint8_t>(r.private_data.size() - hdr), l->handle);
}

void ConnectionManager::on_sidr_rep(const GsiMad& m, const uint8_t* d) {
  wire::CmSidrRep r;
  if (!parse_cm(d, &r)) return;
  Id* id = by_local_comm_id(r.request_id);
  if (id == nullptr || id->dst.ip != m.sgid || id->state != State::kSidrSent) {
    ++stats_.drop_unmatched;
    return;
  }
  id->deadline = UINT64_MAX;
  set_state(*id, State::kClosed);
  if (r.status != wire::SidrStatus::kValid) {
    emit(*id, kUnreachable, static_cast<int>(r.status));
    return;
  }
  id->remote_qpn = r.qpn;
  id->remote_qkey = r.qkey;
  emit(*id, kEstablished, 0, r.private_data.data(),
       static_cast<uint8_t>(r.private_data.size()));
}

}  // namespace uroce::cm

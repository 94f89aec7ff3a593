// The connection manager's ib_cm half: the CM protocol of IBA chapter 12 in MADs on QP1 —
// REQ, REP, RTU, REJ, MRA, DREQ, DREP for RC and UC, SIDR_REQ / SIDR_REP for UD — with
// rdma_cm's IP service IDs and private-data header: comm IDs and TIDs, the kept message and
// its resends, time wait, and every message received. The ids themselves, their addresses
// and the driving loop are stack/cm/rdma_cm.cc.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/cm.h"
#include "cm/cm_id.h"
#include "wire/bth.h"
#include "wire/cm_mad.h"

namespace uroce::cm {

using wire::CmMsgResponse;
using wire::CmRejReason;
using wire::Gid;

namespace {
constexpr uint8_t kTransportRc = wire::kCmTransportRc, kTransportUc = wire::kCmTransportUc;
}  // namespace

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

uint32_t ConnectionManager::new_comm_id() {
  for (;;) {
    const auto c = static_cast<uint32_t>(rng_());
    if (c != 0 && by_comm_id_.find(c) == by_comm_id_.end()) return c;
  }
}

uint64_t ConnectionManager::new_tid() {
  return static_cast<uint64_t>(tid_hi_) << 32 | ++tid_lo_;
}

int ConnectionManager::connect(uint64_t handle, const ConnParam& p, const uint8_t* pdata,
                               uint8_t len) {
  Id* id = find(handle);
  if (id == nullptr) return EINVAL;
  if (id->state != State::kRouteResolved) return EINVAL;
  if (!id->have_path && !path_for(*id)) return EHOSTUNREACH;
  // Checked before anything changes: a refused connect leaves the id as it was (no comm ID
  // registered that destroy() would not know of).
  const size_t room =
      (id->type == IBV_QPT_UD ? wire::CmSidrReq::kPrivateLen : wire::CmReq::kPrivateLen) -
      wire::CmaIpHeader::kLen;
  if (len > room) return EINVAL;
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
  if (len > wire::CmRep::kPrivateLen) return EINVAL;
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

void ConnectionManager::tell_peer_gone(Id& id) {
  switch (id.state) {
    case State::kReqReceived:
      // A request the application never answered: the peer hears a consumer reject.
      reject_for(id.handle, nullptr, 0, CmRejReason::kConsumerReject);
      break;
    case State::kReqSent:
    case State::kRepReceived:
    case State::kRepSent: {
      std::array<uint8_t, wire::kCmDataLen> d{};
      wire::CmRej rej;
      rej.local_comm_id = id.local_comm_id;
      rej.remote_comm_id = id.remote_comm_id;
      rej.msg_rejected = id.state == State::kRepReceived ? CmMsgResponse::kRep : CmMsgResponse::kOther;
      rej.reason = CmRejReason::kTimeout;
      rej.emit(d);
      if (path_for(id)) send(id, wire::cm_attr::kRej, d.data(), id.tid);
      ++stats_.rejects_sent;
      break;
    }
    case State::kEstablished:
    case State::kDreqReceived:
      disconnect(id.handle);  // DREQ, or the DREP the peer's DREQ waits for
      break;
    default:
      break;
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

ConnectionManager::Id* ConnectionManager::answering(const GsiMad& m, uint32_t ours,
                                                    uint32_t theirs, State waiting) {
  Id* id = matched(m, ours, theirs);
  if (id == nullptr) return nullptr;
  if (id->state != waiting) {
    ++stats_.drop_duplicate;  // answered already
    return nullptr;
  }
  id->deadline = UINT64_MAX;  // no more resends
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
  Id* id = answering(m, r.remote_comm_id, r.local_comm_id, State::kRepSent);
  if (id == nullptr) return;
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
  Id* id = answering(m, r.remote_comm_id, r.local_comm_id, State::kDreqSent);
  if (id == nullptr) return;
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

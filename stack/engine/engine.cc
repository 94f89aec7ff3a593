// Engine core: device queries, the poll loop, receive validation, transmit batching,
// timers, completions and async events.
#include "engine/engine.h"
#include "engine/stats_shm.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace uroce {

using namespace wire;

namespace {

/// What an IP packet holds besides the payload, at most: an IPv6 header, UDP, the BTH with
/// its largest extension headers, the ICRC. A payload of the active MTU must fit with it.
constexpr uint32_t kIpRoceOverhead = 40 + 8 + 60 + 4;
constexpr size_t kRxBurst = 32;
constexpr size_t kRxBurstsPerPoll = 8;
constexpr size_t kTxBurst = 32;

}  // namespace

Engine::Engine(Port& port, const EngineConfig& cfg)
    : port_(port),
      cfg_(cfg),
      mac_(port.mac()),
      mrs_(cfg.max_mr, cfg.key_seed),
      active_(cfg.max_qp),
      events_(std::max<uint32_t>(cfg.max_async_events, 1)),
      loopback_(0),  // both made on first use: most devices never need them, and a test or a
      gsi_rx_(0) {   // fuzz input that makes a device for each run need not zero ~110 KiB

  gids_.push_back(link_local_gid(mac_));
  if (cfg_.ipv4) gids_.push_back(ipv4_mapped_gid(*cfg_.ipv4));
  if (cfg_.ipv6) gids_.push_back(*cfg_.ipv6);
  cfg_.max_rd_atomic = std::clamp<uint8_t>(cfg_.max_rd_atomic, 1, kMaxRdAtomic);
  // QPNs are 24 bits; 0 and 1 are the special QPs.
  cfg_.max_qp = std::clamp<uint32_t>(cfg_.max_qp, 1, 0x1000000 - kFirstQpn);
  cfg_.qpn_span = std::clamp<uint32_t>(cfg_.qpn_span, cfg_.max_qp, 0x1000000 - kFirstQpn);
  cfg_.first_qpn = std::clamp<uint32_t>(cfg_.first_qpn, kFirstQpn, 0x1000000 - cfg_.qpn_span);
  // The active MTU can't exceed what fits in the port's frames (an L2 header of up to 18).
  while (cfg_.active_mtu > IBV_MTU_256 &&
         mtu_bytes(cfg_.active_mtu) + 18 + kIpRoceOverhead > port_.max_frame_len())
    cfg_.active_mtu = static_cast<ibv_mtu>(cfg_.active_mtu - 1);
  frame_mtu_ = cfg_.active_mtu;
  if (cfg_.node_guid == 0) {
    for (int i = 0; i < 3; ++i) cfg_.node_guid = cfg_.node_guid << 8 | mac_[i];
    cfg_.node_guid = cfg_.node_guid << 16 | 0xfffe;
    for (int i = 3; i < 6; ++i) cfg_.node_guid = cfg_.node_guid << 8 | mac_[i];
  }
  tx_batch_.reserve(kTxBurst);
  doorbells_.reserve(cfg_.max_qp);
  doorbells_taken_.reserve(cfg_.max_qp);
}

Engine::~Engine() {
  flush_tx();
  while (!loopback_.empty()) {
    port_.free_frame(loopback_.front());
    loopback_.pop();
  }
}

// ---- Device ---------------------------------------------------------------------------

void Engine::query_device(ibv_device_attr* a) const {
  *a = ibv_device_attr{};
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "uroce 0.1.0");
  a->node_guid = __builtin_bswap64(cfg_.node_guid);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = ~0ull;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = 0xffffff;  // no IEEE OUI: a software device
  a->vendor_part_id = 0;
  a->max_qp = static_cast<int>(cfg_.max_qp);
  a->max_qp_wr = static_cast<int>(cfg_.max_qp_wr);
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE |
                        IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_SYS_IMAGE_GUID |
                        IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  a->max_sge = static_cast<int>(cfg_.max_sge);
  a->max_sge_rd = static_cast<int>(cfg_.max_sge);
  a->max_cq = static_cast<int>(cfg_.max_cq);
  a->max_cqe = static_cast<int>(cfg_.max_cqe);
  a->max_mr = static_cast<int>(cfg_.max_mr);
  a->max_mw = static_cast<int>(cfg_.max_mr);  // a table of their own, as large
  a->max_pd = static_cast<int>(cfg_.max_pd);
  a->max_qp_rd_atom = cfg_.max_rd_atomic;
  a->max_qp_init_rd_atom = cfg_.max_rd_atomic;
  a->max_res_rd_atom = static_cast<int>(cfg_.max_rd_atomic * cfg_.max_qp);
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_ah = static_cast<int>(cfg_.max_ah);
  a->max_srq = static_cast<int>(cfg_.max_srq);
  a->max_srq_wr = static_cast<int>(cfg_.max_srq_wr);
  a->max_srq_sge = static_cast<int>(cfg_.max_sge);
  a->max_mcast_grp = static_cast<int>(cfg_.max_mcast_grp);
  a->max_mcast_qp_attach = static_cast<int>(cfg_.max_mcast_qp_attach);
  a->max_total_mcast_qp_attach = a->max_mcast_grp * a->max_mcast_qp_attach;
  a->max_raw_ethy_qp = port_.raw_frames() ? a->max_qp : 0;  // raw-packet QPs (raw.cc)
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
}

int Engine::query_port(uint8_t port_num, ibv_port_attr* a) const {
  if (port_num != 1) return EINVAL;
  *a = ibv_port_attr{};
  a->state = link_up_ ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = cfg_.active_mtu;
  a->gid_tbl_len = kGidTableLen;
  a->port_cap_flags = IBV_PORT_CM_SUP;
  a->max_msg_sz = 1u << 31;
  a->pkey_tbl_len = 1;
  a->max_vl_num = 1;
  a->active_width = 2;  // 4x
  a->active_speed = 32;  // EDR-like figure; software has no real speed
  a->phys_state = link_up_ ? 5 : 3;  // LinkUp, or Disabled (as rxe reports a down netdev)
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

void Engine::set_link_up(bool up, bool notify) {
  if (up == link_up_) return;
  link_up_ = up;
  if (notify) post_event(up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, nullptr);
}

void Engine::set_netdev_mtu(uint32_t bytes) {
  ibv_mtu m = frame_mtu_;
  while (m > IBV_MTU_256 && mtu_bytes(m) + kIpRoceOverhead > bytes) m = static_cast<ibv_mtu>(m - 1);
  cfg_.active_mtu = m;
  wire_frame_max_ = bytes + 14 + (cfg_.vlan_id != 0 ? 4 : 0);
}

int Engine::query_gid(uint8_t port_num, int index, ibv_gid* gid) const {
  if (port_num != 1 || index < 0 || index >= kGidTableLen) return EINVAL;
  if (index >= static_cast<int>(gids_.size())) {
    std::memset(gid->raw, 0, 16);  // an empty entry of the table
    return ENODATA;
  }
  std::memcpy(gid->raw, gids_[static_cast<size_t>(index)].data(), 16);
  return 0;
}

int Engine::query_pkey(uint8_t port_num, int index, uint16_t* pkey) const {
  if (port_num != 1 || index != 0) return EINVAL;
  *pkey = 0xFFFF;  // the default partition, full membership
  return 0;
}

bool Engine::resolve_path(const ibv_ah_attr& ah, Path* path) const {
  if (!ah.is_global) return false;  // RoCE needs a GRH: the destination is a GID
  const uint8_t sgid_index = ah.grh.sgid_index;
  if (sgid_index >= gids_.size()) return false;
  Path p;
  std::memcpy(p.dgid.data(), ah.grh.dgid.raw, 16);
  p.sgid = gids_[sgid_index];
  p.sgid_index = sgid_index;
  p.ipv6 = !is_ipv4_mapped(p.dgid);
  if (p.ipv6 == is_ipv4_mapped(p.sgid)) return false;  // IPv4 source with IPv6 dest or reverse
  p.traffic_class = ah.grh.traffic_class;
  p.hop_limit = ah.grh.hop_limit > 1 ? ah.grh.hop_limit : 64;
  p.flow_label = ah.grh.flow_label;
  p.sl = ah.sl;
  if (is_multicast_gid(p.dgid)) {  // a group: its MAC, no neighbour to ask
    p.dmac = multicast_mac(p.dgid);
    *path = p;
    return true;
  }
  // Our own address: loop back.
  for (const Gid& g : gids_) {
    if (g == p.dgid) {
      p.dmac = mac_;
      *path = p;
      return true;
    }
  }
  for (const auto& n : neighbors_) {
    if (n->ip == p.dgid && n->state == NeighborState::kReachable) {
      p.dmac = n->mac;
      *path = p;
      return true;
    }
  }
  return false;
}

RoceHeaders Engine::headers_for(const Path& p, uint32_t qpn, uint32_t dest_qpn) const {
  RoceHeaders h;
  h.eth.src = mac_;
  h.eth.dst = p.dmac;
  if (cfg_.vlan_id != 0) {
    h.eth.has_vlan = true;
    h.eth.vid = cfg_.vlan_id;
    h.eth.pcp = static_cast<uint8_t>(p.sl & 7);
  }
  h.ipv6 = p.ipv6;
  if (p.ipv6) {
    h.ip6.src = p.sgid;
    h.ip6.dst = p.dgid;
    h.ip6.traffic_class = p.traffic_class;
    h.ip6.flow_label = p.flow_label;
    h.ip6.hop_limit = p.hop_limit;
  } else {
    std::copy(p.sgid.begin() + 12, p.sgid.end(), h.ip4.src.begin());
    std::copy(p.dgid.begin() + 12, p.dgid.end(), h.ip4.dst.begin());
    h.ip4.dscp = static_cast<uint8_t>(p.traffic_class >> 2);
    h.ip4.ecn = static_cast<uint8_t>(p.traffic_class & 3);
    h.ip4.ttl = 64;
  }
  h.udp.src_port = source_port(qpn, dest_qpn);
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = dest_qpn;
  return h;
}

uint16_t Engine::source_port(uint32_t qpn, uint32_t dest_qpn) const {
  // Flow entropy: one UDP source port per QP (so ECMP keeps the QP in order), in
  // 0xC000..0xFFFF, or one of the ports a UDP-socket port has sockets on.
  const uint32_t hash = (qpn * 0x9E3779B1u) ^ (dest_qpn * 0x85EBCA6Bu);
  const std::vector<uint16_t>& ports = cfg_.udp_src_ports;
  if (!ports.empty()) return ports[(hash >> 16) % ports.size()];
  return static_cast<uint16_t>(0xC000 | ((hash >> 16) & 0x3FFF));
}

void Engine::fill_template(Qp* qp) {
  qp->tx_template = headers_for(qp->path, qp->qpn, qp->dest_qpn);
  // ECN-capable transport, for a switch to mark CE instead of dropping (congestion.cc),
  // unless the address vector chose the ECN bits itself.
  if (cfg_.cc.ecn && qp->type != IBV_QPT_UD && (qp->path.traffic_class & 3) == 0) {
    if (qp->tx_template.ipv6) {
      qp->tx_template.ip6.traffic_class |= kEcnEct0;
    } else {
      qp->tx_template.ip4.ecn = kEcnEct0;
    }
  }
}

// ---- Poll loop --------------------------------------------------------------------------

void Engine::ring_doorbell(Qp* qp) {
  if (qp->doorbell.exchange(true, std::memory_order_acq_rel)) return;  // already waiting
  std::lock_guard<std::mutex> lock(doorbell_mu_);
  doorbells_.push_back(qp);  // reserved for max_qp: never allocates
  doorbell_rung_.store(true, std::memory_order_release);
}

void Engine::answer_doorbells() {
  if (!doorbell_rung_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> lock(doorbell_mu_);
    doorbells_taken_.swap(doorbells_);
    doorbell_rung_.store(false, std::memory_order_relaxed);
  }
  for (Qp* qp : doorbells_taken_) {
    // Clear the flag first: a post after this point rings again and is seen next time. An
    // exchange (not a store) so that the engine's later reads of the rings come after it.
    qp->doorbell.exchange(false, std::memory_order_acq_rel);
    if (qp->state == IBV_QPS_ERR) qp->flush_pending = true;  // posted in ERR: flush it
    schedule(qp);
  }
  doorbells_taken_.clear();
}

size_t Engine::poll(uint64_t now_ns) {
  now_ = now_ns;
  size_t work = 0;
  answer_doorbells();

  // 1. Receive: loopback first (our own packets), then the port.
  std::array<Frame*, kRxBurst> burst;
  while (!loopback_.empty()) {
    Frame* f = loopback_.front();
    loopback_.pop();
    receive(f);
    ++work;
  }
  // Up to kRxBurstsPerPoll bursts: receive faster than one QP's budget can send, so that a
  // peer's READ response stream cannot outrun us.
  for (size_t round = 0; round < kRxBurstsPerPoll; ++round) {
    const uint16_t n = port_.rx_burst(now_, burst);
    for (uint16_t i = 0; i < n; ++i) receive(burst[i]);
    work += n;
    if (n < burst.size()) break;
  }

  // 2. Timers.
  work += timers_.advance(now_, [this](Timer& t) { fire_timer(t); });

  // 3. Transmit: every QP with work gets its budget; coalesced ACKs go out here too.
  run_tx();
  const uint64_t hold = std::exchange(ack_hold_ns_, 0);
  if (hold != 0 && !tx_batch_.empty() && tx_batch_acks_ == tx_batch_.size() &&
      (acks_held_until_ == 0 || now_ < acks_held_until_)) {
    if (acks_held_until_ == 0) {
      acks_held_until_ = now_ + hold;
      counters_.inc(Counter::acks_held);
    }
    acks_held_count_ = tx_batch_.size();
  } else {
    flush_tx();
  }
  pacer_held_.store(paced_qps_ != 0, std::memory_order_relaxed);
  return work;
}

size_t Engine::qp_states(QpStats* out, size_t max, size_t* shown) const {
  size_t total = 0, n = 0;
  for (const auto& q : qps_) {
    if (q == nullptr || q->state == IBV_QPS_RESET) continue;
    ++total;
    if (n == max) continue;
    QpStats& s = out[n++];
    s = QpStats{};
    s.qpn = q->qpn;
    s.type = static_cast<uint8_t>(q->type);
    s.state = static_cast<uint8_t>(q->state);
    const auto flag = [&](bool on, QpStats::Flag f) {
      if (on) s.flags |= f;
    };
    flag(q->comp.retransmit_timer.armed, QpStats::kRetransmitArmed);
    flag(q->resp.ack_pending, QpStats::kAckPending);
    s.req_state = static_cast<uint8_t>(q->req.state);
    s.comp_state = static_cast<uint8_t>(q->comp.state);
    s.resp_state = static_cast<uint8_t>(q->resp.state);
    flag(q->scheduled, QpStats::kScheduled);
    flag(q->doorbell.load(std::memory_order_relaxed), QpStats::kDoorbell);
    // The rings' indexes are the engine's (consumer) side and a racy read of the producer's:
    // a snapshot for people, not for decisions.
    s.sq_posted = static_cast<uint32_t>(q->sq.size());
    s.rq_posted = q->srq != nullptr ? 0 : static_cast<uint32_t>(q->rq.size());
    s.sq_psn = q->req.psn.value();
    s.comp_psn = q->comp.psn.value();
    s.epsn = q->resp.epsn.value();
    s.msn = q->resp.msn;
    s.cwnd = q->comp.cwnd;
    s.retry_left = q->comp.retry_left;
    s.rnr_retry_left = q->comp.rnr_retry_left;
    if (q->comp.retransmit_timer.armed && q->comp.retransmit_timer.expires_ns > now_)
      s.timer_in_us = (q->comp.retransmit_timer.expires_ns - now_) / 1000;
  }
  if (shown != nullptr) *shown = n;
  return total;
}

uint64_t Engine::next_deadline() const {
  if (!active_.empty() || !loopback_.empty() ||
      doorbell_rung_.load(std::memory_order_acquire))
    return now_;
  if (acks_held_until_ != 0) return std::min(acks_held_until_, timers_.next_expiry());
  return timers_.next_expiry();
}

void Engine::receive(Frame* f) {
  counters_.inc(Counter::rx_frames);
  ParsedPacket p;
  ParseError e = parse_frame(f->bytes(), p);
  if (e == ParseError::kBadIcrc && cfg_.ipv4_ident_zero && !p.hdr.ipv6 && solve_ident(&p))
    e = ParseError::kOk;
  Qp* qp = nullptr;
  if (e != ParseError::kOk) {
    const bool answered = (e == ParseError::kNotIp && handle_arp(f->bytes())) ||
                          (e == ParseError::kNotUdp && p.hdr.ipv6 && handle_nd(f->bytes()));
    // What is not RoCE's (ARP too, and a frame the parser finds malformed before it reaches
    // a UDP port other than 4791) may be a raw-packet QP's (raw.cc).
    const bool raw = !flows_.empty() && raw_receive(f);
    if (answered || raw) {
      // ARP / neighbour discovery answered or learned from; or a flow took it
    } else if (is_not_roce(e)) {
      counters_.inc(Counter::rx_not_roce);
    } else {
      counters_.inc(Counter::rx_drop_malformed);
      counters_.inc(e);
    }
  } else if (is_multicast_gid(p.hdr.ipv6 ? p.hdr.ip6.dst : ipv4_mapped_gid(p.hdr.ip4.dst))) {
    note_rx();
    mcast_receive(p);
  } else if (validate(p, &qp)) {
    counters_.inc(Counter::rx_roce);
    note_rx();
    if (p.hdr.ecn() == kEcnCe) notify_congestion(qp, p);
    if (qp->type == IBV_QPT_UD) {
      ud_receive(qp, p);
    } else if (p.info->is_request()) {
      responder(qp, p);
    } else {
      completer(qp, p);
    }
  }
  port_.free_frame(f);
}

bool Engine::solve_ident(ParsedPacket* p) {
  // Through a UDP socket the port cannot show the identification and DF flag a packet came
  // with; it gives 0 (a uroce peer's) and DF. A peer that sends others (the kernel's rxe
  // hashes them): the ICRC is linear, so the 17 bits that make it agree are solved for.
  wire::Ipv4Ident id;
  if (p->hdr.ip4.total_len < wire::kIcrcLen ||
      !wire::icrc_solve_ipv4_ident(p->icrc_calc, p->icrc_wire, p->hdr.ip4.total_len - wire::kIcrcLen,
                                   {p->hdr.ip4.ident, p->hdr.ip4.dont_frag}, &id))
    return false;
  p->hdr.ip4.ident = id.ident;
  p->hdr.ip4.dont_frag = id.dont_frag;
  p->icrc_calc = p->icrc_wire;
  counters_.inc(Counter::rx_icrc_ident_solved);
  return true;
}

bool Engine::pkey_matches(uint16_t pkey) {
  // The low 15 bits must match ours (0xFFFF), and at least one side must be a full member.
  constexpr uint16_t kMine = 0xFFFF;
  return (pkey & 0x7FFF) == (kMine & 0x7FFF) && ((pkey | kMine) & 0x8000) != 0;
}

bool Engine::validate(const ParsedPacket& p, Qp** out) {
  const RoceHeaders& h = p.hdr;
  // Addressed to us?
  if (h.eth.dst != mac_) {
    counters_.inc(Counter::rx_drop_wrong_dst);
    return false;
  }
  const Gid dst = h.ipv6 ? h.ip6.dst : ipv4_mapped_gid(h.ip4.dst);
  if (std::find(gids_.begin(), gids_.end(), dst) == gids_.end()) {
    counters_.inc(Counter::rx_drop_wrong_dst);
    return false;
  }
  if (p.info->op == Operation::kCnp) {
    receive_cnp(p);
    return false;
  }
  const uint32_t qpn = h.bth.dest_qp;
  if (qpn == 1) {
    gsi_receive(p);
    return false;
  }
  Qp* qp = qp_by_num(qpn);
  if (qp == nullptr) {
    counters_.inc(Counter::rx_drop_unknown_qpn);
    return false;
  }
  const Transport t = p.info->transport;
  if ((qp->type == IBV_QPT_RC) != (t == Transport::kRc) ||
      (qp->type == IBV_QPT_UC) != (t == Transport::kUc) ||
      (qp->type == IBV_QPT_UD) != (t == Transport::kUd) ||
      is_xrc(qp->type) != (t == Transport::kXrc) ||
      // an XRC initiator only sends (responses come back), a target only receives
      (qp->type == IBV_QPT_XRC_SEND && p.info->is_request()) ||
      (qp->type == IBV_QPT_XRC_RECV && !p.info->is_request())) {
    counters_.inc(Counter::rx_drop_qp_type);
    return false;
  }
  // Requests need RTR or later; responses need a sender (RTS or SQD). Error/reset drop.
  const bool ok_state = p.info->is_request()
                            ? (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS ||
                               qp->state == IBV_QPS_SQD || qp->state == IBV_QPS_SQE)
                            : (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD);
  if (!ok_state) {
    counters_.inc(Counter::rx_drop_qp_state);
    return false;
  }
  if (!pkey_matches(h.bth.pkey)) {
    counters_.inc(Counter::rx_drop_bad_pkey);
    return false;
  }
  if (qp->type == IBV_QPT_UD) {
    if (h.ext.deth.qkey != qp->qkey) {
      counters_.inc(Counter::rx_drop_bad_qkey);
      return false;
    }
  } else {
    const Gid src = h.ipv6 ? h.ip6.src : ipv4_mapped_gid(h.ip4.src);
    if (src != qp->path.dgid) {
      counters_.inc(Counter::rx_drop_bad_src);
      return false;
    }
  }
  if (qp->state == IBV_QPS_RTR && qp->type != IBV_QPT_UD && !qp->comm_est_raised) {
    // IBA 11.6.3: the first packet a connected QP receives in RTR establishes the
    // connection (the CM uses it when the RTU is lost: rdma_notify, ib_cm_notify).
    qp->comm_est_raised = true;
    post_event(IBV_EVENT_COMM_EST, qp);
  }
  *out = qp;
  return true;
}

void Engine::gsi_receive(const ParsedPacket& p) {
  const RoceHeaders& h = p.hdr;
  if (!gsi_open_) {
    counters_.inc(Counter::rx_drop_gsi);
    return;
  }
  // QP1 takes UD SENDs with the GSI Q_Key in the default partition, up to one MAD long.
  if (h.bth.opcode != opcode::kUdSendOnly || h.ext.deth.qkey != kGsiQkey ||
      (h.bth.pkey & 0x7FFF) != 0x7FFF || p.payload.size() > GsiMad::kMaxLen ||
      p.payload.empty()) {
    counters_.inc(Counter::rx_drop_gsi_bad);
    return;
  }
  if (gsi_rx_.full()) {
    counters_.inc(Counter::rx_drop_gsi_full);
    return;
  }
  GsiMad& m = gsi_rx_.next_slot();
  m.ipv6 = h.ipv6;
  m.sgid = h.ipv6 ? h.ip6.src : ipv4_mapped_gid(h.ip4.src);
  m.dgid = h.ipv6 ? h.ip6.dst : ipv4_mapped_gid(h.ip4.dst);
  m.smac = h.eth.src;
  m.src_qp = h.ext.deth.src_qp;
  m.pkey = h.bth.pkey;
  m.traffic_class = h.ipv6 ? h.ip6.traffic_class
                           : static_cast<uint8_t>(h.ip4.dscp << 2 | h.ip4.ecn);
  m.hop_limit = h.ipv6 ? h.ip6.hop_limit : h.ip4.ttl;
  m.flow_label = h.ipv6 ? h.ip6.flow_label : 0;
  m.len = static_cast<uint16_t>(p.payload.size());
  std::copy(p.payload.begin(), p.payload.end(), m.data.begin());
  gsi_rx_.commit();
  counters_.inc(Counter::rx_gsi);
}

bool Engine::pop_mad(GsiMad* out) {
  if (gsi_rx_.empty()) return false;
  *out = gsi_rx_.front();
  gsi_rx_.pop();
  return true;
}

int Engine::gid_index(const Gid& gid) const {
  for (size_t i = 0; i < gids_.size(); ++i)
    if (gids_[i] == gid) return static_cast<int>(i);
  return -1;
}

bool Engine::path_between(const Gid& sgid, const Gid& dgid, Path* out) const {
  const int idx = gid_index(sgid);
  if (idx < 0) return false;
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  std::memcpy(ah.grh.dgid.raw, dgid.data(), 16);
  ah.grh.sgid_index = static_cast<uint8_t>(idx);
  ah.grh.hop_limit = 64;
  return resolve_path(ah, out);
}

int Engine::send_mad(const Path& path, uint32_t dest_qpn, uint32_t qkey, uint16_t pkey,
                     const uint8_t* mad, size_t len) {
  if (len == 0 || len > GsiMad::kMaxLen) return EINVAL;
  RoceHeaders h = headers_for(path, 1, dest_qpn);
  h.bth.opcode = opcode::kUdSendOnly;
  h.bth.pkey = pkey;
  h.bth.psn = gsi_psn_;
  gsi_psn_ = (gsi_psn_ + 1) & 0xFFFFFF;
  h.ext.deth = {qkey, 0, 1};
  FrameLayout lay;
  Frame* f = build_packet(h, len, &lay);
  if (f == nullptr) return ENOBUFS;
  std::memcpy(f->data + lay.payload_off, mad, len);
  send_built(f, lay);
  flush_tx();  // sent by a control call as often as by poll(): out now
  counters_.inc(Counter::tx_gsi);
  return 0;
}

void Engine::fire_timer(Timer& t) {
  if (t.kind == kTimerNeighbor) {
    on_neighbor_timeout(static_cast<Neighbor*>(t.owner));
    return;
  }
  Qp* qp = static_cast<Qp*>(t.owner);
  if (t.kind == kTimerRetransmit) {
    on_retransmit_timeout(qp);
  } else if (t.kind == kTimerRnr) {
    on_rnr_timeout(qp);
  } else {
    on_cc_timer(t);
  }
}

// ---- Transmit ---------------------------------------------------------------------------

void Engine::schedule(Qp* qp) {
  if (qp->scheduled) return;
  qp->scheduled = true;
  active_.push(qp);  // capacity max_qp: cannot be full
}

void Engine::run_tx() {
  // Each QP active at the start of this round gets one turn; QPs with work left re-queue.
  const size_t rounds = active_.size();
  for (size_t i = 0; i < rounds; ++i) {
    Qp* qp = active_.front();
    active_.pop();
    qp->scheduled = false;
    uint32_t budget = cfg_.qp_budget;
    bool more = false;
    if (qp->flush_pending) flush_qp(qp);
    if (qp->type != IBV_QPT_UD || qp->state != IBV_QPS_RESET) {
      if (qp->cc.requester_turn) {
        more |= requester_step(qp, &budget);
        more |= responder_step(qp, &budget);
      } else {
        more |= responder_step(qp, &budget);
        more |= requester_step(qp, &budget);
      }
    }
    if (more) schedule(qp);
  }
}

Frame* Engine::tx_alloc() {
  Frame* f = port_.alloc_frame();
  if (f == nullptr) {
    flush_tx();  // frames may be waiting in our batch
    f = port_.alloc_frame();
  }
  if (f == nullptr) counters_.inc(Counter::tx_no_buffers);
  return f;
}

Frame* Engine::build_packet(RoceHeaders& h, size_t payload_len, FrameLayout* lay) {
  Frame* f = tx_alloc();
  if (f == nullptr) return nullptr;
  if (!h.ipv6) h.ip4.ident = cfg_.ipv4_ident_zero ? 0 : ip_id_++;
  // The headers are written here, copied into the frame, and the ICRC starts from this copy:
  // nothing of the frame is read back (with the shared-memory port, its lines were last the
  // peer core's, and a read waits for each: docs/shm.md). The payload's CRC is taken from
  // its source as it is copied in (gather); seal_frame() finishes what nobody carried on.
  std::array<uint8_t, 256> hdr;
  *lay = emit_header_bytes(h, payload_len, hdr, f->cap);
  if (lay->len == 0) {
    port_.free_frame(f);
    return nullptr;
  }
  std::memcpy(f->data, hdr.data(), lay->payload_off);
  std::memset(f->data + lay->payload_off + payload_len, 0,
              lay->icrc_off - lay->payload_off - payload_len);  // pad
  lay->crc_len = lay->payload_off - lay->l3_off;
  lay->crc = icrc_compute(Bytes(hdr.data() + lay->l3_off, lay->crc_len), lay->ipv6, lay->ip_hdr_len);
  f->len = static_cast<uint32_t>(lay->len);
  return f;
}

bool Engine::is_local_dest(const Frame* f, bool* gsi) {
  wire::ParsedPacket p;
  wire::ParseOptions o;
  o.verify_icrc = false;
  *gsi = false;
  if (wire::parse_frame(f->bytes(), p, o) != wire::ParseError::kOk) return true;
  *gsi = p.hdr.bth.dest_qp == 1;
  return p.hdr.bth.dest_qp <= 1 || qp_by_num(p.hdr.bth.dest_qp) != nullptr;
}

void Engine::send_built(Frame* f, const FrameLayout& lay) {
  seal_frame(f->room(), lay);
  tx_frame(f);
}

void Engine::tx_frame(Frame* f) {
  // Frames for our own MAC to one of our QPs never touch the wire: loop them back (two QPs
  // of one device). Those for a QPN that is not ours go out: another process running uroce
  // on the same interface owns it (the kernel shows each packet socket the frames the
  // others send).
  bool gsi = false;
  if (std::equal(mac_.begin(), mac_.end(), f->data) && is_local_dest(f, &gsi)) {
    // QP1 is every process's: a CM MAD to our own address may be for another process's
    // connection manager on this interface (a client and a server on one host, as rping's
    // two halves), so a copy goes out too. Ours takes the MAD or leaves it (a service another
    // process holds), as the other one does with the copy.
    if (gsi) {
      if (Frame* c = tx_alloc(); c != nullptr && c->cap >= f->len) {
        std::memcpy(c->data, f->data, f->len);
        c->len = f->len;
        counters_.inc(Counter::tx_gsi_copies);
        tx_batch_.push_back(c);
      } else if (c != nullptr) {
        port_.free_frame(c);
      }
    }
    counters_.inc(Counter::tx_loopback);
    if (loopback_.capacity() == 0) loopback_ = Ring<Frame*>(kLoopbackQueue);
    if (!loopback_.push(f)) port_.free_frame(f);
    if (tx_batch_.size() >= kTxBurst) flush_tx();
    return;
  }
  if (f->len > wire_frame_max_) {
    // Longer than the interface carries (its MTU was lowered under a QP whose path MTU no
    // longer fits): lost, as a switch or the kernel's IP layer would lose it, whether or not
    // the port could have sent it inside a super-frame. The transport retries, then fails.
    counters_.inc(Counter::tx_drop_mtu);
    port_.free_frame(f);
    return;
  }
  tx_batch_.push_back(f);
  if (tx_batch_.size() >= kTxBurst) flush_tx();
}

void Engine::flush_tx() {
  // Held ACKs leave behind the reply they waited for: a reply and its ACK to one peer then
  // make a run (all packets as long as the first but the last), which a UDP socket (and the
  // af_packet port's super-frames) sends as one GSO datagram: one trip through the kernel.
  if (acks_held_until_ != 0 && acks_held_count_ < tx_batch_.size())
    std::rotate(tx_batch_.begin(), tx_batch_.begin() + static_cast<std::ptrdiff_t>(acks_held_count_),
                tx_batch_.end());
  size_t off = 0;
  while (off < tx_batch_.size()) {
    const uint16_t n = port_.tx_burst(now_, std::span<Frame* const>(tx_batch_).subspan(off));
    counters_.inc(Counter::tx_frames, n);
    if (n == 0) {
      // The port is full: drop what is left (the transport retransmits what matters).
      for (size_t i = off; i < tx_batch_.size(); ++i) port_.free_frame(tx_batch_[i]);
      counters_.inc(Counter::tx_no_buffers, tx_batch_.size() - off);
      break;
    }
    off += n;
  }
  // Held ACKs that leave with nothing else did not meet a reply.
  if (acks_held_until_ != 0 && tx_batch_acks_ == tx_batch_.size())
    counters_.inc(Counter::acks_held_alone);
  tx_batch_.clear();
  tx_batch_acks_ = 0;
  acks_held_until_ = 0;
  acks_held_count_ = 0;
}

// ---- Local memory ---------------------------------------------------------------------------

namespace {
// Walks an SGE list from `offset`, checking each piece against the MR table (key, PD, bounds,
// LOCAL_WRITE when writing) right before it is touched — an MR deregistered after the post is
// caught here — and hands (host pointer, length) pieces to `copy`.
template <typename Copy>
bool walk_sges(const mem::MrTable& mrs, const mem::Pd* pd, const Sge* sges, uint32_t n,
               uint32_t offset, uint32_t len, int need, Copy&& copy) {
  for (uint32_t i = 0; i < n && len > 0; ++i) {
    const Sge& s = sges[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const uint32_t chunk = std::min(len, s.length - offset);
    uint8_t* host;
    if (mrs.check(s.lkey, pd, s.addr + offset, chunk, need, &host) != mem::AccessError::kOk)
      return false;
    copy(host, chunk);
    len -= chunk;
    offset = 0;
  }
  return len == 0;
}
}  // namespace

bool Engine::copy_to_sges(const mem::Pd* pd, const Sge* sges, uint32_t n, uint32_t offset,
                          const uint8_t* src, uint32_t len) const {
  return walk_sges(mrs_, pd, sges, n, offset, len, IBV_ACCESS_LOCAL_WRITE,
                   [&src](uint8_t* host, uint32_t chunk) {
                     std::memcpy(host, src, chunk);
                     src += chunk;
                   });
}

bool Engine::copy_from_sges(const mem::Pd* pd, const Sge* sges, uint32_t n, uint32_t offset,
                            uint8_t* dst, uint32_t len, uint32_t* crc) const {
  return walk_sges(mrs_, pd, sges, n, offset, len, 0, [&dst, crc](uint8_t* host, uint32_t chunk) {
    std::memcpy(dst, host, chunk);
    if (crc != nullptr) *crc = wire::crc32(*crc, Bytes(host, chunk));
    dst += chunk;
  });
}

// ---- Completions and events ---------------------------------------------------------------

bool Engine::push_cqe(Cq* cq, const ibv_wc& wc, Qp* qp, uint64_t tag) {
  if (cq->overflowed || !cq->ring.push(Cq::Entry{wc, now_, tag})) {
    // A lost completion puts the CQ in error and raises IBV_EVENT_CQ_ERR (IBA 11.4.2.1).
    counters_.inc(Counter::cq_overflows);
    if (!cq->overflowed) {
      cq->overflowed = true;
      post_event(IBV_EVENT_CQ_ERR, nullptr, cq);
    }
    // The QP whose completion was lost cannot go on (IBA 11.6.3.1, a local work queue
    // catastrophic error): it enters the error state and raises IBV_EVENT_QP_FATAL (a
    // receive work queue of RSS: IBV_EVENT_WQ_FATAL).
    if (qp != nullptr && qp->state != IBV_QPS_ERR) {
      enter_error(qp);
      post_event(qp->is_wq ? IBV_EVENT_WQ_FATAL : IBV_EVENT_QP_FATAL, qp);
    }
    return false;
  }
  ++cq->notify_gen;
  counters_.inc(Counter::completions);
  trace({VerbsEvent::Kind::kCompletion, wc.qp_num, wc.wr_id, wc.opcode, wc.byte_len, wc.status, 0});
  return true;
}

void Engine::post_event(ibv_event_type type, Qp* qp, Cq* cq, Srq* srq) {
  events_.push(AsyncEvent{type, qp, cq, srq});
}

bool Engine::pop_async_event(AsyncEvent* ev) {
  if (events_.empty()) return false;
  *ev = events_.front();
  events_.pop();
  return true;
}

int Engine::poll_cq(Cq* cq, int n, ibv_wc* wc) {
  std::lock_guard<std::mutex> consumer(cq->mu);
  int got = 0;
  while (got < n && !cq->ring.empty()) {
    wc[got++] = cq->ring.front().wc;
    cq->polled_ts_ns = cq->ring.front().ts_ns;
    cq->polled_tag = cq->ring.front().tag;
    cq->ring.pop();
  }
  return got;
}

}  // namespace uroce

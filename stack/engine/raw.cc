// Raw-packet QPs (IBV_QPT_RAW_PACKET) and flow steering (ibv_create_flow(3)).
//
// A raw-packet QP has no transport: a send WQE's bytes are one whole Ethernet frame, sent as
// they are; a receive WQE takes one whole frame that the QP's flow rules steered to it. Only
// frames that are not RoCE's are steered: one with UDP destination port 4791 goes to the
// transport however malformed, whatever a rule says, so RoCE and raw traffic never see each
// other's frames. Which QP gets a frame (as an RNIC's
// steering does it, IBV_FLOW_ATTR_* in ibv_create_flow(3)):
//   - the NORMAL rules that match, at the best (lowest) priority among them: every QP with
//     such a rule gets one copy (a rule with the drop action instead: nobody does);
//   - no NORMAL rule matches: the MC_DEFAULT rules' QPs for a multicast frame, else (or with
//     none) the ALL_DEFAULT rules' QPs.
// A frame a raw QP sends to this device's own MAC loops back (tx_frame); one to a multicast or
// broadcast address goes out and is also steered here, to the sender too unless it was
// created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB. RSS (below): a receive-only raw QP whose
// frames go to one of its indirection table's work queues by the Toeplitz hash.
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "engine/engine.h"

namespace uroce {

namespace {

constexpr uint64_t kRssFields = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
                                IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP |
                                IBV_RX_HASH_DST_PORT_TCP | IBV_RX_HASH_SRC_PORT_UDP |
                                IBV_RX_HASH_DST_PORT_UDP;

/// The bytes RSS hashes for a frame, in the order Microsoft's RSS specification gives (source
/// address, destination address, source port, destination port), each only if `fields` asks
/// for it and the frame has it. Returns how many.
size_t rss_input(const FrameFields& f, uint64_t fields, uint8_t* out) {
  size_t n = 0;
  auto put = [&](const void* p, size_t len) {
    std::memcpy(out + n, p, len);
    n += len;
  };
  if (f.has_ipv4) {
    if (fields & IBV_RX_HASH_SRC_IPV4) put(&f.ip4_src, 4);
    if (fields & IBV_RX_HASH_DST_IPV4) put(&f.ip4_dst, 4);
  } else if (f.has_ipv6) {
    if (fields & IBV_RX_HASH_SRC_IPV6) put(f.ip6_src.data(), 16);
    if (fields & IBV_RX_HASH_DST_IPV6) put(f.ip6_dst.data(), 16);
  }
  const bool tcp = f.l4 == IPPROTO_TCP, udp = f.l4 == IPPROTO_UDP;
  if ((tcp && (fields & IBV_RX_HASH_SRC_PORT_TCP)) || (udp && (fields & IBV_RX_HASH_SRC_PORT_UDP)))
    put(&f.src_port, 2);
  if ((tcp && (fields & IBV_RX_HASH_DST_PORT_TCP)) || (udp && (fields & IBV_RX_HASH_DST_PORT_UDP)))
    put(&f.dst_port, 2);
  return n;
}

/// The key bytes a Toeplitz hash of `n` input bytes reads: 32 bits past the input's.
constexpr size_t toeplitz_key_need(size_t n) { return n + 4; }

}  // namespace

// ---- Receive work queues, indirection tables, RSS QPs -----------------------------------

Qp* Engine::create_wq(mem::Pd* pd, Cq* cq, uint32_t max_wr, uint32_t max_sge) {
  if (pd == nullptr || cq == nullptr || max_wr == 0) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_init_attr a{};
  a.qp_type = IBV_QPT_RAW_PACKET;
  a.send_cq = a.recv_cq = &cq->ibv;
  a.cap.max_recv_wr = max_wr;
  a.cap.max_recv_sge = max_sge;
  Qp* wq = create_qp(pd, &a);
  if (wq != nullptr) wq->is_wq = true;
  return wq;
}

ibv_wq_state Engine::wq_state(const Qp* wq) {
  switch (wq->state) {
    case IBV_QPS_RESET: return IBV_WQS_RESET;
    case IBV_QPS_ERR: return IBV_WQS_ERR;
    default: return IBV_WQS_RDY;
  }
}

int Engine::modify_wq(Qp* wq, ibv_wq_state state) {
  if (wq == nullptr || !wq->is_wq || qp_by_num(wq->qpn) != wq) return EINVAL;
  ibv_qp_attr a{};
  switch (state) {
    case IBV_WQS_RDY:
      if (wq->state == IBV_QPS_RTR) return 0;
      if (wq->state != IBV_QPS_RESET) return EINVAL;  // out of ERR through RST
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      if (int e = modify_qp(wq, &a, IBV_QP_STATE | IBV_QP_PORT); e != 0) return e;
      a.qp_state = IBV_QPS_RTR;
      return modify_qp(wq, &a, IBV_QP_STATE);
    case IBV_WQS_RESET: a.qp_state = IBV_QPS_RESET; return modify_qp(wq, &a, IBV_QP_STATE);
    case IBV_WQS_ERR:
      if (wq->state == IBV_QPS_RESET) return EINVAL;
      a.qp_state = IBV_QPS_ERR;
      return modify_qp(wq, &a, IBV_QP_STATE);
    default: return EINVAL;
  }
}

int Engine::destroy_wq(Qp* wq) {
  if (wq == nullptr || !wq->is_wq) return EINVAL;
  return destroy_qp(wq);
}

Engine::RwqTable* Engine::create_rwq_table(std::span<Qp* const> wqs) {
  if (wqs.empty() || (wqs.size() & (wqs.size() - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  for (Qp* wq : wqs)
    if (wq == nullptr || !wq->is_wq || qp_by_num(wq->qpn) != wq) {
      errno = EINVAL;
      return nullptr;
    }
  auto t = std::make_unique<RwqTable>();
  t->wqs.assign(wqs.begin(), wqs.end());
  for (Qp* wq : wqs) ++wq->wq_tables;
  rwq_tables_.push_back(std::move(t));
  return rwq_tables_.back().get();
}

int Engine::destroy_rwq_table(RwqTable* t) {
  auto it = std::find_if(rwq_tables_.begin(), rwq_tables_.end(),
                         [t](const std::unique_ptr<RwqTable>& x) { return x.get() == t; });
  if (t == nullptr || it == rwq_tables_.end()) return EINVAL;
  if (t->users != 0) return EBUSY;
  for (Qp* wq : t->wqs) --wq->wq_tables;
  rwq_tables_.erase(it);
  return 0;
}

Qp* Engine::create_rss_qp(mem::Pd* pd, RwqTable* table, const ibv_rx_hash_conf& hash) {
  if (std::none_of(rwq_tables_.begin(), rwq_tables_.end(),
                   [table](const std::unique_ptr<RwqTable>& x) { return x.get() == table; })) {
    errno = EINVAL;
    return nullptr;
  }
  if (hash.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ || (hash.rx_hash_fields_mask & ~kRssFields)) {
    errno = EOPNOTSUPP;  // inner headers, IPsec SPI
    return nullptr;
  }
  // The longest input the fields can make (an IPv6 pair and two ports) must find key bits.
  const uint64_t f = hash.rx_hash_fields_mask;
  const size_t longest = std::max<size_t>(((f & IBV_RX_HASH_SRC_IPV4) ? 4 : 0) + ((f & IBV_RX_HASH_DST_IPV4) ? 4 : 0),
                                          ((f & IBV_RX_HASH_SRC_IPV6) ? 16 : 0) + ((f & IBV_RX_HASH_DST_IPV6) ? 16 : 0)) +
                         ((f & (IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_SRC_PORT_UDP)) ? 2 : 0) +
                         ((f & (IBV_RX_HASH_DST_PORT_TCP | IBV_RX_HASH_DST_PORT_UDP)) ? 2 : 0);
  if (hash.rx_hash_key_len > Qp::Rss{}.key.size() || (hash.rx_hash_key == nullptr && hash.rx_hash_key_len != 0) ||
      hash.rx_hash_key_len < toeplitz_key_need(longest)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_init_attr a{};
  a.qp_type = IBV_QPT_RAW_PACKET;
  Qp* qp = create_qp(pd, &a, nullptr, true);
  if (qp == nullptr) return nullptr;
  Qp::Rss& r = qp->rss.emplace();
  r.wqs = &table->wqs;
  r.fields = f;
  r.key_len = hash.rx_hash_key_len;
  if (r.key_len != 0) std::memcpy(r.key.data(), hash.rx_hash_key, r.key_len);
  ++table->users;
  return qp;
}

Engine::RawFlow* Engine::create_flow(Qp* qp, const ibv_flow_attr* attr) {
  if (qp == nullptr || qp_by_num(qp->qpn) != qp || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  // (An RNIC steers IPoIB's frames to UD QPs; RoCE has no such use.)
  if (qp->type != IBV_QPT_RAW_PACKET) {
    errno = qp->type == IBV_QPT_UD ? EOPNOTSUPP : EINVAL;
    return nullptr;
  }
  if (attr->port != 1) {
    errno = EINVAL;
    return nullptr;
  }
  auto flow = std::make_unique<RawFlow>();
  if (int e = compile_flow(attr, &flow->rule); e != 0) {
    errno = e;
    return nullptr;
  }
  if (flows_.empty() && !port_.receive_all(true)) {
    errno = EOPNOTSUPP;  // the port shows us RoCE's frames only
    return nullptr;
  }
  flow->qp = qp;
  flow->seq = next_flow_seq_++;
  ++qp->flows;
  raw_to_.reserve(flows_.size() + 1);
  // Kept in the order they are tried: priority, then age.
  const auto at = std::upper_bound(flows_.begin(), flows_.end(), flow->rule.priority,
                                   [](uint16_t prio, const std::unique_ptr<RawFlow>& f) {
                                     return prio < f->rule.priority;
                                   });
  return flows_.insert(at, std::move(flow))->get();
}

int Engine::destroy_flow(RawFlow* flow) {
  auto it = std::find_if(flows_.begin(), flows_.end(),
                         [flow](const std::unique_ptr<RawFlow>& f) { return f.get() == flow; });
  if (flow == nullptr || it == flows_.end()) return EINVAL;
  --flow->qp->flows;
  flows_.erase(it);
  if (flows_.empty()) port_.receive_all(false);
  return 0;
}

bool Engine::raw_send(Qp* qp, SendWqe& w) {
  Frame* f = tx_alloc();
  if (f == nullptr) return false;  // out of frames: the next poll tries again
  w.state = WqeState::kDone;
  if (w.length > f->cap) {
    port_.free_frame(f);
    w.status = IBV_WC_LOC_LEN_ERR;
    return true;
  }
  if (w.is_inline) {
    std::memcpy(f->data, w.inline_data.data(), w.length);
  } else if (!copy_from_sges(qp->pd, w.sge.data(), w.num_sge, 0, f->data, w.length)) {
    port_.free_frame(f);
    w.status = IBV_WC_LOC_PROT_ERR;
    return true;
  }
  f->len = w.length;
  counters_.inc(Counter::tx_raw);
  if ((f->data[0] & 1) != 0) raw_receive(f, qp);  // multicast or broadcast: ours too
  tx_frame(f);
  // A rate limit (ibv_modify_qp_rate_limit) holds raw frames too (DCQCN does not: no CNP
  // names a raw QP).
  if (qp->cc.rate_limit_kbps != 0) advance_pace(qp, w.length);
  return true;
}

bool Engine::raw_receive(const Frame* f, const Qp* sender) {
  FrameFields fields;
  if (!read_fields(f->bytes(), &fields)) return false;
  // UDP to port 4791 is RoCE's, however malformed: never a raw QP's.
  if (fields.l4 == IPPROTO_UDP && fields.dst_port == htons(wire::kRoceV2Port)) return false;
  const bool multicast = (fields.dst[0] & 1) != 0;
  // The QPs that get a copy (each once), from the best priority that has a match. The list
  // never holds more than there are rules: no allocation once the rules are made.
  std::vector<Qp*>& to = raw_to_;
  to.clear();
  bool drop = false;
  auto add = [&to](Qp* qp) {
    if (std::find(to.begin(), to.end(), qp) == to.end()) to.push_back(qp);
  };
  int best = -1;
  for (const auto& fl : flows_) {
    if (fl->rule.type != IBV_FLOW_ATTR_NORMAL) continue;
    if (best >= 0 && fl->rule.priority != best) break;  // sorted: past the best priority
    if (!fl->rule.matches(fields)) continue;
    best = fl->rule.priority;
    if (fl->rule.drop) drop = true;
    else add(fl->qp);
  }
  if (drop) {
    counters_.inc(Counter::rx_drop_raw_flow);
    return true;
  }
  if (best < 0) {
    // No rule: the defaults. Multicast to MC_DEFAULT's QPs, else (or with none) ALL_DEFAULT's.
    for (ibv_flow_attr_type t : {IBV_FLOW_ATTR_MC_DEFAULT, IBV_FLOW_ATTR_ALL_DEFAULT}) {
      if (t == IBV_FLOW_ATTR_MC_DEFAULT && !multicast) continue;
      for (const auto& fl : flows_)
        if (fl->rule.type == t) add(fl->qp);
      if (!to.empty()) break;
    }
  }
  bool taken = false;
  for (Qp* qp : to) {
    if (qp == sender && multicast && sender->block_self_lb) continue;
    raw_deliver(qp, f->bytes(), fields);
    taken = true;
  }
  return taken;
}

void Engine::raw_deliver(Qp* qp, std::span<const uint8_t> frame, const FrameFields& fields) {
  if (qp->rss) {
    // RSS: the WQ the hash's low bits pick (whatever the RSS QP's own state).
    std::array<uint8_t, 36> in;
    const size_t n = rss_input(fields, qp->rss->fields, in.data());
    const uint32_t h = toeplitz_hash({qp->rss->key.data(), qp->rss->key_len}, {in.data(), n});
    const std::vector<Qp*>& wqs = *qp->rss->wqs;
    qp = wqs[h & (wqs.size() - 1)];
  }
  if (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS) {
    counters_.inc(Counter::rx_drop_qp_state);
    return;
  }
  if (!take_rwqe(qp)) {
    counters_.inc(Counter::rx_drop_raw_no_recv);
    return;
  }
  ibv_wc wc{};
  wc.wr_id = qp->resp.rwqe.wr_id;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = qp->qpn;
  wc.pkey_index = qp->pkey_index;
  const auto len = static_cast<uint32_t>(frame.size());
  if (copy_to_rwqe(qp, frame.data(), len)) {
    wc.status = IBV_WC_SUCCESS;
    wc.byte_len = len;
    counters_.inc(Counter::rx_raw);
  } else {
    wc.status = IBV_WC_LOC_LEN_ERR;  // longer than the WQE's buffers (or a key gone)
  }
  qp->resp.have_rwqe = false;
  push_cqe(qp->recv_cq, wc, qp);
}

}  // namespace uroce

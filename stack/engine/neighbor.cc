// ARP responder and resolver (IPv4 over Ethernet, RFC 826) feeding the neighbour cache.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"
#include "wire/arp.h"
#include "wire/ethernet.h"

namespace uroce {

using namespace wire;

namespace {
constexpr MacAddr kBroadcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
}  // namespace

Neighbor* Engine::find_neighbor(const Gid& ip) {
  for (auto& n : neighbors_)
    if (n->ip == ip) return n.get();
  return nullptr;
}

void Engine::set_neighbor(const Gid& ip, const MacAddr& mac) {
  Neighbor* n = find_neighbor(ip);
  if (n == nullptr) {
    neighbors_.push_back(std::make_unique<Neighbor>());
    n = neighbors_.back().get();
    n->ip = ip;
    n->timer.owner = n;
    n->timer.kind = kTimerNeighbor;
  }
  n->mac = mac;
  n->state = NeighborState::kReachable;
  n->is_static = true;
  timers_.cancel(n->timer);
}

NeighborState Engine::neighbor_state(const Gid& ip, MacAddr* mac) {
  if (std::find(gids_.begin(), gids_.end(), ip) != gids_.end()) {
    *mac = mac_;
    return NeighborState::kReachable;
  }
  Neighbor* n = find_neighbor(ip);
  if (n == nullptr) return NeighborState::kFailed;
  if (n->state == NeighborState::kReachable) *mac = n->mac;
  return n->state;
}

NeighborState Engine::resolve(const Gid& ip, MacAddr* mac) {
  if (std::find(gids_.begin(), gids_.end(), ip) != gids_.end()) {
    *mac = mac_;  // ourselves: loopback
    return NeighborState::kReachable;
  }
  Neighbor* n = find_neighbor(ip);
  if (n != nullptr && n->state == NeighborState::kReachable) {
    *mac = n->mac;
    return NeighborState::kReachable;
  }
  if (n != nullptr && n->state == NeighborState::kIncomplete) return n->state;
  if (!is_ipv4_mapped(ip) || !cfg_.ipv4) {
    // IPv6 neighbour discovery is not implemented yet: only static entries work for IPv6.
    return NeighborState::kFailed;
  }
  if (n == nullptr) {
    neighbors_.push_back(std::make_unique<Neighbor>());
    n = neighbors_.back().get();
    n->ip = ip;
    n->timer.owner = n;
    n->timer.kind = kTimerNeighbor;
  }
  n->state = NeighborState::kIncomplete;
  n->tries = 0;
  send_arp_request(n);
  return n->state;
}

void Engine::send_arp_request(Neighbor* n) {
  ++n->tries;
  counters_.inc(Counter::arp_requests_sent);
  ArpRepr a;
  a.oper = ArpRepr::kRequest;
  a.sha = mac_;
  a.spa = *cfg_.ipv4;
  a.tha = {};
  std::copy(n->ip.begin() + 12, n->ip.end(), a.tpa.begin());
  send_arp(a, kBroadcast);
  flush_tx();  // control path: out now, not at the end of the next poll
  timers_.arm(n->timer, now_ + kArpRetryNs);
}

void Engine::on_neighbor_timeout(Neighbor* n) {
  if (n->state != NeighborState::kIncomplete) return;
  if (n->tries >= kArpTries) {
    n->state = NeighborState::kFailed;
    counters_.inc(Counter::arp_failures);
    return;
  }
  send_arp_request(n);
}

void Engine::send_arp(const ArpRepr& a, const MacAddr& dst) {
  Frame* f = tx_alloc();
  if (f == nullptr) return;
  EthernetRepr eth;
  eth.dst = dst;
  eth.src = mac_;
  eth.ethertype = kEtherTypeArp;
  if (cfg_.vlan_id != 0) {
    eth.has_vlan = true;
    eth.vid = cfg_.vlan_id;
  }
  const size_t hl = eth.header_len();
  eth.emit(f->room());
  a.emit(f->room().subspan(hl));
  f->len = static_cast<uint32_t>(std::max<size_t>(hl + ArpView::kLen, 60));  // Ethernet minimum
  std::memset(f->data + hl + ArpView::kLen, 0, f->len - hl - ArpView::kLen);
  tx_frame(f);
}

bool Engine::handle_arp(Bytes frame) {
  EthernetRepr eth;
  if (EthernetRepr::parse(frame, eth) != ParseError::kOk || eth.ethertype != kEtherTypeArp)
    return false;
  ArpRepr a;
  if (ArpRepr::parse(frame.subspan(eth.header_len()), a) != ParseError::kOk) return true;
  counters_.inc(Counter::arp_received);
  const Gid sender = ipv4_mapped_gid(a.spa);
  const bool for_us = cfg_.ipv4 && a.tpa == *cfg_.ipv4;
  // Learn the sender (RFC 826: update an existing entry; add one when the request is for us).
  Neighbor* n = find_neighbor(sender);
  if (n == nullptr && for_us) {
    neighbors_.push_back(std::make_unique<Neighbor>());
    n = neighbors_.back().get();
    n->ip = sender;
    n->timer.owner = n;
    n->timer.kind = kTimerNeighbor;
  }
  if (n != nullptr && !n->is_static) {
    n->mac = a.sha;
    n->state = NeighborState::kReachable;
    timers_.cancel(n->timer);
  }
  if (for_us && a.oper == ArpRepr::kRequest) {
    ArpRepr r;
    r.oper = ArpRepr::kReply;
    r.sha = mac_;
    r.spa = *cfg_.ipv4;
    r.tha = a.sha;
    r.tpa = a.spa;
    counters_.inc(Counter::arp_replies_sent);
    send_arp(r, a.sha);
  }
  return true;
}

}  // namespace uroce

// Neighbour resolution feeding the neighbour cache: ARP for IPv4 (RFC 826) and neighbour
// discovery for IPv6 (RFC 4861: solicitations to the solicited-node multicast group,
// advertisements with the target link-layer address option).
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

Neighbor* Engine::find_or_add_neighbor(const Gid& ip) {
  if (Neighbor* n = find_neighbor(ip)) return n;
  neighbors_.push_back(std::make_unique<Neighbor>());
  Neighbor* n = neighbors_.back().get();
  n->ip = ip;
  n->timer.owner = n;
  n->timer.kind = kTimerNeighbor;
  return n;
}

EthernetRepr Engine::eth_to(const MacAddr& dst, uint16_t ethertype) const {
  EthernetRepr eth;
  eth.dst = dst;
  eth.src = mac_;
  eth.ethertype = ethertype;
  if (cfg_.vlan_id != 0) {
    eth.has_vlan = true;
    eth.vid = cfg_.vlan_id;
  }
  return eth;
}

void Engine::set_neighbor(const Gid& ip, const MacAddr& mac) {
  Neighbor* n = find_or_add_neighbor(ip);
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
  if (is_multicast_gid(ip)) {  // a group: nobody to ask
    *mac = multicast_mac(ip);
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
  if (is_multicast_gid(ip)) {  // a group: its MAC, no ARP
    *mac = multicast_mac(ip);
    return NeighborState::kReachable;
  }
  Neighbor* n = find_neighbor(ip);
  if (n != nullptr && n->state == NeighborState::kReachable) {
    *mac = n->mac;
    return NeighborState::kReachable;
  }
  if (n != nullptr && n->state == NeighborState::kIncomplete) return n->state;
  // IPv4 needs an address to ask from; IPv6 always has one: the link-local (GID index 0).
  if (is_ipv4_mapped(ip) && !cfg_.ipv4) return NeighborState::kFailed;
  if (n == nullptr) n = find_or_add_neighbor(ip);
  n->state = NeighborState::kIncomplete;
  n->tries = 0;
  send_arp_request(n);
  return n->state;
}

void Engine::send_arp_request(Neighbor* n) {
  ++n->tries;
  counters_.inc(Counter::arp_requests_sent);
  if (!is_ipv4_mapped(n->ip)) {
    // From the address of the target's scope (RFC 4861 7.2.2): the link-local one for a
    // link-local target, or when there is no global address.
    const bool link_local = n->ip[0] == 0xfe && (n->ip[1] & 0xc0) == 0x80;
    const Ipv6Addr src = link_local || !cfg_.ipv6 ? gids_[0] : *cfg_.ipv6;
    send_nd(kNeighborSolicitation, n->ip, src, solicited_node(n->ip),
            solicited_node_mac(n->ip), mac_);
    flush_tx();
    timers_.arm(n->timer, now_ + kArpRetryNs);
    return;
  }
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
  const EthernetRepr eth = eth_to(dst, kEtherTypeArp);
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
  learn_neighbor(sender, a.sha, for_us);
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

// ---- IPv6 neighbour discovery -----------------------------------------------------------------

Ipv6Addr Engine::solicited_node(const Ipv6Addr& target) {
  Ipv6Addr g = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0, 0, 0};
  g[13] = target[13];
  g[14] = target[14];
  g[15] = target[15];
  return g;
}

MacAddr Engine::solicited_node_mac(const Ipv6Addr& target) {
  return {0x33, 0x33, 0xff, target[13], target[14], target[15]};
}

void Engine::send_nd(uint8_t type, const Ipv6Addr& target, const Ipv6Addr& src,
                     const Ipv6Addr& dst, const MacAddr& dst_mac, const MacAddr& lladdr) {
  // ICMPv6: type, code, checksum, 4 bytes (reserved / NA flags), target, one link-layer
  // address option (type 1 source for NS, 2 target for NA; length 1 = 8 bytes).
  constexpr size_t kIcmpLen = 4 + 4 + 16 + 8;
  uint8_t icmp[kIcmpLen] = {};
  icmp[0] = type;
  if (type == kNeighborAdvertisement) icmp[4] = 0x60;  // solicited + override
  std::memcpy(icmp + 8, target.data(), 16);
  icmp[24] = type == kNeighborSolicitation ? 1 : 2;
  icmp[25] = 1;
  std::memcpy(icmp + 26, lladdr.data(), 6);
  // Checksum over the IPv6 pseudo-header and the message.
  uint8_t pseudo[40 + kIcmpLen] = {};
  std::memcpy(pseudo, src.data(), 16);
  std::memcpy(pseudo + 16, dst.data(), 16);
  pseudo[35] = kIcmpLen;
  pseudo[39] = kIpProtoIcmpv6;
  std::memcpy(pseudo + 40, icmp, kIcmpLen);
  store_be16(icmp + 2, internet_checksum(Bytes(pseudo, sizeof pseudo)));

  Frame* f = tx_alloc();
  if (f == nullptr) return;
  const EthernetRepr eth = eth_to(dst_mac, kEtherTypeIpv6);
  Ipv6Repr ip;
  ip.src = src;
  ip.dst = dst;
  ip.next_header = kIpProtoIcmpv6;
  ip.hop_limit = 255;  // RFC 4861: anything else proves the packet was routed: ignore it
  ip.payload_len = kIcmpLen;
  const size_t hl = eth.header_len();
  eth.emit(f->room());
  ip.emit(f->room().subspan(hl));
  std::memcpy(f->data + hl + Ipv6View::kLen, icmp, kIcmpLen);
  f->len = static_cast<uint32_t>(hl + Ipv6View::kLen + kIcmpLen);
  tx_frame(f);
}

bool Engine::handle_nd(Bytes frame) {
  EthernetRepr eth;
  Ipv6Repr ip;
  if (EthernetRepr::parse(frame, eth) != ParseError::kOk || eth.ethertype != kEtherTypeIpv6)
    return false;
  Bytes l3 = frame.subspan(eth.header_len());
  if (Ipv6Repr::parse(l3, ip) != ParseError::kOk || ip.next_header != kIpProtoIcmpv6)
    return false;
  Bytes icmp = Ipv6View(l3).payload();
  if (icmp.size() < 24 || (icmp[0] != kNeighborSolicitation && icmp[0] != kNeighborAdvertisement))
    return false;
  if (ip.hop_limit != 255 || icmp[1] != 0) return true;  // not valid ND: ignore
  counters_.inc(Counter::arp_received);
  Ipv6Addr target;
  std::memcpy(target.data(), icmp.data() + 8, 16);
  // The link-layer address option (source for NS, target for NA), if present.
  std::optional<MacAddr> lladdr;
  for (size_t off = 24; off + 8 <= icmp.size() && icmp[off + 1] != 0;
       off += size_t{icmp[off + 1]} * 8) {
    if ((icmp[off] == 1 || icmp[off] == 2) && icmp[off + 1] == 1) {
      MacAddr m;
      std::memcpy(m.data(), icmp.data() + off + 2, 6);
      lladdr = m;
    }
  }
  const bool ours = std::find(gids_.begin(), gids_.end(), target) != gids_.end();
  if (icmp[0] == kNeighborSolicitation) {
    if (!ours) return true;
    const bool dad = std::all_of(ip.src.begin(), ip.src.end(), [](uint8_t b) { return b == 0; });
    if (lladdr && !dad) learn_neighbor(ip.src, *lladdr, true);
    counters_.inc(Counter::arp_replies_sent);
    // Reply from the address asked about, to the asker (or all-nodes for a DAD probe).
    const Ipv6Addr all_nodes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
    send_nd(kNeighborAdvertisement, target, target, dad ? all_nodes : ip.src,
            dad ? MacAddr{0x33, 0x33, 0, 0, 0, 1} : (lladdr ? *lladdr : eth.src), mac_);
  } else if (lladdr) {
    learn_neighbor(target, *lladdr, false);
  }
  return true;
}

void Engine::learn_neighbor(const Gid& ip, const MacAddr& mac, bool create) {
  Neighbor* n = create ? find_or_add_neighbor(ip) : find_neighbor(ip);
  if (n != nullptr && !n->is_static) {
    n->mac = mac;
    n->state = NeighborState::kReachable;
    timers_.cancel(n->timer);
  }
}

}  // namespace uroce

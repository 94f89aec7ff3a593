// Flow rules: compiling ibv_flow_attr specs and matching frames against them (flow.h).
#include "engine/flow.h"

#include <netinet/in.h>

#include <cerrno>
#include <cstring>

namespace uroce {

namespace {

constexpr uint16_t kVlan = 0x8100, kQinQ = 0x88A8, kIpv4 = 0x0800, kIpv6 = 0x86DD;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
/// The bytes as they lie in the frame, read into a host integer unchanged (network order, as
/// the ibv_flow_* filters keep addresses, ports and the EtherType).
template <typename T>
T raw(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
bool masked_equal(T field, T val, T mask) {
  return (field & mask) == (val & mask);
}

template <size_t N>
bool masked_equal(const std::array<uint8_t, N>& field, const uint8_t (&val)[N],
                  const uint8_t (&mask)[N]) {
  for (size_t i = 0; i < N; ++i)
    if ((field[i] & mask[i]) != (val[i] & mask[i])) return false;
  return true;
}

/// Bytes past a spec's known struct must be zero (a newer header's fields we cannot honour).
bool tail_is_zero(const uint8_t* p, size_t known, size_t size) {
  for (size_t i = known; i < size; ++i)
    if (p[i] != 0) return false;
  return true;
}

}  // namespace

bool read_fields(std::span<const uint8_t> frame, FrameFields* out) {
  *out = FrameFields{};
  const uint8_t* d = frame.data();
  const size_t n = frame.size();
  if (n < 14) return false;
  std::memcpy(out->dst.data(), d, 6);
  std::memcpy(out->src.data(), d + 6, 6);
  size_t off = 12;
  uint16_t type = be16(d + off);
  bool tagged = false;
  while ((type == kVlan || type == kQinQ) && n >= off + 6) {
    if (!tagged) out->vlan_tag = raw<uint16_t>(d + off + 2);
    tagged = true;
    off += 4;
    type = be16(d + off);
  }
  out->ether_type = raw<uint16_t>(d + off);
  off += 2;
  bool fragment = false;
  uint8_t proto = 0;
  if (type == kIpv4 && n >= off + 20 && (d[off] >> 4) == 4) {
    const size_t ihl = size_t{d[off] & 0x0Fu} * 4;
    out->has_ipv4 = true;
    out->ip4_tos = d[off + 1];
    out->ip4_flags = static_cast<uint8_t>(d[off + 6] >> 5);
    out->ip4_ttl = d[off + 8];
    out->ip4_proto = proto = d[off + 9];
    out->ip4_src = raw<uint32_t>(d + off + 12);
    out->ip4_dst = raw<uint32_t>(d + off + 16);
    fragment = (be16(d + off + 6) & 0x1FFF) != 0;
    off += ihl < 20 ? 20 : ihl;
  } else if (type == kIpv6 && n >= off + 40 && (d[off] >> 4) == 6) {
    out->has_ipv6 = true;
    const uint32_t word = static_cast<uint32_t>(d[off]) << 24 | static_cast<uint32_t>(d[off + 1]) << 16 |
                          static_cast<uint32_t>(d[off + 2]) << 8 | d[off + 3];
    out->ip6_traffic_class = static_cast<uint8_t>(word >> 20);
    out->ip6_flow_label = htonl(word & 0xFFFFF);
    out->ip6_next_hdr = proto = d[off + 6];
    out->ip6_hop_limit = d[off + 7];
    std::memcpy(out->ip6_src.data(), d + off + 8, 16);
    std::memcpy(out->ip6_dst.data(), d + off + 24, 16);
    off += 40;
  } else {
    return true;
  }
  if (!fragment && (proto == IPPROTO_TCP || proto == IPPROTO_UDP) && n >= off + 4) {
    out->l4 = proto;
    out->src_port = raw<uint16_t>(d + off);
    out->dst_port = raw<uint16_t>(d + off + 2);
  }
  return true;
}

bool FlowRule::matches(const FrameFields& f) const {
  if (has_eth) {
    if (!masked_equal(f.dst, eth_val.dst_mac, eth_mask.dst_mac) ||
        !masked_equal(f.src, eth_val.src_mac, eth_mask.src_mac) ||
        !masked_equal(f.ether_type, eth_val.ether_type, eth_mask.ether_type) ||
        !masked_equal(f.vlan_tag, eth_val.vlan_tag, eth_mask.vlan_tag))
      return false;
  }
  switch (l3) {
    case Need::kAny: break;
    case Need::kIpv4:
      if (!f.has_ipv4 || !masked_equal(f.ip4_src, ip4_val.src_ip, ip4_mask.src_ip) ||
          !masked_equal(f.ip4_dst, ip4_val.dst_ip, ip4_mask.dst_ip) ||
          !masked_equal(f.ip4_proto, ip4_val.proto, ip4_mask.proto) ||
          !masked_equal(f.ip4_tos, ip4_val.tos, ip4_mask.tos) ||
          !masked_equal(f.ip4_ttl, ip4_val.ttl, ip4_mask.ttl) ||
          !masked_equal(f.ip4_flags, ip4_val.flags, ip4_mask.flags))
        return false;
      break;
    case Need::kIpv6:
      if (!f.has_ipv6 || !masked_equal(f.ip6_src, ip6_val.src_ip, ip6_mask.src_ip) ||
          !masked_equal(f.ip6_dst, ip6_val.dst_ip, ip6_mask.dst_ip) ||
          !masked_equal(f.ip6_flow_label, ip6_val.flow_label, ip6_mask.flow_label) ||
          !masked_equal(f.ip6_next_hdr, ip6_val.next_hdr, ip6_mask.next_hdr) ||
          !masked_equal(f.ip6_traffic_class, ip6_val.traffic_class, ip6_mask.traffic_class) ||
          !masked_equal(f.ip6_hop_limit, ip6_val.hop_limit, ip6_mask.hop_limit))
        return false;
      break;
  }
  if (l4 != 0 && (f.l4 != l4 || !masked_equal(f.src_port, ports_val.src_port, ports_mask.src_port) ||
                  !masked_equal(f.dst_port, ports_val.dst_port, ports_mask.dst_port)))
    return false;
  return true;
}

int compile_flow(const ibv_flow_attr* attr, FlowRule* out) {
  *out = FlowRule{};
  // attr->size is not looked at: programs set it to the attribute's own size (pyverbs) or to
  // that and the specs' (the kernel's ABI); libibverbs walks the specs by their own sizes.
  if (attr == nullptr || attr->comp_mask != 0) return EINVAL;
  if (attr->flags & ~static_cast<uint32_t>(IBV_FLOW_ATTR_FLAGS_DONT_TRAP | IBV_FLOW_ATTR_FLAGS_EGRESS))
    return EINVAL;
  // Egress rules steer what QPs send; the sniffer would see RoCE's frames too.
  if ((attr->flags & IBV_FLOW_ATTR_FLAGS_EGRESS) || attr->type == IBV_FLOW_ATTR_SNIFFER)
    return EOPNOTSUPP;
  if (attr->type != IBV_FLOW_ATTR_NORMAL && attr->type != IBV_FLOW_ATTR_ALL_DEFAULT &&
      attr->type != IBV_FLOW_ATTR_MC_DEFAULT)
    return EINVAL;
  if (attr->type != IBV_FLOW_ATTR_NORMAL && attr->num_of_specs != 0) return EINVAL;
  out->type = attr->type;
  out->priority = attr->priority;
  const auto* base = reinterpret_cast<const uint8_t*>(attr);
  size_t off = sizeof *attr;
  bool has_ip4 = false, has_ip6 = false;
  for (unsigned i = 0; i < attr->num_of_specs; ++i) {
    ibv_flow_spec hdr;
    std::memcpy(&hdr.hdr, base + off, sizeof hdr.hdr);
    const size_t size = hdr.hdr.size;
    if (size < sizeof hdr.hdr) return EINVAL;
    const uint8_t* p = base + off;
    // Each spec copied whole (the caller's bytes need not be aligned for it).
    auto take = [&](auto* spec) {
      if (size < sizeof *spec || !tail_is_zero(p, sizeof *spec, size)) return false;
      std::memcpy(spec, p, sizeof *spec);
      return true;
    };
    switch (static_cast<unsigned>(hdr.hdr.type)) {
      case IBV_FLOW_SPEC_ETH: {
        ibv_flow_spec_eth s;
        if (!take(&s) || out->has_eth) return EINVAL;
        out->has_eth = true;
        out->eth_val = s.val;
        out->eth_mask = s.mask;
        break;
      }
      case IBV_FLOW_SPEC_IPV4: {
        ibv_flow_spec_ipv4 s;
        if (!take(&s) || has_ip4 || has_ip6) return EINVAL;
        has_ip4 = true;
        out->ip4_val.src_ip = s.val.src_ip;
        out->ip4_val.dst_ip = s.val.dst_ip;
        out->ip4_mask.src_ip = s.mask.src_ip;
        out->ip4_mask.dst_ip = s.mask.dst_ip;
        break;
      }
      case IBV_FLOW_SPEC_IPV4_EXT: {
        ibv_flow_spec_ipv4_ext s;
        if (!take(&s) || has_ip4 || has_ip6) return EINVAL;
        has_ip4 = true;
        out->ip4_val = s.val;
        out->ip4_mask = s.mask;
        break;
      }
      case IBV_FLOW_SPEC_IPV6: {
        ibv_flow_spec_ipv6 s;
        if (!take(&s) || has_ip4 || has_ip6) return EINVAL;
        has_ip6 = true;
        out->ip6_val = s.val;
        out->ip6_mask = s.mask;
        break;
      }
      case IBV_FLOW_SPEC_TCP:
      case IBV_FLOW_SPEC_UDP: {
        ibv_flow_spec_tcp_udp s;
        if (!take(&s) || out->l4 != 0) return EINVAL;
        out->l4 = hdr.hdr.type == IBV_FLOW_SPEC_TCP ? IPPROTO_TCP : IPPROTO_UDP;
        out->ports_val = s.val;
        out->ports_mask = s.mask;
        break;
      }
      case IBV_FLOW_SPEC_ACTION_DROP: {
        ibv_flow_spec_action_drop s;
        if (!take(&s) || out->drop) return EINVAL;
        out->drop = true;
        break;
      }
      default: return EOPNOTSUPP;  // tunnels, GRE, MPLS, ESP, inner headers, tags, counters
    }
    off += size;
  }
  out->l3 = has_ip4 ? FlowRule::Need::kIpv4 : has_ip6 ? FlowRule::Need::kIpv6 : FlowRule::Need::kAny;
  // The layers must agree: an L3 spec under an Ethernet spec whose EtherType says otherwise,
  // or an L4 spec under an L3 spec whose protocol says otherwise, matches nothing: refused.
  if (out->has_eth && out->eth_mask.ether_type != 0 && out->l3 != FlowRule::Need::kAny) {
    const uint16_t want = htons(has_ip4 ? kIpv4 : kIpv6);
    if ((out->eth_val.ether_type & out->eth_mask.ether_type) != (want & out->eth_mask.ether_type))
      return EINVAL;
  }
  if (out->l4 != 0) {
    const uint8_t val = has_ip4 ? out->ip4_val.proto : out->ip6_val.next_hdr;
    const uint8_t mask = has_ip4 ? out->ip4_mask.proto : out->ip6_mask.next_hdr;
    if ((val & mask) != (out->l4 & mask)) return EINVAL;
  }
  return 0;
}

uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input) {
  // For every set bit of the input, the 32 key bits starting at that bit's position are
  // XORed into the result (the key must be 4 bytes longer than the input).
  const auto key_at = [&key](size_t j) -> uint32_t { return j < key.size() ? key[j] : 0; };
  uint32_t result = 0;
  uint32_t window = key_at(0) << 24 | key_at(1) << 16 | key_at(2) << 8 | key_at(3);
  for (size_t i = 0; i < input.size(); ++i) {
    for (int bit = 7; bit >= 0; --bit) {
      if ((input[i] >> bit) & 1) result ^= window;
      window = window << 1 | ((key_at(i + 4) >> bit) & 1);
    }
  }
  return result;
}

}  // namespace uroce

// Flow steering for raw-packet QPs (ibv_create_flow(3)): which QP a received Ethernet frame
// that is not RoCE goes to. A rule is the ibv_flow_attr's specs (Ethernet, IPv4, IPv6, TCP,
// UDP headers, each a value and a mask) compiled into one list of masked fields; a frame is
// read once into the same fields and compared. No engine state here: the table is the
// engine's (raw.cc), this is what a rule is and how a frame meets it.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <span>

namespace uroce {

/// What a flow can look at in one frame, in network byte order as the ibv_flow_* filters
/// hold them. Layers a frame does not have stay zero and their `has_*` false.
struct FrameFields {
  std::array<uint8_t, 6> dst{}, src{};
  uint16_t ether_type = 0;  // after any VLAN tag (big endian, as in the frame)
  uint16_t vlan_tag = 0;    // the first 802.1Q tag's TCI, 0 without one
  bool has_ipv4 = false, has_ipv6 = false;
  uint32_t ip4_src = 0, ip4_dst = 0;
  uint8_t ip4_proto = 0, ip4_tos = 0, ip4_ttl = 0, ip4_flags = 0;
  std::array<uint8_t, 16> ip6_src{}, ip6_dst{};
  uint32_t ip6_flow_label = 0;  // 20 bits, network order (as the kernel's ABI takes the filter's)
  uint8_t ip6_next_hdr = 0, ip6_traffic_class = 0, ip6_hop_limit = 0;
  uint8_t l4 = 0;  // IPPROTO_TCP or IPPROTO_UDP when ports were read, else 0
  uint16_t src_port = 0, dst_port = 0;
};

/// Reads the fields of an Ethernet frame (one 802.1Q / 802.1ad tag, IPv4 with options,
/// IPv6 without extension headers, TCP and UDP ports of an unfragmented packet). False for a
/// frame shorter than an Ethernet header.
bool read_fields(std::span<const uint8_t> frame, FrameFields* out);

/// One compiled rule: what each layer must be. Unused layers match anything.
struct FlowRule {
  enum class Need : uint8_t { kAny, kIpv4, kIpv6 };
  ibv_flow_attr_type type = IBV_FLOW_ATTR_NORMAL;
  uint16_t priority = 0;
  bool drop = false;  // IBV_FLOW_SPEC_ACTION_DROP: matching frames go nowhere
  bool has_eth = false;
  ibv_flow_eth_filter eth_val{}, eth_mask{};
  Need l3 = Need::kAny;
  ibv_flow_ipv4_ext_filter ip4_val{}, ip4_mask{};
  ibv_flow_ipv6_filter ip6_val{}, ip6_mask{};
  uint8_t l4 = 0;  // IPPROTO_TCP / IPPROTO_UDP when a TCP or UDP spec is given
  ibv_flow_tcp_udp_filter ports_val{}, ports_mask{};

  bool matches(const FrameFields& f) const;
};

/// Compiles an ibv_flow_attr and the num_of_specs specs behind it (each as long as its own
/// size says). 0, or the errno ibv_create_flow gives: EINVAL for a malformed attribute (a
/// spec smaller than its type, two specs of one layer, a TCP and a UDP spec, an L4 spec
/// whose L3 says another protocol, a default rule with specs), EOPNOTSUPP for what uroce does
/// not match on (tunnels, GRE, MPLS, ESP, inner headers, tags, counters, action handles, the
/// sniffer type, egress rules).
int compile_flow(const ibv_flow_attr* attr, FlowRule* out);

/// The Toeplitz hash of `input` under `key` (RSS's, as NICs compute it; `key` should be at
/// least 4 bytes longer than `input`, missing key bits count as 0).
uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input);

}  // namespace uroce

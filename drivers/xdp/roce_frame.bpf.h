// What uroce's two BPF programs (steer.bpf.c, shield.bpf.c) share: the map of the device's
// addresses and the test "is this frame RoCEv2, and for whom".
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCE_PORT 4791

struct addr16 {
  __u8 b[16];
};

// The device's addresses, 16 bytes each (IPv4 as ::ffff:a.b.c.d), filled by uroce.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 64);
  __type(key, struct addr16);
  __type(value, __u8);
} uroce_addrs SEC(".maps");

struct vlan_hdr {
  __be16 tci;
  __be16 proto;
};

// ROCE_SHORT: the headers go past `end` (not all of them in the readable part).
enum roce_kind { NOT_ROCE, ROCE_OURS, ROCE_MULTICAST, ROCE_OTHERS, ROCE_SHORT };

/// Is the frame in [data, end) UDP to port 4791 (not an IPv4 fragment; one VLAN tag at
/// most), and if so, addressed to one of the device's addresses, a multicast group, or
/// someone else? Only the headers are read.
static __always_inline enum roce_kind roce_frame(void* data, void* end) {
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return ROCE_SHORT;
  __be16 proto = eth->h_proto;
  void* l3 = eth + 1;
  if (proto == bpf_htons(ETH_P_8021Q)) {  // one VLAN tag (uroce's `vlan` setting)
    struct vlan_hdr* v = l3;
    if ((void*)(v + 1) > end) return ROCE_SHORT;
    proto = v->proto;
    l3 = v + 1;
  }
  struct addr16 dst = {};
  struct udphdr* udp;
  int multicast;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = l3;
    if ((void*)(ip + 1) > end) return ROCE_SHORT;
    if (ip->protocol != IPPROTO_UDP || ip->ihl < 5) return NOT_ROCE;
    if (ip->frag_off & bpf_htons(0x3FFF)) return NOT_ROCE;  // fragments: the kernel's
    udp = (void*)ip + ip->ihl * 4;
    dst.b[10] = 0xFF;
    dst.b[11] = 0xFF;
    __builtin_memcpy(&dst.b[12], &ip->daddr, 4);
    multicast = (dst.b[12] & 0xF0) == 0xE0;
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = l3;
    if ((void*)(ip6 + 1) > end) return ROCE_SHORT;
    if (ip6->nexthdr != IPPROTO_UDP) return NOT_ROCE;
    udp = (void*)(ip6 + 1);
    __builtin_memcpy(dst.b, &ip6->daddr, 16);
    multicast = dst.b[0] == 0xFF;
  } else {
    return NOT_ROCE;
  }
  if ((void*)(udp + 1) > end) return ROCE_SHORT;
  if (udp->dest != bpf_htons(ROCE_PORT)) return NOT_ROCE;
  if (multicast) return ROCE_MULTICAST;
  return bpf_map_lookup_elem(&uroce_addrs, &dst) != 0 ? ROCE_OURS : ROCE_OTHERS;
}

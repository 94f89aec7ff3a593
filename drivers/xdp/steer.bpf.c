// uroce's XDP program for its AF_XDP port (drivers/xdp/xdp_port.cc; compiled with clang
// -target bpf, embedded in the library). It hands the AF_XDP socket only the frames uroce is for: UDP to port 4791
// (RoCEv2) addressed to one of the device's own IP addresses, or to a multicast group; every
// other frame (ARP, ICMP, the kernel's TCP and UDP, RoCE for other addresses) goes on to the
// kernel as if no program were there. DPDK's default program instead redirects every frame of
// the queue, and the kernel's own traffic on the interface stops.
//
// Maps (uroce fills them once it has attached the program):
//   xsks_map     the AF_XDP sockets, by receive queue index (one on every queue)
//   uroce_addrs  the device's addresses, 16 bytes each (IPv4 as ::ffff:a.b.c.d)
//   uroce_count  per-CPU counters: [0] frames redirected, [1] frames passed to the kernel
//
// Section "xdp.frags": the program may see frames longer than a page (veth at MTU 9000 and
// RoCE MTU 4096). Only the headers are read, and they are in the first fragment.
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

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 64);
  __type(key, struct addr16);
  __type(value, __u8);
} uroce_addrs SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} uroce_count SEC(".maps");

struct vlan_hdr {
  __be16 tci;
  __be16 proto;
};

static __always_inline int count(__u32 which, int verdict) {
  __u64* c = bpf_map_lookup_elem(&uroce_count, &which);
  if (c) *c += 1;
  return verdict;
}

/// Is `a` one of the device's addresses?
static __always_inline int ours(const struct addr16* a) {
  return bpf_map_lookup_elem(&uroce_addrs, a) != 0;
}

SEC("xdp.frags")
int uroce_steer(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return count(1, XDP_PASS);
  __be16 proto = eth->h_proto;
  void* l3 = eth + 1;
  if (proto == bpf_htons(ETH_P_8021Q)) {  // one VLAN tag (uroce's `vlan` setting)
    struct vlan_hdr* v = l3;
    if ((void*)(v + 1) > end) return count(1, XDP_PASS);
    proto = v->proto;
    l3 = v + 1;
  }
  struct addr16 dst = {};
  struct udphdr* udp;
  int multicast;
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = l3;
    if ((void*)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl < 5)
      return count(1, XDP_PASS);
    if (ip->frag_off & bpf_htons(0x3FFF)) return count(1, XDP_PASS);  // fragments: the kernel's
    udp = (void*)ip + ip->ihl * 4;
    dst.b[10] = 0xFF;
    dst.b[11] = 0xFF;
    __builtin_memcpy(&dst.b[12], &ip->daddr, 4);
    multicast = (dst.b[12] & 0xF0) == 0xE0;
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = l3;
    if ((void*)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP) return count(1, XDP_PASS);
    udp = (void*)(ip6 + 1);
    __builtin_memcpy(dst.b, &ip6->daddr, 16);
    multicast = dst.b[0] == 0xFF;
  } else {
    return count(1, XDP_PASS);
  }
  if ((void*)(udp + 1) > end || udp->dest != bpf_htons(ROCE_PORT)) return count(1, XDP_PASS);
  if (!multicast && !ours(&dst)) return count(1, XDP_PASS);
  // No socket on this queue (uroce not running on it): the kernel's, as before.
  const long verdict = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
  return count(verdict == XDP_REDIRECT ? 0 : 1, (int)verdict);
}

char _license[] SEC("license") = "Dual BSD/GPL";

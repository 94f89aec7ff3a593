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
#include "roce_frame.bpf.h"

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} uroce_count SEC(".maps");

static __always_inline int count(__u32 which, int verdict) {
  __u64* c = bpf_map_lookup_elem(&uroce_count, &which);
  if (c) *c += 1;
  return verdict;
}

SEC("xdp.frags")
int uroce_steer(struct xdp_md* ctx) {
  const enum roce_kind k = roce_frame((void*)(long)ctx->data, (void*)(long)ctx->data_end);
  if (k != ROCE_OURS && k != ROCE_MULTICAST) return count(1, XDP_PASS);
  // No socket on this queue (uroce not running on it): the kernel's, as before.
  const long verdict = bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
  return count(verdict == XDP_REDIRECT ? 0 : 1, (int)verdict);
}

char _license[] SEC("license") = "Dual BSD/GPL";

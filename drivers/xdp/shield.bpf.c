// uroce's kernel shield for the af_packet port (drivers/xdp/kernel_shield.cc; compiled with
// clang -target bpf, embedded in the library). The af_packet port reads its frames from a
// packet socket, which sees them before the kernel's own protocols do; the kernel then runs
// every RoCE frame through its IP and UDP layers too, only for uroce's quiet socket to throw
// it away (on veth that work is done on the sending CPU, which limits a bulk transfer). This
// program, at the interface's tc ingress hook (after the packet sockets' taps, before IP),
// drops UDP 4791 frames addressed to one of the device's own addresses there; everything
// else (ARP, ICMP, the kernel's TCP and UDP, RoCE for other addresses, multicast) goes on.
//
// Maps (uroce fills them before it attaches the program):
//   uroce_addrs  the device's addresses, 16 bytes each (IPv4 as ::ffff:a.b.c.d)
//   uroce_count  per-CPU counters: [0] frames kept from the kernel
#include "roce_frame.bpf.h"

// tcx verdicts (Linux 6.6; older uapi headers lack them): on to the next program, or drop.
#define UROCE_TCX_NEXT (-1)
#define UROCE_TCX_DROP 2

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} uroce_count SEC(".maps");

// What roce_frame reads: Ethernet, a VLAN tag, IPv4 with options (or IPv6), UDP.
#define UROCE_HEADERS 86

SEC("tc")
int uroce_shield(struct __sk_buff* skb) {
  enum roce_kind k = roce_frame((void*)(long)skb->data, (void*)(long)skb->data_end);
  // A frame written into a packet socket's transmit ring (DPDK's net_af_packet sends so) has
  // only its Ethernet header in the skb's linear part, the rest in pages the program cannot
  // read directly: make the headers linear, then look again (only for such frames: a pull
  // copies, and a cloned skb's head with it).
  if (k == ROCE_SHORT && skb->len > skb->data_end - skb->data) {
    bpf_skb_pull_data(skb, skb->len < UROCE_HEADERS ? skb->len : UROCE_HEADERS);
    k = roce_frame((void*)(long)skb->data, (void*)(long)skb->data_end);
  }
  if (k != ROCE_OURS) return UROCE_TCX_NEXT;
  __u32 zero = 0;
  __u64* c = bpf_map_lookup_elem(&uroce_count, &zero);
  if (c) *c += 1;
  return UROCE_TCX_DROP;
}

char _license[] SEC("license") = "Dual BSD/GPL";

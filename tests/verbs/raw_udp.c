// A raw Ethernet program, as a user writes one against rdma-core's libibverbs (it knows
// nothing of uroce): a raw-packet QP with a flow rule for UDP to its own address and port,
// which takes COUNT datagrams a kernel socket of the peer sends it and answers each with a
// datagram it builds itself (Ethernet, IPv4 with its checksum, UDP), sent through the QP to
// the peer's kernel socket. tests/verbs/raw_udp.sh runs it beside RoCE traffic on the same
// interface and checks what the peer's socket got.
//
// Usage: raw_udp MY_MAC MY_IP MY_PORT PEER_MAC PEER_IP PEER_PORT COUNT
// Prints "ready" once the rule is in place; exit 0 when COUNT datagrams came and went.
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOT 2048

static int parse_mac(const char* s, uint8_t* mac) {
  unsigned v[6];
  if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return -1;
  for (int i = 0; i < 6; ++i) mac[i] = (uint8_t)v[i];
  return 0;
}

static uint16_t ip_checksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += (uint32_t)(p[i] << 8 | p[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return (uint16_t)~sum;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct flow_rule {
  struct ibv_flow_attr attr;
  struct ibv_flow_spec_eth eth;
  struct ibv_flow_spec_ipv4 ip;
  struct ibv_flow_spec_tcp_udp udp;
};  // each spec as long as its size says: no padding between them

int main(int argc, char** argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: %s MY_MAC MY_IP MY_PORT PEER_MAC PEER_IP PEER_PORT COUNT\n", argv[0]);
    return 2;
  }
  uint8_t my_mac[6], peer_mac[6];
  struct in_addr my_ip, peer_ip;
  if (parse_mac(argv[1], my_mac) || parse_mac(argv[4], peer_mac) || !inet_aton(argv[2], &my_ip) ||
      !inet_aton(argv[5], &peer_ip)) {
    fprintf(stderr, "bad address\n");
    return 2;
  }
  const uint16_t my_port = (uint16_t)atoi(argv[3]), peer_port = (uint16_t)atoi(argv[6]);
  const int count = atoi(argv[7]);
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    fprintf(stderr, "no device\n");
    return 1;
  }
  struct ibv_context* ctx = ibv_open_device(list[0]);
  struct ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  struct ibv_cq* cq = pd ? ibv_create_cq(ctx, 2 * count + 8, NULL, NULL, 0) : NULL;
  uint8_t* buf = calloc((size_t)(2 * count), SLOT);
  struct ibv_mr* mr = cq ? ibv_reg_mr(pd, buf, (size_t)(2 * count) * SLOT, IBV_ACCESS_LOCAL_WRITE) : NULL;
  if (mr == NULL) {
    perror("setting up");
    return 1;
  }
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RAW_PACKET,
                                .cap = {.max_send_wr = (uint32_t)count, .max_recv_wr = (uint32_t)count,
                                        .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (qp == NULL) {
    perror("ibv_create_qp(IBV_QPT_RAW_PACKET)");
    return 1;
  }
  struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  int rc = ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PORT);
  qa.qp_state = IBV_QPS_RTR;
  rc = rc ? rc : ibv_modify_qp(qp, &qa, IBV_QP_STATE);
  qa.qp_state = IBV_QPS_RTS;
  rc = rc ? rc : ibv_modify_qp(qp, &qa, IBV_QP_STATE);
  if (rc != 0) {
    fprintf(stderr, "ibv_modify_qp: %s\n", strerror(rc));
    return 1;
  }
  for (int i = 0; i < count; ++i) {
    struct ibv_sge sge = {(uintptr_t)(buf + (size_t)i * SLOT), SLOT, mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &wr, &bad) != 0) {
      perror("ibv_post_recv");
      return 1;
    }
  }
  // UDP to my address and port, for my MAC.
  struct flow_rule rule;
  memset(&rule, 0, sizeof rule);
  rule.attr.type = IBV_FLOW_ATTR_NORMAL;
  rule.attr.size = sizeof rule;
  rule.attr.num_of_specs = 3;
  rule.attr.port = 1;
  rule.eth.type = IBV_FLOW_SPEC_ETH;
  rule.eth.size = sizeof rule.eth;
  memcpy(rule.eth.val.dst_mac, my_mac, 6);
  memset(rule.eth.mask.dst_mac, 0xFF, 6);
  rule.ip.type = IBV_FLOW_SPEC_IPV4;
  rule.ip.size = sizeof rule.ip;
  rule.ip.val.dst_ip = my_ip.s_addr;
  rule.ip.mask.dst_ip = 0xFFFFFFFF;
  rule.udp.type = IBV_FLOW_SPEC_UDP;
  rule.udp.size = sizeof rule.udp;
  rule.udp.val.dst_port = htons(my_port);
  rule.udp.mask.dst_port = 0xFFFF;
  struct ibv_flow* flow = ibv_create_flow(qp, &rule.attr);
  if (flow == NULL) {
    perror("ibv_create_flow");
    return 1;
  }
  printf("ready\n");
  fflush(stdout);

  int got = 0, sent = 0, done_sends = 0;
  const double deadline = now_s() + 30;
  while ((got < count || done_sends < count) && now_s() < deadline) {
    struct ibv_wc wc[16];
    const int k = ibv_poll_cq(cq, 16, wc);
    if (k < 0) {
      fprintf(stderr, "ibv_poll_cq failed\n");
      return 1;
    }
    if (k == 0) poll(NULL, 0, 1);
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fprintf(stderr, "completion %d: %s\n", wc[i].opcode, ibv_wc_status_str(wc[i].status));
        return 1;
      }
      if (wc[i].opcode == IBV_WC_SEND) {
        ++done_sends;
        continue;
      }
      // A datagram of the peer's: Ethernet, IPv4 (20 bytes), UDP, then the payload. Its
      // payload goes back with "re: " in front.
      const uint8_t* f = buf + wc[i].wr_id * SLOT;
      if (wc[i].byte_len < 42 || f[23] != 17 || memcmp(f, my_mac, 6) != 0) {
        fprintf(stderr, "a frame the rule should not have taken (%u bytes)\n", wc[i].byte_len);
        return 1;
      }
      const size_t len = (size_t)(f[38] << 8 | f[39]) - 8;
      if (42 + len > wc[i].byte_len || len > 1000) {
        fprintf(stderr, "a datagram longer than its frame\n");
        return 1;
      }
      ++got;
      uint8_t* o = buf + (size_t)(count + sent) * SLOT;
      const size_t plen = len + 4;
      memcpy(o, peer_mac, 6);
      memcpy(o + 6, my_mac, 6);
      o[12] = 0x08;
      o[13] = 0x00;
      uint8_t* ip = o + 14;
      memset(ip, 0, 20);
      ip[0] = 0x45;
      ip[2] = (uint8_t)((20 + 8 + plen) >> 8);
      ip[3] = (uint8_t)(20 + 8 + plen);
      ip[6] = 0x40;  // DF
      ip[8] = 64;
      ip[9] = 17;
      memcpy(ip + 12, &my_ip.s_addr, 4);
      memcpy(ip + 16, &peer_ip.s_addr, 4);
      const uint16_t sum = ip_checksum(ip, 20);
      ip[10] = (uint8_t)(sum >> 8);
      ip[11] = (uint8_t)sum;
      uint8_t* udp = ip + 20;
      udp[0] = (uint8_t)(my_port >> 8);
      udp[1] = (uint8_t)my_port;
      udp[2] = (uint8_t)(peer_port >> 8);
      udp[3] = (uint8_t)peer_port;
      udp[4] = (uint8_t)((8 + plen) >> 8);
      udp[5] = (uint8_t)(8 + plen);
      udp[6] = udp[7] = 0;  // no checksum (IPv4 allows it)
      memcpy(udp + 8, "re: ", 4);
      memcpy(udp + 12, f + 42, len);
      struct ibv_sge sge = {(uintptr_t)o, (uint32_t)(42 + plen), mr->lkey};
      struct ibv_send_wr wr = {.wr_id = 1000u + (uint64_t)sent, .sg_list = &sge, .num_sge = 1,
                               .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                         *bad;
      if (ibv_post_send(qp, &wr, &bad) != 0) {
        perror("ibv_post_send");
        return 1;
      }
      ++sent;
    }
  }
  if (got < count || done_sends < count) {
    fprintf(stderr, "%d of %d datagrams came, %d of %d answers went\n", got, count, done_sends, count);
    return 1;
  }
  printf("%d datagrams taken by the flow rule, %d answers sent\n", got, done_sends);
  if (ibv_destroy_qp(qp) != EBUSY) {
    fprintf(stderr, "ibv_destroy_qp with a flow rule on it did not say EBUSY\n");
    return 1;
  }
  rc = ibv_destroy_flow(flow);
  rc = rc ? rc : ibv_destroy_qp(qp);
  rc = rc ? rc : ibv_dereg_mr(mr);
  rc = rc ? rc : ibv_destroy_cq(cq);
  rc = rc ? rc : ibv_dealloc_pd(pd);
  rc = rc ? rc : ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(buf);
  if (rc != 0) {
    fprintf(stderr, "teardown: %s\n", strerror(rc));
    return 1;
  }
  return 0;
}

/* rdma_verify: an RC data-integrity check between two verbs devices, for interop tests.
 *
 *   server: rdma_verify [-d DEV] [-g GIDX] [-m MTU] [-p PORT] [-s SIZE] [-n ITERS] [-t TIMEOUT]
 *   client: rdma_verify ... [-P EVERY] SERVER_IP
 *
 * -t sets the QP's local ACK timeout (4.096 us * 2^TIMEOUT, 14 by default; 7 retries either
 * way); -P makes the client print "rdma_verify: round K" every EVERY rounds, flushed, so that a
 * test can damage the link while the transfer runs.
 *
 * The two sides exchange QPN, PSN, GID, R_Key and address over TCP, then the client runs
 * ITERS rounds. In round k it:
 *   1. RDMA WRITEs pattern(k) into the server's scratch area,
 *   2. RDMA READs it back and compares,
 *   3. RDMA READs the server's fixed area and compares with pattern(-1),
 *   4. FETCH_ADDs k to the server's counter and checks the returned value,
 *   5. COMPARE_SWAPs the counter (once with the right and once with a wrong compare value)
 *      and checks the returned values,
 *   6. SENDs pattern(k) with immediate data k; the server checks the bytes and the immediate
 *      and answers with a SEND, which keeps the two sides in step.
 * At the end the server checks the counter and prints "verified". SIZE is deliberately not a
 * multiple of the MTU, so every message has a short last packet. Any mismatch prints what
 * differs and exits 1. Plain C against rdma-core's libibverbs, so it runs unchanged on uroce
 * and on the kernel's rdma_rxe.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, "rdma_verify: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define PROG_FAIL FAIL
#include "prog_common.h"

struct peer {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

static struct ibv_cq *cq;
static struct ibv_qp *qp;

static uint8_t pattern_byte(long k, size_t i) {
  uint64_t x = (uint64_t)(k + 7) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (uint8_t)(x ^ (x >> 17));
}
static void fill(uint8_t *p, size_t n, long k) { for (size_t i = 0; i < n; ++i) p[i] = pattern_byte(k, i); }
static void check(const uint8_t *p, size_t n, long k, const char *what, long round) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern_byte(k, i))
      FAIL("round %ld: %s: byte %zu is 0x%02x, expected 0x%02x", round, what, i, p[i], pattern_byte(k, i));
}

/* Waits for the completion of wr_id. Completions of other work requests that arrive first are
 * kept: a receive may complete before the SEND whose ACK was lost (the peer's answer arrives
 * before the retransmitted ACK), which is legal ordering between the send and receive queues. */
static struct ibv_wc early[16];
static int early_valid[16];
static struct ibv_wc wait_wc(uint64_t wr_id, const char *what) {
  struct ibv_wc wc;
  if (wr_id < 16 && early_valid[wr_id]) {
    early_valid[wr_id] = 0;
    return early[wr_id];
  }
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) FAIL("ibv_poll_cq failed");
    if (n == 0) continue;
    if (wc.status != IBV_WC_SUCCESS)
      FAIL("%s: completion status %s (%d), vendor_err 0x%x", what, ibv_wc_status_str(wc.status), wc.status, wc.vendor_err);
    if (wc.wr_id == wr_id) return wc;
    if (wc.wr_id >= 16 || early_valid[wc.wr_id])
      FAIL("%s: unexpected completion for wr_id %llu", what, (unsigned long long)wc.wr_id);
    early[wc.wr_id] = wc;
    early_valid[wc.wr_id] = 1;
  }
}

static void post(struct ibv_send_wr *wr, const char *what) {
  struct ibv_send_wr *bad;
  int e = ibv_post_send(qp, wr, &bad);
  if (e) FAIL("%s: ibv_post_send: %s", what, strerror(e));
}

static void post_recv(struct ibv_mr *mr, void *addr, uint32_t len, uint64_t id) {
  struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(qp, &wr, &bad)) FAIL("ibv_post_recv failed");
}

int main(int argc, char **argv) {
  const char *devname = NULL;
  int gidx = 1, port = 18600, opt;
  long iters = 20, every = 0;
  int timeout = 14;
  size_t size = 10000;
  enum ibv_mtu mtu = IBV_MTU_1024;
  while ((opt = getopt(argc, argv, "d:g:m:p:s:n:t:P:")) != -1) {
    switch (opt) {
      case 'd': devname = optarg; break;
      case 'g': gidx = atoi(optarg); break;
      case 'm': mtu = mtu_of_bytes(atoi(optarg)); break;
      case 'p': port = atoi(optarg); break;
      case 's': size = (size_t)atol(optarg); break;
      case 'n': iters = atol(optarg); break;
      case 't': timeout = atoi(optarg); break;
      case 'P': every = atol(optarg); break;
      default: fprintf(stderr, "usage: rdma_verify [-d dev] [-g gid] [-m mtu] [-p port] [-s size] [-n iters] [-t timeout] [-P every] [server]\n"); return 2;
    }
  }
  const char *server_ip = optind < argc ? argv[optind] : NULL; /* set: we are the client */
  if (size < 8 || size > (64u << 20)) FAIL("-s must be 8 .. 64 MiB");
  if (timeout < 1 || timeout > 31) FAIL("-t must be 1 .. 31");

  struct ibv_device **list;
  struct ibv_context *ctx = open_named_device(devname, &list);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  /* layout: [fixed area | scratch area | local read target | send/recv buffers | counter] */
  size_t len = 5 * size + 64;
  uint8_t *buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
  memset(buf, 0, len);
  uint8_t *fixed = buf, *scratch = buf + size, *local = buf + 2 * size, *sbuf = buf + 3 * size,
          *rbuf = buf + 4 * size;
  uint64_t *counter = (uint64_t *)(buf + 5 * size + (8 - (5 * size) % 8) % 8);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
  if (!pd || !mr || !cq) FAIL("cannot create PD/MR/CQ");
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
  qp = ibv_create_qp(pd, &ia);
  if (!qp) FAIL("ibv_create_qp failed");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) FAIL("modify to INIT failed");

  struct peer me = {.qpn = qp->qp_num, .psn = (uint32_t)(getpid() * 7919) & 0xffffff, .rkey = mr->rkey,
                    .addr = (uintptr_t)buf}, them;
  if (ibv_query_gid(ctx, 1, gidx, &me.gid)) FAIL("ibv_query_gid %d failed", gidx);
  if (server_ip) fill(sbuf, size, 0); else fill(fixed, size, -1);
  *counter = 1000;
  /* The server posts its first receive before it tells the client its QPN. */
  if (!server_ip) post_recv(mr, rbuf, (uint32_t)size, 1);
  int fd = server_ip ? tcp_connect(server_ip, port) : tcp_accept(port);
  xfer(fd, &me, &them, sizeof me);

  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = them.qpn,
                          .rq_psn = them.psn, .max_dest_rd_atomic = 4, .min_rnr_timer = 12,
                          .ah_attr = {.is_global = 1, .port_num = 1,
                                      .grh = {.dgid = them.gid, .sgid_index = (uint8_t)gidx, .hop_limit = 64}}};
  if (ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) FAIL("modify to RTR failed");
  struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .sq_psn = me.psn, .timeout = (uint8_t)timeout, .retry_cnt = 7,
                          .rnr_retry = 7, .max_rd_atomic = 4};
  if (ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) FAIL("modify to RTS failed");
  char sync = 'r';  /* both sides are ready to receive */
  if (write(fd, &sync, 1) != 1 || read(fd, &sync, 1) != 1) FAIL("TCP sync failed");

  struct ibv_sge sge = {.lkey = mr->lkey};
  struct ibv_send_wr wr;
  uint64_t expect = 1000;
  for (long k = 0; k < iters; ++k) {
    if (!server_ip) {  /* server: receive pattern(k) with immediate k, answer */
      struct ibv_wc wc = wait_wc(1, "receive");
      if (wc.opcode != IBV_WC_RECV || !(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != (uint32_t)k ||
          wc.byte_len != size)
        FAIL("round %ld: receive: opcode %d flags 0x%x imm %u byte_len %u", k, wc.opcode, wc.wc_flags,
             ntohl(wc.imm_data), wc.byte_len);
      check(rbuf, size, k, "SEND payload received", k);
      post_recv(mr, rbuf, (uint32_t)size, 1);
      sge.addr = (uintptr_t)sbuf; sge.length = 8;
      memset(&wr, 0, sizeof wr);
      wr.wr_id = 2; wr.sg_list = &sge; wr.num_sge = 1; wr.opcode = IBV_WR_SEND; wr.send_flags = IBV_SEND_SIGNALED;
      post(&wr, "answer SEND");
      wait_wc(2, "answer SEND");
      continue;
    }
    if (every > 0 && k % every == 0) { printf("rdma_verify: round %ld\n", k); fflush(stdout); }
    post_recv(mr, rbuf, 8, 9);
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge; wr.num_sge = 1; wr.send_flags = IBV_SEND_SIGNALED;
    /* 1. WRITE pattern(k) into the scratch area */
    fill(sbuf, size, k);
    sge.addr = (uintptr_t)sbuf; sge.length = (uint32_t)size;
    wr.wr_id = 3; wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = them.addr + size; wr.wr.rdma.rkey = them.rkey;
    post(&wr, "WRITE"); wait_wc(3, "WRITE");
    /* 2. READ it back */
    memset(local, 0, size);
    sge.addr = (uintptr_t)local;
    wr.wr_id = 4; wr.opcode = IBV_WR_RDMA_READ;
    post(&wr, "READ scratch"); wait_wc(4, "READ scratch");
    check(local, size, k, "READ of the WRITTEN scratch area", k);
    /* 3. READ the fixed area */
    memset(local, 0, size);
    wr.wr_id = 5; wr.wr.rdma.remote_addr = them.addr;
    post(&wr, "READ fixed"); wait_wc(5, "READ fixed");
    check(local, size, -1, "READ of the fixed area", k);
    /* 4. FETCH_ADD k */
    uint64_t *result = (uint64_t *)local;
    *result = 0;
    sge.addr = (uintptr_t)result; sge.length = 8;
    uint64_t remote_counter = them.addr + (uint64_t)((uint8_t *)counter - buf);
    wr.wr_id = 6; wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.remote_addr = remote_counter; wr.wr.atomic.rkey = them.rkey; wr.wr.atomic.compare_add = (uint64_t)k;
    post(&wr, "FETCH_ADD"); wait_wc(6, "FETCH_ADD");
    if (*result != expect) FAIL("round %ld: FETCH_ADD returned %llu, expected %llu", k, (unsigned long long)*result, (unsigned long long)expect);
    expect += (uint64_t)k;
    /* 5. COMPARE_SWAP: a miss (wrong compare value) and a hit */
    wr.wr_id = 7; wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.compare_add = expect + 1; wr.wr.atomic.swap = 5;
    post(&wr, "CMP_SWAP miss"); wait_wc(7, "CMP_SWAP miss");
    if (*result != expect) FAIL("round %ld: CMP_SWAP (miss) returned %llu, expected %llu", k, (unsigned long long)*result, (unsigned long long)expect);
    wr.wr.atomic.compare_add = expect; wr.wr.atomic.swap = expect * 3 + 1;
    post(&wr, "CMP_SWAP hit"); wait_wc(7, "CMP_SWAP hit");
    if (*result != expect) FAIL("round %ld: CMP_SWAP (hit) returned %llu, expected %llu", k, (unsigned long long)*result, (unsigned long long)expect);
    expect = expect * 3 + 1;
    /* 6. SEND pattern(k) with immediate k, wait for the answer */
    sge.addr = (uintptr_t)sbuf; sge.length = (uint32_t)size;
    wr.wr_id = 8; wr.opcode = IBV_WR_SEND_WITH_IMM; wr.imm_data = htonl((uint32_t)k);
    post(&wr, "SEND"); wait_wc(8, "SEND");
    wait_wc(9, "answer receive");
  }
  /* Final handshake: the client says how the counter must end; the server checks it. */
  uint64_t final = expect;
  if (write(fd, &final, sizeof final) != (ssize_t)sizeof final || read(fd, &final, sizeof final) != (ssize_t)sizeof final)
    FAIL("TCP final exchange failed");
  if (!server_ip && *counter != final)
    FAIL("counter is %llu after %ld rounds, the client expects %llu", (unsigned long long)*counter, iters, (unsigned long long)final);
  if (!server_ip) check(scratch, size, iters - 1, "scratch area after the last WRITE", iters - 1);
  printf("rdma_verify: verified %ld rounds of %zu bytes (WRITE, READ x2, FETCH_ADD, CMP_SWAP x2, SEND+IMM)\n", iters, size);
  close(fd);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(buf);
  return 0;
}

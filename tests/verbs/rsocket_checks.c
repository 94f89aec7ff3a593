/* Checks of uroce's rsockets (stack/rdmacm/rsocket.cc) that no rdma-core example makes.
 *
 * A peer that breaks the rsocket protocol:
 *   rsocket_checks server ADDR PORT           an rsocket server: accepts, then only polls (never
 *                                             reads), and prints the connection's SO_ERROR
 *   rsocket_checks client ADDR PORT MODE      rdma_cm and verbs, no rsockets: connects with a
 *                                             valid rsocket handshake, then
 *     MODE oversize: one data message claiming 512 MiB (a receive half is 64 KiB);
 *     MODE flood:    1000 one-byte data messages while its credits allow 384.
 *
 * The server must end the connection with EPROTO (its ring of arrived messages and its
 * buffer stay in bounds; ASan checks the first), and print "error EPROTO". The client
 * ends when the server's DREQ arrives. Exit 0 on the expected outcome.
 *
 * Two threads on one socket:
 *   rsocket_checks duplex-server ADDR PORT / duplex-client ADDR PORT
 * each end sends 32 MiB and receives 32 MiB at once, a thread each, with 8 KiB socket
 * buffers: both threads keep waiting on the same socket (for data, for credits), and
 * whichever takes an event must wake the other. Every byte is checked. */
#include <pthread.h>
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)            \
  do {                              \
    if (!(cond)) {                  \
      printf("FAIL: " __VA_ARGS__); \
      printf(" (errno %d)\n", errno); \
      exit(1);                      \
    }                               \
  } while (0)

/* The handshake's private data (rdma-core's librdmacm/docs/rsocket). */
struct sge { uint64_t addr; uint32_t key; uint32_t length; };
struct conn_data {
  uint8_t version, flags;
  uint16_t credits;
  uint8_t reserved[3], iomap_scale;
  struct sge target_sgl, data_buf;
};

static int server(const char* addr, const char* port) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  inet_pton(AF_INET, addr, &sin.sin_addr);
  int l = rsocket(AF_INET, SOCK_STREAM, 0);
  CHECK(l >= 0, "rsocket");
  CHECK(rbind(l, (struct sockaddr*)&sin, sizeof sin) == 0, "rbind");
  CHECK(rlisten(l, 1) == 0, "rlisten");
  printf("listening\n");
  fflush(stdout);
  int fd = raccept(l, NULL, NULL);
  CHECK(fd >= 0, "raccept");
  /* Only polls, for errors (what arrives is never read, so the peer's messages pile up); 20 s
   * at most. */
  struct pollfd p = {.fd = fd, .events = 0};
  for (int i = 0; i < 200; ++i) {
    CHECK(rpoll(&p, 1, 100) >= 0, "rpoll");
    if (p.revents & POLLERR) break;
  }
  int err = 0;
  socklen_t len = sizeof err;
  CHECK(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0, "SO_ERROR");
  printf("error %s\n", err == EPROTO ? "EPROTO" : strerror(err));
  rclose(fd);
  rclose(l);
  return err == EPROTO ? 0 : 1;
}

static struct rdma_cm_event* expect(struct rdma_event_channel* ch, enum rdma_cm_event_type t) {
  struct rdma_cm_event* ev = NULL;
  CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
  CHECK(ev->event == t, "event %s, not %s", rdma_event_str(ev->event), rdma_event_str(t));
  return ev;
}

static int client(const char* addr, const char* port, const char* mode) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  inet_pton(AF_INET, addr, &sin.sin_addr);
  struct rdma_event_channel* ch = rdma_create_event_channel();
  CHECK(ch != NULL, "channel");
  struct rdma_cm_id* id;
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr*)&sin, 2000) == 0, "resolve_addr");
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));

  struct ibv_pd* pd = ibv_alloc_pd(id->verbs);
  struct ibv_cq* cq = ibv_create_cq(id->verbs, 2048, NULL, NULL, 0);
  CHECK(pd && cq, "pd/cq");
  struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 1024, .max_recv_wr = 64,
                                        .max_send_sge = 1, .max_recv_sge = 1,
                                        .max_inline_data = 64}};
  CHECK(rdma_create_qp(id, pd, &qa) == 0, "rdma_create_qp");
  for (int i = 0; i < 64; ++i) {  /* the server's credit messages consume receives */
    struct ibv_recv_wr wr = {0}, *bad;
    CHECK(ibv_post_recv(id->qp, &wr, &bad) == 0, "post_recv");
  }
  /* Where the server may write its credit updates and data: real, registered memory. */
  static uint8_t land[4096], rbuf[1 << 17];
  struct ibv_mr* lmr = ibv_reg_mr(pd, land, sizeof land, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_mr* rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(lmr && rmr, "reg_mr");
  struct conn_data cd = {.version = 1, .credits = htobe16(64)};
  cd.target_sgl = (struct sge){htobe64((uintptr_t)land), htobe32(lmr->rkey), htobe32(2)};
  cd.data_buf = (struct sge){htobe64((uintptr_t)rbuf), htobe32(rmr->rkey), htobe32(sizeof rbuf / 2)};
  struct rdma_conn_param cp = {.private_data = &cd, .private_data_len = sizeof cd,
                               .retry_count = 7, .rnr_retry_count = 7};
  CHECK(rdma_connect(id, &cp) == 0, "rdma_connect");
  struct rdma_cm_event* ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
  struct conn_data peer;
  CHECK(ev->param.conn.private_data_len >= sizeof peer, "no ConnData in the REP");
  memcpy(&peer, ev->param.conn.private_data, sizeof peer);
  rdma_ack_cm_event(ev);
  const uint64_t half = be64toh(peer.data_buf.addr);
  const uint32_t key = be32toh(peer.data_buf.key);
  const unsigned credits = be16toh(peer.credits);
  printf("connected: the server offers %u credits and a %u-byte half\n", credits,
         be32toh(peer.data_buf.length));

  const int oversize = strcmp(mode, "oversize") == 0;
  const int n = oversize ? 1 : 1000;
  for (int i = 0; i < n; ++i) {
    uint8_t byte = (uint8_t)i;
    struct ibv_sge sge = {(uintptr_t)&byte, 1, 0};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_INLINE | (i % 64 == 63 ? IBV_SEND_SIGNALED : 0),
                             /* data: op 0, the byte count in the low 29 bits */
                             .imm_data = htobe32(oversize ? 0x1FFFFFFF : 1),
                             .wr.rdma = {.remote_addr = half + (uint64_t)i % 4096, .rkey = key}};
    struct ibv_send_wr* bad;
    CHECK(ibv_post_send(id->qp, &wr, &bad) == 0, "post_send %d", i);
    if (i % 64 == 63) { /* keep the send queue from filling */
      struct ibv_wc wc;
      int got;
      while ((got = ibv_poll_cq(cq, 1, &wc)) == 0) {
      }
      if (got < 0 || wc.status != IBV_WC_SUCCESS) break; /* the server's QP is gone: done */
    }
  }
  printf("sent %d data messages\n", n);
  fflush(stdout);
  /* The server closes: its DREQ ends this side too. */
  for (;;) {
    CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
    const enum rdma_cm_event_type t = ev->event;
    rdma_ack_cm_event(ev);
    if (t == RDMA_CM_EVENT_DISCONNECTED) break;
  }
  printf("disconnected by the server\n");
  rdma_disconnect(id);
  return 0;
}

#define DUPLEX_BYTES (32u << 20)

static uint8_t duplex_byte(uint64_t i, int from_server) {
  return (uint8_t)((i * 2654435761u) >> 13) ^ (uint8_t)(from_server ? 0x5A : 0xA5);
}

struct duplex_rx {
  int fd, from_server;
  int ok;
};

static void* duplex_reader(void* arg) {
  struct duplex_rx* r = arg;
  static __thread uint8_t buf[65536];
  uint64_t got = 0;
  r->ok = 1;
  while (got < DUPLEX_BYTES) {
    const ssize_t n = rrecv(r->fd, buf, sizeof buf, 0);
    if (n <= 0) {
      printf("FAIL: rrecv after %llu bytes: %zd (errno %d)\n", (unsigned long long)got, n, errno);
      r->ok = 0;
      return NULL;
    }
    for (ssize_t i = 0; i < n; ++i)
      if (buf[i] != duplex_byte(got + (uint64_t)i, r->from_server)) {
        printf("FAIL: byte %llu differs\n", (unsigned long long)(got + (uint64_t)i));
        r->ok = 0;
        return NULL;
      }
    got += (uint64_t)n;
  }
  return NULL;
}

static int duplex_send(int fd, int from_server) {
  static uint8_t buf[65536];
  uint64_t sent = 0;
  while (sent < DUPLEX_BYTES) {
    const size_t k = sizeof buf;
    for (size_t i = 0; i < k; ++i) buf[i] = duplex_byte(sent + i, from_server);
    size_t off = 0;
    while (off < k) {
      const ssize_t n = rsend(fd, buf + off, k - off, 0);
      CHECK(n > 0, "rsend after %llu bytes", (unsigned long long)(sent + off));
      off += (size_t)n;
    }
    sent += k;
  }
  return 0;
}

static int duplex(const char* addr, const char* port, int server) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  inet_pton(AF_INET, addr, &sin.sin_addr);
  int s = rsocket(AF_INET, SOCK_STREAM, 0);
  CHECK(s >= 0, "rsocket");
  const int small = 8192;  /* a few messages in flight: both threads wait, often */
  CHECK(rsetsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0, "SO_SNDBUF");
  CHECK(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small) == 0, "SO_RCVBUF");
  int fd = s;
  if (server) {
    CHECK(rbind(s, (struct sockaddr*)&sin, sizeof sin) == 0, "rbind");
    CHECK(rlisten(s, 1) == 0, "rlisten");
    printf("listening\n");
    fflush(stdout);
    fd = raccept(s, NULL, NULL);
    CHECK(fd >= 0, "raccept");
  } else {
    CHECK(rconnect(s, (struct sockaddr*)&sin, sizeof sin) == 0, "rconnect");
  }
  struct duplex_rx rx = {fd, !server, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, duplex_reader, &rx) == 0, "pthread_create");
  duplex_send(fd, server);
  pthread_join(t, NULL);
  if (!rx.ok) return 1;
  printf("duplex: %u MiB each way, every byte as sent\n", DUPLEX_BYTES >> 20);
  rclose(fd);
  if (server) rclose(s);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "duplex-server") == 0) return duplex(argv[2], argv[3], 1);
  if (argc == 4 && strcmp(argv[1], "duplex-client") == 0) return duplex(argv[2], argv[3], 0);
  if (argc == 4 && strcmp(argv[1], "server") == 0) return server(argv[2], argv[3]);
  if (argc == 5 && strcmp(argv[1], "client") == 0) return client(argv[2], argv[3], argv[4]);
  fprintf(stderr, "usage: rsocket_checks server ADDR PORT | client ADDR PORT oversize|flood |\n"
                  "       duplex-server ADDR PORT | duplex-client ADDR PORT\n");
  return 2;
}

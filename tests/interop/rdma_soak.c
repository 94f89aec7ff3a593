/* rdma_soak: a data-verifying soak between two verbs devices, for long runs on damaged links.
 *
 *   rdma_soak [-d DEV] [-g GIDX] [-m MTU] [-p PORT] [-q QPS] [-s MAXSIZE] [-D SECONDS]
 *             [-S SEED] [-t TIMEOUT] [-r RATE] [-P EVERY] [SERVER_IP]
 *
 * Both sides are alike (the one given SERVER_IP connects, the other listens): each opens QPS
 * queue pairs of each transport, RC, UC and UD, and for SECONDS keeps one operation in flight
 * on every one of its QPs, towards the peer, while it checks everything the peer sends it:
 *   RC: WRITE of a random size (1..MAXSIZE) to a random offset of its inbox at the peer,
 *       then READ of it back, compared; READ of a random piece of the peer's fixed pattern,
 *       compared; FETCH_ADD and a missing or hitting CMP_SWAP on the QP's counter at the
 *       peer, each result compared with the value only this side can have left there;
 *       SEND with immediate (the message's sequence number), random size, checked on arrival
 *       byte for byte, in order and without gaps.
 *   UC: SEND with immediate, random size: a message may be lost (UC is unreliable), but one
 *       that arrives must be whole, correct and later than the last one (no duplicate, no
 *       reordering).
 *   UD: SEND with immediate up to the MTU: may be lost, and, as UD has no sequence check,
 *       may come twice or after a later one (counted as "late"); every one that arrives must
 *       be correct and come from the peer's QP of that index.
 * Every payload is a pattern of (seed, side, transport, QP, sequence number), so the receiver
 * regenerates what it must see. At the end the two sides tell each other over TCP what they
 * sent and what their counters must hold; each checks every RC message arrived, no UC/UD
 * message arrived that was not sent, and its counters.
 *
 * UC and UD have no flow control: each QP sends at most RATE messages a second (default 1000;
 * a slow peer, such as rxe in an emulated guest, wants far fewer). -t is the RC QPs' local ACK
 * timeout (4.096 us * 2^TIMEOUT, 14 by default; 7 retries).
 *
 * Every completion is accounted for: a completion with an error status, a wr_id nobody posted,
 * or a wrong byte is an error. Errors are counted, the first few printed, and the soak goes on;
 * it exits 1 if there was any. Every EVERY seconds and at the end it prints a line with what
 * moved and its own resident memory and open descriptors ("rss" and "fds"), which must stay
 * flat once running. Plain C against rdma-core's libibverbs: the same binary runs on uroce and
 * on the kernel's rdma_rxe.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, "rdma_soak: " __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)
#define PROG_FAIL DIE
#include "prog_common.h"

enum { RC, UC, UD, NT };
static const char *tname[NT] = {"RC", "UC", "UD"};
enum { MAXQ = 64, RECV_DEPTH = 8, GRH = 40 };

/* One QP's exchange with the peer, as told over TCP. */
struct wire_qp {
  uint32_t qpn, psn;
};
struct wire_side {
  uint32_t magic, nq;
  union ibv_gid gid;
  uint32_t rkey, pad;
  uint64_t addr; /* the base of its memory (layout below) */
  struct wire_qp qp[NT][MAXQ];
};
/* At the end: what each side sent, and the counters' values it left at the peer. */
struct wire_end {
  uint64_t sent[NT][MAXQ];
  uint64_t counter[MAXQ];
};

/* Memory of one side, per RC QP i: inbox[i] (MAXSIZE, the peer WRITEs and READs it back),
 * fixed[i] (MAXSIZE, a pattern the peer READs), counter[i] (8 bytes, the peer's atomics);
 * per QP of any kind: a send buffer and a read buffer (MAXSIZE each) and RECV_DEPTH receive
 * buffers (MAXSIZE + GRH each). */
static size_t maxsize = 65536;
static int nq = 4;
static uint64_t seed = 1;
static int me_side; /* 0: the listening side, 1: the connecting side */
static uint8_t *mem;
static size_t memlen;
static struct ibv_mr *mr;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qps[NT][MAXQ];
static struct ibv_ah *ahs[MAXQ];
static struct wire_side peer;
static uint32_t mtu_bytes = 1024;
static double pace_s = 0.001; /* UC, UD: one message per QP per this at most */

static size_t area; /* maxsize rounded up to 64 bytes: every area starts aligned */
static uint64_t area_off(int i) { return (uint64_t)i * area; }  /* inbox i; fixed i is nq + i */
static uint64_t counter_off(int i) { return area_off(2 * nq) + 8u * (uint64_t)i; }
static uint8_t *sbuf(int t, int i) { return mem + counter_off(nq) + area * (size_t)(2 * (t * nq + i)); }
static uint8_t *lbuf(int t, int i) { return sbuf(t, i) + area; }
static size_t rlen(void) { return (area + GRH + 63) & ~(size_t)63; }
static uint8_t *rbuf(int t, int i, int k) {
  return mem + counter_off(nq) + area * (size_t)(2 * NT * nq) + rlen() * (size_t)((t * nq + i) * RECV_DEPTH + k);
}

/* The pattern of one message: a key (who, what, which) and a byte index. */
static uint64_t key_of(int side, int t, int i, uint64_t seq) {
  return seed * 0x100000001B3ull ^ ((uint64_t)side << 62) ^ ((uint64_t)t << 58) ^ ((uint64_t)i << 50) ^ seq;
}
static uint8_t pat(uint64_t key, size_t i) {
  uint64_t x = key * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return (uint8_t)(x ^ (x >> 31));
}
static void fill(uint8_t *p, size_t n, uint64_t key, size_t from) {
  for (size_t i = 0; i < n; ++i) p[i] = pat(key, from + i);
}
static long errors;
static void error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void error(const char *fmt, ...) {
  if (++errors <= 20) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rdma_soak: ERROR: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
}
/* Compares; returns the first wrong byte's index or -1. */
static long differs(const uint8_t *p, size_t n, uint64_t key, size_t from) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pat(key, from + i)) return (long)i;
  return -1;
}

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static size_t rsize(size_t max) { return 1 + (size_t)(rnd() % max); }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "re");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = atol(line + 6);
  if (f) fclose(f);
  return kb;
}
static int fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') ++n;
  if (d) closedir(d);
  return n - 1; /* opendir's own */
}

/* ---- The sending side: one operation in flight per QP ---------------------------------- */

enum rc_step { IDLE, WRITE, READ_BACK, READ_FIXED, FADD, CSWAP, SEND };
struct qstate {
  int busy;
  enum rc_step step;
  uint64_t seq;     /* next SEND's sequence number */
  size_t len, off;  /* the WRITE / READ in flight */
  uint64_t key;     /* the pattern it carries */
  uint64_t counter; /* RC: what the peer's counter holds (only we change it) */
  uint64_t expect;  /* an atomic's expected result */
  int dead;         /* its QP failed (an error counted): no more operations on it */
  double next_at;   /* UC, UD: when it may send again (paced: they have no flow control) */
};
static struct qstate qs[NT][MAXQ];
static uint64_t sent[NT][MAXQ];
static uint64_t ops[8], bytes_moved;

static void post_send(int t, int i, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad;
  wr->wr_id = (uint64_t)(t * MAXQ + i);
  wr->send_flags |= IBV_SEND_SIGNALED;
  int e = ibv_post_send(qps[t][i], wr, &bad);
  if (e) DIE("%s QP %d: ibv_post_send: %s", tname[t], i, strerror(e));
  qs[t][i].busy = 1;
}

static void start(int t, int i) {
  struct qstate *q = &qs[t][i];
  struct ibv_sge sge = {.lkey = mr->lkey};
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  uint64_t raddr = peer.addr;
  if (t != RC || q->step == IDLE) {
    if (t == RC) {
      uint64_t r = rnd() % 8;
      q->step = r < 2 ? WRITE : r < 3 ? READ_FIXED : r < 4 ? FADD : r < 5 ? CSWAP : SEND;
    } else {
      q->step = SEND;
    }
  }
  switch (q->step) {
    case WRITE:
      q->len = rsize(maxsize);
      q->off = (size_t)(rnd() % (maxsize - q->len + 1));
      q->key = key_of(me_side, RC, i, rnd());
      fill(sbuf(t, i), q->len, q->key, q->off);
      sge.addr = (uintptr_t)sbuf(t, i);
      sge.length = (uint32_t)q->len;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = raddr + area_off(i) + q->off;
      wr.wr.rdma.rkey = peer.rkey;
      break;
    case READ_BACK:
    case READ_FIXED:
      if (q->step == READ_FIXED) {
        q->len = rsize(maxsize);
        q->off = (size_t)(rnd() % (maxsize - q->len + 1));
      }
      memset(lbuf(t, i), 0, q->len);
      sge.addr = (uintptr_t)lbuf(t, i);
      sge.length = (uint32_t)q->len;
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = raddr + area_off((q->step == READ_FIXED ? nq : 0) + i) + q->off;
      wr.wr.rdma.rkey = peer.rkey;
      break;
    case FADD:
    case CSWAP: {
      uint64_t v = rnd() & 0xFFFF;
      memset(lbuf(t, i), 0, 8);
      sge.addr = (uintptr_t)lbuf(t, i);
      sge.length = 8;
      wr.wr.atomic.remote_addr = raddr + counter_off(i);
      wr.wr.atomic.rkey = peer.rkey;
      q->expect = q->counter;
      if (q->step == FADD) {
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.compare_add = v;
        q->counter += v;
      } else {
        int hit = (int)(rnd() & 1);
        wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.compare_add = hit ? q->counter : q->counter + 1;
        wr.wr.atomic.swap = v;
        if (hit) q->counter = v;
      }
      break;
    }
    case SEND:
    case IDLE:
      q->len = rsize(t == UD && mtu_bytes < maxsize ? mtu_bytes : maxsize);
      fill(sbuf(t, i), q->len, key_of(me_side, t, i, q->seq), 0);
      sge.addr = (uintptr_t)sbuf(t, i);
      sge.length = (uint32_t)q->len;
      wr.opcode = IBV_WR_SEND_WITH_IMM;
      wr.imm_data = htonl((uint32_t)q->seq);
      if (t == UD) {
        wr.wr.ud.ah = ahs[i];
        wr.wr.ud.remote_qpn = peer.qp[UD][i].qpn;
        wr.wr.ud.remote_qkey = 0x11111111;
      }
      break;
  }
  post_send(t, i, &wr);
}

static void sent_done(struct ibv_wc *wc) {
  int t = (int)(wc->wr_id / MAXQ), i = (int)(wc->wr_id % MAXQ);
  if (t >= NT || i >= nq || !qs[t][i].busy) {
    error("send completion for wr_id %llu nobody posted", (unsigned long long)wc->wr_id);
    return;
  }
  struct qstate *q = &qs[t][i];
  q->busy = 0;
  if (wc->status != IBV_WC_SUCCESS) {
    error("%s QP %d: completion status %s (%d), vendor_err 0x%x", tname[t], i,
          ibv_wc_status_str(wc->status), wc->status, wc->vendor_err);
    q->step = IDLE;
    q->dead = 1;
    return;
  }
  long bad;
  uint64_t got;
  ++ops[q->step];
  switch (q->step) {
    case WRITE:
      bytes_moved += q->len;
      q->step = READ_BACK; /* read it back next */
      return;
    case READ_BACK:
    case READ_FIXED:
      bytes_moved += q->len;
      bad = differs(lbuf(t, i), q->len,
                    q->step == READ_BACK ? q->key : key_of(!me_side, NT, i, 0), q->off);
      if (bad >= 0)
        error("RC QP %d: READ of %s, %zu bytes at %zu: byte %ld is 0x%02x", i,
              q->step == READ_BACK ? "what it WROTE" : "the fixed area", q->len, q->off, bad,
              lbuf(t, i)[bad]);
      break;
    case FADD:
    case CSWAP:
      memcpy(&got, lbuf(t, i), 8);
      if (got != q->expect)
        error("RC QP %d: %s returned %llu, the counter held %llu", i,
              q->step == FADD ? "FETCH_ADD" : "CMP_SWAP", (unsigned long long)got,
              (unsigned long long)q->expect);
      break;
    case SEND:
    case IDLE:
      bytes_moved += q->len;
      ++sent[t][i];
      ++q->seq;
      break;
  }
  q->step = IDLE;
}

/* ---- The receiving side ------------------------------------------------------------------ */

static uint64_t rcvd[NT][MAXQ], next_seq[NT][MAXQ];
static uint64_t ud_late; /* UD datagrams that came again or after a later one */

static void post_recv(int t, int i, int k) {
  struct ibv_sge sge = {.addr = (uintptr_t)rbuf(t, i, k), .length = (uint32_t)(maxsize + GRH),
                        .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = (uint64_t)((t * MAXQ + i) * RECV_DEPTH + k), .sg_list = &sge,
                           .num_sge = 1},
                     *bad;
  int e = ibv_post_recv(qps[t][i], &wr, &bad);
  if (e) DIE("%s QP %d: ibv_post_recv: %s", tname[t], i, strerror(e));
}

static void received(struct ibv_wc *wc) {
  uint64_t slot = wc->wr_id % RECV_DEPTH, qi = wc->wr_id / RECV_DEPTH;
  int t = (int)(qi / MAXQ), i = (int)(qi % MAXQ), k = (int)slot;
  if (t >= NT || i >= nq) {
    error("receive completion for wr_id %llu nobody posted", (unsigned long long)wc->wr_id);
    return;
  }
  if (wc->status != IBV_WC_SUCCESS) {
    if (wc->status != IBV_WC_WR_FLUSH_ERR)
      error("%s QP %d: receive status %s (%d)", tname[t], i, ibv_wc_status_str(wc->status), wc->status);
    return;
  }
  uint8_t *p = rbuf(t, i, k);
  uint32_t len = wc->byte_len;
  if (t == UD) {
    if (len < GRH) { error("UD QP %d: %u bytes, less than the GRH", i, len); goto again; }
    p += GRH;
    len -= GRH;
    if (wc->src_qp != peer.qp[UD][i].qpn)
      error("UD QP %d: a datagram from QP 0x%x, the peer's is 0x%x", i, wc->src_qp, peer.qp[UD][i].qpn);
  }
  if (wc->opcode != IBV_WC_RECV || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
    error("%s QP %d: receive opcode %d flags 0x%x", tname[t], i, wc->opcode, wc->wc_flags);
    goto again;
  }
  uint32_t seq32 = ntohl(wc->imm_data);
  /* The 64-bit sequence number nearest above what we expect, from its low 32 bits. */
  uint64_t seq = (next_seq[t][i] & ~0xFFFFFFFFull) | seq32;
  if (seq < next_seq[t][i] && next_seq[t][i] - seq > 0x80000000ull) seq += 0x100000000ull;
  if (t == UD && seq < next_seq[t][i]) {
    /* A datagram may come twice or late (UD has no PSN check): it must still be right. */
    ++ud_late;
    if (differs(p, len, key_of(!me_side, t, i, seq), 0) >= 0)
      error("UD QP %d: late message %llu (%u bytes) is wrong", i, (unsigned long long)seq, len);
    goto again;
  }
  if (seq < next_seq[t][i] || (t == RC && seq != next_seq[t][i])) {
    error("%s QP %d: message %llu arrived, expected %s%llu", tname[t], i, (unsigned long long)seq,
          t == RC ? "" : "no earlier than ", (unsigned long long)next_seq[t][i]);
  } else {
    next_seq[t][i] = seq + 1;  /* UC, UD: the ones skipped were lost */
  }
  long bad = differs(p, len, key_of(!me_side, t, i, seq), 0);
  if (bad >= 0)
    error("%s QP %d: message %llu (%u bytes): byte %ld is 0x%02x", tname[t], i,
          (unsigned long long)seq, len, bad, p[bad]);
  ++rcvd[t][i];
again:
  post_recv(t, i, k);
}

/* ---- Reporting and the end ------------------------------------------------------------- */

static uint64_t peer_sent[NT]; /* known at the end */
static struct ibv_wc wcs[32];

/* Takes every completion there is; returns how many. */
static int poll_both(void) {
  int n = ibv_poll_cq(scq, 32, wcs), m;
  if (n < 0) DIE("ibv_poll_cq failed");
  for (int k = 0; k < n; ++k) sent_done(&wcs[k]);
  m = ibv_poll_cq(rcq, 32, wcs);
  if (m < 0) DIE("ibv_poll_cq failed");
  for (int k = 0; k < m; ++k) received(&wcs[k]);
  return n + m;
}

/* Sends ours and reads theirs over TCP while completions keep being taken. */
static void exchange(int fd, const void *mine, void *theirs, size_t n) {
  if (write(fd, mine, n) != (ssize_t)n) DIE("TCP write failed");
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, (char *)theirs + got, n - got, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) DIE("TCP read failed");
    if (r > 0) got += (size_t)r;
    poll_both();
  }
}

/* One line: what moved, the memory and descriptors (at `rss`, `fds`: the first sample, for
 * the final line, which adds the last one). */
static void report(const char *what, double secs, long rss, int fds) {
  uint64_t in[NT] = {0}, out[NT] = {0};
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < nq; ++i) {
      in[t] += rcvd[t][i];
      out[t] += sent[t][i];
    }
  char tail[96] = "";
  if (strcmp(what, "running") != 0) {
    snprintf(tail, sizeof tail, " (peer sent RC %llu, UC %llu, UD %llu)", (unsigned long long)peer_sent[RC],
             (unsigned long long)peer_sent[UC], (unsigned long long)peer_sent[UD]);
    printf("rdma_soak: %s after %.0f s, %d QPs each of RC, UC, UD: RC %llu WRITE %llu READ %llu atomics "
           "%llu SEND out, %llu SEND in; UC %llu out %llu in; UD %llu out %llu in, %llu late%s; %.1f MB out; "
           "rss %ld -> %ld kB, fds %d -> %d; errors %ld\n",
           what, secs, nq, (unsigned long long)ops[WRITE],
           (unsigned long long)(ops[READ_BACK] + ops[READ_FIXED]),
           (unsigned long long)(ops[FADD] + ops[CSWAP]), (unsigned long long)out[RC],
           (unsigned long long)in[RC], (unsigned long long)out[UC], (unsigned long long)in[UC],
           (unsigned long long)out[UD], (unsigned long long)in[UD], (unsigned long long)ud_late, tail,
           (double)bytes_moved / 1e6,
           rss, rss_kb(), fds, fd_count(), errors);
  } else {
    printf("rdma_soak: %.0f s: RC %llu WRITE %llu READ %llu atomics %llu SEND out %llu in; UC %llu out "
           "%llu in; UD %llu out %llu in; %.1f MB out; rss %ld kB, fds %d; errors %ld\n",
           secs, (unsigned long long)ops[WRITE], (unsigned long long)(ops[READ_BACK] + ops[READ_FIXED]),
           (unsigned long long)(ops[FADD] + ops[CSWAP]), (unsigned long long)out[RC],
           (unsigned long long)in[RC], (unsigned long long)out[UC], (unsigned long long)in[UC],
           (unsigned long long)out[UD], (unsigned long long)in[UD], (double)bytes_moved / 1e6, rss,
           fds, errors);
  }
  fflush(stdout);
}

/* ---- Setup ------------------------------------------------------------------------------- */

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what) {
  int e = ibv_modify_qp(qp, a, mask);
  if (e) DIE("ibv_modify_qp to %s: %s", what, strerror(e));
}

int main(int argc, char **argv) {
  const char *devname = NULL;
  int gidx = 1, port = 18700, timeout = 14, opt;
  double seconds = 60, every = 10;
  enum ibv_mtu mtu = IBV_MTU_1024;
  while ((opt = getopt(argc, argv, "d:g:m:p:q:s:D:S:t:r:P:")) != -1) {
    switch (opt) {
      case 'd': devname = optarg; break;
      case 'g': gidx = atoi(optarg); break;
      case 'm':
        mtu_bytes = (uint32_t)atoi(optarg);
        mtu = mtu_of_bytes((int)mtu_bytes);
        break;
      case 'p': port = atoi(optarg); break;
      case 'q': nq = atoi(optarg); break;
      case 's': maxsize = (size_t)atol(optarg); break;
      case 'D': seconds = atof(optarg); break;
      case 'S': seed = strtoull(optarg, NULL, 0); break;
      case 't': timeout = atoi(optarg); break;
      case 'r': pace_s = 1.0 / atof(optarg); break;
      case 'P': every = atof(optarg); break;
      default:
        fprintf(stderr, "usage: rdma_soak [-d dev] [-g gid] [-m mtu] [-p port] [-q qps] [-s maxsize] "
                        "[-D seconds] [-S seed] [-t timeout] [-r rate] [-P every] [server]\n");
        return 2;
    }
  }
  const char *server_ip = optind < argc ? argv[optind] : NULL;
  me_side = server_ip != NULL;
  if (nq < 1 || nq > MAXQ) DIE("-q must be 1 .. %d", MAXQ);
  if (maxsize < 8 || maxsize > (1u << 20)) DIE("-s must be 8 .. 1 MiB");
  if (timeout < 1 || timeout > 31) DIE("-t must be 1 .. 31");
  if (!(pace_s > 0 && pace_s <= 10)) DIE("-r must be 0.1 .. 1e9 messages a second");
  rng_state = seed * 2 + (uint64_t)me_side;

  struct ibv_device **list;
  struct ibv_context *ctx = open_named_device(devname, &list);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  area = (maxsize + 63) & ~(size_t)63;
  memlen = counter_off(nq) + area * (size_t)(2 * NT * nq) + rlen() * (size_t)(NT * nq * RECV_DEPTH);
  mem = aligned_alloc(4096, (memlen + 4095) & ~(size_t)4095);
  if (!pd || !mem) DIE("cannot allocate the PD or %zu bytes", memlen);
  memset(mem, 0, memlen);
  for (int i = 0; i < nq; ++i) fill(mem + area_off(nq + i), maxsize, key_of(me_side, NT, i, 0), 0);
  mr = ibv_reg_mr(pd, mem, memlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  int depth = NT * nq * RECV_DEPTH + 16;
  scq = ibv_create_cq(ctx, depth, NULL, NULL, 0);
  rcq = ibv_create_cq(ctx, depth, NULL, NULL, 0);
  if (!mr || !scq || !rcq) DIE("cannot register the memory or create the CQs");

  struct wire_side me = {.magic = 0x50414b53, .nq = (uint32_t)nq, .rkey = mr->rkey,
                         .addr = (uintptr_t)mem};
  if (ibv_query_gid(ctx, 1, gidx, &me.gid)) DIE("ibv_query_gid %d failed", gidx);
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < nq; ++i) {
      struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq,
                                    .qp_type = t == RC ? IBV_QPT_RC : t == UC ? IBV_QPT_UC : IBV_QPT_UD,
                                    .cap = {.max_send_wr = 4, .max_recv_wr = RECV_DEPTH,
                                            .max_send_sge = 1, .max_recv_sge = 1}};
      struct ibv_qp *qp = ibv_create_qp(pd, &ia);
      if (!qp) DIE("ibv_create_qp (%s) failed", tname[t]);
      qps[t][i] = qp;
      struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1};
      int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (t == UD) {
        a.qkey = 0x11111111;
        mask |= IBV_QP_QKEY;
      } else {
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                            (t == RC ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
        mask |= IBV_QP_ACCESS_FLAGS;
      }
      modify(qp, &a, mask, "INIT");
      me.qp[t][i].qpn = qp->qp_num;
      me.qp[t][i].psn = (uint32_t)rnd() & 0xFFFFFF;
      for (int k = 0; k < RECV_DEPTH; ++k) post_recv(t, i, k);
    }
  int fd = server_ip ? tcp_connect(server_ip, port) : tcp_accept(port);
  xfer(fd, &me, &peer, sizeof me);
  if (peer.magic != me.magic || (int)peer.nq != nq) DIE("the peer runs another -q or another program");
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < nq; ++i) {
      struct ibv_qp *qp = qps[t][i];
      struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1,
                               .grh = {.dgid = peer.gid, .sgid_index = (uint8_t)gidx, .hop_limit = 64}};
      struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR};
      int mask = IBV_QP_STATE;
      if (t != UD) {
        r.path_mtu = mtu;
        r.dest_qp_num = peer.qp[t][i].qpn;
        r.rq_psn = peer.qp[t][i].psn;
        r.ah_attr = ah;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (t == RC) {
          r.max_dest_rd_atomic = 4;
          r.min_rnr_timer = 1;
          mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
      } else {
        ahs[i] = ibv_create_ah(pd, &ah);
        if (!ahs[i]) DIE("ibv_create_ah failed");
      }
      modify(qp, &r, mask, "RTR");
      struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .sq_psn = me.qp[t][i].psn};
      mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (t == RC) {
        s.timeout = (uint8_t)timeout;
        s.retry_cnt = 7;
        s.rnr_retry = 7;
        s.max_rd_atomic = 4;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      modify(qp, &s, mask, "RTS");
    }
  char sync = 'r';
  if (write(fd, &sync, 1) != 1 || read(fd, &sync, 1) != 1) DIE("TCP sync failed");

  const double t0 = now_s();
  double next_print = t0 + every, warm = t0 + (seconds < 10 ? seconds / 4 : 2.5);
  long rss0 = -1;
  int fds0 = -1;
  int stopping = 0;
  for (;;) {
    const double now = now_s();
    if (!stopping && now - t0 >= seconds) stopping = 1;
    int in_flight = 0;
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < nq; ++i) {
        struct qstate *q = &qs[t][i];
        /* A WRITE is always read back, even when the time is up. */
        if (!q->busy && !q->dead && (!stopping || q->step == READ_BACK) && now >= q->next_at) {
          start(t, i);
          if (t != RC) q->next_at = now + pace_s;
        }
        in_flight += q->busy;
      }
    if (stopping && in_flight == 0) break;
    poll_both();
    if (rss0 < 0 && now >= warm) {
      rss0 = rss_kb();
      fds0 = fd_count();
    }
    if (every > 0 && now >= next_print) {
      next_print += every;
      report("running", now - t0, rss_kb(), fd_count());
    }
  }
  /* Tell each other what was sent and how the counters must end, receiving all along (the
   * peer may still wait for a receive of ours to finish its last SEND). Then wait (up to
   * 5 s) for RC messages still on their way, and take what UC/UD datagrams come meanwhile. */
  struct wire_end mine, theirs;
  memset(&mine, 0, sizeof mine);
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < nq; ++i) mine.sent[t][i] = sent[t][i];
  for (int i = 0; i < nq; ++i) mine.counter[i] = qs[RC][i].counter;
  exchange(fd, &mine, &theirs, sizeof mine);
  const double until = now_s() + 5;
  for (;;) {
    int missing = 0;
    for (int i = 0; i < nq; ++i) missing |= rcvd[RC][i] < theirs.sent[RC][i];
    if (!missing || now_s() > until) break;
    poll_both();
  }
  while (poll_both() > 0) {
  }
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < nq; ++i) {
      peer_sent[t] += theirs.sent[t][i];
      if (t == RC && rcvd[t][i] != theirs.sent[t][i])
        error("RC QP %d: %llu messages arrived, the peer sent %llu", i,
              (unsigned long long)rcvd[t][i], (unsigned long long)theirs.sent[t][i]);
      if (t != RC && rcvd[t][i] > theirs.sent[t][i])
        error("%s QP %d: %llu messages arrived, the peer sent only %llu", tname[t], i,
              (unsigned long long)rcvd[t][i], (unsigned long long)theirs.sent[t][i]);
    }
  for (int i = 0; i < nq; ++i) {
    uint64_t c;
    memcpy(&c, mem + counter_off(i), 8);
    if (c != theirs.counter[i])
      error("RC QP %d: the counter holds %llu, the peer's atomics leave %llu", i,
            (unsigned long long)c, (unsigned long long)theirs.counter[i]);
  }
  /* Both sides have checked before either goes. */
  char sync2 = 'e';
  exchange(fd, &sync2, &sync, 1);
  report(errors ? "FAILED" : "verified", now_s() - t0, rss0, fds0);
  fflush(stdout);
  close(fd);
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < nq; ++i) ibv_destroy_qp(qps[t][i]);
  for (int i = 0; i < nq; ++i) ibv_destroy_ah(ahs[i]);
  ibv_destroy_cq(scq);
  ibv_destroy_cq(rcq);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(mem);
  return errors ? 1 : 0;
}

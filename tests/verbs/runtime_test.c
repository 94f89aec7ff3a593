/* The provider's process model, tested as a plain verbs program (linked against rdma-core's
 * libibverbs, run on uroce's through LD_LIBRARY_PATH). Each mode is one claim:
 *
 *   contexts   two contexts of one process on one device exchange RC traffic (WRITE, SEND)
 *   devices    two devices (uroce0, uroce1 on the two ends of a veth pair) in one process
 *   failed     a device that cannot open leaves the open one working, and it reopens
 *   exec       no file descriptor of uroce's survives exec (fork + exec of `fds`)
 *   affinity   opening a device changes no thread's CPU affinity (nor a later thread's)
 *   loop N     open, use and close the device N times: no growth in fds, memory, /dev/shm
 *   stress     threads posting and polling on their own QPs and CQs of one context, one
 *              blocked in ibv_get_cq_event, and a second context opened and closed in a loop
 *              meanwhile
 *   fork       after fork() the parent's device keeps working; the child opens a device of
 *              its own (the af_packet port: nothing of the parent's is reused) and moves
 *              data over it, or with UROCE_PORT=dpdk cannot (DPDK runs once per process
 *              image: ENODEV); its exit removes none of the parent's files
 *   forkbusy   children forked while another thread runs engine passes use the context they
 *              inherited (ibv_query_device, device memory): none hangs on a lock copied while
 *              held, and the parent's device keeps working
 *   exit       exit() while a thread is still posting and every object is open: a clean
 *              exit, no counters file left
 *   cqevents   a completion event that was never read dies with its CQ: after the CQ is
 *              destroyed, a new CQ on the same channel (at the same address, as malloc
 *              hands it out) reads no event that was not its own (issue 22, bug 1)
 *   mcast IFACE a UD QP attached to 25 IPv4 multicast groups (more than the 20 one Linux
 *              socket may hold) has the kernel join every one on IFACE, and detached, leave
 *              them all
 *   link IFACE UROCE the interface goes down and comes back with another MTU: PORT_ERR and
 *              PORT_ACTIVE on every context, ibv_query_port's state and active MTU follow;
 *              idle after, the progress thread parks no more than its deadlines ask
 *   batch UROCE  bursts of WRITEs posted back to back (doorbell batching may leave them to
 *              the next pass) all land although the program then only spins on the target
 *              memory; every byte checked, super-frames counted
 *
 * Whether a speed policy engaged (batching, waiting for the answer, the ACK kept for the
 * reply) depends on how fast the machine runs the threads at that moment: no mode asserts
 * it. Their rules are tests/verbs/progress_policy_test.cc's (made-up times, every boundary);
 * what they save is measured in docs/bench. The modes below check what holds whatever the
 * timing: the data, no hang, counters that add up, and the rules that are certain by
 * construction (no ACK kept on a CQ armed for events).
 *   regmr      a thread registers 64 MiB of untouched memory while the main thread pings
 *              WRITEs on the same device; the registration's first page fault is held in
 *              the kernel (userfaultfd) while 20 pings complete, so none can have waited for
 *              it (its pages are faulted in before the device lock is taken:
 *              docs/threading.md)
 *   passive UROCE  a device no application thread ever drives (uroce1) takes WRITEs: its
 *              progress thread, asleep in the kernel (parked, as `uroce stats` shows), is
 *              woken by each frame and acknowledges it (UROCE: the uroce tool)
 *   answer UROCE  two threads ping-pong RDMA WRITEs as ib_write_lat does (post, poll the send
 *              CQ, spin on memory for the peer's WRITE), the pattern under which a poll may
 *              receive the peer's WRITE itself before returning ("waiting for the answer" in
 *              docs/threading.md): every byte checked, `progress_answers` at most one a round
 *   reply UROCE  two threads ping-pong SENDs as ib_send_lat does (poll the CQ until the peer's
 *              SEND, answer at once), the pattern under which an ACK may wait to leave with
 *              the answer ("The ACK rides with the reply" in docs/threading.md): `acks_held`
 *              at most one a SEND, `acks_held_alone` some of them; then the same driven by
 *              completion events, each CQ armed before every poll: no ACK is kept then;
 *              every byte checked
 *   pacer UROCE  20 WRITEs polled to completion: with UROCE_LINE_RATE given (every packet
 *              paced) the polls that found nothing while the pacer held data gave the CPU
 *              away (`progress_yields`); without it none did; every byte checked
 *   crowded UROCE  with UROCE_PROGRESS=poll (uroce0's: the environment sets the first
 *              device), the program (as a host program may) confines itself to one CPU before
 *              it opens uroce0 and uroce1: uroce0's spinning progress thread shares that CPU
 *              with the program's thread, which spins on uroce0's CQ, so it is off the CPU
 *              about half the time and backs off (`progress_backoffs`, counted within 10,000
 *              WRITE rounds; docs/threading.md); uroce1's (progress = auto) never spins, so
 *              never does; every byte checked
 *
 * Every traffic check compares the bytes that arrived. Prints "ok: ..." lines; any failure
 * prints "FAIL: ..." and exits 1. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loopback.h"

#define MSG 4096

/* One RC endpoint: its own PD, MR (2 x MSG: send half, receive half), CQ and QP. */
struct ep {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_mr* mr;
  struct ibv_cq* cq;
  struct ibv_comp_channel* ch;
  struct ibv_qp* qp;
  uint8_t* buf;
  union ibv_gid gid;
};

static struct ibv_context* open_named(const char* name) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list != NULL, "ibv_get_device_list: errno %d", errno);
  struct ibv_context* ctx = NULL;
  for (int i = 0; i < n; ++i)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  return ctx;
}

static void ep_init(struct ep* e, struct ibv_context* ctx, int with_channel) {
  memset(e, 0, sizeof *e);
  e->ctx = ctx;
  CHECK(ibv_query_gid(ctx, 1, 1, &e->gid) == 0, "ibv_query_gid");
  e->pd = ibv_alloc_pd(ctx);
  CHECK(e->pd != NULL, "ibv_alloc_pd: errno %d", errno);
  e->buf = calloc(2, MSG);
  e->mr = ibv_reg_mr(e->pd, e->buf, 2 * MSG,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  CHECK(e->mr != NULL, "ibv_reg_mr: errno %d", errno);
  if (with_channel) {
    e->ch = ibv_create_comp_channel(ctx);
    CHECK(e->ch != NULL, "ibv_create_comp_channel: errno %d", errno);
  }
  e->cq = ibv_create_cq(ctx, 256, e, e->ch, 0);
  CHECK(e->cq != NULL, "ibv_create_cq: errno %d", errno);
  struct ibv_qp_init_attr qa = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 128, .max_recv_wr = 128,
                                        .max_send_sge = 1, .max_recv_sge = 1}};
  e->qp = ibv_create_qp(e->pd, &qa);
  CHECK(e->qp != NULL, "ibv_create_qp: errno %d", errno);
}

static void ep_free(struct ep* e) {
  CHECK(ibv_destroy_qp(e->qp) == 0, "ibv_destroy_qp");
  CHECK(ibv_destroy_cq(e->cq) == 0, "ibv_destroy_cq");
  if (e->ch) CHECK(ibv_destroy_comp_channel(e->ch) == 0, "ibv_destroy_comp_channel");
  CHECK(ibv_dereg_mr(e->mr) == 0, "ibv_dereg_mr");
  CHECK(ibv_dealloc_pd(e->pd) == 0, "ibv_dealloc_pd");
  free(e->buf);
}

static void connect_pair(struct ep* a, struct ep* b) {
  const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int step = loopback_connect(a->qp, b->qp->qp_num, b->gid, acc, 1);
  CHECK(step == 0, "connect a->b failed at step %d (errno %d)", step, errno);
  step = loopback_connect(b->qp, a->qp->qp_num, a->gid, acc, 1);
  CHECK(step == 0, "connect b->a failed at step %d (errno %d)", step, errno);
}

/* Opens uroce0 with a connected pair of endpoints on it (a with a completion channel if asked). */
static struct ibv_context* open_pair(struct ep* a, struct ep* b, int a_channel) {
  struct ibv_context* c = open_named("uroce0");
  CHECK(c, "open uroce0: errno %d", errno);
  ep_init(a, c, a_channel);
  ep_init(b, c, 0);
  connect_pair(a, b);
  return c;
}

/* Polls until one completion arrives (bounded by a count of polls, not by time). */
static struct ibv_wc wait_one(struct ep* e) {
  struct ibv_wc wc;
  for (long i = 0; i < 200000000L; ++i) {
    const int n = ibv_poll_cq(e->cq, 1, &wc);
    CHECK(n >= 0, "ibv_poll_cq: %d", n);
    if (n == 1) {
      CHECK(wc.status == IBV_WC_SUCCESS, "completion %s (wr_id %llu)",
            ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
      return wc;
    }
  }
  CHECK(0, "no completion");
  return wc;
}

static void post_recv(struct ep* e, uint64_t id) {
  struct ibv_sge s = {(uintptr_t)(e->buf + MSG), MSG, e->mr->lkey};
  struct ibv_recv_wr w = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
  CHECK(ibv_post_recv(e->qp, &w, &bad) == 0, "ibv_post_recv");
}

/* a WRITEs round r's pattern into b's receive half and polls until it completes (its ACK
 * came); the bytes are checked. */
static void write_round(struct ep* a, struct ep* b, int r) {
  for (int i = 0; i < MSG; ++i) a->buf[i] = (uint8_t)(r * 17 + i);
  struct ibv_sge s = {(uintptr_t)a->buf, MSG, a->mr->lkey};
  struct ibv_send_wr w = {.wr_id = 9, .sg_list = &s, .num_sge = 1,
                          .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
  w.wr.rdma.remote_addr = (uintptr_t)(b->buf + MSG);
  w.wr.rdma.rkey = b->mr->rkey;
  CHECK(ibv_post_send(a->qp, &w, &bad) == 0, "post WRITE");
  wait_one(a);
  CHECK(memcmp(a->buf, b->buf + MSG, MSG) == 0, "round %d: WRITE data differs", r);
}

/* a WRITEs a pattern into b's receive half, then SENDs another into b's posted receive;
 * both are checked byte for byte. */
static void exchange(struct ep* a, struct ep* b, uint8_t seed) {
  for (int i = 0; i < MSG; ++i) a->buf[i] = (uint8_t)(seed + i * 7);
  struct ibv_sge s = {(uintptr_t)a->buf, MSG, a->mr->lkey};
  struct ibv_send_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                          .send_flags = IBV_SEND_SIGNALED}, *bad;
  w.wr.rdma.remote_addr = (uintptr_t)(b->buf + MSG);
  w.wr.rdma.rkey = b->mr->rkey;
  CHECK(ibv_post_send(a->qp, &w, &bad) == 0, "post WRITE");
  wait_one(a);
  CHECK(memcmp(a->buf, b->buf + MSG, MSG) == 0, "WRITE data differs");
  for (int i = 0; i < MSG; ++i) a->buf[i] = (uint8_t)(seed * 3 + i);
  post_recv(b, 2);
  w.opcode = IBV_WR_SEND;
  w.wr_id = 3;
  CHECK(ibv_post_send(a->qp, &w, &bad) == 0, "post SEND");
  wait_one(a);
  struct ibv_wc wc = wait_one(b);
  CHECK(wc.wr_id == 2 && wc.byte_len == MSG, "receive completion wr_id %llu len %u",
        (unsigned long long)wc.wr_id, wc.byte_len);
  CHECK(memcmp(a->buf, b->buf + MSG, MSG) == 0, "SEND data differs");
}

/* ---- modes ---------------------------------------------------------------------------------- */

static int mode_contexts(void) {
  struct ibv_context* c1 = open_named("uroce0");
  struct ibv_context* c2 = open_named("uroce0");
  CHECK(c1 && c2 && c1 != c2, "two opens of uroce0: %p %p (errno %d)", (void*)c1, (void*)c2, errno);
  struct ep a, b;
  ep_init(&a, c1, 0);
  ep_init(&b, c2, 0);
  connect_pair(&a, &b);
  exchange(&a, &b, 1);
  exchange(&b, &a, 2);
  /* An object of one context cannot be used with another's. */
  struct ibv_qp_init_attr qa = {.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 1, .max_recv_wr = 1,
                                        .max_send_sge = 1, .max_recv_sge = 1}};
  CHECK(ibv_create_qp(b.pd, &qa) == NULL && errno == EINVAL, "cross-context QP accepted");
  ep_free(&b);
  CHECK(ibv_close_device(c2) == 0, "close c2");
  /* The first context is untouched by the second's close: a new pair inside it works. */
  struct ep c;
  ep_init(&c, c1, 0);
  ep_free(&a);
  ep_init(&a, c1, 0);
  connect_pair(&a, &c);
  exchange(&a, &c, 3);
  /* Closing with objects still open releases them (only our buffers are left to free). */
  CHECK(ibv_close_device(c1) == 0, "close c1");
  free(a.buf);
  free(c.buf);
  printf("ok: two contexts of one process on uroce0 exchange RC WRITE and SEND; closing one "
         "leaves the other working; closing with objects open releases them\n");
  return 0;
}

/* Opens uroce0 and uroce1 (the two ends of the veth pair) with a connected endpoint on each. */
static void open_two(struct ibv_context** c0, struct ibv_context** c1, struct ep* a,
                     struct ep* b) {
  *c0 = open_named("uroce0");
  *c1 = open_named("uroce1");
  CHECK(*c0 && *c1, "open uroce0 and uroce1: errno %d", errno);
  ep_init(a, *c0, 0);
  ep_init(b, *c1, 0);
  CHECK(memcmp(a->gid.raw, b->gid.raw, 16) != 0, "both devices have the same GID");
  connect_pair(a, b);
}

static int mode_devices(void) {
  struct ibv_context *c0, *c1;
  struct ep a, b;
  open_two(&c0, &c1, &a, &b);
  exchange(&a, &b, 4);
  exchange(&b, &a, 5);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: two devices in one process (uroce0, uroce1) exchange RC WRITE and SEND\n");
  return 0;
}

/* A counter of this process's device `dev` as `uroce stats PID` prints it ("  name  value"),
 * or `absent` if it is not printed (the port's counters are shown only once they count). */
/* `n` counters of device `dev` from one run of `uroce stats` (absent ones: -1). */
static void stats_read_or_absent(const char* uroce, const char* dev, int n,
                                 const char* const* names, long long* out) {
  char cmd[512], line[512], want[96];
  snprintf(cmd, sizeof cmd, "%s stats %d", uroce, (int)getpid());
  snprintf(want, sizeof want, "device %s", dev);
  for (int i = 0; i < n; ++i) out[i] = -1;
  FILE* p = popen(cmd, "r");
  CHECK(p != NULL, "popen %s", cmd);
  int in_dev = 0;
  while (fgets(line, sizeof line, p)) {
    if (!strncmp(line, "pid ", 4)) in_dev = strstr(line, want) != NULL;
    char key[64];
    long long x;
    if (!in_dev || sscanf(line, " %63s %lld", key, &x) != 2) continue;
    for (int i = 0; i < n; ++i)
      if (!strcmp(key, names[i])) out[i] = x;
  }
  pclose(p);
}

static long long stat_or(const char* uroce, const char* dev, const char* name, long long absent) {
  long long v;
  stats_read_or_absent(uroce, dev, 1, &name, &v);
  return v >= 0 ? v : absent;
}

/* `n` counters of device `dev` from one run of `uroce stats`, each of which must be there. */
static void stats_read(const char* uroce, const char* dev, int n, const char* const* names,
                       long long* out) {
  stats_read_or_absent(uroce, dev, n, names, out);
  for (int i = 0; i < n; ++i) CHECK(out[i] >= 0, "%s of %s not in `uroce stats`", names[i], dev);
}

static long long stat_of(const char* uroce, const char* dev, const char* name) {
  const long long v = stat_or(uroce, dev, name, -1);
  CHECK(v >= 0, "%s of %s not in `uroce stats`", name, dev);
  return v;
}

enum { kPassiveRounds = 10 };

static int mode_passive(const char* uroce) {
  struct ibv_context *c0, *c1;
  struct ep a, b;
  open_two(&c0, &c1, &a, &b);
  static const char* const woke[] = {"progress_woke_traffic", "progress_woke_deadline",
                                     "progress_woke_kick"};
  int by_traffic = 0;
  for (int r = 0; r < kPassiveRounds; ++r) {
    /* uroce1's progress thread parks once nothing is left to do (no sleep here: each look is a
     * run of `uroce stats`, bounded in number). */
    int looks = 0;
    while (stat_of(uroce, "uroce1", "progress_parked") != 1) CHECK(++looks < 5000, "never parked");
    long long before[3], after[3];
    stats_read(uroce, "uroce1", 3, woke, before);
    write_round(&a, &b, r); /* its ACK came: only uroce1's progress thread can have sent it */
    stats_read(uroce, "uroce1", 3, woke, after);
    /* Parked when we looked, it must have woken for the ACK to leave: each wake-up is counted
     * by its cause (the WRITE's frame, a deadline, a kick). */
    CHECK(after[0] + after[1] + after[2] > before[0] + before[1] + before[2],
          "round %d: the WRITE was acknowledged, yet uroce1's parked progress thread never woke", r);
    by_traffic += after[0] > before[0];
  }
  /* Which cause comes first is a race: the link watch and the counters wake the thread every
   * 100 ms, and one that does so just before the frame arrives lets a pass take the frame
   * instead (more often on a slow machine, whose rounds take longer). So no count is asked of
   * it but the one that holds whenever waking on traffic works at all: without it, only
   * deadlines would ever wake the thread, in every round. */
  CHECK(by_traffic >= 1, "woken by the WRITE in none of %d rounds", kPassiveRounds);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: a device no thread of the program drives took %d WRITEs, its parked progress "
         "thread woken by the frame in %d\n", kPassiveRounds, by_traffic);
  return 0;
}

/* Waiting for the answer (docs/threading.md): ib_write_lat's loop on both devices at once. */
enum { kAnswerRounds = 3000, kAnswerLen = 64 };

struct pinger {
  struct ep* me;
  struct ep* peer;
  int first;  /* sends first */
};

static void* ping_pong(void* arg) {
  const struct pinger* p = arg;
  volatile uint8_t* in = p->me->buf + MSG;  /* the peer's WRITEs land here */
  for (int r = 1; r <= kAnswerRounds; ++r) {
    if (!p->first || r > 1) {  /* the peer's WRITE of this round (the round's number last) */
      const uint8_t want = (uint8_t)(r - (p->first ? 1 : 0));
      while (in[kAnswerLen - 1] != want) {
      }
      for (int i = 0; i < kAnswerLen - 1; ++i)
        CHECK(in[i] == (uint8_t)(want * 7 + i + p->first), "round %d: byte %d differs", r, i);
    }
    for (int i = 0; i < kAnswerLen - 1; ++i) p->me->buf[i] = (uint8_t)(r * 7 + i + !p->first);
    p->me->buf[kAnswerLen - 1] = (uint8_t)r;
    struct ibv_sge s = {(uintptr_t)p->me->buf, kAnswerLen, p->me->mr->lkey};
    struct ibv_send_wr w = {.wr_id = (uint64_t)r, .sg_list = &s, .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
    w.wr.rdma.remote_addr = (uintptr_t)(p->peer->buf + MSG);
    w.wr.rdma.rkey = p->peer->mr->rkey;
    CHECK(ibv_post_send(p->me->qp, &w, &bad) == 0, "round %d: post WRITE", r);
    wait_one(p->me);
  }
  return NULL;
}

static int mode_answer(const char* uroce) {
  struct ibv_context *c0, *c1;
  struct ep a, b;
  open_two(&c0, &c1, &a, &b);
  struct pinger pa = {&a, &b, 1}, pb = {&b, &a, 0};
  pthread_t ta, tb;
  CHECK(pthread_create(&tb, NULL, ping_pong, &pb) == 0 && pthread_create(&ta, NULL, ping_pong, &pa) == 0,
        "threads");
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  /* The last round's answer: the one thread that waits for it still. */
  const long long n0 = stat_of(uroce, "uroce0", "progress_answers");
  const long long n1 = stat_of(uroce, "uroce1", "progress_answers");
  /* How often a poll waited for the peer's WRITE depends on how fast this machine answers
   * (the rules are tests/verbs/progress_policy_test.cc's, what they save a benchmark row in
   * docs/bench); here every byte arrived, nothing hung, and the count adds up: one wait at
   * most per poll that returned a completion, one such poll per round. */
  CHECK(n0 <= kAnswerRounds && n1 <= kAnswerRounds,
        "polls that received the answer: %lld on uroce0, %lld on uroce1 of %d rounds", n0, n1,
        kAnswerRounds);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: %d WRITE ping-pong rounds, data checked: the polls received the peer's WRITE "
         "themselves %lld times on uroce0 and %lld on uroce1\n", kAnswerRounds, n0, n1);
  return 0;
}

/* A poll that finds nothing while DCQCN's pacer holds the data gives the CPU away
 * (docs/congestion.md, "The pacer and the CPU"). With UROCE_LINE_RATE given by hand every
 * packet waits for its slot at that rate: uroce0's polls for its WRITEs' completions yield
 * (`progress_yields`); without it nothing is paced and no poll does. */
enum { kPacerRounds = 20 };

static int mode_pacer(const char* uroce) {
  const int paced = getenv("UROCE_LINE_RATE") != NULL;
  struct ibv_context *c0, *c1;
  struct ep a, b;
  open_two(&c0, &c1, &a, &b);
  for (int r = 0; r < kPacerRounds; ++r) write_round(&a, &b, r);
  const long long y = stat_of(uroce, "uroce0", "progress_yields");
  if (paced) {
    CHECK(y >= kPacerRounds, "%lld polls yielded in %d paced WRITEs", y, kPacerRounds);
  } else {
    CHECK(y == 0, "%lld polls yielded with nothing paced", y);
  }
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: %d WRITEs, data checked, %s: %lld empty polls gave the CPU away\n", kPacerRounds,
         paced ? "paced at the line rate given" : "nothing paced", y);
  return 0;
}

/* progress = poll on a crowded CPU (docs/threading.md, PollModePolicy). */
enum { kCrowdedRounds = 10000, kCrowdedCheckEvery = 200 };

static int mode_crowded(const char* uroce) {
  const char* mode = getenv("UROCE_PROGRESS");
  CHECK(mode && !strcmp(mode, "poll"), "run with UROCE_PROGRESS=poll");
  cpu_set_t all, one;
  CHECK(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &all)) ++cpu;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0, "sched_setaffinity");  /* the threads to come inherit it */
  struct ibv_context *c0, *c1;
  struct ep a, b;
  open_two(&c0, &c1, &a, &b);
  long long b0 = 0;
  int r = 0;
  while (r < kCrowdedRounds && b0 < 1) {
    for (int i = 0; i < kCrowdedCheckEvery; ++i, ++r) write_round(r % 2 ? &b : &a, r % 2 ? &a : &b, r);
    b0 = stat_of(uroce, "uroce0", "progress_backoffs");
  }
  const long long b1 = stat_of(uroce, "uroce1", "progress_backoffs");
  CHECK(b0 >= 1, "after %d WRITE rounds on one CPU, uroce0's spinning progress thread never "
        "backed off", r);
  CHECK(b1 == 0, "uroce1's progress thread (progress = auto) backed off %lld times", b1);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: progress = poll, one CPU for the program and uroce0's spinning progress thread: "
         "it backed off (%lld times) within %d WRITE rounds, uroce1's (auto) never; data "
         "checked\n", b0, r);
  return 0;
}

/* The ACK rides with the reply (docs/threading.md). */
enum { kReplyRounds = 2000, kReplyLen = 64 };

struct replier {
  struct ep* me;
  int first;   /* sends first */
  int events;  /* waits as an event-driven program: arm, poll, sleep in ibv_get_cq_event */
};

/* The next receive completion, skipping send completions. With events, the CQ is armed
 * before every poll (so no poll of it ever runs a pass on a CQ that is not armed: a poll finds
 * it armed, or finds the completion that disarmed it), and an empty poll sleeps for the event. */
static struct ibv_wc next_recv(const struct replier* p) {
  for (long i = 0; i < 200000000L; ++i) {
    struct ibv_wc wc;
    if (p->events) CHECK(ibv_req_notify_cq(p->me->cq, 0) == 0, "ibv_req_notify_cq");
    const int n = ibv_poll_cq(p->me->cq, 1, &wc);
    if (n == 1) {
      CHECK(wc.status == IBV_WC_SUCCESS, "completion %s", ibv_wc_status_str(wc.status));
      if (wc.opcode == IBV_WC_RECV) return wc;
      continue;
    }
    CHECK(n == 0, "ibv_poll_cq: %d", n);
    if (p->events) {
      struct ibv_cq* cq;
      void* ctx;
      CHECK(ibv_get_cq_event(p->me->ch, &cq, &ctx) == 0, "ibv_get_cq_event");
      ibv_ack_cq_events(cq, 1);
    }
  }
  CHECK(0, "no receive completion");
  struct ibv_wc none = {0};
  return none;
}

static void* reply_loop(void* arg) {
  const struct replier* p = arg;
  for (int r = 1; r <= kReplyRounds; ++r) {
    if (!p->first || r > 1) {
      const struct ibv_wc wc = next_recv(p);
      const uint8_t want = (uint8_t)(r - (p->first ? 1 : 0));
      CHECK(wc.byte_len == kReplyLen, "round %d: %u bytes", r, wc.byte_len);
      for (int i = 0; i < kReplyLen; ++i)
        CHECK(p->me->buf[MSG + i] == (uint8_t)(want * 5 + i + p->first), "round %d: byte %d", r, i);
      post_recv(p->me, (uint64_t)r);  /* for the peer's next SEND */
    }
    for (int i = 0; i < kReplyLen; ++i) p->me->buf[i] = (uint8_t)(r * 5 + i + !p->first);
    struct ibv_sge s = {(uintptr_t)p->me->buf, kReplyLen, p->me->mr->lkey};
    struct ibv_send_wr w = {.wr_id = (uint64_t)r, .sg_list = &s, .num_sge = 1,
                            .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
    CHECK(ibv_post_send(p->me->qp, &w, &bad) == 0, "round %d: post SEND", r);
  }
  if (p->first) next_recv(p);  /* the peer's last answer */
  return NULL;
}

/* Both devices' acks_held and acks_held_alone once their counters (each device publishes its
 * own every 100 ms) show `frames` sent by each: near the end of a phase (each round is a SEND
 * and an ACK from each side), so that the counts read are those of (nearly) all of it. */
static void reply_counts(const char* uroce, long long frames, long long out[4]) {
  int looks = 0;
  while (stat_or(uroce, "uroce0", "tx_frames", 0) < frames ||
         stat_or(uroce, "uroce1", "tx_frames", 0) < frames)
    CHECK(++looks < 5000, "tx_frames stuck");
  out[0] = stat_or(uroce, "uroce0", "acks_held", 0);
  out[1] = stat_or(uroce, "uroce1", "acks_held", 0);
  out[2] = stat_or(uroce, "uroce0", "acks_held_alone", 0);
  out[3] = stat_or(uroce, "uroce1", "acks_held_alone", 0);
}

static void reply_phase(struct ibv_context* c0, struct ibv_context* c1, int events) {
  struct ep a, b;
  ep_init(&a, c0, events);
  ep_init(&b, c1, events);
  connect_pair(&a, &b);
  post_recv(&a, 0);  /* the first receives: each loop posts the next after each SEND it gets */
  post_recv(&b, 0);
  struct replier pa = {&a, 1, events}, pb = {&b, 0, events};
  pthread_t ta, tb;
  CHECK(pthread_create(&tb, NULL, reply_loop, &pb) == 0 && pthread_create(&ta, NULL, reply_loop, &pa) == 0,
        "threads");
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  ep_free(&a);
  ep_free(&b);
}

static int mode_reply(const char* uroce) {
  struct ibv_context* c0 = open_named("uroce0");
  struct ibv_context* c1 = open_named("uroce1");
  CHECK(c0 && c1, "open uroce0 and uroce1: errno %d", errno);
  long long polled[4], evented[4];
  reply_phase(c0, c1, 0);
  reply_counts(uroce, 19LL * kReplyRounds / 10, polled);
  /* How many ACKs waited for the answer depends on how fast this machine answers (the rules
   * are tests/verbs/progress_policy_test.cc's, what they save a benchmark row in docs/bench);
   * here the counts add up: ACKs kept at most once per SEND received, and those that left
   * alone are some of them. */
  for (int d = 0; d < 2; ++d)
    CHECK(polled[d] <= kReplyRounds && polled[2 + d] <= polled[d],
          "uroce%d: %lld bursts of ACKs kept for %d SENDs received, %lld of them left alone", d,
          polled[d], kReplyRounds, polled[2 + d]);
  /* Closed and opened again: the devices start from fresh counters. Driven by completion
   * events, every poll comes after the CQ was armed (or finds the completion that disarmed
   * it, and drives no pass): no ACK is ever kept, however fast the machine. */
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  c0 = open_named("uroce0");
  c1 = open_named("uroce1");
  CHECK(c0 && c1, "open uroce0 and uroce1 again: errno %d", errno);
  reply_phase(c0, c1, 1);
  reply_counts(uroce, 19LL * kReplyRounds / 10, evented);
  CHECK(evented[0] == 0 && evented[1] == 0,
        "ACKs kept while the CQs were armed for events: %lld on uroce0, %lld on uroce1",
        evented[0], evented[1]);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: %d SEND ping-pong rounds, data checked: %lld and %lld ACKs left with the answer "
         "(%lld and %lld waited in vain); none kept with the CQs armed for events\n",
         kReplyRounds, polled[0], polled[1], polled[2], polled[3]);
  return 0;
}

/* Doorbell batching (docs/threading.md): WRITEs posted back to back leave together (the
 * port sends them as a UDP GSO super-frame, `port_tx_super` grows), and without any further
 * call into the library: the program spins on the target memory, as a program waiting for
 * the last WRITE of a burst would, and the progress thread must send what was batched. */
enum { kBatchWrites = 32, kBatchRounds = 20 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int mode_batch(const char* uroce) {
  struct ibv_context *c0, *c1;
  struct ep a, b;
  open_two(&c0, &c1, &a, &b);
  int looks0 = 0;  /* the first publication (after the connection's frames) */
  while (stat_or(uroce, "uroce0", "tx_frames", 0) == 0) CHECK(++looks0 < 5000, "no counters");
  const long long super0 = stat_or(uroce, "uroce0", "port_tx_super", 0);
  const long long tx0 = stat_of(uroce, "uroce0", "tx_frames");
  double worst = 0;
  for (int r = 1; r <= kBatchRounds; ++r) {
    const int len = MSG / kBatchWrites;
    for (int i = 0; i < MSG; ++i) a.buf[i] = (uint8_t)(r * 31 + i);
    const double start = now_s();
    for (int k = 0; k < kBatchWrites; ++k) {
      struct ibv_sge s = {(uintptr_t)(a.buf + k * len), (uint32_t)len, a.mr->lkey};
      struct ibv_send_wr w = {.wr_id = (uint64_t)k, .sg_list = &s, .num_sge = 1,
                              .opcode = IBV_WR_RDMA_WRITE,
                              .send_flags = k == kBatchWrites - 1 ? IBV_SEND_SIGNALED : 0}, *bad;
      w.wr.rdma.remote_addr = (uintptr_t)(b.buf + MSG + k * len);
      w.wr.rdma.rkey = b.mr->rkey;
      CHECK(ibv_post_send(a.qp, &w, &bad) == 0, "post WRITE %d", k);
    }
    /* RC WRITEs land in order: the last byte of the last one means all of them. Whatever of
     * the burst was batched must leave with no further call into the library: a hang bound,
     * not a speed target (the progress thread naps 1 ms at most). */
    volatile uint8_t* last = b.buf + 2 * MSG - 1;
    while (*last != a.buf[MSG - 1])
      CHECK(now_s() - start < 60.0, "round %d: the batched WRITEs never left (no call into the "
            "library after the posts)", r);
    const double took = now_s() - start;
    if (took > worst) worst = took;
    CHECK(memcmp(a.buf, b.buf + MSG, MSG) == 0, "round %d: WRITE data differs", r);
    wait_one(&a);
  }
  /* The counters are published every 100 ms: wait for a publication that has every WRITE. */
  int looks = 0;
  while (stat_of(uroce, "uroce0", "tx_frames") < tx0 + kBatchRounds * kBatchWrites)
    CHECK(++looks < 5000, "tx_frames never counted the WRITEs");
  /* How many of the posts were batched depends on how fast this machine posts (each within
   * 1 us of the previous one's return): the rules are tests/verbs/progress_policy_test.cc's,
   * what they save a benchmark row (docs/bench). Here they only add up: a super-frame
   * carries two frames or more. */
  const long long tx = stat_of(uroce, "uroce0", "tx_frames") - tx0;
  const long long supers = stat_or(uroce, "uroce0", "port_tx_super", 0) - super0;
  CHECK(supers >= 0 && 2 * supers <= tx, "%lld super-frames for %lld frames", supers, tx);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: %d bursts of %d WRITEs posted back to back, data checked, each landed without "
         "another verbs call (slowest %.0f us); %lld super-frames of %lld frames\n", kBatchRounds,
         kBatchWrites, worst * 1e6, supers, tx);
  return 0;
}

static int mode_failed(void) {
  struct ep a, b;
  struct ibv_context* c0 = open_pair(&a, &b, 0);
  struct ibv_context* bad = open_named("uroce1");  /* configured on an interface that is not there */
  CHECK(bad == NULL, "uroce1 opened on a missing interface");
  struct ibv_context* bad2 = open_named("uroce1");
  CHECK(bad2 == NULL, "uroce1 opened on the second try");
  exchange(&a, &b, 6);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0, "close");
  c0 = open_pair(&a, &b, 0);  /* it reopens */
  exchange(&a, &b, 7);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0, "close");
  printf("ok: a device that fails to open leaves the open one working; it reopens after close\n");
  return 0;
}

/* The descriptors of this process other than 0, 1, 2 (and the directory being read). */
static int list_fds(char* out, size_t room) {
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  out[0] = '\0';
  struct dirent* de;
  while ((de = readdir(d)) != NULL) {
    const int fd = atoi(de->d_name);
    if (de->d_name[0] == '.' || fd <= 2 || fd == dirfd(d)) continue;
    char path[64], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const ssize_t len = readlink(path, target, sizeof target - 1);
    target[len > 0 ? len : 0] = '\0';
    const size_t used = strlen(out);
    snprintf(out + used, room - used, " %d->%s", fd, target);
    ++n;
  }
  closedir(d);
  return n;
}

static int mode_fds(void) {
  char fds[4096];
  const int n = list_fds(fds, sizeof fds);
  printf("%d%s\n", n, fds);
  return 0;
}

static int mode_exec(const char* self) {
  char inherited[4096];  /* what the test's own parent gave us: not ours to judge */
  list_fds(inherited, sizeof inherited);
  struct ep a, b;
  struct ibv_context* c = open_pair(&a, &b, 1);
  exchange(&a, &b, 8);
  char fds[4096];
  const int mine = list_fds(fds, sizeof fds);
  int p[2];
  CHECK(pipe(p) == 0, "pipe");  /* (the test's own pipe: it is meant to be inherited) */
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl(self, self, "fds", (char*)NULL);
    _exit(127);
  }
  close(p[1]);
  char got[4096] = {0};
  size_t used = 0;
  ssize_t r;
  while ((r = read(p[0], got + used, sizeof got - 1 - used)) > 0) used += (size_t)r;
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed");
  /* Every descriptor the child has must have been inherited by us from our own parent. */
  char* tok = strchr(got, ' ');
  while (tok != NULL) {
    char* end = strchr(tok + 1, ' ');
    if (end == NULL) end = strchr(tok + 1, '\n');
    char one[300];
    snprintf(one, sizeof one, "%.*s", (int)(end - tok), tok);
    CHECK(strstr(inherited, one) != NULL, "a descriptor survived exec:%s (the parent had %d:%s)",
          one, mine, fds);
    tok = (*end == ' ') ? end : NULL;
  }
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c) == 0, "close");
  printf("ok: no descriptor uroce opened survives exec (the program had %d open)\n", mine);
  return 0;
}

static void* report_affinity(void* out) {
  CHECK(pthread_getaffinity_np(pthread_self(), sizeof(cpu_set_t), out) == 0, "getaffinity");
  return NULL;
}

static int mode_affinity(void) {
  cpu_set_t before, after, later;
  CHECK(sched_getaffinity(0, sizeof before, &before) == 0, "sched_getaffinity");
  struct ibv_context* c = open_named("uroce0");
  CHECK(c, "open uroce0: errno %d", errno);
  CHECK(sched_getaffinity(0, sizeof after, &after) == 0, "sched_getaffinity");
  pthread_t t;
  pthread_create(&t, NULL, report_affinity, &later);
  pthread_join(t, NULL);
  CHECK(CPU_EQUAL(&before, &after), "the opening thread's affinity changed: %d CPUs -> %d",
        CPU_COUNT(&before), CPU_COUNT(&after));
  CHECK(CPU_EQUAL(&before, &later), "a thread created after the open has %d CPUs, not %d",
        CPU_COUNT(&later), CPU_COUNT(&before));
  CHECK(ibv_close_device(c) == 0, "close");
  printf("ok: opening a device leaves the CPU affinity of the program's threads alone "
         "(%d CPUs before and after)\n", CPU_COUNT(&after));
  return 0;
}

/* Entries of `dir` whose names begin with `prefix`. */
static long count_dir(const char* dir, const char* prefix) {
  DIR* d = opendir(dir);
  long n = 0;
  struct dirent* de;
  while (d && (de = readdir(d)) != NULL) n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

static int mode_loop(int n) {
  char fds[4096], own_shm[64];  /* this process's files in /dev/shm: uroce-PID-... */
  snprintf(own_shm, sizeof own_shm, "uroce-%d-", (int)getpid());
  long fd0 = 0, rss0 = 0, shm0 = 0;
  for (int i = 0; i < n; ++i) {
    struct ep a, b;
    struct ibv_context* c = open_pair(&a, &b, i % 2);
    exchange(&a, &b, (uint8_t)i);
    if (i % 3 == 0) {  /* every third round leaves its objects for ibv_close_device */
      ep_free(&a);
      ep_free(&b);
    } else {
      free(a.buf);
      free(b.buf);
    }
    CHECK(ibv_close_device(c) == 0, "close %d", i);
    if (i == 9) {  /* the baseline: after the process-wide setup of the first rounds */
      fd0 = list_fds(fds, sizeof fds);
      rss0 = rss_kib();
      shm0 = count_dir("/dev/shm", own_shm);
    }
  }
  const long fd1 = list_fds(fds, sizeof fds), rss1 = rss_kib(),
             shm1 = count_dir("/dev/shm", own_shm);
  CHECK(fd1 == fd0, "descriptors grew from %ld to %ld:%s", fd0, fd1, fds);
  CHECK(shm1 == shm0, "/dev/shm entries grew from %ld to %ld", shm0, shm1);
  /* A leak of one engine or port per round would be megabytes per round. */
  CHECK(rss1 - rss0 < 16 * 1024, "resident memory grew from %ld KiB to %ld KiB", rss0, rss1);
  printf("ok: %d rounds of open, use and close: descriptors %ld -> %ld, /dev/shm %ld -> %ld, "
         "RSS %ld -> %ld KiB\n", n, fd0, fd1, shm0, shm1, rss0, rss1);
  return 0;
}

/* ---- stress ----------------------------------------------------------------------------------- */

enum { kWorkers = 3, kRounds = 300, kEventRounds = 200, kChurn = 15 };

struct worker {
  struct ep a, b;
  int id;
};

static void* traffic_worker(void* arg) {
  struct worker* w = arg;
  for (int r = 0; r < kRounds; ++r) exchange(&w->a, &w->b, (uint8_t)(w->id * 31 + r));
  return NULL;
}

/* Receives kEventRounds SENDs on a CQ with a completion channel, blocked in ibv_get_cq_event. */
struct evq {
  struct ep rx;
  int got;
};
static void* event_waiter(void* arg) {
  struct evq* q = arg;
  /* The documented order: arm, then drain, then wait. Completions that landed before the arm
   * (this thread may start late) are found by the drain; those after it raise an event. */
  CHECK(ibv_req_notify_cq(q->rx.cq, 0) == 0, "req_notify");
  unsigned unacked = 0;
  for (;;) {
    struct ibv_wc wc[8];
    int n;
    while ((n = ibv_poll_cq(q->rx.cq, 8, wc)) > 0) {
      for (int i = 0; i < n; ++i) {
        CHECK(wc[i].status == IBV_WC_SUCCESS, "event CQ: %s", ibv_wc_status_str(wc[i].status));
        if (wc[i].opcode == IBV_WC_RECV) {
          ++q->got;
          post_recv(&q->rx, wc[i].wr_id);  /* the receive queue stays full */
        }
      }
    }
    if (q->got >= kEventRounds) break;
    struct ibv_cq* cq;
    void* cq_ctx;
    CHECK(ibv_get_cq_event(q->rx.ch, &cq, &cq_ctx) == 0, "ibv_get_cq_event");
    CHECK(cq == q->rx.cq && cq_ctx == &q->rx, "event for another CQ");
    ++unacked;
    CHECK(ibv_req_notify_cq(q->rx.cq, 0) == 0, "req_notify");
  }
  ibv_ack_cq_events(q->rx.cq, unacked);
  return NULL;
}

static void* churn(void* arg) {
  (void)arg;
  for (int i = 0; i < kChurn; ++i) {
    struct ep a, b;
    struct ibv_context* c = open_pair(&a, &b, 0);
    exchange(&a, &b, (uint8_t)i);
    free(a.buf);
    free(b.buf);
    CHECK(ibv_close_device(c) == 0, "churn close");
  }
  return NULL;
}

static int mode_stress(void) {
  struct ibv_context* c = open_named("uroce0");
  CHECK(c, "open: errno %d", errno);
  struct worker w[kWorkers];
  for (int i = 0; i < kWorkers; ++i) {
    w[i].id = i;
    ep_init(&w[i].a, c, 0);
    ep_init(&w[i].b, c, 0);
    connect_pair(&w[i].a, &w[i].b);
  }
  struct evq q = {.got = 0};
  struct ep tx;
  ep_init(&q.rx, c, 1);
  ep_init(&tx, c, 0);
  connect_pair(&tx, &q.rx);
  for (int i = 0; i < 100; ++i) post_recv(&q.rx, 100 + (uint64_t)i);
  pthread_t th[kWorkers + 2];
  pthread_create(&th[kWorkers], NULL, event_waiter, &q);
  pthread_create(&th[kWorkers + 1], NULL, churn, NULL);
  for (int i = 0; i < kWorkers; ++i) pthread_create(&th[i], NULL, traffic_worker, &w[i]);
  /* This thread is the event waiter's sender: SENDs, unsignaled but every 16th. */
  for (int i = 0; i < kEventRounds; ++i) {
    struct ibv_sge s = {(uintptr_t)tx.buf, 64, tx.mr->lkey};
    struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = (i % 16 == 15) ? IBV_SEND_SIGNALED : 0}, *bad;
    CHECK(ibv_post_send(tx.qp, &wr, &bad) == 0, "event sender post %d", i);
    if (i % 16 == 15) wait_one(&tx);
  }
  for (int i = 0; i < kWorkers + 2; ++i) pthread_join(th[i], NULL);
  CHECK(q.got == kEventRounds, "event waiter got %d receives", q.got);
  for (int i = 0; i < kWorkers; ++i) {
    ep_free(&w[i].a);
    ep_free(&w[i].b);
  }
  ep_free(&q.rx);
  ep_free(&tx);
  CHECK(ibv_close_device(c) == 0, "close");
  printf("ok: stress: %d threads x %d checked WRITE+SEND exchanges on their own QPs, %d SENDs "
         "to a thread blocked in ibv_get_cq_event, %d contexts opened and closed meanwhile\n",
         kWorkers, kRounds, kEventRounds, kChurn);
  return 0;
}

static int shm_exists(pid_t pid) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm/uroce-%d-uroce0", (int)pid);
  return access(path, F_OK) == 0;
}

/* The sanitizer build's LeakSanitizer (gcc 12's libasan) checks for leaks at exit with its
 * allocator's locks all taken, and it installs no fork handlers (they came with LLVM 17):
 * a lock that another thread of the parent held at the instant of fork() stays held in the
 * child, whose exit then waits forever (seen 1 run in 11). No leak check in fork's child. */
static pid_t g_main_pid;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return g_main_pid != 0 && getpid() != g_main_pid; }

static int mode_fork(void) {
  struct ep a, b;
  g_main_pid = getpid();
  struct ibv_context* c = open_pair(&a, &b, 0);
  exchange(&a, &b, 9);
  CHECK(shm_exists(getpid()), "no counters file for this process");
  const char* port = getenv("UROCE_PORT");
  const int dpdk = port != NULL && strcmp(port, "dpdk") == 0;
  /* Where it got to, on stderr as it goes: a run that hangs (issue 40's run 21, ASan beside a
   * CPU hog: 300 s and no output at all) says which side stopped where. The parent dies by
   * SIGALRM after 240 s (runtime.sh reports it), the child after 60 s (said below), both well
   * inside ctest's timeout. */
  alarm(240);
  fprintf(stderr, "fork: the parent's first exchange is done; forking\n");
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    if (dpdk) {
      struct ibv_context* cc = open_named("uroce0");
      exit(cc == NULL && errno == ENODEV ? 0 : 3);  /* exit(): the library's exit hook runs */
    }
    struct ep ca, cb;
    struct ibv_context* cc = open_pair(&ca, &cb, 0);
    fprintf(stderr, "fork: the child opened its device and connected its pair\n");
    exchange(&ca, &cb, 12);
    exchange(&cb, &ca, 13);
    fprintf(stderr, "fork: the child's exchanges are done\n");
    CHECK(shm_exists(getpid()), "the child's device has no counters file of its own");
    ep_free(&ca);
    ep_free(&cb);
    CHECK(ibv_close_device(cc) == 0, "the child's close");
    fprintf(stderr, "fork: the child closed its device; exiting\n");
    exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  fprintf(stderr, "fork: the child is gone (status 0x%x)\n", (unsigned)st);
  CHECK(!WIFSIGNALED(st), "the child was killed by signal %d (14: stuck 60 s after fork)",
        WTERMSIG(st));
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s (%d)",
        dpdk ? "the child could open uroce0 on DPDK, or failed oddly" : "the child's own device failed",
        WEXITSTATUS(st));
  CHECK(shm_exists(getpid()), "the child's exit removed the parent's counters file");
  exchange(&a, &b, 10);
  exchange(&b, &a, 11);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c) == 0, "close");
  alarm(0);
  printf("ok: fork: the parent's device keeps working, the child %s, and its exit leaves the "
         "parent's files\n",
         dpdk ? "cannot open one on DPDK (ENODEV)" : "moved data over a device of its own");
  return 0;
}

/* forkbusy: a thread keeps the device's engine busy (polling an empty CQ runs engine passes)
 * while the main thread forks 100 children. Each child calls verbs on the context it
 * inherited: ibv_query_device and device memory (pyverbs' test_multi_process_alloc_dm does
 * the latter in five children). Before the fork handler took the engine lock around fork(),
 * a child forked during a pass found that lock held forever and hung (the CI of 2026-11-27:
 * the pyverbs suite's 900 s timeout). */
static int g_busy_stop;
static void* busy_poll(void* arg) {
  struct ibv_cq* cq = arg;
  struct ibv_wc wc;
  while (!__atomic_load_n(&g_busy_stop, __ATOMIC_RELAXED)) ibv_poll_cq(cq, 1, &wc);
  return NULL;
}

static int mode_forkbusy(void) {
  struct ep a, b;
  g_main_pid = getpid();
  struct ibv_context* c = open_pair(&a, &b, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, busy_poll, b.cq) == 0, "pthread_create");
  for (int i = 0; i < 100; ++i) {
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork: errno %d", errno);
    if (pid == 0) {
      alarm(20);  /* a child stuck on a lock copied while held dies instead of hanging */
      struct ibv_device_attr attr;
      int ok = ibv_query_device(c, &attr) == 0;
      struct ibv_alloc_dm_attr da = {.length = 4096};
      struct ibv_dm* dm = ok ? ibv_alloc_dm(c, &da) : NULL;
      ok = dm != NULL && ibv_free_dm(dm) == 0;
      _exit(ok ? 0 : 3);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid: errno %d", errno);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child %d of 100: %s %d (a verb on the inherited context %s)", i,
          WIFSIGNALED(st) ? "killed by signal" : "exit status",
          WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
          WIFSIGNALED(st) ? "never returned" : "failed");
  }
  __atomic_store_n(&g_busy_stop, 1, __ATOMIC_RELAXED);
  pthread_join(t, NULL);
  exchange(&a, &b, 14);  /* the parent's device still works */
  exchange(&b, &a, 15);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c) == 0, "close");
  printf("ok: forkbusy: 100 children forked while a thread ran engine passes each queried the "
         "inherited context and allocated and freed device memory on it\n");
  return 0;
}

static struct ep ex_a, ex_b, ex_c, ex_d;

static void* post_forever(void* arg) {
  (void)arg;  /* WRITEs from ex_a into ex_b, never waiting */
  struct ibv_sge s = {(uintptr_t)ex_a.buf, 64, ex_a.mr->lkey};
  for (uint64_t i = 0;; ++i) {
    struct ibv_send_wr w = {.wr_id = i, .sg_list = &s, .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
    w.wr.rdma.remote_addr = (uintptr_t)ex_b.buf + MSG;
    w.wr.rdma.rkey = ex_b.mr->rkey;
    if (ibv_post_send(ex_a.qp, &w, &bad) != 0) {
      struct ibv_wc wc[16];
      ibv_poll_cq(ex_a.cq, 16, wc);
    }
  }
  return NULL;
}

static int mode_exit(void) {
  struct ibv_context* c = open_named("uroce0");
  CHECK(c, "open uroce0: errno %d", errno);
  ep_init(&ex_a, c, 1);
  ep_init(&ex_b, c, 0);
  ep_init(&ex_c, c, 0);
  ep_init(&ex_d, c, 0);
  connect_pair(&ex_a, &ex_b);
  connect_pair(&ex_c, &ex_d);
  pthread_t t;
  pthread_create(&t, NULL, post_forever, NULL);
  for (int i = 0; i < 200; ++i) exchange(&ex_c, &ex_d, (uint8_t)i);  /* more traffic meanwhile */
  printf("ok: exit with every object open while a thread is posting\n");
  exit(0);  /* the shell checks the exit status and that no counters file is left */
}

/* ---- link ------------------------------------------------------------------------------------ */

/* The process's CPU time (all threads), in seconds. */
static double cpu_seconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* The next async event within 30 s (a bound against a hang, not a wait for timing). */
static enum ibv_event_type next_event(struct ibv_context* c) {
  struct pollfd p = {.fd = c->async_fd, .events = POLLIN};
  CHECK(poll(&p, 1, 30000) == 1, "no async event within 30 s");
  struct ibv_async_event ev;
  CHECK(ibv_get_async_event(c, &ev) == 0, "ibv_get_async_event");
  ibv_ack_async_event(&ev);
  return ev.event_type;
}

/* A shell command. In the sanitizer build the ASan runtime is preloaded into everything and
 * this program checks for leaks: the `ip` it runs must not (it leaks at exit by design). */
static void run(const char* cmd) {
  char full[512];
  snprintf(full, sizeof full, "ASAN_OPTIONS=detect_leaks=0 %s", cmd);
  CHECK(system(full) == 0, "%s failed", cmd);
}

/* The interface goes down, changes its MTU and comes back: both contexts hear PORT_ERR and
 * PORT_ACTIVE, and ibv_query_port follows (state, and the active MTU the new MTU allows). */
static int mode_link(const char* iface, const char* uroce) {
  struct ibv_context* c1 = open_named("uroce0");
  struct ibv_context* c2 = open_named("uroce0");
  CHECK(c1 && c2, "open: errno %d", errno);
  struct ibv_port_attr pa;
  CHECK(ibv_query_port(c1, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "not ACTIVE at first");
  const enum ibv_mtu mtu0 = pa.active_mtu;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ip link set dev %s down", iface);
  run(cmd);
  CHECK(next_event(c1) == IBV_EVENT_PORT_ERR, "c1: not PORT_ERR");
  CHECK(next_event(c2) == IBV_EVENT_PORT_ERR, "c2: not PORT_ERR");
  CHECK(ibv_query_port(c2, 1, &pa) == 0 && pa.state == IBV_PORT_DOWN, "state %d, not DOWN",
        pa.state);
  snprintf(cmd, sizeof cmd, "ip link set dev %s mtu 1000 up", iface);
  run(cmd);
  CHECK(next_event(c1) == IBV_EVENT_PORT_ACTIVE, "c1: not PORT_ACTIVE");
  CHECK(next_event(c2) == IBV_EVENT_PORT_ACTIVE, "c2: not PORT_ACTIVE");
  CHECK(ibv_query_port(c1, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "not ACTIVE again");
  CHECK(mtu0 > IBV_MTU_512 && pa.active_mtu == IBV_MTU_512,
        "active MTU %d at interface MTU 1000 (was %d)", pa.active_mtu, mtu0);
  /* Idle again, the provider sleeps until traffic: the packet socket's ENETDOWN error from
   * the link going down must not leave it polling ready forever (it did: the progress thread
   * then spun at 100 % of a core for the rest of the program). Counted, not timed: in 500 ms
   * a healthy thread parks about once per deadline (the link watch and the counters, each
   * every 100 ms), fewer times on a slower machine; one whose parks return at once parks
   * thousands of times, hundreds even with a small share of a loaded CPU. */
  const long long parks0 = stat_of(uroce, "uroce0", "progress_parks");
  const double cpu0 = cpu_seconds();
  const struct timespec half = {0, 500000000};
  nanosleep(&half, NULL);
  const double idle_cpu = cpu_seconds() - cpu0;
  const long long parks = stat_of(uroce, "uroce0", "progress_parks") - parks0;
  CHECK(parks <= 50, "%lld parks (%.0f ms of CPU) in 500 ms idle after the link came back", parks,
        idle_cpu * 1e3);
  CHECK(ibv_close_device(c2) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: link down and up: PORT_ERR and PORT_ACTIVE to both contexts, port state DOWN "
         "then ACTIVE, active MTU enum %d -> %d at interface MTU 1000; %lld parks and %.1f ms of "
         "CPU in 500 ms idle after\n", mtu0, IBV_MTU_512, parks, idle_cpu * 1e3);
  return 0;
}

static int mode_cqevents(void) {
  struct ep a, b;
  struct ibv_context* c = open_pair(&a, &b, 1);
  CHECK(ibv_req_notify_cq(a.cq, 0) == 0, "ibv_req_notify_cq");
  /* b SENDs to a: a's CQ gets a completion, and its channel the event. */
  post_recv(&a, 7);
  struct ibv_sge s = {(uintptr_t)b.buf, 64, b.mr->lkey};
  struct ibv_send_wr w = {.wr_id = 8, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED}, *bad;
  CHECK(ibv_post_send(b.qp, &w, &bad) == 0, "post SEND");
  wait_one(&b);
  struct pollfd p = {.fd = a.ch->fd, .events = POLLIN};
  CHECK(poll(&p, 1, 10000) == 1, "no completion event on a's channel");
  /* Unread, the CQ goes (its QP first), and another takes its place on the channel. */
  void* old = a.cq;
  CHECK(ibv_destroy_qp(a.qp) == 0, "ibv_destroy_qp");
  CHECK(ibv_destroy_cq(a.cq) == 0, "ibv_destroy_cq");
  struct ibv_cq* cq2 = ibv_create_cq(c, 256, (void*)0x77, a.ch, 0);
  CHECK(cq2 != NULL, "ibv_create_cq: errno %d", errno);
  CHECK(fcntl(a.ch->fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
  struct ibv_cq* got = NULL;
  void* ctx = NULL;
  const int r = ibv_get_cq_event(a.ch, &got, &ctx);
  CHECK(r == -1 && errno == EAGAIN,
        "ibv_get_cq_event returned %d with cq %p (the new CQ %p, context %p): the destroyed "
        "CQ's event was handed out as the new CQ's", r, (void*)got, (void*)cq2, ctx);
  printf("ok: a destroyed CQ's unread event is not read as the new CQ's (it took the old "
         "address: %s)\n", (void*)cq2 == old ? "yes" : "no");
  CHECK(ibv_destroy_cq(cq2) == 0, "ibv_destroy_cq");
  CHECK(ibv_destroy_comp_channel(a.ch) == 0, "ibv_destroy_comp_channel");
  CHECK(ibv_dereg_mr(a.mr) == 0 && ibv_dealloc_pd(a.pd) == 0, "a's MR, PD");
  free(a.buf);
  ep_free(&b);
  CHECK(ibv_close_device(c) == 0, "ibv_close_device");
  return 0;
}

/* The interface's IPv4 memberships in 239.5.0.0/24, as `ip maddr` lists them. */
static int groups_on(const char* iface) {
  char cmd[160], line[256];
  snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 ip -4 maddr show dev %s", iface);
  FILE* f = popen(cmd, "r");
  CHECK(f != NULL, "popen %s", cmd);
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, "239.5.0.") != NULL;
  CHECK(pclose(f) == 0, "%s failed", cmd);
  return n;
}

static int mode_mcast(const char* iface) {
  struct ibv_context* c = open_named("uroce0");
  CHECK(c, "open uroce0: errno %d", errno);
  struct ibv_pd* pd = ibv_alloc_pd(c);
  struct ibv_cq* cq = ibv_create_cq(c, 16, NULL, NULL, 0);
  struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                        .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = pd && cq ? ibv_create_qp(pd, &qa) : NULL;
  CHECK(qp != NULL, "UD QP: errno %d", errno);
  union ibv_gid g = {.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 5, 0, 0}};
  CHECK(groups_on(iface) == 0, "239.5.0.x joined before any attach");
  for (int i = 1; i <= 25; ++i) {
    g.raw[15] = (uint8_t)i;
    CHECK(ibv_attach_mcast(qp, &g, 0) == 0, "attach 239.5.0.%d", i);
  }
  CHECK(ibv_attach_mcast(qp, &g, 0) == 0, "attach 239.5.0.25 again");
  int n = groups_on(iface);
  CHECK(n == 25, "%d of 25 groups joined on %s", n, iface);
  for (int i = 1; i <= 25; ++i) {
    g.raw[15] = (uint8_t)i;
    CHECK(ibv_detach_mcast(qp, &g, 0) == 0, "detach 239.5.0.%d", i);
  }
  CHECK(ibv_detach_mcast(qp, &g, 0) == EINVAL, "a second detach should be EINVAL");
  n = groups_on(iface);
  CHECK(n == 0, "%d groups still joined after the last detach", n);
  g.raw[12] = 10;  /* 10.5.0.25: not a group */
  CHECK(ibv_attach_mcast(qp, &g, 0) == EINVAL, "attaching a unicast GID should be EINVAL");
  printf("ok: 25 multicast groups joined on %s and left again\n", iface);
  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
        "teardown");
  CHECK(ibv_close_device(c) == 0, "ibv_close_device");
  return 0;
}

/* ---- regmr: a large registration does not stall the device's traffic ------------------------ */

struct reg_job {
  struct ibv_pd* pd;
  void* mem;
  size_t len;
  int done;  /* __atomic */
  struct ibv_mr* mr;
  int err;
};

static void* register_big(void* arg) {
  struct reg_job* j = arg;
  j->mr = ibv_reg_mr(j->pd, j->mem, j->len, IBV_ACCESS_LOCAL_WRITE);
  j->err = errno;
  __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

enum { kRegPings = 20 };

/* ibv_reg_mr faults the region's pages in before it takes the device lock (docs/threading.md).
 * To show it without a race, the region is registered with userfaultfd: the registration's
 * first page fault stops in the kernel until this thread lets it go. Meanwhile the pings must
 * go on; had the registration taken the lock first, the first would never complete. */
static int mode_regmr(void) {
  struct ibv_context *c0, *c1;
  struct ep a, b;
  open_two(&c0, &c1, &a, &b);
  struct reg_job j = {.pd = a.pd, .len = (size_t)64 << 20};
  j.mem = mmap(NULL, j.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
               -1, 0);
  CHECK(j.mem != MAP_FAILED, "mmap 64 MiB: errno %d", errno);
  const int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  CHECK(uffd >= 0, "userfaultfd: errno %d", errno);
  struct uffdio_api api = {.api = UFFD_API};
  CHECK(ioctl(uffd, UFFDIO_API, &api) == 0, "UFFDIO_API: errno %d", errno);
  struct uffdio_register reg = {.range = {(uintptr_t)j.mem, j.len},
                                .mode = UFFDIO_REGISTER_MODE_MISSING};
  CHECK(ioctl(uffd, UFFDIO_REGISTER, &reg) == 0, "UFFDIO_REGISTER: errno %d", errno);
  exchange(&a, &b, 6);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, register_big, &j) == 0, "pthread_create");
  /* The registration's first fault (a bound for a hung program, not a speed target). */
  struct pollfd pf = {uffd, POLLIN, 0};
  CHECK(poll(&pf, 1, 60000) == 1, "ibv_reg_mr never touched its pages");
  struct uffd_msg msg;
  CHECK(read(uffd, &msg, sizeof msg) == (ssize_t)sizeof msg && msg.event == UFFD_EVENT_PAGEFAULT,
        "not a page fault");
  /* 64-byte WRITEs from uroce0 to uroce1, each waited for, while the registration waits. */
  struct ibv_sge sg = {(uintptr_t)a.buf, 64, a.mr->lkey};
  struct ibv_send_wr w = {.wr_id = 7, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                          .send_flags = IBV_SEND_SIGNALED}, *bad;
  w.wr.rdma.remote_addr = (uintptr_t)(b.buf + MSG);
  w.wr.rdma.rkey = b.mr->rkey;
  for (int i = 0; i < kRegPings; ++i) {
    a.buf[0] = (uint8_t)(i + 1);
    CHECK(ibv_post_send(a.qp, &w, &bad) == 0, "post WRITE %d", i);
    const double t0 = now_s();
    struct ibv_wc wc;
    int n = 0;
    while ((n = ibv_poll_cq(a.cq, 1, &wc)) == 0)
      CHECK(now_s() - t0 < 60.0, "WRITE %d never completed while ibv_reg_mr faulted its pages "
            "in: the device is locked meanwhile", i);
    CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "WRITE %d: %d, status %d", i, n, wc.status);
    CHECK(b.buf[MSG] == (uint8_t)(i + 1), "WRITE %d did not arrive", i);
  }
  CHECK(!__atomic_load_n(&j.done, __ATOMIC_ACQUIRE), "ibv_reg_mr returned while its page fault "
        "was held");
  /* Let it go: unregistered, the held fault is woken and the rest fault in as usual. */
  struct uffdio_range all = {(uintptr_t)j.mem, j.len};
  CHECK(ioctl(uffd, UFFDIO_UNREGISTER, &all) == 0, "UFFDIO_UNREGISTER: errno %d", errno);
  CHECK(pthread_join(t, NULL) == 0, "pthread_join");
  close(uffd);
  CHECK(j.mr != NULL, "ibv_reg_mr of 64 MiB: errno %d", j.err);
  CHECK(ibv_dereg_mr(j.mr) == 0, "ibv_dereg_mr");
  munmap(j.mem, j.len);
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c0) == 0 && ibv_close_device(c1) == 0, "close");
  printf("ok: %d WRITE pings on the device, data checked, while ibv_reg_mr was held in its "
         "first page fault; then it registered 64 MiB\n", kRegPings);
  return 0;
}

/* ibv_import_device(3) and the object imports: a second context on a dup of the first's
 * cmd_fd shares its objects. A QP made on the imported context with the imported PD, whose
 * peer WRITEs into the imported MR's memory, is the pyverbs shared-PD test in C; then every
 * way of letting go: unimport, destroy through the imported handle, the original closed
 * first (the group's objects stay until its last context closes). */
static int mode_import(void) {
  struct ibv_context* c = open_named("uroce0");
  CHECK(c, "open uroce0: errno %d", errno);
  struct ibv_pd* pd = ibv_alloc_pd(c);
  CHECK(pd, "ibv_alloc_pd");
  uint8_t* mem = calloc(2, MSG);
  struct ibv_mr* mr = ibv_reg_mr(pd, mem, 2 * MSG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(mr, "ibv_reg_mr");
  struct ibv_alloc_dm_attr da = {.length = 4096};
  struct ibv_dm* dm = ibv_alloc_dm(c, &da);
  CHECK(dm, "ibv_alloc_dm: errno %d", errno);
  /* Not a context's descriptor: EOPNOTSUPP (another process's would be the same). */
  const int other = open("/dev/null", O_RDWR | O_CLOEXEC);
  CHECK(ibv_import_device(other) == NULL && errno == EOPNOTSUPP, "import of /dev/null: errno %d", errno);
  close(other);
  const int fd = dup(c->cmd_fd);
  struct ibv_context* ic = ibv_import_device(fd);
  CHECK(ic, "ibv_import_device: errno %d", errno);
  CHECK(ic != c && ic->cmd_fd == fd && ic->device == c->device, "the imported context");
  CHECK(ibv_import_pd(ic, pd->handle + 1000) == NULL && errno == EINVAL, "a PD handle nobody has");
  struct ibv_pd* ipd = ibv_import_pd(ic, pd->handle);
  CHECK(ipd && ipd->context == ic && ipd->handle == pd->handle, "ibv_import_pd: errno %d", errno);
  struct ibv_mr* imr = ibv_import_mr(ipd, mr->handle);
  CHECK(imr && imr->lkey == mr->lkey && imr->rkey == mr->rkey && imr->length == mr->length &&
        imr->addr == NULL && imr->pd == ipd, "ibv_import_mr: errno %d", errno);
  struct ibv_dm* idm = ibv_import_dm(ic, dm->handle);
  CHECK(idm && idm->context == ic, "ibv_import_dm: errno %d", errno);
  /* The same device memory through both handles. */
  uint32_t word = 0x5eed1234, back = 0;
  CHECK(ibv_memcpy_to_dm(dm, 64, &word, 4) == 0 && ibv_memcpy_from_dm(&back, idm, 64, 4) == 0 &&
        back == word, "device memory through the imported handle");
  /* The original cannot go while an imported handle names it. */
  CHECK(ibv_dealloc_pd(pd) == EBUSY && ibv_dereg_mr(mr) == EBUSY && ibv_free_dm(dm) == EBUSY,
        "destroying what an imported handle names");
  /* Traffic: a QP of the imported context on the imported PD, its peer on another context;
   * the peer WRITEs into the imported MR (the original's memory). */
  struct ep a, b;
  memset(&a, 0, sizeof a);
  a.ctx = ic;
  a.pd = ipd;
  a.mr = imr;
  a.buf = mem;
  CHECK(ibv_query_gid(ic, 1, 1, &a.gid) == 0, "ibv_query_gid");
  a.cq = ibv_create_cq(ic, 64, NULL, NULL, 0);
  struct ibv_qp_init_attr qa = {.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 16, .max_recv_wr = 16,
                                        .max_send_sge = 1, .max_recv_sge = 1}};
  a.qp = ibv_create_qp(ipd, &qa);
  CHECK(a.cq && a.qp, "a QP on the imported context and PD: errno %d", errno);
  struct ibv_context* pc = open_named("uroce0");
  CHECK(pc, "open uroce0 again");
  ep_init(&b, pc, 0);
  connect_pair(&a, &b);
  exchange(&b, &a, 9);  /* b WRITEs and SENDs into mem + MSG through the imported keys */
  exchange(&a, &b, 10); /* and the imported MR's lkey sends */
  /* Let go: the imported context's QP and CQ, the imported handles (unimport, and destroy
   * through the imported DM handle), then the original context closes first. */
  CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_cq(a.cq) == 0, "destroy the imported side's QP");
  ibv_unimport_mr(imr);
  ibv_unimport_pd(ipd);
  CHECK(ibv_free_dm(idm) == 0, "ibv_free_dm through the imported handle: the device memory goes");
  CHECK(ibv_dealloc_pd(pd) == EBUSY, "the MR still holds the PD");
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr once the imported handle is gone");
  /* A PD imported again, the original context closed first: the imported handle still works. */
  struct ibv_pd* ipd2 = ibv_import_pd(ic, pd->handle);
  CHECK(ipd2, "ibv_import_pd again");
  CHECK(ibv_close_device(c) == 0, "close the original context first");
  struct ibv_mr* late = ibv_reg_mr(ipd2, mem, MSG, IBV_ACCESS_LOCAL_WRITE);
  CHECK(late, "ibv_reg_mr on the imported PD after the original context closed: errno %d", errno);
  CHECK(ibv_dereg_mr(late) == 0, "dereg");
  CHECK(ibv_dealloc_pd(ipd2) == 0, "ibv_dealloc_pd through the imported handle: the PD goes");
  CHECK(ibv_close_device(ic) == 0, "close the imported context (its group's last)");
  CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "the imported context closed its cmd_fd");
  ep_free(&b);
  CHECK(ibv_close_device(pc) == 0, "close the peer");
  free(mem);
  printf("ok: ibv_import_device on a dup of cmd_fd shares PD, MR and DM by handle; traffic through "
         "the imported ones; unimport, destroy through an import, the original closed first\n");
  return 0;
}

static uint64_t clock_ns(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Completion timestamps: an extended CQ with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK)
 * gives each completion the device clock's time when it was made; that clock is
 * ibv_query_rt_values_ex's raw clock (1 GHz, hca_core_clock), so a WRITE's completion lies
 * between the clock read before the post and after the poll, and so does its wall-clock time
 * between CLOCK_REALTIME's. */
static int mode_stamps(void) {
  struct ep a, b;
  struct ibv_context* c = open_pair(&a, &b, 0);
  struct ibv_device_attr_ex dx;
  CHECK(ibv_query_device_ex(c, NULL, &dx) == 0, "ibv_query_device_ex");
  CHECK(dx.hca_core_clock == 1000000 && dx.completion_timestamp_mask == UINT64_MAX,
        "hca_core_clock %llu kHz, mask %llx", (unsigned long long)dx.hca_core_clock,
        (unsigned long long)dx.completion_timestamp_mask);
  struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS |
                                   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
  struct ibv_cq_ex* cq = ibv_create_cq_ex(c, &ca);
  CHECK(cq, "ibv_create_cq_ex with completion timestamps: errno %d", errno);
  struct ibv_qp_init_attr qa = {.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
                                .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 16, .max_recv_wr = 16,
                                        .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(a.pd, &qa);
  CHECK(qp, "ibv_create_qp");
  struct ibv_qp* old = a.qp;
  a.qp = qp;
  const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  CHECK(loopback_connect(qp, b.qp->qp_num, b.gid, acc, 1) == 0, "connect");
  CHECK(ibv_modify_qp(b.qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_RESET}, IBV_QP_STATE) == 0,
        "reset b");
  CHECK(loopback_connect(b.qp, qp->qp_num, a.gid, acc, 1) == 0, "connect b");
  for (int round = 0; round < 3; ++round) {
    struct ibv_values_ex before = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK}, after = before;
    CHECK(ibv_query_rt_values_ex(c, &before) == 0, "ibv_query_rt_values_ex");
    const uint64_t wall0 = clock_ns(CLOCK_REALTIME);
    struct ibv_sge sg = {(uintptr_t)a.buf, 64, a.mr->lkey};
    struct ibv_send_wr w = {.wr_id = 40 + round, .sg_list = &sg, .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
    w.wr.rdma.remote_addr = (uintptr_t)(b.buf + MSG);
    w.wr.rdma.rkey = b.mr->rkey;
    CHECK(ibv_post_send(qp, &w, &bad) == 0, "post");
    struct ibv_poll_cq_attr pa = {0};
    int rc = ENOENT;
    for (long i = 0; i < 200000000L && rc == ENOENT; ++i) rc = ibv_start_poll(cq, &pa);
    CHECK(rc == 0 && cq->status == IBV_WC_SUCCESS && cq->wr_id == (uint64_t)(40 + round), "completion");
    const uint64_t ts = ibv_wc_read_completion_ts(cq);
    const uint64_t wall = ibv_wc_read_completion_wallclock_ns(cq);
    ibv_end_poll(cq);
    CHECK(ibv_query_rt_values_ex(c, &after) == 0, "ibv_query_rt_values_ex");
    const uint64_t wall1 = clock_ns(CLOCK_REALTIME);
    const uint64_t t0 = (uint64_t)before.raw_clock.tv_sec * 1000000000u + (uint64_t)before.raw_clock.tv_nsec;
    const uint64_t t1 = (uint64_t)after.raw_clock.tv_sec * 1000000000u + (uint64_t)after.raw_clock.tv_nsec;
    CHECK(t0 <= ts && ts <= t1, "round %d: completion at %llu, not within [%llu, %llu]", round,
          (unsigned long long)ts, (unsigned long long)t0, (unsigned long long)t1);
    /* (CLOCK_REALTIME may be stepped meanwhile; a test machine's is not.) */
    CHECK(wall0 <= wall && wall <= wall1, "round %d: wall clock %llu not within [%llu, %llu]", round,
          (unsigned long long)wall, (unsigned long long)wall0, (unsigned long long)wall1);
  }
  struct ibv_values_ex bad_mask = {.comp_mask = 1u << 5};
  CHECK(ibv_query_rt_values_ex(c, &bad_mask) == EINVAL, "an unknown comp_mask bit: EINVAL");
  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy");
  a.qp = old;
  ep_free(&a);
  ep_free(&b);
  CHECK(ibv_close_device(c) == 0, "close");
  printf("ok: completion timestamps (device clock and wall clock) lie between the clock read "
         "before the post and after the poll; hca_core_clock 1 GHz; ibv_query_rt_values_ex\n");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  const char* m = argc > 1 ? argv[1] : "";
  if (!strcmp(m, "contexts")) return mode_contexts();
  if (!strcmp(m, "devices")) return mode_devices();
  if (!strcmp(m, "failed")) return mode_failed();
  if (!strcmp(m, "exec")) return mode_exec(argv[0]);
  if (!strcmp(m, "fds")) return mode_fds();
  if (!strcmp(m, "affinity")) return mode_affinity();
  if (!strcmp(m, "loop")) return mode_loop(argc > 2 ? atoi(argv[2]) : 1000);
  if (!strcmp(m, "stress")) return mode_stress();
  if (!strcmp(m, "fork")) return mode_fork();
  if (!strcmp(m, "forkbusy")) return mode_forkbusy();
  if (!strcmp(m, "exit")) return mode_exit();
  if (!strcmp(m, "cqevents")) return mode_cqevents();
  if (!strcmp(m, "regmr")) return mode_regmr();
  if (!strcmp(m, "import")) return mode_import();
  if (!strcmp(m, "stamps")) return mode_stamps();
  if (!strcmp(m, "mcast") && argc > 2) return mode_mcast(argv[2]);
  if (!strcmp(m, "link") && argc > 3) return mode_link(argv[2], argv[3]);
  if (!strcmp(m, "passive") && argc > 2) return mode_passive(argv[2]);
  if (!strcmp(m, "batch") && argc > 2) return mode_batch(argv[2]);
  if (!strcmp(m, "answer") && argc > 2) return mode_answer(argv[2]);
  if (!strcmp(m, "reply") && argc > 2) return mode_reply(argv[2]);
  if (!strcmp(m, "pacer") && argc > 2) return mode_pacer(argv[2]);
  if (!strcmp(m, "crowded") && argc > 2) return mode_crowded(argv[2]);
  fprintf(stderr, "usage: %s contexts|devices|failed|exec|affinity|loop N|stress|fork|forkbusy|exit|"
          "cqevents|regmr|import|stamps|mcast IFACE|link IFACE UROCE|passive UROCE|batch UROCE|answer UROCE|reply UROCE|"
          "pacer UROCE|crowded UROCE\n",
          argv[0]);
  return 2;
}

/* What a process blocked in ibv_get_cq_event costs: a connected RC QP whose CQ is armed on
 * a completion channel, a thread blocked reading the channel, nothing else happening. Prints
 * the process's CPU (user + system, all threads) over SECONDS as a share of one core.
 *
 * Usage: cq_wait [SECONDS]   (default 5; run under `uroce run`, see side_by_side.sh) */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include "loopback.h" /* CHECK, loopback_connect (tests/verbs) */

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6 +
         (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec / 1e6;
}

static void* waiter(void* arg) {
  struct ibv_comp_channel* ch = arg;
  struct ibv_cq* cq;
  void* ctx;
  ibv_get_cq_event(ch, &cq, &ctx);  /* nothing ever completes: blocks until exit */
  return NULL;
}

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? atoi(argv[1]) : 5;
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list && n > 0, "no RDMA device (errno %d)", errno);
  struct ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx, "ibv_open_device (errno %d)", errno);
  union ibv_gid gid;
  CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "ibv_query_gid (errno %d)", errno);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  CHECK(pd && ch, "PD, channel (errno %d)", errno);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
  CHECK(cq, "ibv_create_cq (errno %d)", errno);
  struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                        .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &qa);
  CHECK(qp, "ibv_create_qp (errno %d)", errno);
  /* Connected to itself (its own GID and QPN): an RC QP in RTS, idle. */
  CHECK(!loopback_connect(qp, qp->qp_num, gid, 0, 1), "connecting the QP (errno %d)", errno);
  CHECK(!ibv_req_notify_cq(cq, 0), "ibv_req_notify_cq (errno %d)", errno);
  pthread_t t;
  CHECK(!pthread_create(&t, NULL, waiter, ch), "pthread_create (errno %d)", errno);
  const double c0 = cpu_s();
  sleep((unsigned)seconds);  /* the measurement itself: the process is meant to be idle */
  const double c1 = cpu_s();
  printf("blocked_cpu_pct %.2f\n", 100.0 * (c1 - c0) / seconds);
  fflush(stdout);
  exit(0);  /* the waiter stays blocked; the library cleans up at exit */
}

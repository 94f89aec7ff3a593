/* Many RC QPs in one process: how long creating and connecting them takes, what each costs in
 * memory beyond its work queues, and a WRITE completing on every one.
 *
 * Usage: qp_scale [N]   (default 10000; run under `uroce run`, see qp_scale.sh)
 *
 * The N QPs are connected in pairs on the first device (QP 2i to QP 2i+1, through the device's
 * own GID: no wire), each with one send and one receive slot. The memory figure is the growth
 * of the resident set while they are created, per QP; what one work-queue slot pair costs is
 * measured the same way on N/4 more QPs with two slots each, and subtracted.
 * Prints one "key value" line per figure; exits 1 on any failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "loopback.h" /* CHECK, loopback_connect (tests/verbs) */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static struct ibv_qp* make_qp(struct ibv_pd* pd, struct ibv_cq* cq, uint32_t slots) {
  struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                               .cap = {.max_send_wr = slots, .max_recv_wr = slots,
                                       .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &a);
  CHECK(qp != NULL, "ibv_create_qp: errno %d", errno);
  return qp;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 10000;
  CHECK(n >= 2 && n % 2 == 0, "N must be even and at least 2");
  int ndev = 0;
  struct ibv_device** list = ibv_get_device_list(&ndev);
  CHECK(list && ndev > 0, "no RDMA device");
  struct ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx, "ibv_open_device: errno %d", errno);
  union ibv_gid gid;
  CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "ibv_query_gid");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  uint64_t* buf = calloc((size_t)n, sizeof *buf);
  uint64_t* src = calloc((size_t)n, sizeof *src);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, (size_t)n * 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_mr* smr = ibv_reg_mr(pd, src, (size_t)n * 8, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * n, NULL, NULL, 0);
  CHECK(pd && buf && src && mr && smr && cq, "setup: errno %d", errno);
  struct ibv_qp** qp = calloc((size_t)n, sizeof *qp);

  const long rss0 = rss_kib();
  const double t0 = now_ms();
  for (int i = 0; i < n; ++i) qp[i] = make_qp(pd, cq, 1);
  const double t1 = now_ms();
  const long rss1 = rss_kib();
  for (int i = 0; i < n; ++i)
    CHECK(!loopback_connect(qp[i], qp[i ^ 1]->qp_num, gid, IBV_ACCESS_REMOTE_WRITE, 1),
          "connecting QP %d", i);
  const double t2 = now_ms();

  for (int i = 0; i < n; ++i) {
    src[i] = 0x5100000000ull + (uint64_t)i;
    struct ibv_sge s = {(uintptr_t)&src[i], 8, smr->lkey};
    struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
    w.wr.rdma.remote_addr = (uintptr_t)&buf[i ^ 1];  /* into the slot of its peer's index */
    w.wr.rdma.rkey = mr->rkey;
    CHECK(!ibv_post_send(qp[i], &w, &bad), "post WRITE on QP %d", i);
  }
  int done = 0;
  for (long spins = 0; done < n; ++spins) {
    struct ibv_wc wc[64];
    const int got = ibv_poll_cq(cq, 64, wc);
    CHECK(got >= 0 && spins < 2000000000L, "polling: %d of %d completions", done, n);
    for (int k = 0; k < got; ++k)
      CHECK(wc[k].status == IBV_WC_SUCCESS, "WRITE on QP %llu: %s",
            (unsigned long long)wc[k].wr_id, ibv_wc_status_str(wc[k].status));
    done += got;
  }
  const double t3 = now_ms();
  for (int i = 0; i < n; ++i)
    CHECK(buf[i] == 0x5100000000ull + (uint64_t)(i ^ 1), "slot %d holds %llx", i,
          (unsigned long long)buf[i]);

  /* The cost of one work-queue slot pair: N/4 more QPs with two of each. */
  const int m = n / 4;
  struct ibv_qp** more = calloc((size_t)m, sizeof *more);
  const long rss2 = rss_kib();
  for (int i = 0; i < m; ++i) more[i] = make_qp(pd, cq, 2);
  const long rss3 = rss_kib();
  const double per_qp = (double)(rss1 - rss0) * 1024.0 / n;
  const double per_qp2 = (double)(rss3 - rss2) * 1024.0 / m;
  const double slot_pair = per_qp2 - per_qp;

  printf("qps %d\n", n);
  printf("create_ms %.1f\n", t1 - t0);
  printf("create_us_per_qp %.2f\n", (t1 - t0) * 1e3 / n);
  printf("connect_ms %.1f\n", t2 - t1);
  printf("write_each_ms %.1f\n", t3 - t2);
  printf("memory_per_qp_bytes %.0f\n", per_qp);
  printf("wq_slot_pair_bytes %.0f\n", slot_pair);
  printf("memory_per_qp_beyond_wqs_bytes %.0f\n", per_qp - slot_pair);

  for (int i = 0; i < m; ++i) CHECK(!ibv_destroy_qp(more[i]), "destroy");
  for (int i = 0; i < n; ++i) CHECK(!ibv_destroy_qp(qp[i]), "destroy");
  ibv_destroy_cq(cq);
  ibv_dereg_mr(mr);
  ibv_dereg_mr(smr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}

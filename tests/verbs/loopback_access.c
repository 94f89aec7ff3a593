/* A plain C verbs program (built against rdma-core's headers, run on uroce's
 * libibverbs.so.1): two RC QPs of one device connected to each other (loopback).
 *   1. RDMA WRITE with the right R_Key: the data arrives.
 *   2. RDMA WRITE with a wrong R_Key: IBV_WC_REM_ACCESS_ERR, the target memory is untouched,
 *      the requester's next WR is flushed (IBV_WC_WR_FLUSH_ERR).
 * Prints "ok: ..." lines; exits non-zero on the first surprise. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loopback.h"

static struct ibv_qp* make_qp(struct ibv_pd* pd, struct ibv_cq* cq) {
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
                                        .max_recv_sge = 1}};
  return ibv_create_qp(pd, &ia);
}

static int wait_wc(struct ibv_cq* cq, struct ibv_wc* wc) {
  for (long i = 0; i < 50000000; ++i) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n;
  }
  return 0;
}

int main(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list && n >= 1, "no device");
  struct ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx, "open %s", ibv_get_device_name(list[0]));
  ibv_free_device_list(list);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(pd && cq, "pd/cq");
  static char src[4096], dst[4096 + 64];
  memset(src, 0x5a, sizeof src);
  memset(dst, 0xee, sizeof dst);
  struct ibv_mr* smr = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr* dmr = ibv_reg_mr(pd, dst, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(smr && dmr, "reg_mr");
  struct ibv_qp* a = make_qp(pd, cq);
  struct ibv_qp* b = make_qp(pd, cq);
  CHECK(a && b, "create_qp");
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
  const int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  int rc = loopback_connect(a, b->qp_num, gid, access, 1);
  CHECK(rc == 0, "connect a: step %d", rc);
  rc = loopback_connect(b, a->qp_num, gid, access, 1);
  CHECK(rc == 0, "connect b: step %d", rc);

  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 3000, .lkey = smr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                           .wr.rdma = {.remote_addr = (uintptr_t)dst, .rkey = dmr->rkey}};
  struct ibv_send_wr* bad = NULL;
  CHECK(ibv_post_send(a, &wr, &bad) == 0, "post_send");
  struct ibv_wc wc;
  CHECK(wait_wc(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 1,
        "good write: status %s", ibv_wc_status_str(wc.status));
  CHECK(dst[0] == 0x5a && dst[2999] == 0x5a && (unsigned char)dst[3000] == 0xee, "data");
  printf("ok: loopback RDMA WRITE of 3000 bytes between two QPs of one device\n");

  memset(dst, 0xee, sizeof dst);
  struct ibv_send_wr bad_key = wr, next = wr;
  bad_key.wr_id = 2;
  bad_key.wr.rdma.rkey = dmr->rkey ^ 0x1;
  next.wr_id = 3;
  bad_key.next = &next;
  CHECK(ibv_post_send(a, &bad_key, &bad) == 0, "post_send 2");
  CHECK(wait_wc(cq, &wc) == 1, "no completion for the bad key");
  CHECK(wc.wr_id == 2 && wc.status == IBV_WC_REM_ACCESS_ERR, "bad key: wr %llu status %s",
        (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
  CHECK(wait_wc(cq, &wc) == 1 && wc.wr_id == 3 && wc.status == IBV_WC_WR_FLUSH_ERR,
        "next WR: status %s", ibv_wc_status_str(wc.status));
  for (size_t i = 0; i < sizeof dst; ++i) CHECK((unsigned char)dst[i] == 0xee, "byte %zu written", i);
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  CHECK(ibv_query_qp(a, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR, "a not in ERR");
  printf("ok: wrong R_Key -> %s, next WR %s, target untouched, QP in ERR\n",
         ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR));

  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  CHECK(ibv_close_device(ctx) == 0, "close");
  return 0;
}

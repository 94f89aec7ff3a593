/* The extended verbs on uroce, from a plain C program built against rdma-core's headers:
 *   - ibv_create_cq_ex + ibv_start_poll / ibv_next_poll / ibv_end_poll / ibv_wc_read_*,
 *   - ibv_create_qp_ex with send_ops_flags, ibv_qp_to_qp_ex, and one ibv_wr_start ..
 *     ibv_wr_complete batch of WRITE, WRITE_WITH_IMM, inline SEND, FETCH_ADD, CMP_SWAP, READ
 *     between two RC QPs of one device (loopback), each result checked,
 *   - the documented failures: ops not announced in send_ops_flags (SEND_WITH_IMM, LOCAL_INV)
 *     make ibv_wr_complete return EOPNOTSUPP and post nothing; ibv_qp_to_qp_ex of a QP made
 *     without send_ops_flags and a CQ asking for tag matching's completion fields fail with
 *     EOPNOTSUPP (completion timestamps: runtime_test stamps),
 *   - FLUSH through rdma-core 45's ibv_wr_flush (uroce/verbs_compat.h): a range for global
 *     visibility, a whole MR over a shared file mapping for persistence, the right missing
 *     (IBV_WC_REM_ACCESS_ERR), a bad placement type (EINVAL), an MR of anonymous memory that
 *     asks for persistence (EINVAL), the device capability bits,
 *   - ibv_open_qp: a second handle to an XRC target QP, connected through that handle, the
 *     target living on after its creator's handle is destroyed, and the wrong opens (EINVAL).
 * Prints "ok: ..." lines; exits non-zero on the first surprise. */
#define _GNU_SOURCE /* memfd_create */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <uroce/verbs_compat.h>

#include "loopback.h"

enum { kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_ATOMIC | UROCE_ACCESS_FLUSH_GLOBAL |
                 UROCE_ACCESS_FLUSH_PERSISTENT };
/* MRs of anonymous memory: no persistence (an MR may have it over a shared file mapping). */
enum { kMrAccess = kAccess & ~UROCE_ACCESS_FLUSH_PERSISTENT };

struct seen {
  uint64_t wr_id;
  enum ibv_wc_status status;
  enum ibv_wc_opcode opcode;
  uint32_t byte_len, qp_num;
  unsigned int flags;
  uint32_t imm;
};

/* Collects `want` completions through the extended poll API. */
static int collect(struct ibv_cq_ex* cq, struct seen* out, int want) {
  int got = 0;
  for (long spin = 0; got < want && spin < 50000000; ++spin) {
    struct ibv_poll_cq_attr attr = {0};
    int rc = ibv_start_poll(cq, &attr);
    if (rc == ENOENT) continue;
    CHECK(rc == 0, "ibv_start_poll: %d", rc);
    do {
      struct seen* s = &out[got++];
      s->wr_id = cq->wr_id;
      s->status = cq->status;
      s->opcode = ibv_wc_read_opcode(cq);
      s->byte_len = ibv_wc_read_byte_len(cq);
      s->qp_num = ibv_wc_read_qp_num(cq);
      s->flags = ibv_wc_read_wc_flags(cq);
      s->imm = (s->flags & IBV_WC_WITH_IMM) ? ntohl(ibv_wc_read_imm_data(cq)) : 0;
    } while (got < want && ibv_next_poll(cq) == 0);
    ibv_end_poll(cq);
  }
  return got;
}

static const struct seen* find(const struct seen* s, int n, uint64_t wr_id) {
  for (int i = 0; i < n; ++i)
    if (s[i].wr_id == wr_id) return &s[i];
  return NULL;
}

/* INIT -> RTR -> RTS for an XRC end: an initiator (XRC_SEND: no receive side) or a target
 * (XRC_RECV, through whichever handle: no send side but its PSN and timeout). 0 or the step
 * that failed. */
static int xrc_connect(struct ibv_qp* qp, uint32_t dest, union ibv_gid gid, int tgt) {
  const int rtr = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  const int rts = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
  return tgt ? loopback_walk(qp, dest, gid, IBV_ACCESS_REMOTE_WRITE, 1,
                             rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, rts)
             : loopback_walk(qp, dest, gid, IBV_ACCESS_REMOTE_WRITE, 1, rtr,
                             rts | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* One SEND from `ini` to the XRC SRQ `srqn`; its receive completes on `rcq`. */
static void xrc_send_once(struct ibv_qp* ini, struct ibv_cq* scq, struct ibv_cq* rcq,
                          struct ibv_srq* srq, uint32_t srqn, struct ibv_mr* mr, uint8_t* buf,
                          uint8_t tag) {
  struct ibv_sge rs = {(uintptr_t)(buf + 64), 64, mr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 900 + tag, .sg_list = &rs, .num_sge = 1}, *rbad;
  CHECK(ibv_post_srq_recv(srq, &rw, &rbad) == 0, "post_srq_recv");
  memset(buf, tag, 64);
  struct ibv_sge ss = {(uintptr_t)buf, 64, mr->lkey};
  struct ibv_send_wr sw = {.wr_id = 800 + tag, .sg_list = &ss, .num_sge = 1,
                           .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  sw.qp_type.xrc.remote_srqn = srqn;
  CHECK(ibv_post_send(ini, &sw, &sbad) == 0, "post_send on the XRC initiator");
  struct ibv_wc wc;
  int got_s = 0, got_r = 0;
  for (long spin = 0; (!got_s || !got_r) && spin < 50000000; ++spin) {
    if (!got_s && ibv_poll_cq(scq, 1, &wc) == 1) {
      CHECK(wc.status == IBV_WC_SUCCESS, "XRC send: %s", ibv_wc_status_str(wc.status));
      got_s = 1;
    }
    if (!got_r && ibv_poll_cq(rcq, 1, &wc) == 1) {
      CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 900u + tag && buf[64] == tag,
            "XRC receive: %s wr_id %llu", ibv_wc_status_str(wc.status),
            (unsigned long long)wc.wr_id);
      got_r = 1;
    }
  }
  CHECK(got_s && got_r, "XRC SEND %u: send %d receive %d", tag, got_s, got_r);
}

static void xrc_open_qp(struct ibv_context* ctx, struct ibv_pd* pd) {
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
  struct ibv_cq* scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_cq* rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  CHECK(scq && rcq, "cq");
  struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
                                  .fd = -1, .oflags = O_CREAT};
  struct ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &xa);
  CHECK(xrcd, "open_xrcd: %s", strerror(errno));
  struct ibv_srq_init_attr_ex sa = {
      .attr = {.max_wr = 8, .max_sge = 1},
      .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                   IBV_SRQ_INIT_ATTR_CQ,
      .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = xrcd, .cq = rcq};
  struct ibv_srq* srq = ibv_create_srq_ex(ctx, &sa);
  CHECK(srq, "XRC SRQ: %s", strerror(errno));
  uint32_t srqn;
  CHECK(ibv_get_srq_num(srq, &srqn) == 0, "srq num");
  struct ibv_qp_init_attr_ex ta = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD,
                                   .xrcd = xrcd};
  struct ibv_qp* tgt = ibv_create_qp_ex(ctx, &ta);
  CHECK(tgt, "XRC target: %s", strerror(errno));
  struct ibv_qp_init_attr_ex ia = {.send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_XRC_SEND,
                                   .cap = {.max_send_wr = 8, .max_send_sge = 1},
                                   .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd};
  struct ibv_qp* ini = ibv_create_qp_ex(ctx, &ia);
  CHECK(ini, "XRC initiator: %s", strerror(errno));

  /* Wrong opens: a number the domain has no target for, another QP type, no domain. */
  struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
                                             IBV_QP_OPEN_ATTR_TYPE | IBV_QP_OPEN_ATTR_CONTEXT,
                                .qp_num = ini->qp_num, .xrcd = xrcd, .qp_context = (void*)0x1234,
                                .qp_type = IBV_QPT_XRC_RECV};
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == NULL && errno == EINVAL, "open of an initiator: errno %d", errno);
  oa.qp_num = tgt->qp_num;
  oa.qp_type = IBV_QPT_RC;
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == NULL && errno == EINVAL, "open as RC: errno %d", errno);
  oa.qp_type = IBV_QPT_XRC_RECV;
  oa.comp_mask &= ~IBV_QP_OPEN_ATTR_XRCD;
  errno = 0;
  CHECK(ibv_open_qp(ctx, &oa) == NULL && errno == EINVAL, "open without a domain: errno %d", errno);
  oa.comp_mask |= IBV_QP_OPEN_ATTR_XRCD;
  struct ibv_qp* h = ibv_open_qp(ctx, &oa);
  CHECK(h && h->qp_num == tgt->qp_num && h->qp_type == IBV_QPT_XRC_RECV &&
            h->qp_context == (void*)0x1234 && h != tgt,
        "ibv_open_qp: %s", strerror(errno));

  /* The target is connected through the opened handle. */
  int rc = xrc_connect(h, ini->qp_num, gid, 1);
  CHECK(rc == 0, "connect the target through the opened handle: step %d", rc);
  rc = xrc_connect(ini, tgt->qp_num, gid, 0);
  CHECK(rc == 0, "connect the initiator: step %d", rc);
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  CHECK(ibv_query_qp(tgt, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS,
        "the creator's handle sees RTS");
  CHECK(ibv_query_qp(h, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS &&
            qi.qp_context == (void*)0x1234,
        "the opened handle's query");
  static uint8_t buf[128];
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "reg_mr");
  xrc_send_once(ini, scq, rcq, srq, srqn, mr, buf, 1);

  /* The creator's handle goes first: the target stays, its domain is busy. */
  CHECK(ibv_destroy_qp(tgt) == 0, "destroy the creator's handle");
  xrc_send_once(ini, scq, rcq, srq, srqn, mr, buf, 2);
  CHECK(ibv_destroy_qp(h) == 0, "destroy the opened handle (the last)");
  CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_srq(srq) == 0, "destroy initiator, SRQ");
  CHECK(ibv_close_xrcd(xrcd) == 0, "close the domain once its target is gone");
  CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0, "cleanup");
  printf("ok: ibv_open_qp: wrong opens -> EINVAL; connected through the opened handle; the "
         "target outlives its creator's handle until the last is destroyed\n");
}

int main(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  CHECK(list && n >= 1, "no device");
  struct ibv_context* ctx = ibv_open_device(list[0]);
  CHECK(ctx, "open %s", ibv_get_device_name(list[0]));
  ibv_free_device_list(list);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  CHECK(pd, "pd");

  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
                                                         IBV_WC_EX_WITH_QP_NUM};
  struct ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &ca);
  CHECK(cq, "ibv_create_cq_ex: %s", strerror(errno));
  struct ibv_cq_init_attr_ex tag = ca;
  tag.wc_flags |= IBV_WC_EX_WITH_FLOW_TAG;
  errno = 0;
  CHECK(ibv_create_cq_ex(ctx, &tag) == NULL && errno == EOPNOTSUPP,
        "a CQ with flow tags: errno %d", errno);
  printf("ok: ibv_create_cq_ex (flow tags: EOPNOTSUPP)\n");

  struct ibv_qp_init_attr_ex qa = {
      .send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq), .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 128, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 1,
              .max_inline_data = 64},
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
      .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                        IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                        IBV_QP_EX_WITH_ATOMIC_WRITE | UROCE_QP_EX_WITH_FLUSH};
  struct ibv_qp* a = ibv_create_qp_ex(ctx, &qa);
  CHECK(a, "ibv_create_qp_ex: %s", strerror(errno));
  struct ibv_qp_init_attr plain = {.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
                                   .qp_type = IBV_QPT_RC,
                                   .cap = {.max_send_wr = 16, .max_recv_wr = 16,
                                           .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* b = ibv_create_qp(pd, &plain);
  CHECK(b, "ibv_create_qp");
  errno = 0;
  CHECK(ibv_qp_to_qp_ex(b) == NULL && errno == EOPNOTSUPP, "qp_to_qp_ex of a classic QP");
  struct ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  CHECK(x && &x->qp_base == a, "ibv_qp_to_qp_ex");
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "query_gid");
  int rc = loopback_connect(a, b->qp_num, gid, kAccess, 4);
  CHECK(rc == 0, "connect a: step %d", rc);
  rc = loopback_connect(b, a->qp_num, gid, kAccess, 4);
  CHECK(rc == 0, "connect b: step %d", rc);

  static uint8_t src[5000], dst[5000], back[5000], rbuf[2][256];
  static uint64_t counter = 100, fetched[2];
  for (size_t i = 0; i < sizeof src; ++i) src[i] = (uint8_t)(i * 7 + 3);
  struct ibv_mr* smr = ibv_reg_mr(pd, src, sizeof src, kMrAccess);
  struct ibv_mr* dmr = ibv_reg_mr(pd, dst, sizeof dst, kMrAccess);
  struct ibv_mr* bmr = ibv_reg_mr(pd, back, sizeof back, kMrAccess);
  struct ibv_mr* rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, kMrAccess);
  struct ibv_mr* cmr = ibv_reg_mr(pd, &counter, sizeof counter, kMrAccess);
  struct ibv_mr* fmr = ibv_reg_mr(pd, fetched, sizeof fetched, kMrAccess);
  CHECK(smr && dmr && bmr && rmr && cmr && fmr, "reg_mr");
  for (int i = 0; i < 2; ++i) {
    struct ibv_sge s = {(uintptr_t)rbuf[i], sizeof rbuf[i], rmr->lkey};
    struct ibv_recv_wr r = {.wr_id = 100 + (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad;
    CHECK(ibv_post_recv(b, &r, &bad) == 0, "post_recv");
  }

  /* One batch: WRITE (two SGEs), WRITE_WITH_IMM, inline SEND, FETCH_ADD, CMP_SWAP, READ. */
  char msg[] = "hello over ibv_wr_send with inline data";
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst);
  struct ibv_sge two[2] = {{(uintptr_t)src, 3000, smr->lkey}, {(uintptr_t)src + 3000, 2000, smr->lkey}};
  ibv_wr_set_sge_list(x, 2, two);
  x->wr_id = 2;
  ibv_wr_rdma_write_imm(x, dmr->rkey, (uintptr_t)dst, htonl(0xabcd));
  ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, 10);
  x->wr_id = 3;
  x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, msg, sizeof msg);
  memset(msg, 0, sizeof msg); /* inline data was copied: the buffer is ours again */
  x->wr_id = 4;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_fetch_add(x, cmr->rkey, (uintptr_t)&counter, 5);
  ibv_wr_set_sge(x, fmr->lkey, (uintptr_t)&fetched[0], 8);
  x->wr_id = 5;
  x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
  ibv_wr_atomic_cmp_swp(x, cmr->rkey, (uintptr_t)&counter, 105, 7);
  ibv_wr_set_sge(x, fmr->lkey, (uintptr_t)&fetched[1], 8);
  x->wr_id = 6;
  ibv_wr_rdma_read(x, dmr->rkey, (uintptr_t)dst);
  ibv_wr_set_sge(x, bmr->lkey, (uintptr_t)back, sizeof back);
  CHECK(ibv_wr_complete(x) == 0, "ibv_wr_complete");

  struct seen s[16];
  int got = collect(cq, s, 8);
  CHECK(got == 8, "%d completions of 8", got);
  for (uint64_t id = 1; id <= 6; ++id) {
    const struct seen* c = find(s, got, id);
    CHECK(c && c->status == IBV_WC_SUCCESS && c->qp_num == a->qp_num, "send wr %llu: %s",
          (unsigned long long)id, c ? ibv_wc_status_str(c->status) : "missing");
  }
  CHECK(find(s, got, 1)->opcode == IBV_WC_RDMA_WRITE && find(s, got, 6)->opcode == IBV_WC_RDMA_READ &&
        find(s, got, 4)->opcode == IBV_WC_FETCH_ADD && find(s, got, 5)->opcode == IBV_WC_COMP_SWAP,
        "send opcodes");
  const struct seen* r_imm = find(s, got, 100);
  const struct seen* r_send = find(s, got, 101);
  CHECK(r_imm && r_imm->status == IBV_WC_SUCCESS && r_imm->opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
        (r_imm->flags & IBV_WC_WITH_IMM) && r_imm->imm == 0xabcd && r_imm->qp_num == b->qp_num,
        "receive of WRITE_WITH_IMM: opcode %d flags 0x%x imm 0x%x", r_imm ? (int)r_imm->opcode : -1,
        r_imm ? r_imm->flags : 0, r_imm ? r_imm->imm : 0);
  CHECK(r_send && r_send->status == IBV_WC_SUCCESS && r_send->opcode == IBV_WC_RECV &&
        r_send->byte_len == sizeof msg && !strcmp((char*)rbuf[1], "hello over ibv_wr_send with inline data"),
        "receive of the inline SEND: byte_len %u '%s'", r_send ? r_send->byte_len : 0, (char*)rbuf[1]);
  CHECK(!memcmp(dst, src, sizeof src) && !memcmp(back, src, sizeof src), "WRITE / READ data");
  CHECK(fetched[0] == 100 && fetched[1] == 105 && counter == 7, "atomics: fetched %llu %llu counter %llu",
        (unsigned long long)fetched[0], (unsigned long long)fetched[1], (unsigned long long)counter);
  printf("ok: one ibv_wr_* batch (WRITE x2 SGEs, WRITE_WITH_IMM, inline SEND, FETCH_ADD, CMP_SWAP, READ) "
         "and the ibv_wc_read_* fields\n");

  /* Documented failures: nothing of a failed batch is posted. */
  ibv_wr_start(x);
  x->wr_id = 7;
  ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst);
  ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, 8);
  ibv_wr_send_imm(x, htonl(1)); /* not in send_ops_flags */
  CHECK(ibv_wr_complete(x) == EOPNOTSUPP, "an op outside send_ops_flags");
  ibv_wr_start(x);
  ibv_wr_local_inv(x, 1234);
  CHECK(ibv_wr_complete(x) == EOPNOTSUPP, "LOCAL_INV (not in send_ops_flags)");
  ibv_wr_start(x);
  ibv_wr_send(x);
  ibv_wr_abort(x);
  struct ibv_poll_cq_attr attr = {0};
  CHECK(ibv_start_poll(cq, &attr) == ENOENT, "a failed or aborted batch posted something");
  printf("ok: ops outside send_ops_flags -> EOPNOTSUPP, nothing posted; wr_abort\n");

  /* ATOMIC WRITE: the 8 bytes are passed by value and copied. */
  uint64_t value = 0x1122334455667788ull;
  ibv_wr_start(x);
  x->wr_id = 20;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(x, cmr->rkey, (uintptr_t)&counter, &value);
  value = 0;
  CHECK(ibv_wr_complete(x) == 0, "ATOMIC WRITE batch");
  got = collect(cq, s, 1);
  CHECK(got == 1 && s[0].wr_id == 20 && s[0].status == IBV_WC_SUCCESS, "ATOMIC WRITE: %s",
        got ? ibv_wc_status_str(s[0].status) : "no completion");
  CHECK(counter == 0x1122334455667788ull, "ATOMIC WRITE left %llx", (unsigned long long)counter);
  printf("ok: ibv_wr_atomic_write\n");

  /* FLUSH. The device says it can (rdma-core 45's capability bits). */
  struct ibv_device_attr_ex dx;
  CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "query_device_ex");
  CHECK((dx.device_cap_flags_ex & UROCE_DEVICE_FLUSH_GLOBAL) &&
            (dx.device_cap_flags_ex & UROCE_DEVICE_FLUSH_PERSISTENT) &&
            (dx.device_cap_flags_ex & UROCE_DEVICE_ATOMIC_WRITE),
        "FLUSH / ATOMIC WRITE capability bits: 0x%llx", (unsigned long long)dx.device_cap_flags_ex);
  /* Persistence: only over a shared mapping of a file (here a memory file). */
  errno = 0;
  CHECK(ibv_reg_mr(pd, dst, sizeof dst, kAccess) == NULL && errno == EINVAL,
        "an MR of anonymous memory with IBV_ACCESS_FLUSH_PERSISTENT: errno %d", errno);
  int mfd = memfd_create("loopback_ext", MFD_CLOEXEC);
  CHECK(mfd >= 0 && ftruncate(mfd, 8192) == 0, "memfd");
  uint8_t* pm = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  CHECK(pm != MAP_FAILED, "mmap");
  close(mfd);
  struct ibv_mr* pmr = ibv_reg_mr(pd, pm, 8192, kAccess);
  CHECK(pmr, "an MR over a shared file mapping with IBV_ACCESS_FLUSH_PERSISTENT: %s", strerror(errno));
  /* A WRITE, then a FLUSH of its range for visibility; a WRITE into the file, then a FLUSH of
   * the whole MR for persistence. */
  ibv_wr_start(x);
  x->wr_id = 30;
  x->wr_flags = 0;
  ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst);
  ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, 64);
  x->wr_id = 31;
  x->wr_flags = IBV_SEND_SIGNALED;
  uroce_wr_flush(x, dmr->rkey, (uintptr_t)dst, 64, UROCE_FLUSH_GLOBAL, UROCE_FLUSH_RANGE);
  x->wr_id = 32;
  x->wr_flags = 0;
  ibv_wr_rdma_write(x, pmr->rkey, (uintptr_t)pm + 100);
  ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, 500);
  x->wr_id = 33;
  x->wr_flags = IBV_SEND_SIGNALED;
  uroce_wr_flush(x, pmr->rkey, (uintptr_t)pm, 0, UROCE_FLUSH_PERSISTENT | UROCE_FLUSH_GLOBAL,
                 UROCE_FLUSH_MR);
  CHECK(ibv_wr_complete(x) == 0, "WRITE + FLUSH batch");
  got = collect(cq, s, 2);
  CHECK(got == 2 && s[0].wr_id == 31 && s[0].status == IBV_WC_SUCCESS &&
            s[0].opcode == (enum ibv_wc_opcode)UROCE_WC_FLUSH && s[1].wr_id == 33 &&
            s[1].status == IBV_WC_SUCCESS && s[1].opcode == (enum ibv_wc_opcode)UROCE_WC_FLUSH,
        "FLUSH completions: %d, first wr %llu %s opcode %d", got,
        (unsigned long long)(got ? s[0].wr_id : 0), got ? ibv_wc_status_str(s[0].status) : "-",
        got ? (int)s[0].opcode : -1);
  CHECK(!memcmp(dst, src, 64) && !memcmp(pm + 100, src, 500), "data WRITTEN before the FLUSHes");
  /* Checked when posted: a placement type that is none of the two, a level past MR. */
  ibv_wr_start(x);
  uroce_wr_flush(x, dmr->rkey, (uintptr_t)dst, 64, 0, UROCE_FLUSH_RANGE);
  CHECK(ibv_wr_complete(x) == EINVAL, "FLUSH without a placement type");
  ibv_wr_start(x);
  uroce_wr_flush(x, dmr->rkey, (uintptr_t)dst, 64, UROCE_FLUSH_GLOBAL, 2);
  CHECK(ibv_wr_complete(x) == EINVAL, "FLUSH of selectivity level 2");
  printf("ok: ibv_wr_flush (range, global visibility; whole MR, persistence); bad type/level -> "
         "EINVAL; persistence over anonymous memory -> EINVAL\n");

  /* A batch larger than any before (the builder grows) of inline WRITEs, only the last
   * signaled; then a batch larger than the send queue: ENOMEM and nothing of it posted. */
  memset(dst, 0, sizeof dst);
  ibv_wr_start(x);
  for (uint64_t i = 0; i < 100; ++i) {
    x->wr_id = 300 + i;
    x->wr_flags = IBV_SEND_INLINE | (i == 99 ? IBV_SEND_SIGNALED : 0);
    ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst + 8 * i);
    uint64_t v = i * 3 + 1;
    ibv_wr_set_inline_data(x, &v, sizeof v);
  }
  CHECK(ibv_wr_complete(x) == 0, "batch of 100 inline WRITEs");
  got = collect(cq, s, 1);
  CHECK(got == 1 && s[0].wr_id == 399 && s[0].status == IBV_WC_SUCCESS, "100 inline WRITEs");
  for (uint64_t i = 0; i < 100; ++i) {
    uint64_t v;
    memcpy(&v, dst + 8 * i, 8);
    CHECK(v == i * 3 + 1, "inline WRITE %llu wrote %llu", (unsigned long long)i, (unsigned long long)v);
  }
  memset(dst, 0, sizeof dst);
  ibv_wr_start(x);
  for (uint64_t i = 0; i < 200; ++i) {
    x->wr_id = 500 + i;
    x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst);
    ibv_wr_set_inline_data(x, &value, 8);
  }
  CHECK(ibv_wr_complete(x) == ENOMEM, "a batch larger than the send queue");
  CHECK(ibv_start_poll(cq, &attr) == ENOENT, "part of a refused batch was posted");
  printf("ok: a batch of 100 inline WRITEs lands; a batch larger than the SQ -> ENOMEM, nothing posted\n");

  /* The responder's MR lacks the right asked for: a remote access error (and the QP is in
   * error: last). */
  ibv_wr_start(x);
  x->wr_id = 40;
  x->wr_flags = IBV_SEND_SIGNALED;
  uroce_wr_flush(x, dmr->rkey, (uintptr_t)dst, 64, UROCE_FLUSH_PERSISTENT, UROCE_FLUSH_RANGE);
  CHECK(ibv_wr_complete(x) == 0, "FLUSH for persistence of an MR without the right");
  got = collect(cq, s, 1);
  CHECK(got == 1 && s[0].wr_id == 40 && s[0].status == IBV_WC_REM_ACCESS_ERR,
        "FLUSH without the MR's right: %s", got ? ibv_wc_status_str(s[0].status) : "no completion");
  printf("ok: FLUSH for persistence of an MR without IBV_ACCESS_FLUSH_PERSISTENT -> "
         "IBV_WC_REM_ACCESS_ERR\n");

  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy qp");
  CHECK(ibv_dereg_mr(pmr) == 0 && munmap(pm, 8192) == 0, "dereg / unmap the file's MR");
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  ibv_dereg_mr(bmr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(cmr);
  ibv_dereg_mr(fmr);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");
  xrc_open_qp(ctx, pd);
  ibv_dealloc_pd(pd);
  CHECK(ibv_close_device(ctx) == 0, "close");
  return 0;
}

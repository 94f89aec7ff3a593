/* Shared by the plain C verbs programs (loopback_access.c, loopback_ext.c, runtime_test.c and
 * tools/bench's qp_scale.c, cq_wait.c): a CHECK macro that prints "FAIL: ..." and exits, the
 * INIT -> RTR -> RTS walk that connects an RC QP to another QP of the same device (GID index
 * 1, the RoCEv2 IPv4 GID), and the process's resident memory. */
#pragma once
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)            \
  do {                              \
    if (!(cond)) {                  \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                 \
      exit(1);                      \
    }                               \
  } while (0)

/* INIT -> RTR -> RTS towards QP `dest` of the same device (GID index 1). `rtr_mask` and
 * `rts_mask` are the attributes given beyond the state (the QP type decides which it takes).
 * Returns 0, or the step that failed (1 INIT, 2 RTR, 3 RTS). */
static inline int loopback_walk(struct ibv_qp* qp, uint32_t dest, union ibv_gid gid, int access,
                                uint8_t rd_atomic, int rtr_mask, int rts_mask) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = (unsigned int)access};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return 1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest;
  a.max_dest_rd_atomic = rd_atomic;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | rtr_mask)) return 2;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = rd_atomic;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | rts_mask) ? 3 : 0;
}

/* An RC QP: every attribute RC requires. */
static inline int loopback_connect(struct ibv_qp* qp, uint32_t dest, union ibv_gid gid,
                                   int access, uint8_t rd_atomic) {
  return loopback_walk(qp, dest, gid, access, rd_atomic,
                       IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                       IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

/* The process's resident set (VmRSS), KiB; -1 if unknown. */
static inline long rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

/* uroce: what rdma-core after version 44 added to <infiniband/verbs.h>, for programs built
 * against rdma-core 44's headers (Debian 12's) that want it from a uroce device.
 *
 * The values are rdma-core's own ABI (libibverbs/verbs.h and kernel-headers/rdma/
 * ib_user_verbs.h upstream), so a program built against newer headers reaches the same
 * things with rdma-core's names: ibv_wr_flush(), IBV_WR_FLUSH, IBV_WC_FLUSH,
 * IBV_QP_EX_WITH_FLUSH, IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT, IBV_FLUSH_GLOBAL / _PERSISTENT,
 * IBV_FLUSH_RANGE / _MR. Here they carry a UROCE_ prefix, so that they never clash with the
 * headers that have them.
 *
 * FLUSH (IBA 1.5): makes what earlier RDMA WRITEs placed in a remote range (or a whole MR)
 * visible to every later reader (IBV_FLUSH_GLOBAL) or durable (IBV_FLUSH_PERSISTENT). The
 * target's MR and QP need the matching IBV_ACCESS_FLUSH_* right. On uroce, an MR may have
 * IBV_ACCESS_FLUSH_PERSISTENT only over a shared file mapping (msync() writes it back).
 */
#ifndef UROCE_VERBS_COMPAT_H
#define UROCE_VERBS_COMPAT_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Plain integers (not enumerators: C++ warns when two enumerations are mixed in an
 * expression, e.g. IBV_ACCESS_LOCAL_WRITE | UROCE_ACCESS_FLUSH_GLOBAL). */
#define UROCE_WR_FLUSH 14                     /* enum ibv_wr_opcode */
#define UROCE_WC_FLUSH 8                      /* enum ibv_wc_opcode */
#define UROCE_QP_EX_WITH_FLUSH (1 << 11)      /* enum ibv_qp_create_send_ops_flags */
#define UROCE_ACCESS_FLUSH_GLOBAL (1 << 8)    /* enum ibv_access_flags */
#define UROCE_ACCESS_FLUSH_PERSISTENT (1 << 9)
#define UROCE_FLUSH_GLOBAL (1 << 0)           /* enum ibv_placement_type */
#define UROCE_FLUSH_PERSISTENT (1 << 1)
#define UROCE_FLUSH_RANGE 0                   /* enum ibv_selectivity_level */
#define UROCE_FLUSH_MR 1

/* ibv_device_attr_ex.device_cap_flags_ex (IB_UVERBS_DEVICE_*). */
#define UROCE_DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define UROCE_DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define UROCE_DEVICE_ATOMIC_WRITE (1ULL << 40)

/* rdma-core 45 and later put wr_flush right after wr_atomic_write in struct ibv_qp_ex;
 * uroce's ibv_qp_ex always has it there. Addressed by offset, so that this works the same
 * whether the headers at hand end the struct at wr_atomic_write (44) or at wr_flush (45+). */
typedef void (*uroce_wr_flush_fn)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr,
                                  size_t len, uint8_t type, uint8_t level);
#define UROCE_WR_FLUSH_OFFSET \
  (offsetof(struct ibv_qp_ex, wr_atomic_write) + sizeof(void (*)(void)))

static inline uroce_wr_flush_fn *uroce_wr_flush_slot(struct ibv_qp_ex *qp) {
#ifdef __cplusplus
  return reinterpret_cast<uroce_wr_flush_fn *>(reinterpret_cast<char *>(qp) +
                                               UROCE_WR_FLUSH_OFFSET);
#else
  return (uroce_wr_flush_fn *)((char *)qp + UROCE_WR_FLUSH_OFFSET);
#endif
}

/* ibv_wr_flush(): a FLUSH of [remote_addr, remote_addr + len) under rkey (level
 * UROCE_FLUSH_RANGE) or of the whole MR rkey names (UROCE_FLUSH_MR), with placement `type`
 * (UROCE_FLUSH_GLOBAL and/or UROCE_FLUSH_PERSISTENT). Completes as UROCE_WC_FLUSH. */
static inline void uroce_wr_flush(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr,
                                  size_t len, uint8_t type, uint8_t level) {
  (*uroce_wr_flush_slot(qp))(qp, rkey, remote_addr, len, type, level);
}

#ifdef __cplusplus
}
#endif

#endif /* UROCE_VERBS_COMPAT_H */

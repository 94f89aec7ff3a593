/* The private interface between uroce's librdmacm.so.1 and its libibverbs.so.1, which runs the
 * connection manager next to the engine (what the kernel's rdma_ucm is to rdma-core's
 * librdmacm). Both libraries are built from one tree: no compatibility across versions.
 * Every function returns 0 or a positive errno unless it says otherwise. C names, compiled as
 * C++ on both sides: struct uroce_cm_param is the connection manager's own (cm/conn_param.h). */
#ifndef UROCE_CM_ABI_H
#define UROCE_CM_ABI_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cm/conn_param.h"

#ifdef __cplusplus
extern "C" {
#endif

struct uroce_cm_event {
  uint64_t handle;        /* the id the event is about (a new one for CONNECT_REQUEST) */
  uint64_t listen_handle; /* CONNECT_REQUEST: the listener */
  int event;              /* RDMA_CM_EVENT_* */
  int status;
  struct uroce_cm_param param;
  struct ibv_ah_attr ah_attr;   /* UD */
  struct sockaddr_storage src;  /* the id's addresses */
  struct sockaddr_storage dst;
  struct ibv_context *verbs;    /* CONNECT_REQUEST: the device of the new id */
  uint8_t private_data_len;
  uint8_t private_data[224];
};

/* A channel is an eventfd (close-on-exec) that counts the events waiting. */
int uroce_cm_channel_create(void); /* the fd, or -1 with errno */
void uroce_cm_channel_destroy(int fd);
/* Takes the next event of channel `fd`: blocks unless the fd is non-blocking (EAGAIN). */
int uroce_cm_get_event(int fd, struct uroce_cm_event *ev);

uint64_t uroce_cm_create_id(int channel_fd, int ps, int qp_type); /* 0 with errno */
/* Forgets the id (a connection is disconnected or rejected). Its undelivered events go. */
void uroce_cm_destroy_id(uint64_t h);
int uroce_cm_migrate_id(uint64_t h, int channel_fd);
/* Binds to `addr` (a port of 0 takes a free one); `bound` gets the address, *verbs the
 * device (NULL for a wildcard address). devs: the contexts the caller opened, n of them. */
int uroce_cm_bind(uint64_t h, struct ibv_context **devs, int n, const struct sockaddr *addr,
                  struct sockaddr_storage *bound, struct ibv_context **verbs);
int uroce_cm_resolve_addr(uint64_t h, struct ibv_context **devs, int n,
                          const struct sockaddr *src, const struct sockaddr *dst,
                          int timeout_ms, struct sockaddr_storage *bound,
                          struct ibv_context **verbs);
int uroce_cm_resolve_route(uint64_t h);
/* rdma_join_multicast: RDMA_CM_EVENT_MULTICAST_JOIN follows, its `dst` the group. */
int uroce_cm_join_multicast(uint64_t h, const struct sockaddr *group);
int uroce_cm_listen(uint64_t h, struct ibv_context **devs, int n, int backlog);
int uroce_cm_connect(uint64_t h, const struct uroce_cm_param *p, const void *pdata,
                     uint8_t len);
int uroce_cm_accept(uint64_t h, const struct uroce_cm_param *p, const void *pdata,
                    uint8_t len);
int uroce_cm_reject(uint64_t h, const void *pdata, uint8_t len);
int uroce_cm_establish(uint64_t h);
int uroce_cm_disconnect(uint64_t h);
int uroce_cm_notify(uint64_t h, int ibv_event);
int uroce_cm_init_qp_attr(uint64_t h, struct ibv_qp_attr *attr, int *mask);
/* RDMA_OPTION_ID_TOS (0), RDMA_OPTION_ID_ACK_TIMEOUT (3). */
int uroce_cm_set_option(uint64_t h, int name, uint8_t value);
/* The GID index the id's source address has on its device (-1: none). */
int uroce_cm_sgid_index(uint64_t h);

#ifdef __cplusplus
}
#endif
#endif

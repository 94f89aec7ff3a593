/* uroce-conform-agent: the device-under-test side of uroce-conform.
 *
 * An ordinary verbs program (libibverbs only), so it runs unchanged over the kernel's rxe, a
 * real RNIC or uroce. It listens on a TCP port, takes one connection from uroce-conform and
 * does what each line asks: create memory regions, CQs and QPs, move QPs through their
 * states, post work requests, poll completions, read async events and memory. Each request
 * is one line of words (`key=value` arguments), each answer one line beginning "ok" or
 * "err <what>" (docs/conformance.md lists them). Objects are named by the caller.
 *
 *   uroce-conform-agent [-d DEVICE] [-g GID_INDEX] [-p TCP_PORT] [-b BIND_ADDR]
 *
 * The GID is by default the first RoCEv2 GID with an IPv4 address. The agent serves one
 * connection and exits when it closes. Connections through the CM (cm_listen, cm_accept,
 * cm_connect, ...) use librdmacm, on the device context librdmacm holds (rdma_get_devices),
 * so that the QPs it makes and the agent's PD and CQs belong together. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pattern.h"

enum { kMaxObjs = 32, kNameLen = 24, kMaxArgs = 32, kLine = 1 << 16 };

struct mr_obj {
  char name[kNameLen];
  struct ibv_mr* mr;
  uint8_t* buf;
  size_t len;
};
struct cq_obj {
  char name[kNameLen];
  struct ibv_cq* cq;
};
struct qp_obj {
  char name[kNameLen];
  struct ibv_qp* qp;
  enum ibv_qp_type type;
  struct rdma_cm_id* cm;  /* made by rdma_create_qp on this id: destroyed through it */
};
/* An rdma_cm id, and the events that came for it and were not asked for yet. */
enum { kMaxEvents = 8 };
struct cm_obj {
  char name[kNameLen];
  struct rdma_cm_id* id;
  int n_ev;
  struct {
    enum rdma_cm_event_type type;
    int status;
    struct rdma_cm_id* conn; /* CONNECT_REQUEST: the new id */
  } ev[kMaxEvents];
};

static struct ibv_context* ctx;
static struct ibv_pd* pd;
static int gid_index = -1;
static union ibv_gid gid;
static struct mr_obj mrs[kMaxObjs];
static struct cq_obj cqs[kMaxObjs];
static struct qp_obj qps[kMaxObjs];
static struct cm_obj cms[kMaxObjs];
static struct rdma_event_channel* channel;
static struct ibv_ah* ahs[256];
static int n_ahs;

/* One request's words: argv[0] the command, then positional words and key=value pairs. */
struct req {
  int argc;
  char* argv[kMaxArgs];
};

static const char* arg(const struct req* r, const char* key) {
  size_t k = strlen(key);
  for (int i = 1; i < r->argc; ++i)
    if (strncmp(r->argv[i], key, k) == 0 && r->argv[i][k] == '=') return r->argv[i] + k + 1;
  return NULL;
}
static int flag(const struct req* r, const char* word) {
  for (int i = 1; i < r->argc; ++i)
    if (strcmp(r->argv[i], word) == 0) return 1;
  return 0;
}
static uint64_t num(const struct req* r, const char* key, uint64_t dflt) {
  const char* v = arg(r, key);
  return v ? strtoull(v, NULL, 0) : dflt;
}

static char out[kLine * 2 + 64];
static int reply(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, sizeof out, fmt, ap);
  va_end(ap);
  return 0;
}
static int fail(const char* fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  snprintf(out, sizeof out, "err %s", tmp);
  return -1;
}

/* Each object table's entries begin with their name (empty: a free entry). */
static void* find_obj(void* table, size_t stride, const char* nm) {
  for (int i = 0; nm && i < kMaxObjs; ++i) {
    char* e = (char*)table + (size_t)i * stride;
    if (e[0] && strcmp(e, nm) == 0) return e;
  }
  return NULL;
}
static void* free_obj(void* table, size_t stride) {
  for (int i = 0; i < kMaxObjs; ++i) {
    char* e = (char*)table + (size_t)i * stride;
    if (!e[0]) return e;
  }
  return NULL;
}
#define FIND(table, nm) ((__typeof__(&(table)[0]))find_obj((table), sizeof(table)[0], (nm)))
#define SLOT(table) ((__typeof__(&(table)[0]))free_obj((table), sizeof(table)[0]))

static int parse_access(const char* s) {
  int a = 0;
  if (!s) return IBV_ACCESS_LOCAL_WRITE;
  if (strstr(s, "lw")) a |= IBV_ACCESS_LOCAL_WRITE;
  if (strstr(s, "rw")) a |= IBV_ACCESS_REMOTE_WRITE;
  if (strstr(s, "rr")) a |= IBV_ACCESS_REMOTE_READ;
  if (strstr(s, "ra")) a |= IBV_ACCESS_REMOTE_ATOMIC;
  return a;
}

static const char* status_name(enum ibv_wc_status s) {
  static const char* names[] = {
      "success",       "loc_len_err",     "loc_qp_op_err",     "loc_eec_op_err",
      "loc_prot_err",  "wr_flush_err",    "mw_bind_err",       "bad_resp_err",
      "loc_access_err", "rem_inv_req_err", "rem_access_err",    "rem_op_err",
      "retry_exc_err", "rnr_retry_exc_err", "loc_rdd_viol_err", "rem_inv_rd_req_err",
      "rem_abort_err", "inv_eecn_err",    "inv_eec_state_err", "fatal_err",
      "resp_timeout_err", "general_err"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}
static const char* opcode_name(enum ibv_wc_opcode o) {
  switch (o) {
    case IBV_WC_SEND: return "send";
    case IBV_WC_RDMA_WRITE: return "write";
    case IBV_WC_RDMA_READ: return "read";
    case IBV_WC_COMP_SWAP: return "cas";
    case IBV_WC_FETCH_ADD: return "fadd";
    case IBV_WC_BIND_MW: return "bind";
    case IBV_WC_LOCAL_INV: return "inv";
    case IBV_WC_RECV: return "recv";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "recv_imm";
    default: return "other";
  }
}
static const char* state_name(enum ibv_qp_state s) {
  static const char* names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return (unsigned)s < 7 ? names[s] : "UNKNOWN";
}

static int find_gid(uint8_t port) {
  struct ibv_port_attr pa;
  if (ibv_query_port(ctx, port, &pa)) return -1;
  for (int i = 0; i < pa.gid_tbl_len; ++i) {
    struct ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0)) continue;
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e.gid.raw, v4, 12) == 0) return i;
  }
  return -1;
}

/* The MAC of the interface behind the GID, "-" if the device does not say. */
static void gid_mac(char* mac, size_t n) {
  struct ibv_gid_entry e;
  snprintf(mac, n, "-");
  if (ibv_query_gid_ex(ctx, 1, (uint32_t)gid_index, &e, 0) || e.ndev_ifindex == 0) return;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  if (!if_indextoname(e.ndev_ifindex, ifr.ifr_name)) return;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (ioctl(fd, SIOCGIFHWADDR, &ifr) == 0) {
    const unsigned char* m = (const unsigned char*)ifr.ifr_hwaddr.sa_data;
    snprintf(mac, n, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  }
  close(fd);
}

static int cmd_hello(const struct req* r) {
  (void)r;
  struct ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) return fail("ibv_query_port: %s", strerror(errno));
  char ip[INET_ADDRSTRLEN], mac[32];
  inet_ntop(AF_INET, gid.raw + 12, ip, sizeof ip);
  gid_mac(mac, sizeof mac);
  return reply("ok dev=%s gid_index=%d ip=%s mac=%s active_mtu=%d state=%d",
               ibv_get_device_name(ctx->device), gid_index, ip, mac,
               128 << pa.active_mtu, pa.state);
}

static void drop_all(void) {
  for (int i = 0; i < n_ahs; ++i) ibv_destroy_ah(ahs[i]);
  n_ahs = 0;
  for (int i = 0; i < kMaxObjs; ++i)
    if (qps[i].name[0]) {
      if (qps[i].cm) rdma_destroy_qp(qps[i].cm);
      else ibv_destroy_qp(qps[i].qp);
      qps[i].name[0] = 0;
      qps[i].cm = NULL;
    }
  for (int i = 0; i < kMaxObjs; ++i)
    if (cms[i].name[0]) {
      for (int k = 0; k < cms[i].n_ev; ++k)
        if (cms[i].ev[k].conn) rdma_destroy_id(cms[i].ev[k].conn);
      rdma_destroy_id(cms[i].id);
      memset(&cms[i], 0, sizeof cms[i]);
    }
  for (int i = 0; i < kMaxObjs; ++i)
    if (cqs[i].name[0]) {
      ibv_destroy_cq(cqs[i].cq);
      cqs[i].name[0] = 0;
    }
  for (int i = 0; i < kMaxObjs; ++i)
    if (mrs[i].name[0]) {
      ibv_dereg_mr(mrs[i].mr);
      free(mrs[i].buf);
      mrs[i].name[0] = 0;
    }
}

static int cmd_mr(const struct req* r) {
  const char* nm = r->argc > 1 ? r->argv[1] : NULL;
  struct mr_obj* m = SLOT(mrs);
  size_t len = num(r, "len", 4096);
  if (!nm || strlen(nm) >= kNameLen || FIND(mrs, nm)) return fail("mr: a new name, please");
  if (!m) return fail("mr: too many");
  if (len == 0 || len > (64u << 20)) return fail("mr: len 1..64 MiB");
  uint8_t* buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
  if (!buf) return fail("mr: out of memory");
  memset(buf, 0, len);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, len, parse_access(arg(r, "access")));
  if (!mr) {
    free(buf);
    return fail("ibv_reg_mr: %s", strerror(errno));
  }
  snprintf(m->name, kNameLen, "%s", nm);
  m->mr = mr;
  m->buf = buf;
  m->len = len;
  return reply("ok lkey=0x%x rkey=0x%x addr=0x%" PRIx64, mr->lkey, mr->rkey, (uint64_t)(uintptr_t)buf);
}

static struct mr_obj* mr_range(const struct req* r, size_t* off, size_t* len) {
  struct mr_obj* m = FIND(mrs, r->argc > 1 ? r->argv[1] : NULL);
  if (!m) return NULL;
  *off = num(r, "off", 0);
  *len = num(r, "len", m->len - (*off < m->len ? *off : m->len));
  if (*off > m->len || *len > m->len - *off) return NULL;
  return m;
}

static int cmd_fill(const struct req* r) {
  size_t off, len;
  struct mr_obj* m = mr_range(r, &off, &len);
  if (!m) return fail("fill: no such MR or range");
  uint32_t seed = (uint32_t)num(r, "seed", 0);
  for (size_t i = 0; i < len; ++i) m->buf[off + i] = pattern_byte(seed, i);
  return reply("ok");
}

static int cmd_get(const struct req* r) {
  size_t off, len;
  struct mr_obj* m = mr_range(r, &off, &len);
  if (!m || len > kLine / 2 - 16) return fail("get: no such MR or range (at most 32 KiB)");
  char* p = out + sprintf(out, "ok hex=");
  for (size_t i = 0; i < len; ++i) p += sprintf(p, "%02x", m->buf[off + i]);
  return 0;
}

static int cmd_cq(const struct req* r) {
  const char* nm = r->argc > 1 ? r->argv[1] : NULL;
  struct cq_obj* c = SLOT(cqs);
  if (!nm || strlen(nm) >= kNameLen || FIND(cqs, nm) || !c) return fail("cq: a new name, please");
  struct ibv_cq* cq = ibv_create_cq(ctx, (int)num(r, "depth", 64), NULL, NULL, 0);
  if (!cq) return fail("ibv_create_cq: %s", strerror(errno));
  snprintf(c->name, kNameLen, "%s", nm);
  c->cq = cq;
  return reply("ok");
}

static int cmd_qp(const struct req* r) {
  const char* nm = r->argc > 1 ? r->argv[1] : NULL;
  struct qp_obj* q = SLOT(qps);
  if (!nm || strlen(nm) >= kNameLen || FIND(qps, nm) || !q) return fail("qp: a new name, please");
  struct cq_obj* scq = FIND(cqs, arg(r, "cq"));
  struct cq_obj* rcq = arg(r, "rcq") ? FIND(cqs, arg(r, "rcq")) : scq;
  if (!scq || !rcq) return fail("qp: cq=NAME of a CQ made before");
  const char* t = arg(r, "type");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = scq->cq;
  ia.recv_cq = rcq->cq;
  ia.cap.max_send_wr = (uint32_t)num(r, "sq", 16);
  ia.cap.max_recv_wr = (uint32_t)num(r, "rq", 16);
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = (uint32_t)num(r, "inline", 0);
  ia.sq_sig_all = 0;
  if (!t || strcmp(t, "rc") == 0) ia.qp_type = IBV_QPT_RC;
  else if (strcmp(t, "uc") == 0) ia.qp_type = IBV_QPT_UC;
  else if (strcmp(t, "ud") == 0) ia.qp_type = IBV_QPT_UD;
  else return fail("qp: type=rc|uc|ud");
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (!qp) return fail("ibv_create_qp: %s", strerror(errno));
  snprintf(q->name, kNameLen, "%s", nm);
  q->qp = qp;
  q->type = ia.qp_type;
  return reply("ok qpn=0x%x", qp->qp_num);
}

static int set_gid_ah(struct ibv_ah_attr* ah, const char* dip) {
  memset(ah, 0, sizeof *ah);
  ah->is_global = 1;
  ah->port_num = 1;
  ah->grh.sgid_index = (uint8_t)gid_index;
  ah->grh.hop_limit = 64;
  uint8_t* g = ah->grh.dgid.raw;
  g[10] = g[11] = 0xff;
  return dip && inet_pton(AF_INET, dip, g + 12) == 1 ? 0 : -1;
}

static enum ibv_mtu mtu_enum(unsigned v) {
  switch (v) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return IBV_MTU_1024;
  }
}

/* init QP [access=lw,rw,rr,ra] [qkey=N] | rtr QP [dqpn= dip= psn= mtu= rd_atomic= min_rnr=]
 * | rts QP [psn= timeout= retry= rnr_retry= rd_atomic=] | err QP | reset QP */
static int cmd_modify(const struct req* r) {
  struct qp_obj* q = FIND(qps, r->argc > 1 ? r->argv[1] : NULL);
  if (!q) return fail("%s: no such QP", r->argv[0]);
  struct ibv_qp_attr a;
  int mask = IBV_QP_STATE;
  memset(&a, 0, sizeof a);
  const int ud = q->type == IBV_QPT_UD;
  if (strcmp(r->argv[0], "init") == 0) {
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.pkey_index = 0;
    mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (ud) {
      a.qkey = (uint32_t)num(r, "qkey", 0x11111111);
      mask |= IBV_QP_QKEY;
    } else {
      a.qp_access_flags = arg(r, "access") ? parse_access(arg(r, "access")) : 0;
      mask |= IBV_QP_ACCESS_FLAGS;
    }
  } else if (strcmp(r->argv[0], "rtr") == 0) {
    a.qp_state = IBV_QPS_RTR;
    if (!ud) {
      if (set_gid_ah(&a.ah_attr, arg(r, "dip"))) return fail("rtr: dip=IPv4 address");
      a.path_mtu = mtu_enum((unsigned)num(r, "mtu", 1024));
      a.dest_qp_num = (uint32_t)num(r, "dqpn", 0);
      a.rq_psn = (uint32_t)num(r, "psn", 0);
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (q->type == IBV_QPT_RC) {
        a.max_dest_rd_atomic = (uint8_t)num(r, "rd_atomic", 4);
        a.min_rnr_timer = (uint8_t)num(r, "min_rnr", 1);
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
    }
  } else if (strcmp(r->argv[0], "rts") == 0) {
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = (uint32_t)num(r, "psn", 0);
    mask |= IBV_QP_SQ_PSN;
    if (q->type == IBV_QPT_RC) {
      a.timeout = (uint8_t)num(r, "timeout", 14);
      a.retry_cnt = (uint8_t)num(r, "retry", 7);
      a.rnr_retry = (uint8_t)num(r, "rnr_retry", 7);
      a.max_rd_atomic = (uint8_t)num(r, "rd_atomic", 4);
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
  } else if (strcmp(r->argv[0], "err") == 0) {
    a.qp_state = IBV_QPS_ERR;
  } else {
    a.qp_state = IBV_QPS_RESET;
  }
  if (ibv_modify_qp(q->qp, &a, mask)) return fail("ibv_modify_qp: %s", strerror(errno));
  return reply("ok");
}

static int cmd_state(const struct req* r) {
  struct qp_obj* q = FIND(qps, r->argc > 1 ? r->argv[1] : NULL);
  if (!q) return fail("state: no such QP");
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  if (ibv_query_qp(q->qp, &a, IBV_QP_STATE, &ia)) return fail("ibv_query_qp: %s", strerror(errno));
  return reply("ok state=%s", state_name(a.qp_state));
}

/* recv QP MR [off= len= wr=] */
static int cmd_recv(const struct req* r) {
  struct qp_obj* q = FIND(qps, r->argc > 1 ? r->argv[1] : NULL);
  struct mr_obj* m = FIND(mrs, r->argc > 2 ? r->argv[2] : NULL);
  if (!q || !m) return fail("recv: QP MR [off= len= wr=]");
  size_t off = num(r, "off", 0), len = num(r, "len", m->len - off);
  if (off > m->len || len > m->len - off) return fail("recv: range outside the MR");
  struct ibv_sge sge = {(uint64_t)(uintptr_t)(m->buf + off), (uint32_t)len, m->mr->lkey};
  struct ibv_recv_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = num(r, "wr", 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  int rc = ibv_post_recv(q->qp, &wr, &bad);
  return rc ? fail("ibv_post_recv: %s", strerror(rc)) : reply("ok");
}

/* send QP op=send|send_imm|write|write_imm|read|cas|fadd [mr=NAME off= len=] [raddr= rkey=]
 *      [imm=] [cmp=] [swap=] [add=] [wr=] [unsignaled] [solicited] [inline]
 *      UD: dip= dqpn= qkey= */
static int cmd_send(const struct req* r) {
  struct qp_obj* q = FIND(qps, r->argc > 1 ? r->argv[1] : NULL);
  if (!q) return fail("send: no such QP");
  const char* op = arg(r, "op");
  struct ibv_send_wr wr, *bad;
  struct ibv_sge sge;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = num(r, "wr", 0);
  struct mr_obj* m = arg(r, "mr") ? FIND(mrs, arg(r, "mr")) : NULL;
  if (arg(r, "mr") && !m) return fail("send: no such MR");
  if (m) {
    size_t off = num(r, "off", 0), len = num(r, "len", m->len - off);
    if (off > m->len || len > m->len - off) return fail("send: range outside the MR");
    sge.addr = (uint64_t)(uintptr_t)(m->buf + off);
    sge.length = (uint32_t)len;
    sge.lkey = m->mr->lkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  if (!op || strcmp(op, "send") == 0) wr.opcode = IBV_WR_SEND;
  else if (strcmp(op, "send_imm") == 0) wr.opcode = IBV_WR_SEND_WITH_IMM;
  else if (strcmp(op, "write") == 0) wr.opcode = IBV_WR_RDMA_WRITE;
  else if (strcmp(op, "write_imm") == 0) wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  else if (strcmp(op, "read") == 0) wr.opcode = IBV_WR_RDMA_READ;
  else if (strcmp(op, "cas") == 0) wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  else if (strcmp(op, "fadd") == 0) wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  else return fail("send: op=send|send_imm|write|write_imm|read|cas|fadd");
  wr.imm_data = htonl((uint32_t)num(r, "imm", 0));
  if (!flag(r, "unsignaled")) wr.send_flags |= IBV_SEND_SIGNALED;
  if (flag(r, "solicited")) wr.send_flags |= IBV_SEND_SOLICITED;
  if (flag(r, "inline")) wr.send_flags |= IBV_SEND_INLINE;
  if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = num(r, "raddr", 0);
    wr.wr.atomic.rkey = (uint32_t)num(r, "rkey", 0);
    wr.wr.atomic.compare_add = wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? num(r, "add", 0) : num(r, "cmp", 0);
    wr.wr.atomic.swap = num(r, "swap", 0);
  } else if (wr.opcode != IBV_WR_SEND && wr.opcode != IBV_WR_SEND_WITH_IMM) {
    wr.wr.rdma.remote_addr = num(r, "raddr", 0);
    wr.wr.rdma.rkey = (uint32_t)num(r, "rkey", 0);
  }
  if (q->type == IBV_QPT_UD) {
    struct ibv_ah_attr aa;
    if (set_gid_ah(&aa, arg(r, "dip"))) return fail("send: UD needs dip=");
    if (n_ahs == (int)(sizeof ahs / sizeof ahs[0])) return fail("send: too many AHs");
    struct ibv_ah* ah = ibv_create_ah(pd, &aa);
    if (!ah) return fail("ibv_create_ah: %s", strerror(errno));
    ahs[n_ahs++] = ah;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = (uint32_t)num(r, "dqpn", 0);
    wr.wr.ud.remote_qkey = (uint32_t)num(r, "qkey", 0x11111111);
  }
  int rc = ibv_post_send(q->qp, &wr, &bad);
  return rc ? fail("ibv_post_send: %s", strerror(rc)) : reply("ok");
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* poll CQ [n=K] [wait=MS]: until K completions came or MS passed (default 1, 0). Each
 * completion wr:status:opcode:byte_len:imm:src_qp, separated by ';'. */
static int cmd_poll(const struct req* r) {
  struct cq_obj* c = FIND(cqs, r->argc > 1 ? r->argv[1] : NULL);
  if (!c) return fail("poll: no such CQ");
  int want = (int)num(r, "n", 1);
  double until = now_ms() + (double)num(r, "wait", 0);
  static char list[kLine];
  char* p = list;
  *p = 0;
  int got = 0;
  do {
    struct ibv_wc wc[8];
    int k = ibv_poll_cq(c->cq, 8, wc);
    if (k < 0) return fail("ibv_poll_cq: %d", k);
    for (int i = 0; i < k && p < list + sizeof list - 200; ++i, ++got)
      p += sprintf(p, "%s%" PRIu64 ":%s:%s:%u:0x%x:0x%x", got ? ";" : "", wc[i].wr_id,
                   status_name(wc[i].status), wc[i].status == IBV_WC_SUCCESS ? opcode_name(wc[i].opcode) : "-",
                   wc[i].byte_len, (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0,
                   wc[i].src_qp);
    if (got >= want) break;
    if (k == 0) usleep(200);
  } while (now_ms() < until);
  return reply("ok n=%d wc=%s", got, list);
}

/* events [wait=MS]: the async events that came (name:qp-name), acknowledged. */
static int cmd_events(const struct req* r) {
  double until = now_ms() + (double)num(r, "wait", 0);
  char* p = out + sprintf(out, "ok ev=");
  int n = 0;
  for (;;) {
    struct pollfd pf = {ctx->async_fd, POLLIN, 0};
    double left = until - now_ms();
    if (poll(&pf, 1, left > 0 ? (int)left + 1 : 0) <= 0) break;
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) break;
    const char* who = "-";
    if (ev.event_type <= IBV_EVENT_PATH_MIG_ERR || ev.event_type == IBV_EVENT_COMM_EST ||
        ev.event_type == IBV_EVENT_SQ_DRAINED || ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED)
      for (int i = 0; i < kMaxObjs; ++i)
        if (qps[i].name[0] && qps[i].qp == ev.element.qp) who = qps[i].name;
    p += sprintf(p, "%s%s:%s", n++ ? ";" : "", ibv_event_type_str(ev.event_type), who);
    ibv_ack_async_event(&ev);
  }
  return 0;
}

/* ---- the connection manager (librdmacm) ---- */

static const char* cm_event_name(enum rdma_cm_event_type t) {
  const char* s = rdma_event_str(t); /* "RDMA_CM_EVENT_ESTABLISHED" */
  return strncmp(s, "RDMA_CM_EVENT_", 14) == 0 ? s + 14 : s;
}

/* Reads the channel until an event for `c` is queued or `until` (ms) passes. */
static int cm_pump(struct cm_obj* c, double until) {
  for (;;) {
    if (c->n_ev > 0) return 1;
    struct pollfd pf = {channel->fd, POLLIN, 0};
    double left = until - now_ms();
    if (poll(&pf, 1, left > 0 ? (int)left + 1 : 0) <= 0) return 0;
    struct rdma_cm_event* ev;
    if (rdma_get_cm_event(channel, &ev)) return 0;
    struct rdma_cm_id* owner = ev->listen_id ? ev->listen_id : ev->id;
    for (int i = 0; i < kMaxObjs; ++i) {
      struct cm_obj* o = &cms[i];
      if (!o->name[0] || o->id != owner || o->n_ev == kMaxEvents) continue;
      o->ev[o->n_ev].type = ev->event;
      o->ev[o->n_ev].status = ev->status;
      o->ev[o->n_ev].conn = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;
      ++o->n_ev;
      owner = NULL;
      break;
    }
    if (owner && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) rdma_reject(ev->id, NULL, 0);
    rdma_ack_cm_event(ev);
  }
}

static void cm_pop(struct cm_obj* c) {
  memmove(&c->ev[0], &c->ev[1], sizeof c->ev[0] * (size_t)(c->n_ev - 1));
  --c->n_ev;
}

static struct cm_obj* cm_new(const char* nm, struct rdma_cm_id* id) {
  struct cm_obj* c = SLOT(cms);
  if (!c) return NULL;
  memset(c, 0, sizeof *c);
  snprintf(c->name, kNameLen, "%s", nm);
  c->id = id;
  return c;
}

static int cm_name_ok(const char* nm) { return nm && strlen(nm) < kNameLen && !FIND(cms, nm); }

/* cm_listen NAME port=P */
static int cmd_cm_listen(const struct req* r) {
  const char* nm = r->argc > 1 ? r->argv[1] : NULL;
  if (!cm_name_ok(nm)) return fail("cm_listen: a new name, please");
  struct rdma_cm_id* id;
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) return fail("rdma_create_id: %s", strerror(errno));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)num(r, "port", 7000))};
  memcpy(&sa.sin_addr, gid.raw + 12, 4);
  if (rdma_bind_addr(id, (struct sockaddr*)&sa) || rdma_listen(id, 4)) {
    int e = errno;
    rdma_destroy_id(id);
    return fail("rdma_bind_addr/rdma_listen: %s", strerror(e));
  }
  if (!cm_new(nm, id)) {
    rdma_destroy_id(id);
    return fail("cm_listen: too many ids");
  }
  return reply("ok");
}

/* The QP of a connection: RC, on the agent's PD and the CQ named cq=. */
static int cm_make_qp(const struct req* r, struct rdma_cm_id* id, const char* qname) {
  struct cq_obj* cq = FIND(cqs, arg(r, "cq"));
  struct qp_obj* q = SLOT(qps);
  if (!cq || !qname || strlen(qname) >= kNameLen || FIND(qps, qname) || !q) return -1;
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq->cq;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ia.qp_type = IBV_QPT_RC;
  if (rdma_create_qp(id, pd, &ia)) return -1;
  snprintf(q->name, kNameLen, "%s", qname);
  q->qp = id->qp;
  q->type = IBV_QPT_RC;
  q->cm = id;
  return 0;
}

static void cm_param(const struct req* r, struct rdma_conn_param* p) {
  memset(p, 0, sizeof *p);
  p->responder_resources = (uint8_t)num(r, "rd", 4);
  p->initiator_depth = (uint8_t)num(r, "rd", 4);
  p->retry_count = (uint8_t)num(r, "retry", 7);
  p->rnr_retry_count = (uint8_t)num(r, "rnr_retry", 7);
}

/* cm_accept LISTENER NAME qp=Q cq=C [wait=MS] [rd=N]: takes the next connection request,
 * makes its QP and accepts. cm_reject LISTENER [wait=MS]: rejects the next one. */
static int cmd_cm_accept(const struct req* r) {
  struct cm_obj* l = FIND(cms, r->argc > 1 ? r->argv[1] : NULL);
  const int reject = strcmp(r->argv[0], "cm_reject") == 0;
  const char* nm = r->argc > 2 ? r->argv[2] : NULL;
  if (!l || (!reject && !cm_name_ok(nm))) return fail("%s: LISTENER [NAME qp= cq=]", r->argv[0]);
  if (!cm_pump(l, now_ms() + (double)num(r, "wait", 2000))) return fail("no connection request came");
  if (l->ev[0].type != RDMA_CM_EVENT_CONNECT_REQUEST) {
    const char* what = cm_event_name(l->ev[0].type);
    cm_pop(l);
    return fail("the listener's next event is %s", what);
  }
  struct rdma_cm_id* id = l->ev[0].conn;
  cm_pop(l);
  if (reject) {
    rdma_reject(id, NULL, 0);
    rdma_destroy_id(id);
    return reply("ok");
  }
  struct cm_obj* c = cm_new(nm, id);
  if (!c || cm_make_qp(r, id, arg(r, "qp"))) {
    if (c) memset(c, 0, sizeof *c);
    rdma_reject(id, NULL, 0);
    rdma_destroy_id(id);
    return fail("cm_accept: cannot make the QP (qp=NEW cq=CQ)");
  }
  struct rdma_conn_param p;
  cm_param(r, &p);
  if (rdma_accept(id, &p)) return fail("rdma_accept: %s", strerror(errno));
  return reply("ok qpn=0x%x", id->qp->qp_num);
}

static int cm_wait_for(struct cm_obj* c, enum rdma_cm_event_type want, double until) {
  if (!cm_pump(c, until)) return -1;
  const int ok = c->ev[0].type == want;
  cm_pop(c);
  return ok ? 0 : -1;
}

/* cm_connect NAME qp=Q cq=C dip=ADDR port=P [wait=MS] [rd=N]: resolves, makes the QP and
 * sends the REQ (the rest comes as events: cm_event). */
static int cmd_cm_connect(const struct req* r) {
  const char* nm = r->argc > 1 ? r->argv[1] : NULL;
  if (!cm_name_ok(nm)) return fail("cm_connect: a new name, please");
  struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
  memcpy(&src.sin_addr, gid.raw + 12, 4);
  dst.sin_port = htons((uint16_t)num(r, "port", 7000));
  if (!arg(r, "dip") || inet_pton(AF_INET, arg(r, "dip"), &dst.sin_addr) != 1) return fail("cm_connect: dip=ADDR");
  struct rdma_cm_id* id;
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) return fail("rdma_create_id: %s", strerror(errno));
  struct cm_obj* c = cm_new(nm, id);
  if (!c) {
    rdma_destroy_id(id);
    return fail("cm_connect: too many ids");
  }
  const double until = now_ms() + (double)num(r, "wait", 2000);
  if (rdma_resolve_addr(id, (struct sockaddr*)&src, (struct sockaddr*)&dst, 2000) ||
      cm_wait_for(c, RDMA_CM_EVENT_ADDR_RESOLVED, until))
    return fail("the address did not resolve");
  if (rdma_resolve_route(id, 2000) || cm_wait_for(c, RDMA_CM_EVENT_ROUTE_RESOLVED, until))
    return fail("the route did not resolve");
  if (cm_make_qp(r, id, arg(r, "qp"))) return fail("cm_connect: cannot make the QP (qp=NEW cq=CQ)");
  struct rdma_conn_param p;
  cm_param(r, &p);
  if (rdma_connect(id, &p)) return fail("rdma_connect: %s", strerror(errno));
  return reply("ok qpn=0x%x", id->qp->qp_num);
}

/* cm_event NAME [wait=MS]: the id's next event (ESTABLISHED, REJECTED, DISCONNECTED, ...). */
static int cmd_cm_event(const struct req* r) {
  struct cm_obj* c = FIND(cms, r->argc > 1 ? r->argv[1] : NULL);
  if (!c) return fail("cm_event: no such id");
  if (!cm_pump(c, now_ms() + (double)num(r, "wait", 0))) return reply("ok ev=none");
  const char* name = cm_event_name(c->ev[0].type);
  const int status = c->ev[0].status;
  if (c->ev[0].conn) rdma_reject(c->ev[0].conn, NULL, 0), rdma_destroy_id(c->ev[0].conn);
  cm_pop(c);
  return reply("ok ev=%s status=%d", name, status);
}

/* cm_disconnect NAME */
static int cmd_cm_disconnect(const struct req* r) {
  struct cm_obj* c = FIND(cms, r->argc > 1 ? r->argv[1] : NULL);
  if (!c) return fail("cm_disconnect: no such id");
  return rdma_disconnect(c->id) ? fail("rdma_disconnect: %s", strerror(errno)) : reply("ok");
}

static int dispatch(struct req* r) {
  static const struct {
    const char* name;
    int (*fn)(const struct req*);
  } table[] = {{"hello", cmd_hello}, {"mr", cmd_mr},     {"fill", cmd_fill},   {"get", cmd_get},
               {"cq", cmd_cq},       {"qp", cmd_qp},     {"init", cmd_modify}, {"rtr", cmd_modify},
               {"rts", cmd_modify},  {"err", cmd_modify}, {"reset", cmd_modify}, {"state", cmd_state},
               {"recv", cmd_recv},   {"send", cmd_send}, {"poll", cmd_poll},   {"events", cmd_events},
               {"cm_listen", cmd_cm_listen}, {"cm_accept", cmd_cm_accept}, {"cm_reject", cmd_cm_accept},
               {"cm_connect", cmd_cm_connect}, {"cm_event", cmd_cm_event},
               {"cm_disconnect", cmd_cm_disconnect}};
  if (r->argc == 0) return fail("empty line");
  if (strcmp(r->argv[0], "clear") == 0) {
    drop_all();
    return reply("ok");
  }
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
    if (strcmp(r->argv[0], table[i].name) == 0) return table[i].fn(r);
  return fail("unknown command %s", r->argv[0]);
}

static void serve(int fd) {
  static char buf[kLine];
  size_t have = 0;
  for (;;) {
    char* nl = memchr(buf, '\n', have);
    if (!nl) {
      if (have == sizeof buf) return;
      ssize_t k = read(fd, buf + have, sizeof buf - have);
      if (k <= 0) return;
      have += (size_t)k;
      continue;
    }
    *nl = 0;
    size_t used = (size_t)(nl - buf) + 1;
    struct req r = {0, {0}};
    for (char* s = strtok(buf, " \t\r"); s && r.argc < kMaxArgs; s = strtok(NULL, " \t\r"))
      r.argv[r.argc++] = s;
    if (r.argc == 1 && strcmp(r.argv[0], "bye") == 0) {
      (void)!write(fd, "ok\n", 3);
      return;
    }
    dispatch(&r);
    size_t n = strlen(out);
    out[n++] = '\n';
    for (size_t w = 0; w < n;) {
      ssize_t k = write(fd, out + w, n - w);
      if (k <= 0) return;
      w += (size_t)k;
    }
    memmove(buf, buf + used, have - used);
    have -= used;
  }
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: uroce-conform-agent [-d DEVICE] [-g GID_INDEX] [-p TCP_PORT] [-b BIND_ADDR]\n"
          "The device-under-test side of uroce-conform: serves one connection, then exits.\n");
}

int main(int argc, char** argv) {
  const char* dev = NULL;
  const char* bind_addr = "0.0.0.0";
  int port = 18600, c;
  if (argc > 1 && strcmp(argv[1], "--help") == 0) {
    usage(stdout);
    return 0;
  }
  while ((c = getopt(argc, argv, "d:g:p:b:h")) != -1) {
    switch (c) {
      case 'd': dev = optarg; break;
      case 'g': gid_index = atoi(optarg); break;
      case 'p': port = atoi(optarg); break;
      case 'b': bind_addr = optarg; break;
      default: usage(c == 'h' ? stdout : stderr); return c == 'h' ? 0 : 2;
    }
  }
  struct ibv_device** list = ibv_get_device_list(NULL);
  if (!list || !list[0]) {
    fprintf(stderr, "uroce-conform-agent: no RDMA device (is a provider loaded?)\n");
    return 1;
  }
  struct ibv_device* d = list[0];
  for (int i = 0; dev && list[i]; ++i)
    if (strcmp(ibv_get_device_name(list[i]), dev) == 0) d = list[i];
  if (dev && strcmp(ibv_get_device_name(d), dev) != 0) {
    fprintf(stderr, "uroce-conform-agent: no device %s (-d names one of ibv_devices')\n", dev);
    return 1;
  }
  /* The context librdmacm uses for this device, so that its ids' QPs can use our PD and CQs;
   * a context of our own when librdmacm has none. */
  int n_cm = 0;
  struct ibv_context** cm_ctxs = rdma_get_devices(&n_cm);
  for (int i = 0; cm_ctxs && i < n_cm; ++i)
    if (strcmp(ibv_get_device_name(cm_ctxs[i]->device), ibv_get_device_name(d)) == 0) ctx = cm_ctxs[i];
  const int own_ctx = ctx == NULL;
  if (own_ctx) ctx = ibv_open_device(d);
  channel = rdma_create_event_channel();
  pd = ctx && channel ? ibv_alloc_pd(ctx) : NULL;
  if (!pd) {
    fprintf(stderr, "uroce-conform-agent: cannot open %s: %s\n", ibv_get_device_name(d), strerror(errno));
    return 1;
  }
  if (gid_index < 0) gid_index = find_gid(1);
  if (gid_index < 0 || ibv_query_gid(ctx, 1, gid_index, &gid)) {
    fprintf(stderr, "uroce-conform-agent: %s has no RoCEv2 IPv4 GID (-g names one)\n", ibv_get_device_name(d));
    return 1;
  }
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (inet_pton(AF_INET, bind_addr, &sa.sin_addr) != 1 || bind(ls, (struct sockaddr*)&sa, sizeof sa) ||
      listen(ls, 1)) {
    fprintf(stderr, "uroce-conform-agent: cannot listen on %s:%d: %s\n", bind_addr, port, strerror(errno));
    return 1;
  }
  printf("uroce-conform-agent: %s gid %d, listening on %s:%d\n", ibv_get_device_name(d), gid_index,
         bind_addr, port);
  fflush(stdout);
  int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
  close(ls);
  if (fd < 0) return 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  serve(fd);
  close(fd);
  drop_all();
  ibv_dealloc_pd(pd);
  rdma_destroy_event_channel(channel);
  if (own_ctx) ibv_close_device(ctx);
  if (cm_ctxs) rdma_free_devices(cm_ctxs);
  ibv_free_device_list(list);
  return 0;
}

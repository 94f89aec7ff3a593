// The rest of libibverbs.so.1's exported symbols: string and rate helpers, sysfs helpers,
// fork control, async events, the context's op table — and, for what uroce does not
// implement yet, explicit EOPNOTSUPP answers (never a crash, never pretending).
//
// IBVERBS_PRIVATE_34 (rdma-core's interface to its own provider libraries) is exported only
// so that libraries like libmlx5, which perftest links, load: their constructors call
// verbs_register_driver_34(), which we ignore; nothing else there is ever reached for a
// uroce device.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "uroce/version.h"
#include "verbs/provider.h"

using namespace uroce;
using namespace uroce::verbs;

namespace {

template <typename T>
T* not_supported() {
  errno = EOPNOTSUPP;
  return nullptr;
}

// ibv_bind_mw (type 1; verbs.h has checked the type, the MR's PD and an MR-less range): a
// bind work request on the QP's send queue. The window's new R_Key (its low 8 bits stepped,
// ibv_inc_rkey) is in mw->rkey when this returns, as with rdma-core's providers; if the bind
// then fails (IBV_WC_MW_BIND_ERR) the application must not use it.
int op_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  const ibv_mw_bind_info& b = mw_bind->bind_info;
  if (qp == nullptr || qp->context != mw->context ||
      (b.mw_access_flags & IBV_ACCESS_ZERO_BASED))  // type 1 windows are not zero-based
    return EINVAL;
  const uint32_t new_key = ibv_inc_rkey(mw->rkey);
  const mem::BindRequest req{mw->rkey,  new_key,  b.mr != nullptr ? b.mr->lkey : 0,
                             b.addr,    b.length, static_cast<int>(b.mw_access_flags),
                             true};
  Runtime* rt = runtime_of(qp->context);
  app_posted(rt);
  const int e = rt->engine->post_bind_mw(to_qp(qp), mw_bind->wr_id, mw_bind->send_flags, req);
  if (e == 0) mw->rkey = new_key;
  rt->drive(true);
  return e;
}

int op_query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t len) {
  ibv_port_attr a;
  Runtime* rt = runtime_of(context);
  EngineLock lock(rt);
  if (int e = rt->engine->query_port(port_num, &a); e != 0) return e;
  std::memcpy(attr, &a, std::min(len, sizeof a));
  return 0;
}

int op_query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                       ibv_device_attr_ex* attr, size_t len) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  ibv_device_attr_ex a{};
  Runtime* rt = runtime_of(context);
  {
    EngineLock lock(rt);
    rt->engine->query_device(&a.orig_attr);
  }
  a.max_dm_size = kDeviceMemoryBytes;
  // IBA 1.5's FLUSH (both placement types: persistence for MRs over shared file mappings)
  // and ATOMIC WRITE, in the bits rdma-core 45 names (uroce/verbs_compat.h).
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags | UROCE_DEVICE_FLUSH_GLOBAL |
                          UROCE_DEVICE_FLUSH_PERSISTENT | UROCE_DEVICE_ATOMIC_WRITE;
  // On-demand paging: nothing is ever pinned here (the engine copies with the CPU), so every
  // transport's every operation can use an on-demand MR, the implicit one included, where
  // the kernel lets each access check its pages (mem::odp_supported).
  if (mem::odp_supported()) {
    a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    constexpr uint32_t kAll = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                              IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                              IBV_ODP_SUPPORT_SRQ_RECV;
    a.odp_caps.per_transport_caps.rc_odp_caps = kAll;
    a.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
                                                 IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
    a.odp_caps.per_transport_caps.ud_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
    a.xrc_odp_caps = kAll;
  }
  // RSS over receive work queues, where raw-packet QPs can be had (objects.cc, raw.cc).
  if (a.orig_attr.max_raw_ethy_qp != 0) {
    a.rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
    a.rss_caps.max_rwq_indirection_tables = static_cast<uint32_t>(a.orig_attr.max_qp);
    a.rss_caps.max_rwq_indirection_table_size = 1u << 10;
    a.rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 |
                                     IBV_RX_HASH_SRC_IPV6 | IBV_RX_HASH_DST_IPV6 |
                                     IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
                                     IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
    a.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
    a.max_wq_type_rq = static_cast<uint32_t>(a.orig_attr.max_qp);
  }
  // Tag matching on RC (tag_matching.cc): the list, rendezvous headers up to 64 bytes; list
  // operations complete at once, so any number may be outstanding.
  a.tm_caps.flags = IBV_TM_CAP_RC;
  a.tm_caps.max_num_tags = Engine::kTmMaxTags;
  a.tm_caps.max_rndv_hdr_size = Engine::kTmMaxRndvHdr;
  a.tm_caps.max_ops = static_cast<uint32_t>(a.orig_attr.max_srq_wr);
  a.tm_caps.max_sge = static_cast<uint32_t>(a.orig_attr.max_srq_sge);
  // Per-QP rate limits (IBV_QP_RATE_LIMIT, ibv_modify_qp_rate_limit): the pacer DCQCN uses,
  // on the QP types the kernel's state table gives the attribute to.
  a.packet_pacing_caps.qp_rate_limit_min = Engine::kRateLimitMinKbps;
  a.packet_pacing_caps.qp_rate_limit_max = Engine::kRateLimitMaxKbps;
  a.packet_pacing_caps.supported_qpts = (1u << IBV_QPT_RC) | (1u << IBV_QPT_RAW_PACKET);
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  // Completion timestamps count nanoseconds of CLOCK_MONOTONIC: a 1 GHz clock of 64 bits.
  a.completion_timestamp_mask = ~uint64_t{0};
  a.hca_core_clock = 1'000'000;  // kHz
  std::memcpy(attr, &a, std::min(len, sizeof a));
  return 0;
}

// ibv_query_rt_values_ex(3): the device's clock now (the one completion timestamps count).
int op_query_rt_values(ibv_context*, ibv_values_ex* values) {
  if (values == nullptr || (values->comp_mask & ~uint32_t{IBV_VALUES_MASK_RAW_CLOCK}) != 0)
    return EINVAL;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) clock_gettime(CLOCK_MONOTONIC, &values->raw_clock);
  return 0;
}

}  // namespace

namespace uroce::verbs {
void install_ops(Context* ctx) {
  ibv_context_ops& o = ctx->vctx.context.ops;
  install_data_ops(&o);
  // Memory windows (ibv_alloc_mw(3), ibv_bind_mw(3)): verbs.h's inlines call these ops.
  o.alloc_mw = alloc_mw;
  o.bind_mw = op_bind_mw;
  o.dealloc_mw = dealloc_mw;
  ctx->vctx.query_port = op_query_port;
  ctx->vctx.query_device_ex = op_query_device_ex;
  ctx->vctx.query_rt_values = op_query_rt_values;
  ctx->vctx.alloc_parent_domain = alloc_parent_domain;
  install_memory_ops(ctx);
  install_ext_ops(ctx);
}
}  // namespace uroce::verbs

extern "C" {

// ---- Strings and rates ------------------------------------------------------------------

const char* ibv_wc_status_str(ibv_wc_status status) {
  static const char* const kNames[] = {
      "success", "local length error", "local QP operation error", "local EE context operation error",
      "local protection error", "Work Request Flushed Error", "memory management operation error",
      "bad response error", "local access error", "remote invalid request error",
      "remote access error", "remote operation error", "transport retry counter exceeded",
      "RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
      "aborted error", "invalid EE context number", "invalid EE context state", "fatal error",
      "response timeout error", "general error", "TM error", "TM rendezvous incomplete"};
  const auto i = static_cast<size_t>(status);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

const char* ibv_event_type_str(ibv_event_type event) {
  static const char* const kNames[] = {
      "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
      "local access violation work queue error", "communication established", "send queue drained",
      "path migrated", "path migration request error", "local catastrophic error", "port active",
      "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
      "SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
      "WQ fatal"};
  const auto i = static_cast<size_t>(event);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

const char* ibv_node_type_str(ibv_node_type node_type) {
  switch (node_type) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED: return "unspecified";
    default: return "unknown";
  }
}

const char* ibv_port_state_str(ibv_port_state port_state) {
  static const char* const kNames[] = {"no state change (NOP)", "down", "init", "armed",
                                       "active", "active defer"};
  const auto i = static_cast<size_t>(port_state);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "unknown";
}

// IB static rates: enum value <-> multiple of 2.5 Gb/s <-> Mb/s (IBA table 226).
namespace {
struct RateRow {
  ibv_rate rate;
  int mult, mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},      {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},      {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},     {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},     {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},   {IBV_RATE_14_GBPS, 5, 14062},
    {IBV_RATE_56_GBPS, 22, 56250},     {IBV_RATE_112_GBPS, 45, 112500},
    {IBV_RATE_168_GBPS, 67, 168750},   {IBV_RATE_25_GBPS, 10, 25781},
    {IBV_RATE_100_GBPS, 40, 103125},   {IBV_RATE_200_GBPS, 80, 206250},
    {IBV_RATE_300_GBPS, 120, 309375},  {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},     {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},
};
}  // namespace

int ibv_rate_to_mult(ibv_rate rate) {
  for (const auto& r : kRates)
    if (r.rate == rate) return r.mult;
  return 0;
}
ibv_rate mult_to_ibv_rate(int mult) {
  for (const auto& r : kRates)
    if (r.mult == mult && r.rate < IBV_RATE_14_GBPS) return r.rate;
  return IBV_RATE_MAX;
}
int ibv_rate_to_mbps(ibv_rate rate) {
  for (const auto& r : kRates)
    if (r.rate == rate) return r.mbps;
  return 0;
}
ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const auto& r : kRates)
    if (r.mbps == mbps) return r.rate;
  return IBV_RATE_MAX;
}

// ---- sysfs helpers ------------------------------------------------------------------------
// A uroce device has no sysfs directory; its ibdev_path answers a few synthetic files.

const char* ibv_get_sysfs_path(void) { return "/sys"; }

int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  for (Device* d : devices()) {
    if (std::strcmp(dir, d->ibv.ibdev_path) != 0) continue;
    std::string v;
    if (!std::strcmp(file, "board_id")) v = "uroce software RoCEv2";
    else if (!std::strcmp(file, "fw_ver")) v = "uroce " UROCE_VERSION_STRING;
    else if (!std::strcmp(file, "node_type")) v = "1: CA";
    else return -1;
    return std::snprintf(buf, size, "%s", v.c_str());
  }
  const std::string path = std::string(dir) + "/" + file;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, size);
  close(fd);
  if (n < 0) return -1;
  if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = '\0';
  if (static_cast<size_t>(n) < size) buf[n] = '\0';
  return static_cast<int>(n);
}

int ibv_read_ibdev_sysfs_file(char* buf, size_t size, ibv_device* dev, const char* fmt, ...) {
  char file[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(file, sizeof file, fmt, ap);
  va_end(ap);
  return ibv_read_sysfs_file(dev->ibdev_path, file, buf, size);
}

// ---- fork -------------------------------------------------------------------------------
// uroce copies with the CPU and pins nothing, so registered memory survives fork() as any
// memory does: nothing to set up (the child must not use the parent's verbs objects).

int ibv_fork_init(void) { return 0; }
int ibv_dontfork_range(void*, size_t) { return 0; }
int ibv_dofork_range(void*, size_t) { return 0; }
ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

// ---- Async events -------------------------------------------------------------------------

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  for (;;) {
    AsyncRecord r;
    const ssize_t n = read(context->async_fd, &r, sizeof r);
    if (n != sizeof r) {
      if (n >= 0) errno = EIO;
      return -1;
    }
    *event = r.ev;
    if (count_async_read(context, r.ev, r.id)) return 0;
    // else: about an object destroyed since; dropped, as the kernel does at destroy
  }
}

// Acknowledging lets ibv_destroy_{qp,cq,srq} (which wait for every event about the object to
// be acknowledged) go ahead, as in rdma-core.
void ibv_ack_async_event(ibv_async_event* event) {
  auto ack = [](pthread_mutex_t* m, pthread_cond_t* cv, uint32_t* completed) {
    pthread_mutex_lock(m);
    ++*completed;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(m);
  };
  switch (event_object(event->event_type)) {
    case EventObject::kCq: {
      ibv_cq* cq = event->element.cq;
      ack(&cq->mutex, &cq->cond, &cq->async_events_completed);
      break;
    }
    case EventObject::kQp: {
      ibv_qp* qp = event->element.qp;
      ack(&qp->mutex, &qp->cond, &qp->events_completed);
      break;
    }
    case EventObject::kSrq: {
      ibv_srq* srq = event->element.srq;
      ack(&srq->mutex, &srq->cond, &srq->events_completed);
      break;
    }
    case EventObject::kWq: {
      ibv_wq* wq = event->element.wq;
      ack(&wq->mutex, &wq->cond, &wq->events_completed);
      break;
    }
    case EventObject::kNone: break;  // port and device events name no object
  }
}

// ---- Not supported yet: the extended QP API ---------------------------------------------------

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  return not_supported<ibv_mr>();
}
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }
// ---- Multicast (ibv_attach_mcast(3)): a UD QP joins a group; `lid` means nothing on RoCE ----

namespace {
int mcast(ibv_qp* qp, const ibv_gid* gid, bool attach) {
  if (qp == nullptr || gid == nullptr) return EINVAL;
  wire::Gid g;
  std::memcpy(g.data(), gid->raw, 16);
  Runtime* rt = runtime_of(qp->context);
  EngineLock lock(rt);
  return attach ? rt->engine->attach_mcast(to_qp(qp), g) : rt->engine->detach_mcast(to_qp(qp), g);
}
}  // namespace

int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) { return mcast(qp, gid, true); }
int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) { return mcast(qp, gid, false); }

// ---- Not supported: ECE, dmabuf, kernel ABI copies -----------------------------------------

int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) {
  return EOPNOTSUPP;
}
void ibv_copy_ah_attr_from_kern(void*, void*) {}
void ibv_copy_qp_attr_from_kern(void*, void*) {}
void ibv_copy_path_rec_from_kern(void*, void*) {}
void ibv_copy_path_rec_to_kern(void*, void*) {}

// ---- IBVERBS_PRIVATE_34: for rdma-core's own provider libraries only -----------------------

bool verbs_allow_disassociate_destroy = false;
void verbs_register_driver_34(const void*) {}  // provider libraries register here: ignored
void __verbs_log(void*, uint32_t, const char*, ...) {}
int verbs_set_ops() { return EOPNOTSUPP; }
int verbs_init_cq() { return EOPNOTSUPP; }
int verbs_open_device() { return EOPNOTSUPP; }
int verbs_uninit_context() { return EOPNOTSUPP; }
void* _verbs_init_and_alloc_context() { return not_supported<void>(); }
int execute_ioctl() { return EOPNOTSUPP; }
int __ioctl_final_num_attrs() { return EOPNOTSUPP; }

#define UROCE_CMD_STUB(name) \
  int name() { return EOPNOTSUPP; }
UROCE_CMD_STUB(ibv_cmd_advise_mr)
UROCE_CMD_STUB(ibv_cmd_alloc_dm)
UROCE_CMD_STUB(ibv_cmd_alloc_mw)
UROCE_CMD_STUB(ibv_cmd_alloc_pd)
UROCE_CMD_STUB(ibv_cmd_attach_mcast)
UROCE_CMD_STUB(ibv_cmd_close_xrcd)
UROCE_CMD_STUB(ibv_cmd_create_ah)
UROCE_CMD_STUB(ibv_cmd_create_counters)
UROCE_CMD_STUB(ibv_cmd_create_cq)
UROCE_CMD_STUB(ibv_cmd_create_cq_ex)
UROCE_CMD_STUB(ibv_cmd_create_flow)
UROCE_CMD_STUB(ibv_cmd_create_flow_action_esp)
UROCE_CMD_STUB(ibv_cmd_create_qp)
UROCE_CMD_STUB(ibv_cmd_create_qp_ex2)
UROCE_CMD_STUB(ibv_cmd_create_qp_ex)
UROCE_CMD_STUB(ibv_cmd_create_rwq_ind_table)
UROCE_CMD_STUB(ibv_cmd_create_srq)
UROCE_CMD_STUB(ibv_cmd_create_srq_ex)
UROCE_CMD_STUB(ibv_cmd_create_wq)
UROCE_CMD_STUB(ibv_cmd_dealloc_mw)
UROCE_CMD_STUB(ibv_cmd_dealloc_pd)
UROCE_CMD_STUB(ibv_cmd_dereg_mr)
UROCE_CMD_STUB(ibv_cmd_destroy_ah)
UROCE_CMD_STUB(ibv_cmd_destroy_counters)
UROCE_CMD_STUB(ibv_cmd_destroy_cq)
UROCE_CMD_STUB(ibv_cmd_destroy_flow)
UROCE_CMD_STUB(ibv_cmd_destroy_flow_action)
UROCE_CMD_STUB(ibv_cmd_destroy_qp)
UROCE_CMD_STUB(ibv_cmd_destroy_rwq_ind_table)
UROCE_CMD_STUB(ibv_cmd_destroy_srq)
UROCE_CMD_STUB(ibv_cmd_destroy_wq)
UROCE_CMD_STUB(ibv_cmd_detach_mcast)
UROCE_CMD_STUB(ibv_cmd_free_dm)
UROCE_CMD_STUB(ibv_cmd_get_context)
UROCE_CMD_STUB(ibv_cmd_modify_cq)
UROCE_CMD_STUB(ibv_cmd_modify_flow_action_esp)
UROCE_CMD_STUB(ibv_cmd_modify_qp)
UROCE_CMD_STUB(ibv_cmd_modify_qp_ex)
UROCE_CMD_STUB(ibv_cmd_modify_srq)
UROCE_CMD_STUB(ibv_cmd_modify_wq)
UROCE_CMD_STUB(ibv_cmd_open_qp)
UROCE_CMD_STUB(ibv_cmd_open_xrcd)
UROCE_CMD_STUB(ibv_cmd_poll_cq)
UROCE_CMD_STUB(ibv_cmd_post_recv)
UROCE_CMD_STUB(ibv_cmd_post_send)
UROCE_CMD_STUB(ibv_cmd_post_srq_recv)
UROCE_CMD_STUB(ibv_cmd_query_context)
UROCE_CMD_STUB(ibv_cmd_query_device_any)
UROCE_CMD_STUB(ibv_cmd_query_mr)
UROCE_CMD_STUB(ibv_cmd_query_port)
UROCE_CMD_STUB(ibv_cmd_query_qp)
UROCE_CMD_STUB(ibv_cmd_query_srq)
UROCE_CMD_STUB(ibv_cmd_read_counters)
UROCE_CMD_STUB(ibv_cmd_reg_dm_mr)
UROCE_CMD_STUB(ibv_cmd_reg_dmabuf_mr)
UROCE_CMD_STUB(ibv_cmd_reg_mr)
UROCE_CMD_STUB(ibv_cmd_req_notify_cq)
UROCE_CMD_STUB(ibv_cmd_rereg_mr)
UROCE_CMD_STUB(ibv_cmd_resize_cq)
#undef UROCE_CMD_STUB

}  // extern "C"

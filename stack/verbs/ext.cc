// The extended verbs: ibv_create_cq_ex with the ibv_start_poll / ibv_next_poll / ibv_wc_read_*
// iterator, and ibv_create_qp_ex with send_ops_flags, ibv_qp_to_qp_ex and the ibv_wr_* builder.
//
// A cq_ex polls one ibv_wc at a time through the context's poll_cq op and the read_* functions
// return its fields; a qp_ex's ibv_wr_* calls write WQEs straight into the send queue (see
// the builder below), so nothing is allocated or copied twice per work request. Unsupported
// requests (TSO, other wc_flags) fail with EOPNOTSUPP, as rdma-core documents.
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs/provider.h"

using namespace uroce;
using namespace uroce::verbs;

namespace {

// ---- CQ ------------------------------------------------------------------------------------

Cq* cq_of(ibv_cq_ex* c) { return to_cq(ibv_cq_ex_to_cq(c)); }

int poll_one(ibv_cq_ex* current) {
  ibv_cq* cq = ibv_cq_ex_to_cq(current);
  Cq* c = to_cq(cq);
  const int n = cq->context->ops.poll_cq(cq, 1, &c->ex_wc);
  if (n < 0) return EINVAL;
  if (n == 0) return ENOENT;
  current->wr_id = c->ex_wc.wr_id;
  current->status = c->ex_wc.status;
  return 0;
}

// The CQ stays locked from a successful start_poll to end_poll (unless the application said it
// polls from one thread only), so the read_* calls see the completion this thread polled.
int cq_start_poll(ibv_cq_ex* current, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  Cq* c = cq_of(current);
  if (!c->ex_single) c->ex_mu.lock();
  const int rc = poll_one(current);
  if (rc != 0 && !c->ex_single) c->ex_mu.unlock();  // no end_poll follows a failed start
  return rc;
}
int cq_next_poll(ibv_cq_ex* current) { return poll_one(current); }
void cq_end_poll(ibv_cq_ex* current) {
  Cq* c = cq_of(current);
  if (!c->ex_single) c->ex_mu.unlock();
}
ibv_wc_opcode cq_read_opcode(ibv_cq_ex* c) { return cq_of(c)->ex_wc.opcode; }
uint32_t cq_read_vendor_err(ibv_cq_ex* c) { return cq_of(c)->ex_wc.vendor_err; }
uint32_t cq_read_byte_len(ibv_cq_ex* c) { return cq_of(c)->ex_wc.byte_len; }
__be32 cq_read_imm_data(ibv_cq_ex* c) { return cq_of(c)->ex_wc.imm_data; }
uint32_t cq_read_qp_num(ibv_cq_ex* c) { return cq_of(c)->ex_wc.qp_num; }
uint32_t cq_read_src_qp(ibv_cq_ex* c) { return cq_of(c)->ex_wc.src_qp; }
unsigned int cq_read_wc_flags(ibv_cq_ex* c) { return cq_of(c)->ex_wc.wc_flags; }
uint32_t cq_read_slid(ibv_cq_ex* c) { return cq_of(c)->ex_wc.slid; }
uint8_t cq_read_sl(ibv_cq_ex* c) { return cq_of(c)->ex_wc.sl; }
uint8_t cq_read_dlid_path_bits(ibv_cq_ex* c) { return cq_of(c)->ex_wc.dlid_path_bits; }
// Completion timestamps: the engine's clock (CLOCK_MONOTONIC, in ns: hca_core_clock 1 GHz) when
// it made the completion; as wall-clock time, that instant on CLOCK_REALTIME.
uint64_t cq_read_completion_ts(ibv_cq_ex* c) { return cq_of(c)->polled_ts_ns; }
// Tag matching: the tag of the message (0 for one that matched no buffer), as its header had it.
void cq_read_tm_info(ibv_cq_ex* c, ibv_wc_tm_info* info) {
  info->tag = cq_of(c)->polled_tag;
  info->priv = 0;
}
uint64_t cq_read_completion_wallclock_ns(ibv_cq_ex* c) {
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  const auto ns = [](const timespec& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec);
  };
  const uint64_t ago = ns(mono) - std::min(ns(mono), cq_of(c)->polled_ts_ns);
  return ns(real) - ago;
}

constexpr uint64_t kStandardWcFlags = IBV_WC_STANDARD_FLAGS;
constexpr uint64_t kStampWcFlags = uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP} |
                                   uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
constexpr uint64_t kCqWcFlags = kStandardWcFlags | kStampWcFlags | uint64_t{IBV_WC_EX_WITH_TM_INFO};

ibv_cq_ex* op_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr->comp_mask & ~uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD}) {
    errno = EINVAL;
    return nullptr;
  }
  // A parent domain given must be one of this context's (its allocators are not used).
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
      (attr->parent_domain == nullptr || attr->parent_domain->context != context ||
       !is_parent_domain(attr->parent_domain))) {
    errno = EINVAL;
    return nullptr;
  }
  // Overrun-ignoring CQs and timestamps are not supported.
  if (((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
       (attr->flags & ~uint32_t{IBV_CREATE_CQ_ATTR_SINGLE_THREADED})) ||
      (attr->wc_flags & ~kCqWcFlags)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq* cq = ibv_create_cq(context, static_cast<int>(attr->cqe), attr->cq_context,
                             attr->channel, static_cast<int>(attr->comp_vector));
  if (cq == nullptr) return nullptr;
  to_cq(cq)->ex_single = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                         (attr->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
  ibv_cq_ex& x = to_cq(cq)->ex;
  x.comp_mask = 0;
  x.start_poll = cq_start_poll;
  x.next_poll = cq_next_poll;
  x.end_poll = cq_end_poll;
  x.read_opcode = cq_read_opcode;
  x.read_vendor_err = cq_read_vendor_err;
  x.read_byte_len = cq_read_byte_len;
  x.read_imm_data = cq_read_imm_data;
  x.read_qp_num = cq_read_qp_num;
  x.read_src_qp = cq_read_src_qp;
  x.read_wc_flags = cq_read_wc_flags;
  x.read_slid = cq_read_slid;
  x.read_sl = cq_read_sl;
  x.read_dlid_path_bits = cq_read_dlid_path_bits;
  x.read_completion_ts = cq_read_completion_ts;
  x.read_completion_wallclock_ns = cq_read_completion_wallclock_ns;
  x.read_tm_info = cq_read_tm_info;
  return &x;
}

// ---- QP: the ibv_wr_* builder -----------------------------------------------------------------
//
// As rdma-core's providers do, each ibv_wr_<op> writes its WQE in place, into the next free
// slot of the send queue, under the queue's producer lock (held from ibv_wr_start to
// ibv_wr_complete / ibv_wr_abort). ibv_wr_complete checks the batch as ibv_post_send checks
// its WRs and publishes it at once; ibv_wr_abort, or a failed check, leaves the slots
// unpublished: nothing of the batch runs (ibv_wr_post(3)).

struct Builder {
  size_t n = 0;  // WQEs staged in the current batch
  int err = 0;   // the first error of the batch; ibv_wr_complete returns it
  uint64_t send_ops = 0;
};

Qp* qp_of(ibv_qp_ex* q) { return to_qp(&q->qp_base); }
Builder* builder_of(ibv_qp_ex* q) { return static_cast<Builder*>(qp_of(q)->ext); }
Engine& engine_of(ibv_qp_ex* q) { return *runtime_of(q->qp_base.context)->engine; }

/// Starts a new work request of the batch, from the qp_ex's wr_id / wr_flags.
SendWqe* begin_wr(ibv_qp_ex* q, ibv_wr_opcode op) {
  Builder* b = builder_of(q);
  if (b->err != 0) return nullptr;
  if ((b->send_ops & wr_info(op).qp_ex_flag) == 0) {
    b->err = EOPNOTSUPP;  // not announced in send_ops_flags at creation
    return nullptr;
  }
  Qp* qp = qp_of(q);
  SendWqe* w = engine_of(q).stage_wqe(qp, b->n);
  if (w == nullptr) {
    b->err = ENOMEM;  // the batch does not fit in the send queue
    return nullptr;
  }
  ++b->n;
  w->wr_id = q->wr_id;
  w->opcode = op;
  w->send_flags = q->wr_flags;
  w->signaled = qp->sq_sig_all || (q->wr_flags & IBV_SEND_SIGNALED);
  return w;
}

SendWqe* current(ibv_qp_ex* q) {
  Builder* b = builder_of(q);
  if (b->err != 0) return nullptr;
  if (b->n == 0) {
    b->err = EINVAL;  // a setter before any ibv_wr_<op>
    return nullptr;
  }
  return &qp_of(q)->sq.next_slot(b->n - 1);
}

void wr_send(ibv_qp_ex* q) { begin_wr(q, IBV_WR_SEND); }
void wr_send_imm(ibv_qp_ex* q, __be32 imm) {
  if (SendWqe* w = begin_wr(q, IBV_WR_SEND_WITH_IMM)) w->imm_or_inv = imm;
}
void wr_send_inv(ibv_qp_ex* q, uint32_t rkey) {
  if (SendWqe* w = begin_wr(q, IBV_WR_SEND_WITH_INV)) w->imm_or_inv = rkey;
}
void set_remote(SendWqe* w, uint32_t rkey, uint64_t addr) {
  w->rkey = rkey;
  w->remote_addr = addr;
}
void wr_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  if (SendWqe* w = begin_wr(q, IBV_WR_RDMA_WRITE)) set_remote(w, rkey, addr);
}
void wr_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (SendWqe* w = begin_wr(q, IBV_WR_RDMA_WRITE_WITH_IMM)) {
    set_remote(w, rkey, addr);
    w->imm_or_inv = imm;
  }
}
void wr_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  if (SendWqe* w = begin_wr(q, IBV_WR_RDMA_READ)) set_remote(w, rkey, addr);
}
void wr_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare,
                       uint64_t swap) {
  if (SendWqe* w = begin_wr(q, IBV_WR_ATOMIC_CMP_AND_SWP)) {
    set_remote(w, rkey, addr);
    w->compare_add = compare;
    w->swap = swap;
  }
}
void wr_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (SendWqe* w = begin_wr(q, IBV_WR_ATOMIC_FETCH_AND_ADD)) {
    set_remote(w, rkey, addr);
    w->compare_add = add;
  }
}
void wr_atomic_write(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, const void* value) {
  // The 8 bytes to write are the payload, passed by value: carried inline.
  if (SendWqe* w = begin_wr(q, IBV_WR_ATOMIC_WRITE)) {
    set_remote(w, rkey, addr);
    std::memcpy(w->inline_data.data(), value, 8);
    w->length = 8;
    w->is_inline = true;
    w->send_flags |= IBV_SEND_INLINE;
  }
}
void wr_flush(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, size_t len, uint8_t type,
              uint8_t level) {
  SendWqe* w = begin_wr(q, static_cast<ibv_wr_opcode>(UROCE_WR_FLUSH));
  if (w == nullptr) return;
  // A range's length is the RETH's 32-bit DMA length; a whole MR's is not looked at (sent
  // as given, as far as it fits).
  if (level == UROCE_FLUSH_RANGE && len > UINT32_MAX) {
    builder_of(q)->err = EINVAL;
    return;
  }
  set_remote(w, rkey, addr);
  w->flush_len = static_cast<uint32_t>(std::min<size_t>(len, UINT32_MAX));
  w->flush_type = type;
  w->flush_level = level;
}
void wr_local_inv(ibv_qp_ex* q, uint32_t rkey) {
  if (SendWqe* w = begin_wr(q, IBV_WR_LOCAL_INV)) w->imm_or_inv = rkey;
}
void wr_bind_mw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  SendWqe* w = begin_wr(q, IBV_WR_BIND_MW);
  if (w == nullptr) return;
  // Checked now, as ibv_post_send checks it: the WQE keeps keys, not the objects.
  Engine::WrShape s;
  s.opcode = IBV_WR_BIND_MW;
  s.bind_mw = mw;
  s.bind_mr = info != nullptr ? info->mr : nullptr;
  if (int e = engine_of(q).check_wr(qp_of(q), s); e != 0) {
    builder_of(q)->err = e;
    return;
  }
  w->bind = {mw->rkey, rkey, info->mr->lkey, info->addr, info->length,
             static_cast<int>(info->mw_access_flags), false};
}
void wr_unsupported_tso(ibv_qp_ex* q, void*, uint16_t, uint16_t) {
  builder_of(q)->err = EOPNOTSUPP;
}
void wr_set_ud_addr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  if (SendWqe* w = current(q)) {
    w->ah = ah != nullptr ? to_ah(ah) : nullptr;
    w->remote_qpn = remote_qpn;
    w->remote_qkey = remote_qkey;  // the high bit is resolved when sent
  }
}
/// The WQE's data: `n` pieces, copied in when it is sent inline (IBV_SEND_INLINE where the
/// opcode allows it, as ibv_post_send does), else gathered from the SGEs when it is sent.
void set_data(ibv_qp_ex* q, SendWqe* w, size_t n, const ibv_sge* list) {
  Builder* b = builder_of(q);
  if (n > kMaxSge) {
    b->err = EINVAL;
    return;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += list[i].length;
  if (total > (1ull << 31)) {
    b->err = EINVAL;
    return;
  }
  w->length = static_cast<uint32_t>(total);
  w->is_inline = (w->send_flags & IBV_SEND_INLINE) != 0 && w->info().inline_ok;
  if (w->is_inline) {
    if (total > kMaxInline) {
      b->err = EINVAL;  // more than max_inline_data can be
      return;
    }
    uint32_t off = 0;
    for (size_t i = 0; i < n; ++i) {
      if (list[i].length == 0) continue;  // its address may be null
      std::memcpy(w->inline_data.data() + off, reinterpret_cast<const void*>(list[i].addr),
                  list[i].length);
      off += list[i].length;
    }
    w->num_sge = 0;
    return;
  }
  for (size_t i = 0; i < n; ++i) w->sge[i] = {list[i].addr, list[i].length, list[i].lkey};
  w->num_sge = static_cast<uint32_t>(n);
}
void wr_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  if (SendWqe* w = current(q)) set_data(q, w, 1, &sge);
}
void wr_set_sge_list(ibv_qp_ex* q, size_t num_sge, const ibv_sge* list) {
  if (SendWqe* w = current(q)) set_data(q, w, num_sge, list);
}
void wr_set_inline_data_list(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* bufs) {
  SendWqe* w = current(q);
  if (w == nullptr) return;
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += bufs[i].length;
  if (total > kMaxInline) {
    builder_of(q)->err = EINVAL;  // more than max_inline_data
    return;
  }
  size_t off = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (bufs[i].length > 0) std::memcpy(w->inline_data.data() + off, bufs[i].addr, bufs[i].length);
    off += bufs[i].length;
  }
  w->length = static_cast<uint32_t>(total);
  w->num_sge = 0;
  w->is_inline = w->info().inline_ok;
  w->send_flags |= IBV_SEND_INLINE;
}
void wr_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) {
  const ibv_data_buf b{addr, length};
  wr_set_inline_data_list(q, 1, &b);
}
void wr_set_xrc_srqn(ibv_qp_ex* q, uint32_t remote_srqn) {
  if (SendWqe* w = current(q)) w->xrc_srqn = remote_srqn & 0xFFFFFF;
}

void wr_start(ibv_qp_ex* q) {
  Builder* b = builder_of(q);
  qp_of(q)->sq_mu.lock();  // the send queue's producer lock, until complete or abort
  b->n = 0;
  b->err = 0;
}
int wr_complete(ibv_qp_ex* q) {
  Builder* b = builder_of(q);
  Qp* qp = qp_of(q);
  Runtime* rt = runtime_of(q->qp_base.context);
  int rc = b->err;
  if (rc == 0 && b->n > 0) {
    app_posted(rt);
    rc = rt->engine->commit_wqes(qp, b->n);
  }
  const bool posted = rc == 0 && b->n > 0;
  b->n = 0;
  b->err = 0;
  qp->sq_mu.unlock();
  if (posted) send_posted(rt);  // as ibv_post_send does, without the queue's lock
  return rc;
}
void wr_abort(ibv_qp_ex* q) {
  Builder* b = builder_of(q);
  b->n = 0;  // the staged slots stay unpublished
  b->err = 0;
  qp_of(q)->sq_mu.unlock();
}

constexpr uint64_t kSendOps = wr_qp_ex_flags();

ibv_qp* op_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                              IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                              IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
                              IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  // An XRC target is made through its domain (no PD); every other QP needs a PD.
  const bool tgt = attr->qp_type == IBV_QPT_XRC_RECV;
  if ((attr->comp_mask & ~kKnown) ||
      (tgt ? !(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || attr->xrcd == nullptr ||
                 attr->xrcd->context != context
           : !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr ||
                 attr->pd->context != context)) {
    errno = EINVAL;
    return nullptr;
  }
  const bool with_ops = !tgt && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
  // Of the creation flags, only "no multicast loopback to myself" (raw-packet and UD QPs): a
  // UD QP's multicast never loops back here anyway, a raw QP's does unless it says so.
  const uint32_t flags =
      (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? attr->create_flags : 0;
  const bool block_self_lb = (flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) != 0 &&
                             (attr->qp_type == IBV_QPT_RAW_PACKET || attr->qp_type == IBV_QPT_UD);
  // RSS: a table and a hash, both or neither.
  constexpr uint32_t kRss = IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
  if ((attr->comp_mask & kRss) != 0) {
    if ((attr->comp_mask & kRss) != kRss || with_ops) {
      errno = EINVAL;
      return nullptr;
    }
    if ((flags & ~uint32_t{IBV_QP_CREATE_BLOCK_SELF_MCAST_LB}) == 0)
      return create_rss_qp_in(context, attr);  // (receive-only: nothing of its own loops back)
  }
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) ||
      (flags & ~(block_self_lb ? static_cast<uint32_t>(IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) : 0u)) ||
      (with_ops && (attr->send_ops_flags & ~kSendOps))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  ibv_qp* qp = create_qp_in(context, tgt ? nullptr : attr->pd, &a,
                            tgt ? reinterpret_cast<Xrcd*>(attr->xrcd) : nullptr);
  if (qp == nullptr) return nullptr;
  attr->cap = a.cap;
  to_qp(qp)->block_self_lb = block_self_lb;  // read by the engine only once the QP sends
  if (with_ops) {
    auto* b = new (std::nothrow) Builder;
    if (b == nullptr) {
      ibv_destroy_qp(qp);
      errno = ENOMEM;
      return nullptr;
    }
    b->send_ops = attr->send_ops_flags;
    Qp* q = to_qp(qp);
    q->ext = b;
    ibv_qp_ex& x = q->ex;
    x.comp_mask = 0;
    x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x.wr_atomic_fetch_add = wr_atomic_fetch_add;
    x.wr_bind_mw = wr_bind_mw;
    x.wr_local_inv = wr_local_inv;
    x.wr_rdma_read = wr_rdma_read;
    x.wr_rdma_write = wr_rdma_write;
    x.wr_rdma_write_imm = wr_rdma_write_imm;
    x.wr_send = wr_send;
    x.wr_send_imm = wr_send_imm;
    x.wr_send_inv = wr_send_inv;
    x.wr_send_tso = wr_unsupported_tso;
    x.wr_set_ud_addr = wr_set_ud_addr;
    x.wr_set_xrc_srqn = wr_set_xrc_srqn;
    x.wr_set_inline_data = wr_set_inline_data;
    x.wr_set_inline_data_list = wr_set_inline_data_list;
    x.wr_set_sge = wr_set_sge;
    x.wr_set_sge_list = wr_set_sge_list;
    x.wr_start = wr_start;
    x.wr_complete = wr_complete;
    x.wr_abort = wr_abort;
    x.wr_atomic_write = wr_atomic_write;
    *uroce_wr_flush_slot(&x) = wr_flush;  // rdma-core 45's layout (uroce/verbs_compat.h)
  }
  return qp;
}

}  // namespace

namespace uroce::verbs {
void install_ext_ops(Context* ctx) {
  ctx->vctx.create_cq_ex = op_create_cq_ex;
  ctx->vctx.create_qp_ex = op_create_qp_ex;
  install_xrc_ops(ctx);
}
void free_qp_ext(void* ext) { delete static_cast<Builder*>(ext); }
}  // namespace uroce::verbs

extern "C" {

ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  Qp* q = to_qp(qp);
  if (q->ext == nullptr) {  // created without send_ops_flags: no ibv_wr_* API (as rdma-core)
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return &q->ex;
}

}  // extern "C"

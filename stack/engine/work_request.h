// Facts about work-request opcodes (ibv_wr_opcode) in one table, as stack/wire/opcode.h keeps
// them for BTH opcodes: which QP types may post one, what the requester and the responder do
// with it, which completion it ends in, the ibv_qp_ex flag that announces it and the BTH
// opcodes that carry it. Posting checks, the requester, the completer, the ibv_wr_* builder,
// the verbs trace and uroce-replay all read it (STYLE.md 14): a fact written once cannot
// disagree with itself.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "uroce/verbs_compat.h"
#include "wire/opcode.h"

namespace uroce {

enum class WrKind : uint8_t {
  kUnsupported,  // TSO, DRIVER1 and the gaps: ibv_post_send answers EINVAL
  kSend,
  kWrite,
  kRead,
  kAtomic,       // compare-and-swap, fetch-and-add: the old value comes back
  kAtomicWrite,  // 8 bytes written at once, acknowledged like a WRITE
  kFlush,        // earlier WRITEs to a range made visible or durable there; carries no data
  kLocal,        // carried out by the requester in order, sends nothing, takes no PSN
};

/// The QP types that may post a work request, one bit each.
enum WrQpTypes : uint8_t {
  kWrOnRc = 1u << 0,
  kWrOnUc = 1u << 1,
  kWrOnUd = 1u << 2,
  kWrOnXrc = 1u << 3,  // XRC_SEND (an XRC_RECV target posts nothing)
  kWrOnRaw = 1u << 4,  // RAW_PACKET: a SEND whose bytes are the whole frame
};

struct WrOpInfo {
  const char* name;  // as in IBV_WR_<name>; the verbs trace and uroce-replay print it
  WrKind kind = WrKind::kUnsupported;
  uint8_t qp_types = 0;
  // The responder answers from one of its READ/atomic resources: max_rd_atomic bounds how
  // many are in flight, a fence waits for them; a READ's and an atomic's answer is written
  // into the local SGEs (which need LOCAL_WRITE).
  bool rd_atomic = false;
  // One request packet whatever the length (a READ request, the atomics).
  bool one_packet = false;
  // One PSN (the atomics); otherwise one per path MTU of data (a READ: its response packets).
  bool one_psn = false;
  bool inline_ok = false;     // IBV_SEND_INLINE may carry its data
  uint32_t fixed_length = 0;  // the only length it may have (the atomics: 8), 0 = any
  // A LOCAL_INV waits until everything posted before it has completed (work posted earlier
  // may still use the key), as rxe's does.
  bool waits_for_all_before = false;
  ibv_wc_opcode wc_opcode = IBV_WC_SEND;
  uint64_t qp_ex_flag = 0;  // IBV_QP_EX_WITH_*: ibv_wr_<op> needs it in send_ops_flags
  // BTH opcodes in RC numbering (opcode_base() adds UC's and XRC's transport bits): the
  // packet of a one-packet message, and the first/middle/last of a longer one (all equal to
  // `only` for a one_packet request).
  uint8_t bth_only = 0, bth_first = 0, bth_middle = 0, bth_last = 0;
};

namespace detail {

constexpr WrOpInfo data_op(const char* name, WrKind kind, uint8_t types, ibv_wc_opcode wc,
                           uint64_t flag, uint8_t only, uint8_t first, uint8_t middle,
                           uint8_t last) {
  WrOpInfo i{name};
  i.kind = kind;
  i.qp_types = types;
  i.inline_ok = true;
  i.wc_opcode = wc;
  i.qp_ex_flag = flag;
  i.bth_only = only;
  i.bth_first = first;
  i.bth_middle = middle;
  i.bth_last = last;
  return i;
}

constexpr WrOpInfo request_op(const char* name, WrKind kind, uint8_t types, ibv_wc_opcode wc,
                              uint64_t flag, uint8_t bth) {
  WrOpInfo i{name};
  i.kind = kind;
  i.qp_types = types;
  // ATOMIC WRITE and FLUSH too: their answer is a READ RESPONSE without data (IBA 1.5 oA19;
  // rxe's, from one of the responder's resources, replayed for a duplicate as a READ's is).
  i.rd_atomic = true;
  i.one_packet = true;
  i.one_psn = kind != WrKind::kRead;
  i.inline_ok = kind == WrKind::kAtomicWrite;  // ibv_wr_atomic_write passes its 8 bytes by value
  i.fixed_length = kind == WrKind::kRead || kind == WrKind::kFlush ? 0 : 8;
  i.wc_opcode = wc;
  i.qp_ex_flag = flag;
  i.bth_only = i.bth_first = i.bth_middle = i.bth_last = bth;
  return i;
}

constexpr WrOpInfo local_op(const char* name, ibv_wc_opcode wc, uint64_t flag, bool wait_all) {
  WrOpInfo i{name};
  i.kind = WrKind::kLocal;
  i.qp_types = kWrOnRc | kWrOnUc | kWrOnXrc;  // windows and keys serve RC and UC peers
  i.waits_for_all_before = wait_all;
  i.wc_opcode = wc;
  i.qp_ex_flag = flag;
  return i;
}

constexpr std::array<WrOpInfo, 16> make_wr_table() {
  namespace op = wire::opcode;
  constexpr uint8_t kAll = kWrOnRc | kWrOnUc | kWrOnUd | kWrOnXrc;
  constexpr uint8_t kConnected = kWrOnRc | kWrOnUc | kWrOnXrc;
  constexpr uint8_t kReliable = kWrOnRc | kWrOnXrc;
  std::array<WrOpInfo, 16> t{};
  for (WrOpInfo& i : t) i.name = "OTHER";
  t[IBV_WR_TSO].name = "TSO";
  t[IBV_WR_DRIVER1].name = "DRIVER1";
  t[IBV_WR_SEND] = data_op("SEND", WrKind::kSend, kAll | kWrOnRaw, IBV_WC_SEND, IBV_QP_EX_WITH_SEND,
                           op::kRcSendOnly, op::kRcSendFirst, op::kRcSendMiddle, op::kRcSendLast);
  t[IBV_WR_SEND_WITH_IMM] =
      data_op("SEND_WITH_IMM", WrKind::kSend, kAll, IBV_WC_SEND, IBV_QP_EX_WITH_SEND_WITH_IMM,
              op::kRcSendOnlyImm, op::kRcSendFirst, op::kRcSendMiddle, op::kRcSendLastImm);
  t[IBV_WR_SEND_WITH_INV] =
      data_op("SEND_WITH_INV", WrKind::kSend, kReliable, IBV_WC_SEND,
              IBV_QP_EX_WITH_SEND_WITH_INV, op::kRcSendOnlyInv, op::kRcSendFirst,
              op::kRcSendMiddle, op::kRcSendLastInv);
  t[IBV_WR_RDMA_WRITE] =
      data_op("RDMA_WRITE", WrKind::kWrite, kConnected, IBV_WC_RDMA_WRITE,
              IBV_QP_EX_WITH_RDMA_WRITE, op::kRcWriteOnly, op::kRcWriteFirst,
              op::kRcWriteMiddle, op::kRcWriteLast);
  t[IBV_WR_RDMA_WRITE_WITH_IMM] =
      data_op("RDMA_WRITE_WITH_IMM", WrKind::kWrite, kConnected, IBV_WC_RDMA_WRITE,
              IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, op::kRcWriteOnlyImm, op::kRcWriteFirst,
              op::kRcWriteMiddle, op::kRcWriteLastImm);
  t[IBV_WR_RDMA_READ] = request_op("RDMA_READ", WrKind::kRead, kReliable, IBV_WC_RDMA_READ,
                                   IBV_QP_EX_WITH_RDMA_READ, op::kRcReadRequest);
  t[IBV_WR_ATOMIC_CMP_AND_SWP] =
      request_op("ATOMIC_CMP_AND_SWP", WrKind::kAtomic, kReliable, IBV_WC_COMP_SWAP,
                 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, op::kRcCompareSwap);
  t[IBV_WR_ATOMIC_FETCH_AND_ADD] =
      request_op("ATOMIC_FETCH_AND_ADD", WrKind::kAtomic, kReliable, IBV_WC_FETCH_ADD,
                 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, op::kRcFetchAdd);
  // XRC has no ATOMIC WRITE opcode.
  t[IBV_WR_ATOMIC_WRITE] =
      request_op("ATOMIC_WRITE", WrKind::kAtomicWrite, kWrOnRc, IBV_WC_ATOMIC_WRITE,
                 IBV_QP_EX_WITH_ATOMIC_WRITE, op::kRcAtomicWrite);
  // FLUSH (rdma-core 45's ibv_wr_flush; uroce/verbs_compat.h): RC only, as the opcode.
  t[UROCE_WR_FLUSH] =
      request_op("FLUSH", WrKind::kFlush, kWrOnRc, static_cast<ibv_wc_opcode>(UROCE_WC_FLUSH),
                 UROCE_QP_EX_WITH_FLUSH, op::kRcFlush);
  t[IBV_WR_BIND_MW] = local_op("BIND_MW", IBV_WC_BIND_MW, IBV_QP_EX_WITH_BIND_MW, false);
  t[IBV_WR_LOCAL_INV] = local_op("LOCAL_INV", IBV_WC_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV, true);
  return t;
}

}  // namespace detail

inline constexpr std::array<WrOpInfo, 16> kWrTable = detail::make_wr_table();

/// The facts about `op`; an opcode past the table is unsupported.
constexpr const WrOpInfo& wr_info(int op) {
  return op >= 0 && static_cast<size_t>(op) < kWrTable.size() ? kWrTable[static_cast<size_t>(op)]
                                                              : kWrTable[IBV_WR_DRIVER1];
}

constexpr uint8_t wr_qp_type_bit(ibv_qp_type t) {
  switch (t) {
    case IBV_QPT_RC: return kWrOnRc;
    case IBV_QPT_UC: return kWrOnUc;
    case IBV_QPT_UD: return kWrOnUd;
    case IBV_QPT_XRC_SEND: return kWrOnXrc;
    case IBV_QPT_RAW_PACKET: return kWrOnRaw;
    default: return 0;  // XRC_RECV: posts nothing
  }
}

/// Whether ibv_post_send takes `op` on a QP of type `t`.
constexpr bool wr_allowed(ibv_qp_type t, int op) {
  const WrOpInfo& i = wr_info(op);
  return i.kind != WrKind::kUnsupported && (i.qp_types & wr_qp_type_bit(t)) != 0;
}

/// The IBV_QP_EX_WITH_* flags of every supported opcode: what ibv_create_qp_ex accepts in
/// send_ops_flags.
constexpr uint64_t wr_qp_ex_flags() {
  uint64_t f = 0;
  for (const WrOpInfo& i : kWrTable)
    if (i.kind != WrKind::kUnsupported) f |= i.qp_ex_flag;
  return f;
}

/// The work request a BTH request opcode (any transport) carries out, or -1 (a response, an
/// ACK, a CNP). A FIRST or MIDDLE packet says SEND or RDMA_WRITE: only the LAST packet tells
/// the _WITH_IMM / _WITH_INV variants apart.
constexpr int wr_for_bth(uint8_t bth) {
  const uint8_t low = bth & 0x1F;
  for (size_t op = 0; op < kWrTable.size(); ++op) {
    const WrOpInfo& i = kWrTable[op];
    if (i.kind == WrKind::kUnsupported || i.kind == WrKind::kLocal) continue;
    if (low == i.bth_only || low == i.bth_last) return static_cast<int>(op);
  }
  for (size_t op = 0; op < kWrTable.size(); ++op) {
    const WrOpInfo& i = kWrTable[op];
    if ((i.kind == WrKind::kSend || i.kind == WrKind::kWrite) &&
        (low == i.bth_first || low == i.bth_middle))
      return static_cast<int>(op);
  }
  return -1;
}

// The table agrees with itself and with the wire's opcode table.
static_assert(kWrTable[IBV_WR_ATOMIC_WRITE].kind == WrKind::kAtomicWrite);
static_assert(wr_info(IBV_WR_TSO).kind == WrKind::kUnsupported && !wr_allowed(IBV_QPT_RC, 12));
static_assert(wr_allowed(IBV_QPT_UD, IBV_WR_SEND) && !wr_allowed(IBV_QPT_UD, IBV_WR_RDMA_WRITE));
static_assert(!wr_allowed(IBV_QPT_XRC_RECV, IBV_WR_SEND));
static_assert(!wr_allowed(IBV_QPT_XRC_SEND, IBV_WR_ATOMIC_WRITE));
static_assert(kWrTable[UROCE_WR_FLUSH].kind == WrKind::kFlush &&
              wr_for_bth(wire::opcode::kRcFlush) == UROCE_WR_FLUSH);
static_assert(wr_for_bth(wire::opcode::kRcSendLastInv) == IBV_WR_SEND_WITH_INV);
static_assert(wr_for_bth(0x20 | wire::opcode::kRcWriteMiddle) == IBV_WR_RDMA_WRITE);
static_assert(wr_for_bth(wire::opcode::kRcAck) == -1);
constexpr bool wr_table_consistent() {
  uint64_t flags = 0;
  for (const WrOpInfo& i : kWrTable) {
    if (i.kind == WrKind::kUnsupported) {
      if (i.qp_types != 0 || i.qp_ex_flag != 0) return false;
      continue;
    }
    if ((flags & i.qp_ex_flag) != 0 || i.qp_ex_flag == 0) return false;  // one flag each
    flags |= i.qp_ex_flag;
    // READs and atomics take responder resources, need a reliable QP, go in one packet.
    if (i.rd_atomic && (!i.one_packet || (i.qp_types & (kWrOnUc | kWrOnUd)) != 0)) return false;
    if ((i.fixed_length != 0) != (i.kind == WrKind::kAtomic || i.kind == WrKind::kAtomicWrite))
      return false;
    if (i.kind == WrKind::kLocal) {
      if (i.bth_only != 0 || i.inline_ok || (i.qp_types & kWrOnUd) != 0) return false;
      continue;
    }
    // Every packet it sends is a request the wire table knows, with a payload or a RETH as
    // the kind says.
    const uint8_t bth[] = {i.bth_only, i.bth_first, i.bth_middle, i.bth_last};
    for (uint8_t b : bth) {
      const wire::OpcodeInfo& w = wire::kOpcodeTable[b];
      if (!w.valid || !w.is_request()) return false;
    }
    if (!i.one_packet) {  // each at its place in a message
      using wire::Position;
      const Position want[] = {Position::kOnly, Position::kFirst, Position::kMiddle,
                               Position::kLast};
      for (size_t k = 0; k < 4; ++k)
        if (wire::kOpcodeTable[bth[k]].pos != want[k]) return false;
    }
    if ((i.kind == WrKind::kWrite || i.kind == WrKind::kRead) &&
        !wire::kOpcodeTable[i.bth_only].has(wire::Ext::kReth))
      return false;
  }
  return true;
}
static_assert(wr_table_consistent());

}  // namespace uroce

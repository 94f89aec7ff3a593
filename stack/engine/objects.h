// The verbs objects the engine keeps: completion queues, shared receive queues, address
// handles and queue pairs with all their transport state. Everything is sized when the
// object is created; nothing here allocates afterwards.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/dcqcn.h"
#include "engine/timer_wheel.h"
#include "engine/work_request.h"
#include "memory/mr.h"
#include "util/ring.h"
#include "wire/addr.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace uroce {

using wire::Psn;

inline constexpr uint32_t kMaxSge = 16;
inline constexpr uint32_t kMaxInline = 256;
/// ibv_wc.sl of a UD receive completion: the packet type, as the mlx5 provider reports it on
/// RoCE (bit 3: a UDP header, RoCEv2; bits 2:0: 1 IPv6, 2 IPv4). See Engine::complete_recv.
inline constexpr uint8_t kWcSlRoceV2Ipv6 = 0x9;
inline constexpr uint8_t kWcSlRoceV2Ipv4 = 0xA;
// READs/atomics in flight per QP and direction, as rdma_rxe (max_qp_rd_atom 128). perftest
// sets max_rd_atomic to the *peer's* advertised value, so a smaller limit here would make
// ib_read_bw against the kernel fail with "Failed to modify QP to RTS".
inline constexpr uint8_t kMaxRdAtomic = 128;
// Smallest congestion window (packets) after a retransmission timeout.
inline constexpr uint32_t kMinCwnd = 8;

/// A completion queue: a ring of finished work completions.
struct Cq {
  // First: the ibv_cq* in verbs structures converts back to the Cq. ibv_cq_ex begins with
  // the same members as ibv_cq (that is how ibv_cq_ex_to_cq works), so one object serves
  // both APIs; the extended poll functions live in `ex` (set by the verbs provider).
  union {
    ibv_cq_ex ex{};
    ibv_cq ibv;
  };
  uint32_t handle = 0;
  // Completions: the engine produces (under the engine lock), pollers consume under `mu`
  // (see util/ring.h), so ibv_poll_cq never waits for the engine. Each with the engine's
  // time when it was made (the completion timestamp, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP).
  struct Entry {
    ibv_wc wc;
    uint64_t ts_ns;
    uint64_t tag;  // tag matching's (IBV_WC_EX_WITH_TM_INFO), 0 otherwise
  };
  Ring<Entry> ring;
  uint64_t polled_ts_ns = 0;  // the last polled completion's time (under `mu`)
  uint64_t polled_tag = 0;    // ...and its tag (tag matching)
  std::mutex mu;            // serialises the consumers (threads polling this CQ)
  bool overflowed = false;  // a completion was lost: the CQ is in error (IBA 11.4.2.1)
  uint32_t users = 0;       // QPs attached
  std::atomic<uint64_t> notify_gen{0};  // bumped when a completion lands (completion channels)
  // Completion-channel arming and event counts, kept here for the verbs provider (the engine
  // ignores them): under the provider's notification lock (notify_armed is atomic so that
  // ibv_poll_cq may also look without it: an armed CQ's program is about to sleep).
  std::atomic<bool> notify_armed{false};
  uint64_t notify_seen = 0;
  // Events about this CQ the application has read (ibv_get_cq_event / ibv_get_async_event),
  // under ibv.mutex: ibv_destroy_cq waits until as many are acknowledged.
  uint32_t comp_events_read = 0;
  uint32_t async_events_read = 0;
  ibv_wc ex_wc{};  // the completion ibv_start_poll/ibv_next_poll is looking at (provider)
  std::mutex ex_mu;          // held from ibv_start_poll to ibv_end_poll (provider)
  bool ex_single = false;    // IBV_CREATE_CQ_ATTR_SINGLE_THREADED: no ex_mu
};

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sge{};
};

/// An XRC domain (ibv_open_xrcd): the XRC SRQs and target QPs that belong together. A target
/// QP delivers a message into any SRQ of its domain, named by the packet's XRCETH.
struct Xrcd {
  ibv_xrcd ibv{};  // first, as in Cq
  uint32_t handle = 0;
  uint32_t users = 0;  // its SRQs and target QPs
};

struct Srq {
  ibv_srq ibv{};  // first, as in Cq
  uint32_t handle = 0;  // an XRC SRQ's number (ibv_get_srq_num) too: below 2^24
  mem::Pd* pd = nullptr;
  Xrcd* xrcd = nullptr;  // XRC SRQs: their domain...
  Cq* cq = nullptr;      // ...and the CQ their receives complete on (a QP's otherwise)
  // Posted receives: application threads produce under `mu`, the engine consumes.
  Ring<RecvWqe> ring;
  std::mutex mu;
  uint32_t async_events_read = 0;  // provider: async events read (under ibv.mutex)
  uint32_t max_sge = 0;
  uint32_t limit = 0;  // armed SRQ limit (0 = not armed)
  uint32_t users = 0;
  // Tag matching (IBV_SRQT_TM, tag_matching.cc): the tagged buffers ibv_post_srq_ops added,
  // matched in the order they were added; `ring` above takes what matches none.
  struct TagList {
    struct Entry {
      bool used = false;
      uint32_t gen = 0;  // bumped when the buffer is consumed or deleted: stale handles fail
      uint64_t seq = 0;  // when it was added: the oldest match wins
      uint64_t tag = 0, mask = 0;
      RecvWqe wqe;  // recv_wr_id and the buffers
    };
    std::vector<Entry> entries;  // max_num_tags; handle = gen << 8 | (index + 1)
    uint64_t next_seq = 0;
    uint32_t unexpected = 0;  // messages that matched no tag (the device's count)
    uint32_t synced = 0;      // the count software last synchronised with (IBV_WR_TAG_SYNC)
  };
  std::unique_ptr<TagList> tm;
};

/// Where packets for a peer go: addresses and the header fields a path fixes.
struct Path {
  wire::MacAddr dmac{};
  wire::Gid sgid{};
  wire::Gid dgid{};
  bool ipv6 = false;  // dgid is not IPv4-mapped
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0;
  uint8_t sl = 0;
};

/// An address handle (UD destinations). `ibv` comes first so that the ibv_ah* a verbs
/// program puts in a work request converts back to the Ah.
struct Ah {
  ibv_ah ibv{};
  mem::Pd* pd = nullptr;
  ibv_ah_attr attr{};
  Path path;
};

/// Bytes of a path MTU enum (IBV_MTU_1024 -> 1024).
constexpr uint32_t mtu_bytes(ibv_mtu m) { return 128u << static_cast<unsigned>(m); }

/// The errno for an address vector (create_ah, modify_qp with IBV_QP_AV): EINVAL for one that
/// can never be valid (no such port or source GID, no GRH: RoCE addresses by GID), otherwise
/// EHOSTUNREACH when the destination could not be resolved to a neighbour.
inline int av_errno(const ibv_ah_attr& ah, size_t gid_count, bool resolved) {
  if (ah.port_num != 1 || !ah.is_global || ah.grh.sgid_index >= gid_count) return EINVAL;
  return resolved ? 0 : EHOSTUNREACH;
}

enum class WqeState : uint8_t {
  kPosted,   // no PSN assigned yet
  kSending,  // PSNs assigned, packets [0, sent) transmitted in the current attempt
  kSent,     // every packet transmitted; waiting for the ACK / response
  kDone,     // acknowledged (or failed): will complete in order
};

struct SendWqe {
  // What the application asked for.
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  unsigned send_flags = 0;
  uint32_t imm_or_inv = 0;  // imm_data (as posted, network order) or invalidate_rkey
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  Ah* ah = nullptr;  // UD
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint32_t xrc_srqn = 0;  // XRC: the SRQ its messages go to, in the target's domain
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sge{};
  uint32_t length = 0;  // total bytes
  bool is_inline = false;
  std::array<uint8_t, kMaxInline> inline_data{};
  mem::BindRequest bind{};  // IBV_WR_BIND_MW (ibv_bind_mw posts one too)
  // FLUSH: the range's length (the RETH's DMA length), placement type, selectivity level.
  uint32_t flush_len = 0;
  uint8_t flush_type = 0, flush_level = 0;

  // Progress.
  WqeState state = WqeState::kPosted;
  Psn first_psn;
  uint32_t npkts = 0;       // PSNs this WQE uses (READ: response packets)
  uint32_t sent = 0;        // packets sent in the current attempt (READ: 1 when sent)
  uint32_t read_done = 0;   // READ: response packets received so far
  ibv_wc_status status = IBV_WC_SUCCESS;
  bool signaled = false;
  // Work the device posts itself for tag matching's rendezvous (tag_matching.cc): the READ
  // of the sender's data and the FIN after it. No completion of their own: when done, the
  // tagged buffer's (recv_wr_id, tag) completes on the SRQ's CQ.
  enum class Internal : uint8_t { kNone, kRndvRead, kRndvFin };
  Internal internal = Internal::kNone;
  uint64_t tm_wr_id = 0, tm_tag = 0;

  /// The facts about its opcode (engine/work_request.h).
  const WrOpInfo& info() const { return wr_info(opcode); }
  /// A READ or an atomic that the responder answers from its resources (max_rd_atomic).
  bool uses_rd_atomic() const { return info().rd_atomic; }
  Psn last_psn() const { return first_psn + static_cast<int32_t>(npkts) - 1; }
  /// Carried out by the requester when it reaches it; sends nothing, takes no PSN.
  bool is_local() const { return info().kind == WrKind::kLocal; }
};

/// A READ or ATOMIC the responder accepted: kept so that a duplicate can be answered from it,
/// and (READ) the response stream still being sent.
struct RdAtomicRes {
  bool valid = false;
  bool atomic = false;
  Psn first_psn;
  uint32_t npkts = 0;
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint64_t atomic_orig = 0;
  // Response stream: packets [next, npkts) still to send (READ); atomic ack pending.
  uint32_t next = 0;
  bool sending = false;
  // The stream is an answer to a duplicate request, not the first answer: the requester has
  // had this response before, so a new request may take the slot (see claim_res).
  bool replay = false;
  // The PD its R_Key is checked in: the QP's, or on an XRC target the SRQ's its request named.
  mem::Pd* pd = nullptr;
};

/// XRC QPs are RC connections: a sender (initiator, XRC_SEND) and a receiver (target,
/// XRC_RECV) that delivers into its domain's SRQs.
constexpr bool is_xrc(ibv_qp_type t) { return t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV; }
/// Acknowledged, retransmitted, PSN-checked: RC and both XRC ends.
constexpr bool is_reliable(ibv_qp_type t) { return t == IBV_QPT_RC || is_xrc(t); }
/// The transport bits of a QP's opcodes: RC 0x00, UC 0x20, XRC 0xA0 (UD's are built apart).
constexpr uint8_t opcode_base(ibv_qp_type t) {
  return t == IBV_QPT_UC ? 0x20 : is_xrc(t) ? 0xA0 : 0x00;
}

enum TimerKind : uint8_t {
  kTimerRetransmit,
  kTimerRnr,
  kTimerNeighbor,
  kTimerPace,     // a rate-limited QP may send again (congestion.cc)
  kTimerCcAlpha,  // DCQCN's alpha update
  kTimerCcRate,   // DCQCN's rate-increase timer
};

/// The roles whose state machines the verbs trace shows (VerbsEvent::kRoleState).
enum class Role : uint8_t { kRequester, kCompleter, kResponder };

/// The requester (requester.cc): turns send WQEs into packets.
struct Requester {
  enum class State : uint8_t {
    kReady,         // sends what the window, the fences and the pacer let it
    kRetryPending,  // the completer rewound it to retry_psn; the re-sent packet is not out yet
    kRnrWait,       // the peer said RNR: nothing leaves until rnr_timer fires, then a retry
  };
  static constexpr const char* kStateNames[] = {"ready", "retry-pending", "rnr-wait"};
  State state = State::kReady;
  uint64_t cursor = 0;        // absolute index of the WQE being sent next
  uint64_t assigned_end = 0;  // absolute index after the last WQE with PSNs assigned
  Psn psn;                    // next PSN to assign
  uint32_t rd_atomic_outstanding = 0;
  uint32_t pkts_since_ackreq = 0;
  Psn max_sent_psn;  // highest PSN transmitted (to count retransmissions)
  bool sent_any = false;
  Psn retry_psn;     // where the last rewind went back to
  Timer rnr_timer;
  bool drained_notified = false;  // IBV_EVENT_SQ_DRAINED raised for this SQD
};

/// The completer (completer.cc): ACKs, NAKs and responses; retries and the ACK timer.
struct Completer {
  enum class State : uint8_t {
    kAcking,  // takes every ACK and response in PSN order
    kGap,     // a READ response was lost: the ones after it are ignored until resp_gap_psn's
  };
  static constexpr const char* kStateNames[] = {"acking", "gap"};
  // Go-back-N rounds since the last forward progress. retry_cnt bounds the rounds a timeout
  // starts; a gap or NAK starts one at once when none is under way, and while one is, one
  // more per timeout period (retry_on_gap).
  enum class Round : uint8_t { kNone, kStarted, kExtraUsed };
  State state = State::kAcking;
  Round round = Round::kNone;
  Psn psn;  // oldest PSN not yet acknowledged
  Psn resp_gap_psn;
  uint8_t retry_left = 7;
  uint8_t rnr_retry_left = 7;
  // Congestion window, in packets past psn that may be on the wire (RC). It is the
  // configured tx_window on a clean path; a retransmission timeout cuts it to kMinCwnd and a
  // PSN sequence NAK halves it, then every newly acknowledged packet adds one (slow start)
  // until it is back at tx_window. Without it a go-back-N re-sends the whole window at once
  // into a receiver that is already behind (seen against rdma_rxe under emulation: the
  // re-sends queued behind stale ones until the retry count ran out). The requester reads it.
  uint32_t cwnd = 0;
  Timer retransmit_timer;
};

/// The responder (responder.cc): executes requests, answers READs and atomics, ACKs.
struct Responder {
  enum class State : uint8_t {
    kIdle,     // between messages: a FIRST or ONLY packet may come
    kInSend,   // inside a multi-packet SEND: its MIDDLE and LAST packets may come
    kInWrite,  // inside a multi-packet RDMA WRITE
  };
  static constexpr const char* kStateNames[] = {"idle", "in-send", "in-write"};
  State state = State::kIdle;
  Psn epsn;          // next PSN expected
  uint32_t msn = 0;  // messages completed (24 bits on the wire)
  // A PSN sequence NAK went out for the gap before epsn: one per gap (IBA 9.7.5.2.2).
  bool seq_nak_sent = false;
  // A receive WQE is taken for the message being received (a SEND, or a WRITE with
  // immediate at its last packet that must find the same WQE when it is re-sent).
  bool have_rwqe = false;
  RecvWqe rwqe;
  uint32_t rwqe_offset = 0;
  // RDMA WRITE in progress: its R_Key and the address of its next byte. Every packet checks
  // them again (never a pointer kept from the first), so ibv_dereg_mr between two packets
  // stops the WRITE.
  uint32_t write_rkey = 0;
  uint64_t write_va = 0;
  uint32_t write_left = 0;
  uint32_t write_len = 0;
  // READ/ATOMIC resources (max_dest_rd_atomic of them, used round-robin), sized when that
  // attribute is set, so that a QP costs what it allows.
  std::vector<RdAtomicRes> res = std::vector<RdAtomicRes>(1);
  uint32_t res_next = 0;
  uint32_t res_sending = 0;  // resources with a response stream in progress
  // Tag matching: what the message being received turned out to be (its header, in its first
  // 16 bytes, read at its first packet), and where its data goes.
  enum class Tm : uint8_t { kNone, kNoTag, kUnexpected, kEager, kRndv };
  Tm tm = Tm::kNone;
  uint32_t tm_skip = 0;  // bytes of the first packet not written (an eager match's header)
  uint64_t tm_tag = 0;
  uint64_t rndv_va = 0;  // kRndv: the sender's buffer, read once the header is in
  uint32_t rndv_rkey = 0, rndv_len = 0;
  // Coalesced ACK waiting to be sent.
  bool ack_pending = false;
  Psn ack_psn;
  uint32_t ack_msn = 0;  // the MSN when ack_psn was queued: later messages may complete first
};

/// Names for traces and tools: "requester", and a role's state by its number.
inline const char* role_name(Role r) {
  return r == Role::kRequester ? "requester" : r == Role::kCompleter ? "completer" : "responder";
}
inline const char* role_state_name(Role r, int state) {
  const auto pick = [state](const auto& names) -> const char* {
    return state >= 0 && static_cast<size_t>(state) < std::size(names) ? names[state] : "?";
  };
  if (r == Role::kRequester) return pick(Requester::kStateNames);
  if (r == Role::kCompleter) return pick(Completer::kStateNames);
  return pick(Responder::kStateNames);
}

/// Congestion control's per-QP state (congestion.cc). The reaction point: DCQCN's rate and
/// the pacer that holds the requester to it while the rate is below the line rate. The
/// notification point: when this QP last sent its peer a CNP.
struct CcState {
  Dcqcn dcqcn;
  // The application's rate limit (IBV_QP_RATE_LIMIT, ibv_modify_qp_rate_limit): at most this
  // many kbit/s (0: none), bursts of up to burst_bytes at once. Held with or without DCQCN.
  uint32_t rate_limit_kbps = 0;
  uint32_t burst_bytes = 0;
  uint64_t pace_next_ns = 0;  // the next packet may leave at this time
  // The pacer's last slot went to a READ response: the requester (its retransmissions too)
  // goes first for the next, so that neither role starves the other.
  bool requester_turn = false;
  // The rate the QP really sends at: bytes over windows of at least kRateWindowNs.
  uint64_t sent_window_start_ns = 0;
  uint64_t sent_window_bytes = 0;
  uint64_t sent_rate_at_ns = 0;  // when sent_rate_mbps was measured
  double sent_rate_mbps = 0;
  uint64_t cnp_sent_ns = 0;
  bool cnp_sent_any = false;
  uint64_t cnps_rcvd = 0;
  Timer pace_timer;
  Timer alpha_timer;
  Timer rate_timer;
};

struct Qp;

/// An RSS QP's hashing: a frame goes to the WQ of its indirection table that the Toeplitz hash
/// of the chosen header fields picks (raw.cc). (Outside Qp: an optional of a nested struct
/// with member initializers is not constructible for clang inside the enclosing class.)
struct QpRss {
  const std::vector<Qp*>* wqs = nullptr;  // the indirection table's, 2^n of them
  uint64_t fields = 0;                    // IBV_RX_HASH_* (enum ibv_rx_hash_fields)
  std::array<uint8_t, 64> key{};
  uint32_t key_len = 0;
};

struct Qp {
  // First: lets the verbs layer convert ibv_qp* back to Qp*. ibv_qp_ex starts with an
  // ibv_qp (qp_base), as in rdma-core's own verbs_qp, so ibv_qp_to_qp_ex is a cast; room
  // follows for the wr_flush of rdma-core 45's layout (include/uroce/verbs_compat.h), with
  // either version's headers.
  union {
    ibv_qp_ex ex{};
    ibv_qp ibv;
    std::array<char, UROCE_WR_FLUSH_OFFSET + sizeof(uroce_wr_flush_fn)> ex_with_flush;
  };
  void* ext = nullptr;  // the provider's ibv_wr_* builder when created with send_ops_flags
  // ibv_open_qp(3): a handle to an XRC target QP is a Qp of its own, outside the engine,
  // that names the target here (to_qp resolves it). The target counts its open handles: it
  // lives on until the last is destroyed when its creator's handle went first.
  // `closing`: the creator's handle is being destroyed (no new opens, no second destroy);
  // `creator_closed`: it is gone (all under the engine lock).
  Qp* real = nullptr;
  uint32_t opens = 0;
  bool closing = false;
  bool creator_closed = false;
  uint32_t qpn = 0;
  ibv_qp_type type = IBV_QPT_RC;
  ibv_qp_state state = IBV_QPS_RESET;  // the engine's (under the engine lock)
  // Raw-packet QPs: flow rules steering frames here (the QP cannot be destroyed while any
  // exist, as with the kernel's verbs), and IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (frames it
  // sends are not handed to its own flows).
  uint32_t flows = 0;
  bool block_self_lb = false;
  // Send queue slots kept for work the device posts itself (tag matching's rendezvous):
  // the application may fill the rest. `sq_internal` of the queued WQEs are the device's
  // (written by the engine, read by posters); what the queue was too busy to take waits in
  // `sq_pending` (engine only) for the next pass.
  uint32_t sq_reserved = 0;
  std::atomic<uint32_t> sq_internal{0};
  std::vector<SendWqe> sq_pending;
  // A receive work queue (ibv_create_wq(3)) is kept as a raw-packet QP with a receive queue
  // only (its number is the WQ's; RDY is RTR), in `wq_tables` indirection tables.
  bool is_wq = false;
  uint32_t wq_tables = 0;
  // An RSS QP (ibv_create_qp_ex(3) with IBV_QP_INIT_ATTR_RX_HASH): receives nothing itself;
  // a frame its flows steer goes to one WQ of its table (raw.cc).
  using Rss = QpRss;
  std::optional<Rss> rss;
  // The boundary with posting threads (Engine::post_send / post_recv run without the engine
  // lock): the state as posters see it, the producer locks of the two work queues, and the
  // doorbell flag (set while the QP waits in the engine's doorbell list).
  std::atomic<ibv_qp_state> post_state{IBV_QPS_RESET};
  std::mutex sq_mu;
  std::mutex rq_mu;
  std::atomic<bool> doorbell{false};
  uint32_t async_events_read = 0;  // provider: async events read (under ibv.mutex)
  // An XRC target has none of these of its own: each message takes the SRQ its XRCETH names
  // (and that SRQ's PD and CQ) while it is received. An XRC initiator has no receive side.
  mem::Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;
  Xrcd* xrcd = nullptr;  // XRC targets
  bool sq_sig_all = false;
  ibv_qp_cap cap{};

  // Attributes (ibv_modify_qp).
  uint32_t dest_qpn = 0;
  uint32_t qkey = 0;
  uint16_t pkey_index = 0;
  uint8_t port_num = 1;
  unsigned access = 0;  // qp_access_flags
  ibv_mtu path_mtu = IBV_MTU_1024;
  uint32_t mtu = 1024;
  uint8_t timeout = 14;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  uint8_t en_sqd_async_notify = 0;
  ibv_ah_attr ah_attr{};
  Path path;
  wire::RoceHeaders tx_template;  // addresses, ports, P_Key, dest QP: per-packet fields vary

  // The two work queues: posters produce into them under sq_mu / rq_mu, the engine consumes.
  Ring<SendWqe> sq;
  Ring<RecvWqe> rq;

  // The three roles of the transport, each in its own file and struct (STYLE.md 15): the
  // requester sends the send queue's WQEs, the completer reads ACKs and responses and
  // completes them, the responder executes the peer's requests. A role writes only its own
  // struct; it drives another through that role's named calls (Engine::rewind_requester,
  // release_rd_atomic, ...), so that grep finds every place a role is driven from outside.
  Requester req;
  Completer comp;
  Responder resp;
  // Congestion control (congestion.cc): DCQCN's reaction point and the notification point.
  CcState cc;

  // Engine bookkeeping.
  bool scheduled = false;  // in the engine's active list
  bool flush_pending = false;
  bool last_wqe_reached = false;  // IBV_EVENT_QP_LAST_WQE_REACHED raised (SRQ QPs), until reset
  bool comm_est_raised = false;   // IBV_EVENT_COMM_EST raised (first packet in RTR), until reset
};

// The verbs structures carry ibv_* pointers; our objects start with that ibv_* member.
inline Cq* to_cq(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline Srq* to_srq(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Ah* to_ah(ibv_ah* a) { return reinterpret_cast<Ah*>(a); }
inline Qp* to_qp(ibv_qp* q) {
  Qp* p = reinterpret_cast<Qp*>(q);
  return p->real != nullptr ? p->real : p;  // an opened handle: the QP it names
}


}  // namespace uroce

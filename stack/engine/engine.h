// The uroce engine: one RoCEv2 device on one port.
//
// It owns the verbs objects (PDs, MRs, CQs, SRQs, AHs, QPs) and runs the transport:
// poll(now) receives a burst from the port, validates each packet (rxe_recv-style: parse,
// addresses, QPN, QP type and state, P_Key / Q_Key, ICRC) and hands it to the responder
// (requests) or the completer (ACKs and responses); then fires due timers and lets every QP
// with work transmit, in bursts. Time is an argument: production passes a monotonic clock,
// tests step it. Nothing allocates per packet.
//
// The verbs entry points take rdma-core's own structures (ibv_qp_attr, ibv_send_wr, ibv_wc,
// ...) and return the errno values rdma-core documents, so the libibverbs provider is a thin
// layer on top.
//
// Threads: the engine is single-threaded and deterministic — one thread at a time calls
// poll() and every control entry point (the provider holds one engine lock for that). The
// data-path boundary is the exception, built like an RNIC's queues (see util/ring.h and
// docs/threading.md): post_send, post_recv, post_srq_recv, poll_cq and ring_doorbell may be
// called by application threads at any time, concurrently with the engine and with each
// other. Posting writes the work request into the QP's ring under that queue's own lock and
// rings the QP's doorbell; the engine picks the doorbells up at the start of its next poll().
// poll_cq takes completions the engine has already produced, under the CQ's own lock.
#pragma once

#include <atomic>
#include <infiniband/verbs.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "engine/counters.h"
#include "engine/flow.h"
#include "engine/neighbor.h"
#include "engine/objects.h"
#include "engine/timer_wheel.h"
#include "engine/verbs_trace.h"
#include "memory/mr.h"
#include "uroce/port.h"
#include "wire/addr.h"
#include "wire/arp.h"

namespace uroce {

struct QpStats;  // engine/stats_shm.h

/// Congestion control (stack/engine/congestion.cc, README "Congestion control").
struct CongestionConfig {
  // The reaction point: RC/UC/XRC packets leave ECN-capable (ECT(0)) unless the address
  // vector's traffic class sets ECN bits of its own, and a CNP cuts the QP's rate (DCQCN).
  // The notification point (a CE-marked packet is answered with a CNP) is always on, as on
  // RNICs: it costs nothing unless a sender marks its packets and a switch marks them CE.
  bool ecn = true;
  uint8_t cnp_dscp = 48;                        // DSCP of the CNPs we send (RNICs: 48)
  uint64_t min_time_between_cnps_ns = 50'000;   // per QP
  // Pace every packet at the line rate, not only below it: for a line rate given by hand,
  // which a QP could otherwise exceed in bursts (a veth is as fast as memory).
  bool pace_at_line_rate = false;
  DcqcnConfig dcqcn;
};

struct EngineConfig {
  std::optional<wire::Ipv4Addr> ipv4;
  std::optional<wire::Ipv6Addr> ipv6;  // a global IPv6 address (link-local is derived)
  uint16_t vlan_id = 0;                // 0: untagged
  ibv_mtu active_mtu = IBV_MTU_4096;   // port's active MTU (capped by the port's frame size)
  uint32_t max_qp = 4096;
  uint32_t max_async_events = 4096;  // events (QP/CQ/SRQ errors, port changes) waiting for a pass
  uint32_t max_qp_wr = 16384;
  uint32_t max_sge = kMaxSge;
  uint32_t max_inline = kMaxInline;
  uint32_t max_cq = 4096;
  uint32_t max_cqe = 1u << 20;
  uint32_t max_mr = 1u << 18;
  uint32_t max_pd = 4096;
  uint32_t max_srq = 1024;
  uint32_t max_srq_wr = 16384;
  uint32_t max_ah = 1u << 16;
  uint32_t max_mcast_grp = 8192;       // multicast groups with a QP attached (rxe's limits);
                                       // 0: the port carries no multicast (EOPNOTSUPP)
  uint32_t max_mcast_qp_attach = 56;   // QPs attached to one group
  uint8_t max_rd_atomic = kMaxRdAtomic;  // per QP, each direction (at most kMaxRdAtomic)
  uint32_t tx_window = 512;    // unacknowledged packets per RC QP
  uint32_t qp_budget = 64;     // packets a QP may send per poll
  uint32_t ack_every = 64;     // AckReq at least every this many packets inside a message
  uint64_t seed = 0x726f6365;  // anything random but keys
  uint64_t key_seed = 0;       // L_Key/R_Key generator: 0 = the OS's random source (getrandom);
                               // tests set one so that their keys repeat
  uint64_t node_guid = 0;      // 0: derived from the MAC
  // First QPN this engine hands out. Several processes may run an engine each on one
  // interface (one "device" shared as with any RDMA device); their QPNs must not overlap,
  // since a frame is delivered by QPN. The verbs provider gives each process its own block.
  uint32_t first_qpn = 0x11;
  // How many QPNs from first_qpn are this engine's (the provider's block per process). They
  // are handed out in rotation; at least max_qp.
  uint32_t qpn_span = 0x10000;
  CongestionConfig cc;
  // A port through a UDP socket (drivers/udp/udp_port.h): the kernel writes the IP and UDP
  // headers, so packets are built with the ones it will write (the ICRC covers them), and
  // arrive without the IPv4 identification and DF flag.
  // The source ports it can send from (its sockets'): each QP takes one of them (flow
  // entropy, as far as there are sockets). Empty: any, one per QP in 0xC000..0xFFFF.
  std::vector<uint16_t> udp_src_ports;
  bool ipv4_ident_zero = false;  // identification 0 (the kernel's for an unconnected socket's
                                 // DF packets); on receive the ICRC solves for both fields
};

/// A management datagram that arrived on QP1 (the connection manager's MADs), with the
/// addresses it came from and went to.
struct GsiMad {
  static constexpr size_t kMaxLen = 256;
  wire::Gid sgid{};
  wire::Gid dgid{};
  wire::MacAddr smac{};
  bool ipv6 = false;
  uint32_t src_qp = 0;
  uint16_t pkey = 0;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint32_t flow_label = 0;
  uint16_t len = 0;
  std::array<uint8_t, kMaxLen> data{};
};

struct AsyncEvent {
  ibv_event_type type;
  Qp* qp = nullptr;
  Cq* cq = nullptr;
  Srq* srq = nullptr;
};

class Engine {
 public:
  static constexpr uint32_t kFirstQpn = 0x11;  // as rdma_rxe: QP0/QP1 are special

  Engine(Port& port, const EngineConfig& cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- Device, port, GIDs --------------------------------------------------------------
  void query_device(ibv_device_attr* attr) const;
  int query_port(uint8_t port_num, ibv_port_attr* attr) const;
  /// The interface under the port went down or came up (the verbs provider watches it):
  /// query_port reports it, and a change raises IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE.
  void set_link_up(bool up, bool notify = true);
  /// The interface's MTU (bytes): the port's active MTU becomes the largest IB MTU whose
  /// packets fit it (and the port's frames), as rxe's does. QPs keep the path MTU they were
  /// given; frames longer than the MTU allows are dropped (counter tx_drop_mtu).
  void set_netdev_mtu(uint32_t bytes);
  /// GID table: [0] fe80:: link-local from the MAC, [1] IPv4-mapped (if an IPv4 address is
  /// configured), then the global IPv6 address. All are RoCEv2 GIDs. The table has
  /// kGidTableLen entries, as a port reports it: the rest are empty (ENODATA, a zero GID).
  static constexpr int kGidTableLen = 16;
  int query_gid(uint8_t port_num, int index, ibv_gid* gid) const;
  int gid_count() const { return static_cast<int>(gids_.size()); }
  int query_pkey(uint8_t port_num, int index, uint16_t* pkey) const;
  wire::MacAddr mac() const { return mac_; }
  /// Static neighbour entry: frames for `ip` go to `mac` (never overwritten by ARP).
  void set_neighbor(const wire::Gid& ip, const wire::MacAddr& mac);
  /// Starts the resolution of `ip` unless it is known or under way (a failed one starts
  /// over). IPv4: ARP, up to kArpTries requests kArpRetryNs apart, driven by poll().
  /// kReachable fills *mac. Callers that must block (ibv_modify_qp, ibv_create_ah) then poll
  /// and watch neighbor_state() until it leaves kIncomplete; kFailed becomes EHOSTUNREACH.
  /// IPv6: neighbour solicitations to the solicited-node group, the same retry schedule.
  NeighborState resolve(const wire::Gid& ip, wire::MacAddr* mac);
  /// The state of `ip` without starting anything (kFailed when unknown).
  NeighborState neighbor_state(const wire::Gid& ip, wire::MacAddr* mac);

  // ---- Verbs objects (nullptr + errno on failure, or an errno return) ------------------
  mem::Pd* alloc_pd();
  int dealloc_pd(mem::Pd* pd);
  mem::Mr* reg_mr(mem::Pd* pd, void* addr, size_t length, int access);
  /// The peer addresses the region as [iova, iova + length) (ibv_reg_mr_iova2).
  /// `pages` kChecked: prefault_mr ran, without the engine lock (the provider does that).
  mem::Mr* reg_mr_iova(mem::Pd* pd, void* addr, size_t length, uint64_t iova, int access,
                       mem::Pages pages = mem::Pages::kCheck);
  /// The checks ibv_reg_mr makes on its arguments, and every page of the region faulted in:
  /// 0 or the errno. Touches no engine state, so it runs before the engine lock is taken.
  static int prefault_mr(const mem::Pd* pd, const void* addr, size_t length, int access);
  /// ibv_reg_dm_mr: [host, host + length) of emulated device memory, zero-based (the peer
  /// and the SGEs address it from 0). `access` must have IBV_ACCESS_ZERO_BASED (EINVAL).
  mem::Mr* reg_dm_mr(mem::Pd* pd, void* host, size_t length, int access);
  /// ibv_advise_mr for one SGE: 0 or the errno ibv_advise_mr(3) gives (EFAULT: no such
  /// L_Key or out of its MR; EINVAL: not an on-demand MR, or a window's key; EPERM: another
  /// PD's, or PREFETCH_WRITE on an MR without local write).
  int advise_mr(const mem::Pd* pd, ibv_advise_mr_advice advice, const ibv_sge& sge) const;
  /// ibv_rereg_mr: the MR keeps its key; 0 or the errno.
  int rereg_mr(mem::Mr* mr, mem::Pd* pd, void* addr, size_t length, uint64_t iova, int access,
               mem::Pages pages = mem::Pages::kCheck);
  int dereg_mr(mem::Mr* mr);
  const mem::MrTable& mr_table() const { return mrs_; }
  /// ibv_alloc_mw / ibv_dealloc_mw.
  mem::Mw* alloc_mw(mem::Pd* pd, ibv_mw_type type);
  int dealloc_mw(mem::Mw* mw);
  /// ibv_bind_mw: queues the bind of a type 1 window on `qp`'s send queue (it takes effect
  /// in order with the work before it). 0 or the errno ibv_post_send would give.
  int post_bind_mw(Qp* qp, uint64_t wr_id, unsigned send_flags, const mem::BindRequest& b);
  Cq* create_cq(int cqe);
  /// ibv_resize_cq: EINVAL if the CQ holds more completions than `cqe`.
  int resize_cq(Cq* cq, int cqe);
  int destroy_cq(Cq* cq);
  /// A basic SRQ, or with `xrcd` an XRC SRQ whose receives complete on `cq`, or with `tm` a
  /// tag-matching SRQ (IBV_SRQT_TM) whose receives and list operations complete on `cq`.
  Srq* create_srq(mem::Pd* pd, ibv_srq_init_attr* attr, Xrcd* xrcd = nullptr, Cq* cq = nullptr,
                  const ibv_tm_cap* tm = nullptr);
  /// ibv_post_srq_ops(3) on a tag-matching SRQ: ADD a tagged buffer (its handle written back
  /// into the operation), DEL one, SYNC the unexpected count. Signaled ones complete on the
  /// SRQ's CQ (IBV_WC_TM_ADD / _DEL / _SYNC). 0 or the errno: EINVAL (not a TM SRQ, a bad
  /// opcode, handle or SGE count), ENOMEM (max_num_tags in the list); *bad names it.
  int post_srq_ops(Srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad);
  /// What a device reports in ibv_device_attr_ex.tm_caps.
  static constexpr uint32_t kTmMaxTags = 64, kTmMaxRndvHdr = 64;
  /// Send-queue slots a QP on a tag-matching SRQ keeps for the device's own work: a READ and
  /// a FIN for each tagged buffer that can be matched at once.
  static constexpr uint32_t kTmInternalWqes = 2 * kTmMaxTags;
  Xrcd* create_xrcd();
  int destroy_xrcd(Xrcd* xrcd);  // EBUSY while SRQs or target QPs belong to it
  int modify_srq(Srq* srq, ibv_srq_attr* attr, int mask);
  int query_srq(Srq* srq, ibv_srq_attr* attr) const;
  int destroy_srq(Srq* srq);
  Ah* create_ah(mem::Pd* pd, const ibv_ah_attr* attr);
  int destroy_ah(Ah* ah);
  /// XRC targets (IBV_QPT_XRC_RECV) take `xrcd` and neither PD nor CQs.
  Qp* create_qp(mem::Pd* pd, ibv_qp_init_attr* attr, Xrcd* xrcd = nullptr, bool rss = false);
  /// Where the rotation looks for the next QPN (uroce-replay recreates a capture's QPNs):
  /// the next create_qp gets `qpn` if it is in this engine's span and free.
  void set_next_qpn(uint32_t qpn) {
    if (qpn >= cfg_.first_qpn && qpn - cfg_.first_qpn < cfg_.qpn_span)
      next_qpn_slot_ = qpn - cfg_.first_qpn;
  }
  int modify_qp(Qp* qp, ibv_qp_attr* attr, int mask);
  /// The rate limits IBV_QP_RATE_LIMIT and ibv_modify_qp_rate_limit(3) take, in kbit/s (the
  /// device's packet_pacing_caps), and the QP types they apply to.
  static constexpr uint32_t kRateLimitMinKbps = 1;
  static constexpr uint32_t kRateLimitMaxKbps = 100'000'000;  // 100 Gb/s
  /// ibv_modify_qp_rate_limit: the limit (0: none) and the burst it allows, on an RC or raw
  /// packet QP in RTS. 0 or the errno (EINVAL).
  int modify_rate_limit(Qp* qp, const ibv_qp_rate_limit_attr& a);
  int query_qp(const Qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) const;
  int destroy_qp(Qp* qp);
  Qp* qp_by_num(uint32_t qpn);
  /// ibv_attach_mcast(3) / ibv_detach_mcast(3): UD QP `qp` receives, or no longer, the
  /// datagrams sent to multicast group `gid` (DQPN 0xFFFFFF; its Q_Key is checked as for any
  /// UD datagram). 0 or the errno: EINVAL (not a UD QP, not a multicast GID; detach: not
  /// attached), ENOMEM (max_mcast_grp groups, or max_mcast_qp_attach QPs in the group),
  /// EOPNOTSUPP (max_mcast_grp 0: a port without multicast, the udp port).
  /// Attaching twice is one attachment. Destroying a QP detaches it.
  int attach_mcast(Qp* qp, const wire::Gid& gid);
  bool multicast() const { return cfg_.max_mcast_grp != 0; }  // the port carries groups
  int detach_mcast(Qp* qp, const wire::Gid& gid);
  /// Called when a group gets its first QP (true) or loses its last (false): the provider
  /// joins the group on the interface then (IGMP / MLD), as the kernel does for rdma_rxe.
  void on_group_change(std::function<void(const wire::Gid&, bool)> f) {
    group_change_ = std::move(f);
  }

  // ---- Raw-packet QPs and flow steering (raw.cc) ---------------------------------------------
  /// An ibv_create_flow(3) rule: frames that are not RoCE and match it go to `qp`.
  struct RawFlow {
    Qp* qp = nullptr;
    FlowRule rule;
    uint64_t seq = 0;  // creation order: among equal priorities, the older rule first
  };
  /// ibv_create_flow on a raw-packet QP: the rule, or nullptr with errno as compile_flow
  /// gives it, or EINVAL (not a raw-packet QP, a port other than 1), EOPNOTSUPP (the port
  /// cannot show us every frame: Port::receive_all).
  RawFlow* create_flow(Qp* qp, const ibv_flow_attr* attr);
  int destroy_flow(RawFlow* flow);  // 0 or EINVAL (not a rule of this engine)
  /// ibv_create_wq(3), IBV_WQT_RQ: a receive queue whose completions go to `cq` (errno as
  /// create_qp's; EOPNOTSUPP where raw-packet QPs cannot be had).
  Qp* create_wq(mem::Pd* pd, Cq* cq, uint32_t max_wr, uint32_t max_sge);
  /// ibv_modify_wq(3) to `state` (RST, RDY, ERR); EINVAL for RDY from ERR or no WQ.
  int modify_wq(Qp* wq, ibv_wq_state state);
  static ibv_wq_state wq_state(const Qp* wq);
  int destroy_wq(Qp* wq);  // EBUSY while an indirection table holds it
  /// ibv_create_rwq_ind_table(3): the table's WQs in order (2^n of them, each a WQ of this
  /// engine; EINVAL otherwise).
  struct RwqTable {
    std::vector<Qp*> wqs;
    uint32_t users = 0;  // RSS QPs using it
  };
  RwqTable* create_rwq_table(std::span<Qp* const> wqs);
  int destroy_rwq_table(RwqTable* t);  // EBUSY while an RSS QP uses it
  /// An RSS QP over `table` hashing `hash` (Toeplitz only: EOPNOTSUPP for other functions and
  /// for inner or IPsec fields; EINVAL for a key too short for the fields).
  Qp* create_rss_qp(mem::Pd* pd, RwqTable* table, const ibv_rx_hash_conf& hash);

  // ---- Data path (thread-safe: see the top of this file) ------------------------------------
  /// ibv_post_send(3): the WRs ahead of a failing one stay posted, and *bad names it.
  int post_send(Qp* qp, const ibv_send_wr* wr, const ibv_send_wr** bad);
  /// The ibv_wr_* builder (stack/verbs/ext.cc) writes WQEs in place: with qp->sq_mu held
  /// from ibv_wr_start on, stage_wqe(qp, k) is the k-th free slot of the send queue, cleared
  /// (nullptr when the queue has no room for it), and commit_wqes(qp, n) checks the n staged
  /// WQEs as ibv_post_send checks its WRs and publishes all of them, or none (0 or the errno).
  SendWqe* stage_wqe(Qp* qp, size_t k);
  int commit_wqes(Qp* qp, size_t n);
  /// One signaled FLUSH, posted as ibv_wr_flush posts it (the engine's own users: replay,
  /// tests): `len` bytes at `va` under `rkey`, placement `type`, selectivity `level`.
  struct FlushWr {
    uint64_t wr_id = 0;
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t len = 0;
    uint8_t type = UROCE_FLUSH_GLOBAL;
    uint8_t level = UROCE_FLUSH_RANGE;
  };
  int post_flush(Qp* qp, const FlushWr& f);
  /// What ibv_post_send's checks look at in a work request, however it was written
  /// (an ibv_send_wr, or a WQE the ibv_wr_* builder filled in place).
  struct WrShape {
    int opcode = 0;
    int num_sge = 0;
    uint64_t total = 0;  // bytes
    bool inline_asked = false;
    bool has_ah = false;
    const ibv_mw* bind_mw = nullptr;  // IBV_WR_BIND_MW: the window and the MR it binds to
    const ibv_mr* bind_mr = nullptr;
    uint8_t flush_type = 0;  // FLUSH: placement type and selectivity level (ibv_wr_flush)
    uint8_t flush_level = 0;
    uint64_t flush_len = 0;
  };
  /// The checks ibv_post_send makes on one work request: 0 or the errno.
  int check_wr(const Qp* qp, const WrShape& s) const;
  int post_recv(Qp* qp, const ibv_recv_wr* wr, const ibv_recv_wr** bad);
  int post_srq_recv(Srq* srq, const ibv_recv_wr* wr, const ibv_recv_wr** bad);
  /// Up to n completions; returns how many (never negative).
  int poll_cq(Cq* cq, int n, ibv_wc* wc);
  /// Tells the engine that `qp` has new work (posted WRs; in ERR: WRs to flush). The next
  /// poll() schedules it.
  void ring_doorbell(Qp* qp);

  /// Runs the pipeline once at time `now_ns`; returns the amount of work done
  /// (packets received + sent + timers fired), 0 when idle.
  size_t poll(uint64_t now_ns);
  /// When the engine next needs poll() even if no packet arrives (TimerWheel::kNever: never).
  uint64_t next_deadline() const;
  /// True when a QP still has something to transmit (poll again without waiting).
  bool has_tx_work() const {
    return !active_.empty() || doorbell_rung_.load(std::memory_order_acquire);
  }

  bool pop_async_event(AsyncEvent* ev);
  /// For the next poll() only: if all it has to send is ACKs, they wait, up to `hold_ns`
  /// after they were first kept, for something else to send (the application's reply, most
  /// likely), and then leave in one burst with it, behind it; the first poll after that
  /// sends them anyway, as does any flush. 0: no wait. The verbs provider asks for it in the
  /// polls of an application that answers at once (docs/threading.md, "The ACK rides with
  /// the reply").
  void hold_acks_next_poll(uint64_t hold_ns) { ack_hold_ns_ = hold_ns; }
  /// Sends ACKs kept so, if any.
  void send_held_acks() {
    if (acks_held_until_ != 0) flush_tx();
  }

  // ---- QP1, the general services QP (the connection manager) -------------------------------
  static constexpr uint32_t kGsiQkey = 0x80010000;
  static constexpr size_t kGsiQueue = 256;
  /// With QP1 open, UD SENDs to QP1 that carry the GSI Q_Key are queued (up to kGsiQueue; more
  /// are dropped and counted) for pop_mad(); closed, they are dropped and counted.
  void set_gsi_open(bool open) {
    gsi_open_ = open;
    if (open && gsi_rx_.capacity() == 0) gsi_rx_ = Ring<GsiMad>(kGsiQueue);
  }
  /// Reports the verbs side (posts, completions, QP states, timers) to `t`; null: nothing.
  void set_verbs_tracer(VerbsTracer* t) { tracer_ = t; }
  bool pop_mad(GsiMad* out);
  /// The path from our GID `sgid` to `dgid` (the neighbour must be resolved; our own address
  /// loops back). False if `sgid` is not ours, the families differ, or the MAC is unknown.
  bool path_between(const wire::Gid& sgid, const wire::Gid& dgid, Path* out) const;
  /// Sends `len` bytes as a UD SEND from QP1 to `dest_qpn` along `path`, with `qkey` (the
  /// frame goes out at the next poll()). 0, or EINVAL (too long), ENOBUFS (no frame).
  int send_mad(const Path& path, uint32_t dest_qpn, uint32_t qkey, uint16_t pkey,
               const uint8_t* mad, size_t len);
  /// Learns `ip` at `mac` (the source of a MAD we answer), unless a static entry says otherwise.
  void learn_peer(const wire::Gid& ip, const wire::MacAddr& mac) { learn_neighbor(ip, mac, true); }
  uint64_t node_guid() const { return cfg_.node_guid; }
  /// Our GID table index of `gid`, or -1.
  int gid_index(const wire::Gid& gid) const;
  uint64_t now() const { return now_; }
  const Counters& counters() const { return counters_; }
  /// When (the engine's clock) a RoCE packet for one of our QPs (or a multicast group) last
  /// arrived, and how many have: stored before the packet is acted on, and readable from any
  /// thread (the progress policy's "waiting for the answer", stack/verbs/progress.h).
  uint64_t last_rx_ns() const { return last_rx_ns_.load(std::memory_order_relaxed); }
  /// After the last pass, a packet waits for the pacer (a QP DCQCN holds below line rate, or
  /// one paced at a line rate given by hand): readable from any thread, a hint.
  bool pacer_held() const { return pacer_held_.load(std::memory_order_relaxed); }
  uint64_t rx_seq() const { return rx_seq_.load(std::memory_order_relaxed); }
  /// The QPs DCQCN holds below line rate right now (up to `max` of them, by QPN).
  size_t cc_limited_qps(CcQpStats* out, size_t max) const;
  double line_rate_mbps() const { return cfg_.cc.dcqcn.line_rate_mbps; }
  /// Every QP past RESET: its transport state, the first `max` by QPN in `out`. Returns how
  /// many there are in all.
  size_t qp_states(QpStats* out, size_t max, size_t* shown) const;

 private:
  // engine.cc
  void answer_doorbells();
  void receive(Frame* f);
  bool validate(const wire::ParsedPacket& p, Qp** out);
  /// A packet with a bad ICRC through a port that hides the IPv4 identification: true (and
  /// *p fixed) if an identification and DF flag make the ICRC agree (EngineConfig).
  bool solve_ident(wire::ParsedPacket* p);
  void gsi_receive(const wire::ParsedPacket& p);
  void fire_timer(Timer& t);
  void schedule(Qp* qp);
  void run_tx();
  Frame* tx_alloc();
  void tx_frame(Frame* f);
  // A frame for our MAC: is its QP one of ours? `*gsi`: it is for QP1 (the CM's MADs).
  bool is_local_dest(const Frame* f, bool* gsi);
  void flush_tx();
  Frame* build_packet(wire::RoceHeaders& h, size_t payload_len,
                      wire::FrameLayout* lay);
  void send_built(Frame* f, const wire::FrameLayout& lay);
  bool push_cqe(Cq* cq, const ibv_wc& wc, Qp* qp, uint64_t tag = 0);
  /// Copy `len` bytes into / out of an SGE list, starting `offset` bytes into it. False if
  /// the list is too short or a key check fails (writing needs LOCAL_WRITE).
  bool copy_to_sges(const mem::Pd* pd, const Sge* sges, uint32_t n, uint32_t offset,
                    const uint8_t* src, uint32_t len) const;
  /// `crc`: the ICRC's running CRC, carried on over the bytes copied, read from the MR.
  bool copy_from_sges(const mem::Pd* pd, const Sge* sges, uint32_t n, uint32_t offset,
                      uint8_t* dst, uint32_t len, uint32_t* crc = nullptr) const;
  void post_event(ibv_event_type type, Qp* qp, Cq* cq = nullptr, Srq* srq = nullptr);
  bool resolve_path(const ibv_ah_attr& ah, Path* path) const;
  /// Ethernet/IP/UDP/BTH fields for packets from QP `qpn` to `dest_qpn` along `path`.
  wire::RoceHeaders headers_for(const Path& path, uint32_t qpn, uint32_t dest_qpn) const;
  /// The UDP source port of the flow from `qpn` to `dest_qpn` (EngineConfig::udp_src_ports).
  uint16_t source_port(uint32_t qpn, uint32_t dest_qpn) const;
  void fill_template(Qp* qp);

  // neighbor.cc
  Neighbor* find_neighbor(const wire::Gid& ip);
  Neighbor* find_or_add_neighbor(const wire::Gid& ip);
  wire::EthernetRepr eth_to(const wire::MacAddr& dst, uint16_t ethertype) const;
  bool handle_arp(wire::Bytes frame);
  void send_arp(const wire::ArpRepr& a, const wire::MacAddr& dst);
  void send_arp_request(Neighbor* n);
  void on_neighbor_timeout(Neighbor* n);
  void learn_neighbor(const wire::Gid& ip, const wire::MacAddr& mac, bool create);
  bool handle_nd(wire::Bytes frame);
  void send_nd(uint8_t type, const wire::Ipv6Addr& target, const wire::Ipv6Addr& src,
               const wire::Ipv6Addr& dst, const wire::MacAddr& dst_mac,
               const wire::MacAddr& lladdr);
  static wire::Ipv6Addr solicited_node(const wire::Ipv6Addr& target);
  static wire::MacAddr solicited_node_mac(const wire::Ipv6Addr& target);

  // qp_state.cc (lifecycle.cc creates and destroys objects, posting.cc takes work requests)
  void set_state(Qp* qp, ibv_qp_state st);  // the engine's state and the posters' copy
  void clean_cq(Cq* cq, uint32_t qpn);       // drops the QP's completions from the CQ
  int check_modify(const Qp* qp, const ibv_qp_attr* attr, int mask) const;
  void enter_error(Qp* qp);
  void flush_qp(Qp* qp);
  void reset_qp(Qp* qp);

  // congestion.cc
  void cc_init_qp(Qp* qp);   // the timers' owner and kind, DCQCN at line rate
  void cc_reset_qp(Qp* qp);  // back to line rate, timers cancelled
  /// NP: `p` reached `qp` marked CE: tell the peer QP with a CNP (at most one per period).
  void notify_congestion(Qp* qp, const wire::ParsedPacket& p);
  /// RP: a CNP for one of our QPs.
  void receive_cnp(const wire::ParsedPacket& p);
  void on_cc_timer(Timer& t);
  /// The pacer: whether `qp` must wait before its next packet (it arms the pace timer).
  bool pace_wait(Qp* qp);
  void cancel_pace(Qp* qp);
  /// `bytes` of `qp` went on the wire: the pacer's clock and DCQCN's byte counter.
  void paced(Qp* qp, uint32_t bytes);
  void advance_pace(Qp* qp, uint32_t bytes);
  void set_rate_limit(Qp* qp, uint32_t kbps, uint32_t burst_bytes);
  void trace_rate(const Qp* qp, int cause) const;

  // requester.cc. What other rooms may ask of the requester (it alone writes qp->req):
  void init_requester(Qp* qp);   // its timer's owner and kind
  void reset_requester(Qp* qp);  // RESET: nothing sent, nothing assigned
  /// ERR: every WQE completes (a done one with its status, the rest flushed).
  void flush_requester(Qp* qp);
  void start_send_psn(Qp* qp, Psn psn);  // ibv_modify_qp's sq_psn (the completer's too)
  void restart_drain(Qp* qp);  // RTS or SQD entered: SQ_DRAINED may be raised again
  /// Go-back-N: re-send every packet from `psn` on, with the same PSNs.
  void rewind_requester(Qp* qp, Psn psn);
  /// Acknowledged up to the WQE at absolute index `index`: the cursor does not stay behind.
  void requester_skip_to(Qp* qp, uint64_t index);
  /// The WQE at absolute `index` is acknowledged below `upto`: a rewind skips those packets.
  void requester_partly_acked(Qp* qp, uint64_t index, Psn upto);
  /// The peer said RNR: send nothing for `ns`, then go back to where rewind_requester said.
  void hold_requester_for_rnr(Qp* qp, uint64_t ns);
  void on_rnr_timeout(Qp* qp);
  void release_rd_atomic(Qp* qp, const SendWqe& w);  // its READ/atomic slot is free again
  void set_req_state(Qp* qp, Requester::State s);  // traced (VerbsEvent::kRoleState)
  bool requester_step(Qp* qp, uint32_t* budget);
  bool send_packet(Qp* qp, SendWqe& w);
  bool prepare_wqe(Qp* qp, SendWqe& w);
  /// Carries out a bind or local invalidate; false (the QP in error) if it fails.
  bool run_local_op(Qp* qp, SendWqe& w);
  void retire_sq(Qp* qp);
  /// Copies the payload into a frame from build_packet, its ICRC carried on over the source.
  bool gather(Qp* qp, const SendWqe& w, uint32_t offset, Frame* f, wire::FrameLayout* lay,
              uint32_t len);
  void ud_send(Qp* qp, SendWqe& w);
  /// A raw-packet QP's WQE: its bytes are the frame, sent as they are (and handed to this
  /// device's own flows when they match: a frame to our MAC, multicast or broadcast).
  /// False: no frame to send it in (the next poll tries again).
  bool raw_send(Qp* qp, SendWqe& w);
  /// A frame that is not RoCE: to the QPs whose flows match it (false: none took it).
  bool raw_receive(const Frame* f, const Qp* sender = nullptr);
  void raw_deliver(Qp* qp, std::span<const uint8_t> frame, const FrameFields& fields);

  // completer.cc. What other rooms may ask of the completer (it alone writes qp->comp):
  void init_completer(Qp* qp);   // its timer's owner and kind, a full window
  void reset_completer(Qp* qp);  // RESET
  void completer_start_psn(Qp* qp, Psn psn);  // nothing outstanding before `psn`
  void refill_retries(Qp* qp);  // ibv_modify_qp's retry_cnt / rnr_retry
  void set_comp_state(Qp* qp, Completer::State s);  // traced
  void completer(Qp* qp, const wire::ParsedPacket& p);
  void ack_upto(Qp* qp, Psn psn);
  void widen_cwnd(Qp* qp, Psn upto);  // before comp_psn moves to upto
  void retry_from(Qp* qp, Psn psn);
  void arm_retransmit(Qp* qp);
  bool spend_retry(Qp* qp);  // false (and the WQE failed) when retry_cnt is used up
  bool retry_on_gap(Qp* qp);  // a gap or NAK asks to go back: whether to go back now
  void note_progress(Qp* qp);  // forward progress: a full retry budget again
  void on_retransmit_timeout(Qp* qp);
  void complete_send(Qp* qp, SendWqe& w);  // done, successfully (its slot released)
  void fail_send(Qp* qp, SendWqe& w, ibv_wc_status st);
  bool scatter(Qp* qp, const SendWqe& w, uint32_t offset, const uint8_t* src, uint32_t len);

  // responder.cc. What other rooms may ask of the responder (it alone writes qp->resp):
  void reset_responder(Qp* qp);  // RESET
  /// ERR: a receive WQE taken for an unfinished message and the posted ones are flushed.
  void flush_responder(Qp* qp);
  void start_recv_psn(Qp* qp, Psn psn);  // ibv_modify_qp's rq_psn
  void size_rd_atomic_res(Qp* qp);       // max_dest_rd_atomic changed
  /// An XRC SRQ is destroyed: a message into it is lost, READs answered under its PD go.
  void forget_srq(Qp* qp, const Srq* srq);
  void set_resp_state(Qp* qp, Responder::State s);  // traced
  void responder(Qp* qp, const wire::ParsedPacket& p);
  void ud_receive(Qp* qp, const wire::ParsedPacket& p);
  // tag_matching.cc: a SEND's first packet on a QP with a tag-matching SRQ decides where the
  // message goes (false: no buffer for it, RNR); its end completes it.
  bool tm_begin(Qp* qp, const wire::ParsedPacket& p);
  void tm_complete(Qp* qp, const wire::ParsedPacket& p);
  /// An internal WQE (the rendezvous READ or FIN) is done.
  void tm_internal_done(Qp* qp, const SendWqe& w);
  /// Queues work the device posts itself on `qp`'s send queue (its reserved slots). Never
  /// waits for a poster (one may hold the queue from ibv_wr_start on): a busy queue gets it
  /// at the next pass (take_pending_internal, at the requester's start).
  void post_internal(Qp* qp, const SendWqe& w);
  void take_pending_internal(Qp* qp);
  /// The send queue's front WQE is the device's own and done with `st`: gone, its buffer
  /// completed (tm_internal_done).
  void pop_internal(Qp* qp, ibv_wc_status st);
  void mcast_receive(const wire::ParsedPacket& p);
  static bool pkey_matches(uint16_t pkey);  // a packet's P_Key against our partition
  void execute_request(Qp* qp, const wire::ParsedPacket& p);
  /// ATOMIC WRITE and FLUSH, executed: their answer queued as a READ of nothing.
  void answer_with_empty_read_response(Qp* qp, Psn psn);
  /// An XRC target's request: binds the SRQ its XRCETH names (false: NAKed, QP in error).
  bool bind_xrc_srq(Qp* qp, const wire::ParsedPacket& p);
  void duplicate_request(Qp* qp, const wire::ParsedPacket& p);
  bool take_rwqe(Qp* qp);
  bool copy_to_rwqe(Qp* qp, const uint8_t* src, uint32_t len);
  void complete_recv(Qp* qp, const wire::ParsedPacket& p, ibv_wc_status st);
  void complete_recv_error(Qp* qp, uint64_t wr_id, ibv_wc_status st);
  void no_receive_wqe(Qp* qp, Psn psn);  // RC: RNR NAK; UC: the message is dropped
  void send_ack(Qp* qp, uint8_t syndrome, Psn psn);  // with the QP's current MSN
  void send_ack(Qp* qp, uint8_t syndrome, Psn psn, uint32_t msn);
  void queue_ack(Qp* qp, Psn psn);
  void send_nak(Qp* qp, uint8_t syndrome, Psn psn, Counter c);
  void responder_error(Qp* qp, wire::NakCode code, Psn psn, ibv_wc_status local_status);
  bool responder_step(Qp* qp, uint32_t* budget);
  bool send_read_response(Qp* qp, RdAtomicRes& r);
  void send_atomic_ack(Qp* qp, const RdAtomicRes& r);
  RdAtomicRes* find_res(Qp* qp, Psn psn);
  /// Whether a new READ/atomic may take the next responder resource (dropping a replay).
  bool claim_res(Qp* qp);

  Port& port_;
  EngineConfig cfg_;
  wire::MacAddr mac_{};
  std::vector<wire::Gid> gids_;
  std::vector<std::unique_ptr<Neighbor>> neighbors_;
  uint64_t now_ = 0;
  VerbsTracer* tracer_ = nullptr;
  void trace(const VerbsEvent& e) const {
    if (tracer_ != nullptr) tracer_->event(e);
  }
  /// Every role state transition goes through here (set_req_state, set_comp_state,
  /// set_resp_state): counted, and traced when a tracer listens.
  template <typename State>
  void move_role(const Qp* qp, Role r, State& state, State to, Psn psn) {
    if (state == to) return;
    counters_.inc(Counter::role_transitions);
    trace({VerbsEvent::Kind::kRoleState, qp->qpn, 0, static_cast<int>(r),
           static_cast<uint32_t>(state), static_cast<int>(to), psn.value()});
    state = to;
  }
  uint16_t ip_id_ = 0;

  mem::MrTable mrs_;
  std::vector<std::unique_ptr<mem::Pd>> pds_;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Srq>> srqs_;
  std::vector<std::unique_ptr<Xrcd>> xrcds_;
  std::vector<std::unique_ptr<Ah>> ahs_;
  struct McGroup {
    wire::Gid gid{};
    std::vector<Qp*> qps;  // attached, in attach order
  };
  std::vector<McGroup> mcast_;  // groups with at least one QP attached
  std::vector<std::unique_ptr<RawFlow>> flows_;  // by (priority, seq)
  uint64_t next_flow_seq_ = 0;
  std::vector<Qp*> raw_to_;  // raw_receive's scratch: the QPs a frame goes to
  std::vector<std::unique_ptr<RwqTable>> rwq_tables_;
  std::function<void(const wire::Gid&, bool)> group_change_;
  std::vector<std::unique_ptr<Qp>> qps_;  // index = qpn - cfg_.first_qpn
  size_t qp_count_ = 0;                   // live QPs (at most max_qp)
  bool link_up_ = true;
  ibv_mtu frame_mtu_ = IBV_MTU_4096;      // the largest IB MTU the port's frames carry
  uint32_t wire_frame_max_ = UINT32_MAX;  // the longest frame the interface takes (its MTU)
  size_t next_qpn_slot_ = 0;              // where the search for a free QPN starts
  uint32_t next_handle_ = 1;

  TimerWheel timers_;
  Ring<Qp*> active_;  // QPs with something to transmit
  Ring<AsyncEvent> events_;
  std::atomic<uint64_t> last_rx_ns_{0};
  std::atomic<bool> pacer_held_{false};  // paced_qps_ != 0, published after each pass
  size_t paced_qps_ = 0;                  // QPs whose pace timer is armed
  std::atomic<uint64_t> rx_seq_{0};  // written under the engine's lock only
  void note_rx() {
    last_rx_ns_.store(now_, std::memory_order_relaxed);
    rx_seq_.store(rx_seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::vector<Frame*> tx_batch_;
  size_t tx_batch_acks_ = 0;     // how many of tx_batch_ are ACKs (send_ack)
  uint64_t ack_hold_ns_ = 0;     // hold_acks_next_poll()
  uint64_t acks_held_until_ = 0;  // ACKs alone in tx_batch_ are kept until then (0: none)
  size_t acks_held_count_ = 0;    // how many: the front of tx_batch_ (flush_tx sends them last)
  static constexpr size_t kLoopbackQueue = 4096;  // frames to ourselves waiting for poll()
  Ring<Frame*> loopback_;
  Counters counters_;
  bool gsi_open_ = false;
  Ring<GsiMad> gsi_rx_;
  uint32_t gsi_psn_ = 0;

  // Doorbells rung by posting threads: QPs waiting to be scheduled (each at most once, while
  // its `doorbell` flag is set). Both vectors are reserved for max_qp entries at start.
  std::mutex doorbell_mu_;
  std::vector<Qp*> doorbells_;
  std::vector<Qp*> doorbells_taken_;  // the engine's side of the swap
  std::atomic<bool> doorbell_rung_{false};
};

}  // namespace uroce

// The connection manager: what the kernel's rdma_cm and ib_cm do for a RoCE device, for one
// engine. It speaks the CM protocol (IBA chapter 12) in MADs on QP1: REQ, REP, RTU, REJ, MRA,
// DREQ, DREP for connected QPs (RC, UC) and SIDR_REQ / SIDR_REP for UD, with the IP-based
// service IDs and private-data header of rdma_cm, so that its peers may be the kernel's CM or
// another uroce.
//
// It knows nothing of librdmacm's structures: an id is addressed by the handle its owner
// gave it, addresses are GIDs (IPv4 as IPv4-mapped) plus a port, and everything the owner
// must hear about comes out as an Event through the sink, in order. The owner (the verbs
// provider, stack/verbs/ucma.cc) turns them into rdma_cm events. Single-threaded, like the
// engine: every call runs with the engine held. Time comes from the engine's clock.
//
// Two files, one class: stack/cm/rdma_cm.cc is rdma_cm's half (ids, addresses, routes,
// listening, multicast joins, QP attributes, events, the poll loop), stack/cm/ib_cm.cc is
// ib_cm's (the CM protocol: comm IDs, the messages, resends, time wait); stack/cm/cm_id.h is
// the id's record they share.
//
// Not built here (yet): LAP/APR (path migration), the ClassPortInfo redirect. A multicast join
// asks nobody: RoCE has no subnet manager.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "cm/conn_param.h"
#include "engine/engine.h"
#include "wire/addr.h"
#include "wire/cm_mad.h"

namespace uroce::cm {

/// rdma_cm event numbers (rdma_cma.h), and the one the provider handles itself.
enum EventType : int {
  kAddrResolved = 0,
  kAddrError = 1,
  kRouteResolved = 2,
  kRouteError = 3,
  kConnectRequest = 4,
  kConnectResponse = 5,
  kConnectError = 6,
  kUnreachable = 7,
  kRejected = 8,
  kEstablished = 9,
  kDisconnected = 10,
  kTimewaitExit = 15,
  kMulticastJoin = 12,
};

/// An IP endpoint: an IPv4-mapped GID or an IPv6 address, and a port (host order).
struct Endpoint {
  wire::Gid ip{};
  uint16_t port = 0;
  bool ipv6() const { return !wire::is_ipv4_mapped(ip); }
  bool wildcard() const;
  /// 127.0.0.0/8 or ::1: bound without a device (as the kernel's rdma_bind_addr leaves
  /// id->verbs NULL for it); a listener there takes requests to the device's own loopback
  /// addresses only (the udp port on loopback), never one to another address.
  bool loopback() const;
};


struct Event {
  uint64_t handle = 0;         // the id it is about
  uint64_t listen_handle = 0;  // kConnectRequest: the listener (handle = the new id's)
  int type = 0;
  int status = 0;              // 0, or a negative errno / the REJ reason
  ConnParam param;
  ibv_ah_attr ah{};            // UD: the address of the peer
  Endpoint src, dst;           // kConnectRequest: the new id's addresses
  uint8_t pdata_len = 0;
  std::array<uint8_t, 224> pdata{};
};

/// The ids' states (as ib_cm's and rdma_cm's, merged).
enum class State : uint8_t {
  kIdle,
  kAddrQuery,
  kAddrResolved,
  kRouteResolved,
  kListen,
  kReqSent,       // active: REQ out, waiting for REP / REJ
  kRepReceived,   // active: CONNECT_RESPONSE given, waiting for establish()
  kReqReceived,   // passive: CONNECT_REQUEST given, waiting for accept / reject
  kRepSent,       // passive: REP out, waiting for RTU
  kEstablished,
  kDreqSent,
  kDreqReceived,  // the peer disconnected: DISCONNECTED given, DREP once disconnect() is called
  kTimewait,      // disconnected: old MADs for it are answered, never taken for a new one
  kSidrSent,      // UD: SIDR_REQ out
  kClosed,
};
const char* state_name(State s);

class ConnectionManager {
 public:
  using Sink = std::function<void(const Event&)>;
  /// Allocates the handle of a new id (a connection request makes one).
  using NewHandle = std::function<uint64_t()>;

  /// A request for a service no id here listens on: may it be rejected? (Another process on
  /// this interface may own it; the provider knows. Unset: never.)
  using Unowned = std::function<bool(uint16_t ps, uint16_t port, const wire::Gid& ip)>;
  void set_unowned(Unowned u) { unowned_ = std::move(u); }

  /// The udp port on loopback: each process has a 127.0.0.x of its own, and a client that
  /// resolves 127.0.0.1 (any loopback address not its own) means the process listening on
  /// that port. Where that is (cm/rendezvous.h; the provider looks), or nothing yet: the
  /// resolution waits for a listener until its timeout. Unset: the address is taken as given.
  using Rendezvous = std::function<std::optional<wire::Gid>(uint16_t ps, uint16_t port)>;
  void set_rendezvous(Rendezvous r) { rendezvous_ = std::move(r); }

  /// Timeouts, in ns (tests shorten them).
  struct Timing {
    uint8_t cm_response_timeout = 18;  // IBA: 4.096 us * 2^n (~1.07 s) before a resend
    uint8_t max_cm_retries = 15;
    uint64_t timewait_ns = 2'000'000'000;
  };

  ConnectionManager(Engine& engine, Sink sink, NewHandle new_handle, uint64_t seed,
                    const Timing& timing);
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;
  ~ConnectionManager();

  // ---- The verbs of rdma_cm (0 or a positive errno) ------------------------------------------
  int create(uint64_t handle, uint16_t ps, ibv_qp_type type);
  /// Forgets the id. A connected one sends DREQ first; one with a request pending, REJ.
  /// Called from inside the sink (the receiver of an event gives up on its id: a connection
  /// request whose listener is gone), it is done as soon as the sink has returned into
  /// poll(), or at the next poll().
  void destroy(uint64_t handle);
  /// The process is going away (exit, or its last ibv_close_device): every id is destroyed
  /// as above, so each peer hears DREQ (or REJ) once, as the kernel's rdma_cm does when a
  /// process's file is closed. Nothing is resent afterwards: there is nobody left to. Returns
  /// how many connections were told.
  size_t shutdown();
  /// The local address (its port already reserved by the caller).
  int bind(uint64_t handle, const Endpoint& src);
  /// ADDR_RESOLVED once `dst`'s MAC is known (ADDR_ERROR after timeout_ms).
  int resolve_addr(uint64_t handle, const Endpoint& src, const Endpoint& dst, int timeout_ms);
  int resolve_route(uint64_t handle);
  /// rdma_join_multicast: a UD id with a local address on this device (bound, or resolved,
  /// to `group` itself as mckey does) joins multicast group `group`: kMulticastJoin at once
  /// (RoCE has no subnet manager to ask) with the group's address — dgid the group, hop
  /// limit 64, as the kernel's CM gives for RoCEv2 — DestQP 0xFFFFFF and the id's Q_Key.
  /// EINVAL for another id or a group that is not multicast; EAFNOSUPPORT for a group of the
  /// other family.
  int join_multicast(uint64_t handle, const wire::Gid& group);
  int listen(uint64_t handle, int backlog);
  /// Sends REQ (RC/UC) or SIDR_REQ (UD), its starting PSN (our first receive PSN) random.
  int connect(uint64_t handle, const ConnParam& p, const uint8_t* pdata, uint8_t len);
  int accept(uint64_t handle, const ConnParam& p, const uint8_t* pdata, uint8_t len);
  int reject(uint64_t handle, const uint8_t* pdata, uint8_t len, uint16_t reason = 28);
  /// Active side, after CONNECT_RESPONSE: RTU out, established.
  int establish(uint64_t handle);
  int disconnect(uint64_t handle);
  /// rdma_notify(IBV_EVENT_COMM_EST): the QP got traffic before the RTU: established.
  int notify_established(uint64_t handle);
  /// rdma_init_qp_attr: the attributes for moving the id's QP to attr->qp_state.
  int init_qp_attr(uint64_t handle, ibv_qp_attr* attr, int* mask) const;
  void set_tos(uint64_t handle, uint8_t tos);
  void set_ack_timeout(uint64_t handle, uint8_t t);
  State state(uint64_t handle) const;
  /// The GID index and path MTU the id resolved to (for the verbs side).
  int sgid_index(uint64_t handle) const;
  bool addresses(uint64_t handle, Endpoint* src, Endpoint* dst) const;

  // ---- Driving ---------------------------------------------------------------------------------
  /// Takes the MADs the engine queued, resends what timed out, finishes resolutions.
  /// Returns the work done.
  size_t poll();
  /// When poll() must run next even if no MAD comes (TimerWheel::kNever-like UINT64_MAX).
  uint64_t next_deadline() const { return next_deadline_; }
  size_t id_count() const { return ids_.size(); }

  /// Counters (uroce stats shows them next to the engine's).
  struct Stats {
    uint64_t mads_rx = 0, mads_tx = 0, resent = 0, timeouts = 0;
    uint64_t drop_malformed = 0, drop_unmatched = 0, drop_duplicate = 0, drop_not_ours = 0;
    uint64_t rejects_sent = 0, rejects_rcvd = 0;
    uint64_t drop_backlog = 0;  // REQs dropped: the listener had `backlog` unanswered ones
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Id;
  Id* find(uint64_t handle) const;
  Id* by_local_comm_id(uint32_t comm_id) const;
  Id* by_remote(uint32_t remote_comm_id, const wire::Gid& peer) const;
  Id* listener_for(uint16_t ps, uint16_t port, const wire::Gid& dst) const;
  void emit(const Id& id, int type, int status, const uint8_t* pdata = nullptr,
            uint8_t len = 0, uint64_t listen_handle = 0);
  void set_state(Id& id, State s);
  void arm(Id& id, uint64_t at);
  void recompute_deadline();
  bool path_for(Id& id);
  bool send(Id& id, uint16_t attr, const uint8_t* cm_data, uint64_t tid);
  /// Sends a message of the connection's exchange and keeps it, under the id's current TID:
  /// a duplicate of what it answers (the peer's resend) is answered with it again, and
  /// resend_until_answered resends it.
  void send_kept(Id& id, uint16_t attr, const std::array<uint8_t, wire::kCmDataLen>& d);
  /// The kept message goes again every `timeout` (the CM's 4.096 us * 2^timeout) until its
  /// answer comes or max_cm_retries resends are spent.
  void resend_until_answered(Id& id, uint8_t timeout);
  /// Parses the CM data of a message; false (counted as malformed) if it does not parse.
  template <typename T>
  bool parse_cm(const uint8_t* d, T* out) {
    if (T::parse({d, wire::kCmDataLen}, *out) == wire::ParseError::kOk) return true;
    ++stats_.drop_malformed;
    return false;
  }
  bool send_to(const Path& path, uint16_t attr, const uint8_t* cm_data, uint64_t tid);
  void on_mad(const GsiMad& m);
  void on_req(const GsiMad& m, uint64_t tid, const uint8_t* d);
  void on_rep(const GsiMad& m, uint64_t tid, const uint8_t* d);
  void on_rtu(const GsiMad& m, const uint8_t* d);
  void on_rej(const GsiMad& m, const uint8_t* d);
  void on_mra(const GsiMad& m, const uint8_t* d);
  void on_dreq(const GsiMad& m, uint64_t tid, const uint8_t* d);
  void on_drep(const GsiMad& m, const uint8_t* d);
  void on_sidr_req(const GsiMad& m, uint64_t tid, const uint8_t* d);
  void on_sidr_rep(const GsiMad& m, const uint8_t* d);
  void on_timeout(Id& id);
  void reply_rej(const GsiMad& m, uint64_t tid, uint32_t remote_comm_id,
                 wire::CmMsgResponse msg, wire::CmRejReason reason);
  int reject_for(uint64_t handle, const uint8_t* pdata, uint8_t len, wire::CmRejReason reason);
  void enter_timewait(Id& id);
  /// The id goes away: a request in progress is rejected (REJ), a connection disconnected
  /// (DREQ, or the DREP a received DREQ waits for).
  void tell_peer_gone(Id& id);
  /// The connection a message from m's sender names: ours by our comm ID `ours`, held with
  /// that peer, and with the peer's comm ID `theirs` once we know it. Counted as unmatched
  /// when there is none.
  Id* matched(const GsiMad& m, uint32_t ours, std::optional<uint32_t> theirs = std::nullopt);
  /// The connection an answer (RTU, DREP) is for, if it waits for one in state `waiting`
  /// (its resends then stop); another answer is a duplicate, counted.
  Id* answering(const GsiMad& m, uint32_t ours, uint32_t theirs, State waiting);
  /// The listener has `backlog` requests nobody answered yet: counts the drop.
  bool backlog_full(const Id& listener);
  uint32_t new_comm_id();
  uint64_t new_tid();
  /// Hands `e` to the sink (destroy() defers while it runs).
  void sink(const Event& e);
  void destroy_doomed();

  Engine& engine_;
  Sink sink_;
  NewHandle new_handle_;
  Unowned unowned_;
  Rendezvous rendezvous_;
  Timing timing_;
  std::mt19937_64 rng_;
  uint32_t tid_hi_ = 0;
  uint32_t tid_lo_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Id>> ids_;
  std::unordered_map<uint32_t, Id*> by_comm_id_;
  uint64_t next_deadline_ = UINT64_MAX;
  Stats stats_;
  int sinking_ = 0;                // the sink is running
  std::vector<uint64_t> doomed_;   // ids it destroyed meanwhile
};

}  // namespace uroce::cm

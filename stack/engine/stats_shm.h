// Live counters of a running process, published for `uroce stats`: each open device writes
// its engine counters into a small shared-memory file /dev/shm/uroce-<pid>-<device>, refreshed
// by the progress thread; the tool maps it read-only and prints the counters by name.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>

#include "engine/counters.h"
#include "engine/dcqcn.h"

namespace uroce {

/// The connection manager's counters (cm::ConnectionManager::Stats, in its order), shown by
/// `uroce stats` once a program used librdmacm.
struct CmCounterInfo {
  const char* name;
  const char* text;
};
inline constexpr CmCounterInfo kCmCounterInfo[] = {
    {"cm_mads_rx", "CM MADs taken from QP1"},
    {"cm_mads_tx", "CM MADs sent"},
    {"cm_resent", "CM MADs sent again: no answer within the response timeout"},
    {"cm_timeouts", "connections given up after the last resend (UNREACHABLE / error)"},
    {"cm_drop_malformed", "CM MADs dropped: bad header, class, version or attribute"},
    {"cm_drop_unmatched", "CM MADs dropped: no connection has those comm IDs (stale or forged)"},
    {"cm_drop_duplicate", "CM MADs seen before (resends, replays): answered again or dropped"},
    {"cm_drop_not_ours", "REQs for a service nobody here listens on (or not an IP service)"},
    {"cm_rejects_sent", "REJs sent"},
    {"cm_rejects_rcvd", "REJs received"},
    {"cm_drop_backlog", "REQs dropped unanswered: the listener's backlog was full (resent later)"},
};
inline constexpr size_t kCmCounters = std::size(kCmCounterInfo);

/// The packet port's own counters (below the engine), shown by `uroce stats` when not zero.
inline constexpr CmCounterInfo kPortCounterInfo[] = {
    {"port_rx_frames", "frames the port received"},
    {"port_tx_frames", "frames the port sent"},
    {"port_rx_dropped", "frames the NIC, PMD or kernel dropped before uroce saw them (no buffer, ring full); shm: the peer's ring entries out of range, skipped"},
    {"port_rx_oversize", "frames longer than the port takes (AF_XDP: two chunks; af_packet: a super-frame it could not cut), dropped"},
    {"xdp_to_uroce", "AF_XDP: frames uroce's XDP program handed the socket (RoCE for us)"},
    {"xdp_to_kernel", "AF_XDP: frames it left to the kernel (everything else on the interface)"},
    {"port_rx_super", "af_packet: UDP GSO super-frames received from a uroce peer, cut into packets; udp: GRO datagrams so cut"},
    {"port_tx_super", "af_packet: UDP GSO super-frames sent (runs of packets in one write); udp: GSO sends"},
    {"shield_kept", "af_packet: RoCE frames uroce's tc program kept from the kernel's IP layer (uroce read them from its socket)"},
    {"udp_passed_on", "udp, an address shared by several processes: datagrams that came here for another process's QP, passed on to it"},
    {"udp_unowned", "udp, an address shared by several processes: datagrams for a QP no process here has (dropped)"},
};
inline constexpr size_t kPortCounters = std::size(kPortCounterInfo);

/// One QP's transport state, as `uroce stats` shows it (Engine::qp_states): what a stuck
/// program is waiting for. Plain data: it lives in the shared-memory counters file.
struct QpStats {
  enum Flag : uint32_t {
    kRetransmitArmed = 1u << 0,  // a request is outstanding and the ACK timer runs
    kAckPending = 1u << 1,       // a coalesced ACK waits to be sent
    kScheduled = 1u << 2,        // in the engine's transmit list
    kDoorbell = 1u << 3,         // posted work the engine has not picked up yet
  };
  uint32_t qpn;
  uint8_t type;   // ibv_qp_type
  uint8_t state;  // ibv_qp_state
  // Each role's state machine (Requester / Completer / Responder::State).
  uint8_t req_state;
  uint8_t comp_state;
  uint8_t resp_state;
  uint8_t pad[3];
  uint32_t flags;
  uint32_t sq_posted;  // send WQEs not yet completed
  uint32_t rq_posted;  // receive WQEs posted (0 on an SRQ)
  uint32_t sq_psn;     // the next PSN the requester assigns
  uint32_t comp_psn;   // the oldest PSN not yet acknowledged
  uint32_t epsn;       // the PSN the responder expects next
  uint32_t msn;
  uint32_t cwnd;
  uint8_t retry_left;
  uint8_t rnr_retry_left;
  uint16_t pad2;
  uint64_t timer_in_us;  // until the ACK timer fires (kRetransmitArmed)
};

struct StatsShm {
  static constexpr uint64_t kMagic = 0x75726f6365737434ull;  // "urocest4" (progress_backoffs)
  uint64_t magic;
  uint32_t n_counters;      // Counter::kCount when written
  uint32_t n_parse_errors;  // wire::ParseError::kCount when written
  char device[64];
  uint64_t updated_ns;
  uint64_t values[static_cast<size_t>(Counter::kCount)];
  uint64_t parse_errors[static_cast<size_t>(wire::ParseError::kCount)];
  // The progress thread, written by it as it goes (docs/threading.md): whether it is parked
  // (sleeping in the kernel until traffic, a deadline or posted work) right now, how often it
  // parked, and what woke it each time.
  uint64_t progress_parked;
  uint64_t progress_parks;
  uint64_t progress_woke_traffic;   // a frame arrived
  uint64_t progress_woke_kick;      // an application thread left work
  uint64_t progress_woke_deadline;  // a timer (retransmit, ARP, ...) or the link watch
  uint64_t progress_answers;  // polls that received the application's answer before returning
  uint64_t progress_yields;   // empty polls that gave the CPU away while the pacer held data
  uint64_t progress_backoffs;  // progress = poll: times the spinning thread found the CPUs crowded
  uint64_t cm[kCmCounters];         // kCmCounterInfo's; all 0 while no CM runs
  uint64_t port[kPortCounters];     // kPortCounterInfo's
  // DCQCN: the QPs held below line rate right now, with their rate and alpha.
  static constexpr size_t kCcQps = 16;
  uint32_t line_rate_mbps;
  uint32_t cc_qps;  // entries in cc (more limited QPs than kCcQps: the first by QPN)
  CcQpStats cc[kCcQps];
  // Every QP past RESET (the first kQps by QPN): its transport state.
  static constexpr size_t kQps = 16;
  uint32_t qps;
  uint32_t qps_total;  // QPs past RESET, shown or not
  QpStats qp[kQps];
};

inline std::string stats_shm_name(int pid, const std::string& device) {
  return "/uroce-" + std::to_string(pid) + "-" + device;
}

}  // namespace uroce

// Per-reason counters for every drop, NAK, retransmission and timeout — uroce's equivalent of
// rdma_rxe's hw_counters. One flat array indexed by an enum, so that counting is a single
// increment on the hot path and tools can print them all by name.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "wire/error.h"

namespace uroce {

#define UROCE_COUNTERS(X)                                                               \
  X(rx_frames, "frames received from the port")                                         \
  X(rx_roce, "RoCEv2 packets accepted by validation")                                   \
  X(rx_not_roce, "frames that were not RoCEv2 (ARP, other UDP, other protocols)")       \
  X(rx_drop_malformed, "RoCEv2 frames dropped by the parser (see rx_parse_* counters)") \
  X(rx_icrc_ident_solved,                                                               \
    "ICRCs checked with the IPv4 identification solved for (a UDP socket hides it)")     \
  X(rx_drop_wrong_dst, "frames not addressed to this device's MAC or IP")               \
  X(rx_drop_unknown_qpn, "destination QP does not exist")                               \
  X(rx_drop_gsi, "packets for QP1 while no connection manager runs (no librdmacm)")     \
  X(rx_drop_gsi_bad, "packets for QP1 that are not a UD SEND with the GSI Q_Key")       \
  X(rx_drop_gsi_full, "CM MADs dropped: the connection manager's queue was full")        \
  X(rx_gsi, "CM MADs received on QP1")                                                  \
  X(tx_gsi, "CM MADs sent from QP1")                                                    \
  X(rx_drop_qp_type, "opcode's transport does not match the QP type")                   \
  X(xrc_bad_srqn, "XRC requests naming no SRQ of the target's XRC domain (NAKed)")       \
  X(rx_drop_qp_state, "QP is not in a state that accepts this packet")                  \
  X(rx_drop_bad_pkey, "P_Key does not match the QP's partition")                        \
  X(rx_drop_bad_qkey, "UD Q_Key does not match the QP's Q_Key")                         \
  X(rx_drop_bad_src, "RC/UC packet from an address other than the QP's peer")           \
  X(rx_drop_ud_no_recv, "UD datagram dropped: no receive WQE posted")                   \
  X(rx_mcast, "multicast datagrams handed to an attached QP (one per QP)")              \
  X(rx_raw, "frames steered to a raw-packet QP by its flows (one per QP)")              \
  X(rx_drop_raw_no_recv, "frames for a raw-packet QP dropped: no receive WQE posted")   \
  X(rx_drop_raw_flow, "frames a flow rule with the drop action matched")                \
  X(tm_matched, "tag matching: messages that matched a tagged buffer")                  \
  X(tm_unexpected, "tag matching: tagged messages that matched none (to a plain receive)") \
  X(rx_drop_uc_msg, "UC packets dropped (PSN gap, no receive WQE or bad access)")       \
  X(rx_drop_uc_stale, "UC packets older than the expected PSN (a copy, or overtaken): dropped") \
  X(rx_drop_unexpected_resp, "response or ACK that matches no outstanding request")     \
  X(rx_drop_cnp, "CNPs for no QP of ours, a UD QP, or from an address not the QP's peer") \
  X(cnp_rcvd, "CNPs received for a QP of ours (DCQCN cuts its rate unless ecn = no)")   \
  X(cc_rate_cuts, "DCQCN rate cuts (at most one per rate_reduce_monitor_period per QP)") \
  X(cc_paced, "times a rate-limited QP had to wait for its pacer before a packet")      \
  X(rx_ce_marked, "packets that arrived marked CE (congestion experienced) by a switch") \
  X(cnp_sent, "CNPs sent (a CE-marked request or READ response arrived)")               \
  X(cnp_held, "CE marks not answered: a CNP went to that QP within min_time_between_cnps") \
  X(tx_frames, "frames transmitted")                                                    \
  X(tx_loopback, "frames delivered to this device itself (loopback)")                   \
  X(tx_raw, "frames sent by raw-packet QPs")                                            \
  X(tx_gsi_copies, "CM MADs to our own address, sent out too (other processes)")        \
  X(tx_no_buffers, "transmit postponed: frame pool exhausted or port busy")             \
  X(tx_drop_mtu, "frames longer than the interface's MTU (lowered under the QP): lost")   \
  X(dup_requests, "duplicate requests received (PSN behind ePSN)")                      \
  X(dup_reads_replayed, "duplicate READ requests answered from saved state")            \
  X(dup_atomics_replayed, "duplicate atomics answered without executing again")         \
  X(flushes, "FLUSH requests carried out (global visibility, persistence: msync)")      \
  X(replays_dropped, "replays of old READs/atomics given up for a newer request's slot")  \
  X(out_of_seq_requests, "requests ahead of ePSN (a packet was lost)")                  \
  X(seq_naks_sent, "NAK PSN sequence error sent")                                       \
  X(rnr_naks_sent, "RNR NAK sent (no receive WQE)")                                     \
  X(inv_req_naks_sent, "NAK invalid request sent")                                      \
  X(access_naks_sent, "NAK remote access error sent")                                   \
  X(rem_op_naks_sent, "NAK remote operational error sent")                              \
  X(acks_sent, "ACK packets sent")                                                      \
  X(acks_held, "bursts of ACKs kept back for the application's reply, to leave with it")  \
  X(acks_held_alone, "of those, bursts that left alone (no reply came in time)")          \
  X(seq_naks_rcvd, "NAK PSN sequence error received")                                   \
  X(rnr_naks_rcvd, "RNR NAK received")                                                  \
  X(error_naks_rcvd, "NAK invalid request / access / operational error received")       \
  X(implicit_naks, "READ/ATOMIC responses missing when a later PSN was ACKed")          \
  X(retransmit_timeouts, "retransmission timer expirations")                            \
  X(retransmitted_pkts, "packets sent again (go-back-N)")                               \
  X(retry_exceeded, "WQEs completed with IBV_WC_RETRY_EXC_ERR")                         \
  X(rnr_retry_exceeded, "WQEs completed with IBV_WC_RNR_RETRY_EXC_ERR")                 \
  X(cq_overflows, "completions lost to a full CQ (the CQ is then in error)")            \
  X(completions, "work completions generated")                                          \
  X(role_transitions, "requester/completer/responder state changes (UROCE_PCAP traces each)") \
  X(flushed_wqes, "WQEs flushed with IBV_WC_WR_FLUSH_ERR")                              \
  X(arp_received, "ARP packets received")                                               \
  X(arp_replies_sent, "ARP replies sent for our IPv4 address")                          \
  X(arp_requests_sent, "ARP requests sent to resolve a neighbour")                      \
  X(arp_failures, "neighbours that did not answer ARP")                                 \
  X(access_revoked, "WRITE/READ stopped mid-message: its MR was deregistered or changed") \
  X(inv_rkey_refused, "SEND with invalidate naming a key that cannot be invalidated")   \
  X(windows_invalidated, "type 2 memory windows invalidated by a peer's SEND with invalidate")

enum class Counter : uint16_t {
#define UROCE_X(id, text) id,
  UROCE_COUNTERS(UROCE_X)
#undef UROCE_X
      kCount
};

struct CounterInfo {
  std::string_view name, text;
};
inline constexpr std::array<CounterInfo, static_cast<size_t>(Counter::kCount)> kCounterInfo = {{
#define UROCE_X(id, text) {#id, text},
    UROCE_COUNTERS(UROCE_X)
#undef UROCE_X
}};

class Counters {
 public:
  void inc(Counter c, uint64_t n = 1) { v_[static_cast<size_t>(c)] += n; }
  void inc(wire::ParseError e) { parse_[static_cast<size_t>(e)] += 1; }
  uint64_t get(Counter c) const { return v_[static_cast<size_t>(c)]; }
  uint64_t get(wire::ParseError e) const { return parse_[static_cast<size_t>(e)]; }
  uint64_t operator[](Counter c) const { return get(c); }
  uint64_t operator[](wire::ParseError e) const { return get(e); }

 private:
  std::array<uint64_t, static_cast<size_t>(Counter::kCount)> v_{};
  std::array<uint64_t, static_cast<size_t>(wire::ParseError::kCount)> parse_{};
};

}  // namespace uroce

// What both halves of the connection manager share (stack/cm/rdma_cm.cc: the ids, their
// addresses and the driving; stack/cm/ib_cm.cc: the CM protocol on QP1): the id's record and
// a few numbers of rdma_cm's. Private to stack/cm.
#pragma once

#include <array>
#include <cstdint>

#include "cm/cm.h"
#include "wire/cm_mad.h"

namespace uroce::cm {

inline constexpr uint32_t kRdmaUdpQkey = 0x01234567;  // RDMA_UDP_QKEY: the Q_Key of rdma_cm's UD ids
inline constexpr uint8_t kDefaultAckTimeout = 14;     // ~67 ms: the QP's local ACK timeout

/// One id: its addresses and route (rdma_cm's part), and the connection's exchange (ib_cm's).
struct ConnectionManager::Id {
  uint64_t handle = 0;
  uint16_t ps = 0;
  ibv_qp_type type = IBV_QPT_RC;
  State state = State::kIdle;
  Endpoint src, dst;
  bool bound = false;
  int backlog = 0;
  // Resolution and the path.
  Path path;
  bool have_path = false;
  bool asks_rendezvous = false;  // dst is 127.0.0.1: the listener's own address is not known yet
  uint64_t deadline = UINT64_MAX;  // a timer (resend, resolution, time wait)
  // The connection.
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint64_t tid = 0;            // of the exchange in progress
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // A REQ's or REP's starting PSN is the PSN its sender's QP expects to receive first (the
  // kernel's ib_cm: the active side sends from the REP's PSN, the passive from the REQ's).
  uint32_t local_psn = 0;      // ours: our QP's first receive PSN, the peer's first send PSN
  uint32_t remote_psn = 0;     // the peer's: its first receive PSN, our first send PSN
  ibv_mtu mtu = IBV_MTU_1024;
  ConnParam param{};           // ours (after negotiation)
  uint8_t remote_response_timeout = 20;
  uint8_t ack_timeout = kDefaultAckTimeout;
  uint8_t tos = 0;
  uint8_t retries_left = 0;
  uint8_t resend_timeout = 18;
  uint64_t listen_handle = 0;  // passive: the listener it came from
  std::array<uint8_t, wire::kCmDataLen> last{};  // the message to resend
  uint16_t last_attr = 0;
  uint64_t last_tid = 0;
  bool has_last = false;
};

}  // namespace uroce::cm

// What the verbs side did, for a trace beside the packet capture (UROCE_PCAP): work requests
// posted, completions made, QP state changes, and the transport's timers firing. The engine
// reports them to a VerbsTracer when one is set (the provider writes them to CAPTURE.verbs,
// which uroce-dissect --ladder draws at the edge of the local lane); nothing otherwise.
#pragma once

#include <cstdint>

namespace uroce {

struct VerbsEvent {
  enum class Kind : uint8_t {
    kPostSend,           // a send WR taken (wr_id, opcode = ibv_wr_opcode, length)
    kPostRecv,           // a receive WR taken (wr_id, length = the scatter list's bytes)
    kCompletion,         // a completion queued (wr_id, opcode = ibv_wc_opcode, length, status)
    kQpState,            // the QP entered state `status` (an ibv_qp_state)
    kRetransmitTimeout,  // no ACK in time: the requester goes back to `psn`
    kRnrResend,          // an RNR NAK's wait is over: the requester resends from `psn`
    kRate,               // DCQCN changed the QP's rate: opcode = RateCause, length = the
                         // rate (Mb/s), psn = the target rate (Mb/s), status = alpha x 1024
    kRoleState,          // a role's state machine moved: opcode = Role, length = the state
                         // it left, status = the state it entered, psn = the PSN concerned
    kRateLimit,          // the application set the QP's rate limit: length = kbit/s (0:
                         // none), status = the burst it allows (bytes)
  };
  enum RateCause : int { kRateCut, kRateTimer, kRateBytes, kRateLine };
  Kind kind = Kind::kPostSend;
  uint32_t qpn = 0;
  uint64_t wr_id = 0;
  int opcode = 0;
  uint32_t length = 0;
  int status = 0;
  uint32_t psn = 0;
};

class VerbsTracer {
 public:
  virtual ~VerbsTracer() = default;
  /// Called from the engine, possibly from several application threads at once.
  virtual void event(const VerbsEvent& e) = 0;
};

}  // namespace uroce

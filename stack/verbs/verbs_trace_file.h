// The verbs side of a trace: with UROCE_PCAP=X (or uroce run --pcap X) the provider also
// writes X.verbs, one line per event the engine reports (engine/verbs_trace.h), stamped with
// the clock the capture's frames are stamped with, so that uroce-dissect --ladder can draw
// each post and completion beside the packets it caused or came from. Tab-separated:
//
//   # uroce verbs events: time_ns event qpn wr_id opcode length status psn
//   device <tab> IPv4 <tab> IPv6        (the local endpoint: "-" where there is none)
//   1234567 <tab> post_send <tab> 17 <tab> 5 <tab> RDMA_WRITE <tab> 65536 <tab> - <tab> -
//   1234999 <tab> completion <tab> 17 <tab> 5 <tab> RDMA_WRITE <tab> 65536 <tab> success <tab> -
//   ...      qp_state 17 - RTS - - -;  retransmit_timeout 17 - - - - 12345;  rnr_resend ...
//   ...      rate 17 - cut 5000 0.502 10000   (DCQCN: cause, rate Mb/s, alpha, target Mb/s)
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "engine/verbs_trace.h"

namespace uroce::verbs {

class VerbsTraceFile final : public VerbsTracer {
 public:
  /// Creates (truncates) `path`; nullptr and *error when it cannot.
  static std::unique_ptr<VerbsTraceFile> open(const std::string& path, const std::string& ipv4,
                                              const std::string& ipv6, std::string* error);
  ~VerbsTraceFile() override;
  void event(const VerbsEvent& e) override;

 private:
  explicit VerbsTraceFile(std::FILE* f) : f_(f) {}
  std::mutex mu_;
  std::FILE* f_;
  uint64_t flushed_ns_ = 0;
};

}  // namespace uroce::verbs

#include "verbs/verbs_trace_file.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "verbs/provider.h"  // now_ns: the clock the capture's frames are stamped with

namespace uroce::verbs {

namespace {

const char* wr_opcode_name(int op) { return wr_info(op).name; }

const char* wc_opcode_name(int op) {
  switch (op) {
    case IBV_WC_SEND: return "SEND";
    case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "RDMA_READ";
    case IBV_WC_COMP_SWAP: return "COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "FETCH_ADD";
    case IBV_WC_BIND_MW: return "BIND_MW";
    case IBV_WC_LOCAL_INV: return "LOCAL_INV";
    case IBV_WC_ATOMIC_WRITE: return "ATOMIC_WRITE";
    case UROCE_WC_FLUSH: return "FLUSH";
    case IBV_WC_RECV: return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
    default: return "OTHER";
  }
}

const char* state_name(int st) {
  switch (st) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "UNKNOWN";
  }
}

/// ibv_wc_status as its enum's name without the prefix, lower case: "success", "retry_exc_err".
std::string status_name(int st) {
  static const char* const kNames[] = {
      "success",        "loc_len_err",      "loc_qp_op_err",   "loc_eec_op_err",
      "loc_prot_err",   "wr_flush_err",     "mw_bind_err",     "bad_resp_err",
      "loc_access_err", "rem_inv_req_err",  "rem_access_err",  "rem_op_err",
      "retry_exc_err",  "rnr_retry_exc_err", "loc_rdd_viol_err", "rem_inv_rd_req_err",
      "rem_abort_err",  "inv_eecn_err",     "inv_eec_state_err", "fatal_err",
      "resp_timeout_err", "general_err",    "tm_err",          "tm_rndv_incomplete"};
  if (st >= 0 && static_cast<size_t>(st) < std::size(kNames)) return kNames[st];
  return "status_" + std::to_string(st);
}

}  // namespace

std::unique_ptr<VerbsTraceFile> VerbsTraceFile::open(const std::string& path,
                                                     const std::string& ipv4,
                                                     const std::string& ipv6,
                                                     std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "we");  // close-on-exec
  if (f == nullptr) {
    *error = path + ": " + std::strerror(errno);
    return nullptr;
  }
  std::fprintf(f, "# uroce verbs events: time_ns event qpn wr_id opcode length status psn\n"
                  "device\t%s\t%s\n",
               ipv4.empty() ? "-" : ipv4.c_str(), ipv6.empty() ? "-" : ipv6.c_str());
  std::fflush(f);
  return std::unique_ptr<VerbsTraceFile>(new VerbsTraceFile(f));
}

VerbsTraceFile::~VerbsTraceFile() { std::fclose(f_); }

void VerbsTraceFile::event(const VerbsEvent& e) {
  using K = VerbsEvent::Kind;
  const uint64_t t = now_ns();
  std::lock_guard<std::mutex> g(mu_);
  switch (e.kind) {
    case K::kPostSend:
      std::fprintf(f_, "%" PRIu64 "\tpost_send\t%u\t%" PRIu64 "\t%s\t%u\t-\t-\n", t, e.qpn,
                   e.wr_id, wr_opcode_name(e.opcode), e.length);
      break;
    case K::kPostRecv:
      std::fprintf(f_, "%" PRIu64 "\tpost_recv\t%u\t%" PRIu64 "\t-\t%u\t-\t-\n", t, e.qpn,
                   e.wr_id, e.length);
      break;
    case K::kCompletion:
      std::fprintf(f_, "%" PRIu64 "\tcompletion\t%u\t%" PRIu64 "\t%s\t%u\t%s\t-\n", t, e.qpn,
                   e.wr_id, wc_opcode_name(e.opcode), e.length, status_name(e.status).c_str());
      break;
    case K::kQpState:
      std::fprintf(f_, "%" PRIu64 "\tqp_state\t%u\t-\t%s\t-\t-\t-\n", t, e.qpn,
                   state_name(e.status));
      break;
    case K::kRetransmitTimeout:
    case K::kRnrResend:
      std::fprintf(f_, "%" PRIu64 "\t%s\t%u\t-\t-\t-\t-\t%u\n", t,
                   e.kind == K::kRnrResend ? "rnr_resend" : "retransmit_timeout", e.qpn, e.psn);
      break;
    case K::kRoleState: {
      // role_state QPN - ROLE FROM TO PSN
      const Role r = static_cast<Role>(e.opcode);
      std::fprintf(f_, "%" PRIu64 "\trole_state\t%u\t-\t%s\t%s\t%s\t%u\n", t, e.qpn,
                   role_name(r), role_state_name(r, static_cast<int>(e.length)),
                   role_state_name(r, e.status), e.psn);
      break;
    }
    case K::kRateLimit:
      // rate_limit QPN - - KBPS BURST_BYTES -
      std::fprintf(f_, "%" PRIu64 "\trate_limit\t%u\t-\t-\t%u\t%u\t-\n", t, e.qpn, e.length,
                   static_cast<unsigned>(e.status));
      break;
    case K::kRate: {
      // rate QPN - CAUSE RATE_MBPS ALPHA TARGET_MBPS (alpha as a fraction, 3 decimals)
      static const char* const kCause[] = {"cut", "timer", "bytes", "line"};
      std::fprintf(f_, "%" PRIu64 "\trate\t%u\t-\t%s\t%u\t%.3f\t%u\n", t, e.qpn,
                   kCause[e.opcode & 3], e.length, e.status / 1024.0, e.psn);
      break;
    }
  }
  // Written out every 10 ms at most: a killed program loses little, a busy one is not slowed
  // by a write per event.
  if (t - flushed_ns_ > 10'000'000) {
    std::fflush(f_);
    flushed_ns_ = t;
  }
}

}  // namespace uroce::verbs

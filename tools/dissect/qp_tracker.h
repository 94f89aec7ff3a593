// Following queue pairs across a capture.
//
// A request stream is everything one requester sends to one responder QP: keyed by
// (source IP, destination IP, destination QPN). For each stream the tracker keeps the next
// PSN it expects and notices gaps (packets missing before this point), retransmissions
// (PSNs below the expected one), and FIRST/MIDDLE/LAST order within messages.
//
// Responses (ACK, NAK, RNR NAK, READ responses, ATOMIC ACKs) travel back to the requester's
// QPN, which request packets never carry. A response stream (responder IP, requester IP,
// requester QPN) is therefore paired with a request stream by the IP pair, and by PSN range
// when the IP pair has several request streams; the pairing is then remembered.
//
// The tracker sees what the capture point saw, not what either end saw: a "gap" here is a
// packet lost before the capture point (or not captured), and a responder may still NAK a
// packet the capture shows, because it was lost after the capture point.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dissect/dissector.h"
#include "wire/psn.h"

namespace uroce::dissect {

enum class NoteKind : uint8_t {
  kNewStream,       // first request packet of a stream
  kInOrder,         // request PSN is the expected one
  kGap,             // request PSN beyond the expected one: packets missing before it
  kRetransmission,  // request PSN below the expected one: sent again
  kOpSequence,      // FIRST / MIDDLE / LAST out of order within a message
  kPairing,         // a response stream was matched with its request stream
  kAck,             // which PSNs and messages an ACK acknowledges
  kDuplicateAck,    // an ACK that acknowledges nothing new
  kNak,             // a NAK, its reason and the PSN it points to
  kRnrNak,          // receiver not ready, with the timer
  kResend,          // the first packet resent after a NAK / RNR NAK, with the observed wait
  kReadRequest,     // a READ request and the PSNs its response will use
  kReadResponse,    // a READ response segment matched with its request
  kAtomicRequest,
  kAtomicAck,   // an ATOMIC ACK matched with its request
  kCnp,         // congestion notification
  kUnmatched,   // a response that matches no request in the capture
  kNotTracked,  // a packet left out of tracking (bad ICRC)
  kConnection,  // a connection manager MAD: the connection's state, or its first PSN checked
  kCount
};

/// Machine name of a note kind: "gap", "retransmission", ...
std::string_view to_string(NoteKind k);

struct Note {
  NoteKind kind;
  std::string text;
  // kGap: packets missing; kResend: wait in ns; kReadResponse: the READ request's frame;
  // otherwise 0
  int64_t value = 0;
};

/// The path MTU the tracker uses to work out how many PSNs a READ request consumes.
struct PathMtu {
  uint32_t bytes = 0;   // 0: nothing known (the tracker then learns it or assumes 1024)
  bool assumed = true;  // false when FIRST/MIDDLE payloads showed it
  std::string how;      // one sentence saying where the value comes from
};

/// "1024 bytes, assumed: ..." / "1024 bytes, from the largest FIRST/MIDDLE payload (...)".
std::string describe(const PathMtu& m);

/// Infers the path MTU from a capture: FIRST and MIDDLE packets always carry exactly one
/// MTU of payload, so the largest such payload is the MTU. Without any, the MTU is assumed.
class MtuScanner {
 public:
  void observe(const Frame& f);
  PathMtu result() const;

 private:
  size_t seg_max_ = 0;  // largest FIRST/MIDDLE payload
  std::string_view seg_opcode_;
  uint64_t seg_frame_ = 0;
  size_t any_max_ = 0;  // largest payload of any RoCE packet
};

struct StreamKey {
  wire::Gid src{};
  wire::Gid dst{};
  uint32_t qpn = 0;
  auto operator<=>(const StreamKey&) const = default;
};

struct ReadRequest {
  wire::Psn psn;          // the first response PSN
  uint32_t segments = 1;  // response packets expected: ceil(len / MTU)
  uint64_t va = 0;
  uint32_t len = 0;
  uint64_t frame = 0;
  uint32_t last_segment = 0;  // highest segment seen so far
  uint64_t bytes = 0;         // READ data received so far
  // What the READ RESPONSE answers: a READ, or a FLUSH / ATOMIC WRITE (IBA 1.5: answered by
  // one READ RESPONSE ONLY without data, from the same responder resources).
  wire::Operation op = wire::Operation::kReadRequest;
};

struct AtomicRequest {
  wire::Psn psn;
  wire::Operation op = wire::Operation::kFetchAdd;
  uint64_t va = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
  uint64_t frame = 0;
  bool answered = false;
};

struct GapRange {
  wire::Psn first;
  uint32_t count = 0;
  uint64_t frame = 0;  // where the gap was noticed
  bool contains(wire::Psn p) const {
    const int32_t d = p - first;
    return d >= 0 && static_cast<uint32_t>(d) < count;
  }
};

struct RnrEvent {
  uint64_t nak_frame = 0;
  int64_t nak_ns = 0;
  wire::Psn psn;
  uint8_t timer_code = 0;
  bool resent = false;
  uint64_t resend_frame = 0;
  int64_t wait_ns = 0;
};

/// Everything known about one request stream and the responses paired with it.
struct RequestStream {
  StreamKey key;
  wire::Transport transport = wire::Transport::kRc;
  uint64_t first_frame = 0;

  // Sequence state.
  wire::Psn first_psn;
  wire::Psn next_psn;  // the next new PSN expected
  enum class Msg : uint8_t { kUnknown, kBetween, kInside } msg = Msg::kUnknown;
  wire::Operation msg_op = wire::Operation::kSend;

  // Response side.
  bool paired = false;
  uint32_t requester_qpn = 0;  // destination QP of the responses
  bool have_ack = false;
  wire::Psn acked;  // highest PSN acknowledged, explicitly or implicitly
  bool have_msn = false;
  uint32_t msn = 0;
  bool nak_pending = false;  // a PSN sequence error NAK whose resend has not been seen
  wire::Psn nak_psn;
  uint64_t nak_frame = 0;
  int64_t nak_ns = 0;

  std::deque<ReadRequest> reads;
  std::deque<AtomicRequest> atomics;
  std::deque<GapRange> gap_log;
  std::vector<RnrEvent> rnr;

  // Statistics.
  uint64_t req_packets = 0;
  uint64_t req_payload_bytes = 0;
  uint64_t req_wire_bytes = 0;
  uint64_t new_packets = 0;
  uint64_t retransmitted = 0;
  uint64_t gaps = 0;
  uint64_t missing = 0;   // packets missing, summed over all gaps
  uint64_t messages = 0;  // LAST / ONLY request packets seen in order
  uint64_t op_seq_errors = 0;
  uint64_t reads_requested = 0;
  uint64_t atomics_requested = 0;
  uint64_t resp_packets = 0;
  uint64_t resp_payload_bytes = 0;
  uint64_t resp_wire_bytes = 0;
  uint64_t acks = 0;
  uint64_t duplicate_acks = 0;
  uint64_t read_responses = 0;
  uint64_t read_matched = 0;
  uint64_t reads_completed = 0;
  uint64_t atomic_acks = 0;
  uint64_t atomic_matched = 0;
  uint64_t rnr_naks = 0;
  std::array<uint64_t, 32> naks{};  // NAKs by NAK code

  wire::Psn last_psn() const { return next_psn - 1; }
  uint64_t nak_total() const;
};

/// A connection the CM set up (REQ / REP / RTU ... on QP1), followed by comm IDs.
struct CmConnection {
  wire::Gid active{}, passive{};  // IP addresses: the side that sent the REQ, and the other
  uint32_t active_comm = 0, passive_comm = 0;
  uint32_t active_qpn = 0, passive_qpn = 0;
  uint32_t req_psn = 0, rep_psn = 0;  // each the PSN its sender expects to receive first
  uint64_t service_id = 0;
  uint64_t req_frame = 0, rep_frame = 0;
  int64_t req_ns = 0;
  enum class State : uint8_t { kRequested, kReplied, kEstablished, kDisconnecting, kClosed,
                               kRejected } state = State::kRequested;
  bool checked_to_passive = false, checked_to_active = false;  // first data PSNs compared
};

class QpTracker {
 public:
  /// `mtu.bytes == 0`: learn the MTU from the packets as they come (single pass).
  explicit QpTracker(PathMtu mtu = {});

  /// Feeds one frame, in capture order; returns what it revealed. Non-RoCE and malformed
  /// frames are ignored; bad-ICRC frames are not tracked (a receiver drops them).
  std::vector<Note> observe(const Frame& f);

  const std::vector<RequestStream>& streams() const { return streams_; }
  const PathMtu& mtu() const { return mtu_; }
  const std::vector<CmConnection>& connections() const { return cm_; }
  /// "10.77.0.12 → 10.77.0.11 QP 0x000011"
  static std::string stream_name(const StreamKey& k);
  /// Unmatched responses (no request stream could be found for them).
  uint64_t unmatched() const { return unmatched_; }
  /// The request stream (index into streams()) the frame last observed belongs to, as a
  /// request or as a paired response; -1 if none (not RoCE, CM, CNP, bad ICRC, unmatched).
  int64_t last_stream() const { return last_stream_; }

 private:
  void on_cm(const Frame& f, const wire::CmMessage& m, std::vector<Note>& notes);
  /// A new RC/UC request stream: when the CM set its QPs up, is its first PSN the announced one?
  void check_cm_psn(const StreamKey& key, wire::Psn psn, std::vector<Note>& notes);
  void on_request(const Frame& f, std::vector<Note>& notes);
  void on_response(const Frame& f, std::vector<Note>& notes);
  void check_message_order(RequestStream& s, const wire::OpcodeInfo& info,
                           std::vector<Note>& notes);
  void retransmission(RequestStream& s, const Frame& f, std::vector<Note>& notes);
  void on_aeth(RequestStream& s, const Frame& f, bool explicit_ack, std::vector<Note>& notes);
  void on_read_response(RequestStream& s, const Frame& f, std::vector<Note>& notes);
  void on_atomic_ack(RequestStream& s, const Frame& f, std::vector<Note>& notes);
  size_t pair(const Frame& f, std::vector<Note>& notes);
  uint32_t mtu_for_reads(uint32_t len, std::vector<Note>& notes);
  void learn_mtu(const Frame& f);

  static constexpr size_t kNone = static_cast<size_t>(-1);
  PathMtu mtu_;
  bool mtu_note_given_ = false;
  std::vector<RequestStream> streams_;
  std::map<StreamKey, size_t> requests_;   // request stream key -> index
  std::map<StreamKey, size_t> responses_;  // response stream key -> request stream index
  uint64_t unmatched_ = 0;
  int64_t last_stream_ = -1;
  std::vector<CmConnection> cm_;
};

}  // namespace uroce::dissect

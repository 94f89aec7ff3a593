#include "dissect/qp_tracker.h"

#include <algorithm>
#include <cinttypes>
#include <climits>

namespace uroce::dissect {

using wire::Operation;
using wire::Position;
using wire::Psn;

namespace {

constexpr size_t kMaxOutstanding = 1024;  // remembered READ / atomic requests per stream
constexpr size_t kMaxGapLog = 64;         // remembered gaps per stream
constexpr uint32_t kValidMtus[] = {256, 512, 1024, 2048, 4096};

const char* s_if(uint64_t n) { return n == 1 ? "" : "s"; }

std::string sv(std::string_view v) { return std::string(v); }

uint32_t segments_for(uint32_t len, uint32_t mtu) { return len == 0 ? 1 : (len + mtu - 1) / mtu; }

template <typename T>
void push_bounded(std::deque<T>& d, T v, size_t max) {
  d.push_back(std::move(v));
  while (d.size() > max) d.pop_front();
}

}  // namespace

std::string_view to_string(NoteKind k) {
  switch (k) {
    case NoteKind::kNewStream: return "new_stream";
    case NoteKind::kInOrder: return "in_order";
    case NoteKind::kGap: return "gap";
    case NoteKind::kRetransmission: return "retransmission";
    case NoteKind::kOpSequence: return "op_sequence";
    case NoteKind::kPairing: return "pairing";
    case NoteKind::kAck: return "ack";
    case NoteKind::kDuplicateAck: return "duplicate_ack";
    case NoteKind::kNak: return "nak";
    case NoteKind::kRnrNak: return "rnr_nak";
    case NoteKind::kResend: return "resend";
    case NoteKind::kReadRequest: return "read_request";
    case NoteKind::kReadResponse: return "read_response";
    case NoteKind::kAtomicRequest: return "atomic_request";
    case NoteKind::kAtomicAck: return "atomic_ack";
    case NoteKind::kCnp: return "cnp";
    case NoteKind::kUnmatched: return "unmatched";
    case NoteKind::kNotTracked: return "not_tracked";
    case NoteKind::kConnection: return "connection";
    case NoteKind::kCount: break;
  }
  return "?";
}

// ---- path MTU ----

void MtuScanner::observe(const Frame& f) {
  if (!f.is_roce() || f.info() == nullptr) return;
  any_max_ = std::max(any_max_, f.payload_len);
  const Position pos = f.info()->pos;
  if ((pos == Position::kFirst || pos == Position::kMiddle) && f.payload_len > seg_max_) {
    seg_max_ = f.payload_len;
    seg_opcode_ = f.info()->name;
    seg_frame_ = f.index;
  }
}

PathMtu MtuScanner::result() const {
  if (seg_max_ > 0) {
    return {static_cast<uint32_t>(seg_max_), false,
            strf("from the largest FIRST/MIDDLE payload (%s in #%" PRIu64
                 "); such packets always carry exactly one MTU",
                 sv(seg_opcode_).c_str(), seg_frame_)};
  }
  if (any_max_ > 1024) {
    uint32_t m = 4096;
    for (uint32_t v : kValidMtus) {
      if (v >= any_max_) {
        m = v;
        break;
      }
    }
    return {
        m, true,
        strf("no FIRST/MIDDLE packet shows it; a %zu-byte payload needs at least %u", any_max_, m)};
  }
  return {1024, true,
          "no FIRST/MIDDLE packet shows it; 1024 is what a 1500-byte Ethernet MTU gives"};
}

std::string describe(const PathMtu& m) {
  return strf("%u bytes, %s%s", m.bytes, m.assumed ? "assumed: " : "", m.how.c_str());
}

// ---- tracker ----

uint64_t RequestStream::nak_total() const {
  uint64_t n = 0;
  for (uint64_t v : naks) n += v;
  return n;
}

QpTracker::QpTracker(PathMtu mtu) : mtu_(std::move(mtu)) {}

std::string QpTracker::stream_name(const StreamKey& k) {
  return strf("%s → %s QP 0x%06x", addr_string(k.src).c_str(), addr_string(k.dst).c_str(), k.qpn);
}

std::vector<Note> QpTracker::observe(const Frame& f) {
  std::vector<Note> notes;
  last_stream_ = -1;
  if (!f.is_roce() || f.info() == nullptr) return notes;
  learn_mtu(f);
  if (f.icrc_bad()) {
    // The receiver drops it, so for the protocol it never arrived.
    notes.push_back({NoteKind::kNotTracked,
                     "bad ICRC: the receiver drops this packet, so tracking ignores it "
                     "(expect a NAK or a retransmission)"});
    return notes;
  }
  const wire::OpcodeInfo& info = *f.info();
  if (info.op == Operation::kCnp) {
    notes.push_back(
        {NoteKind::kCnp,
         strf("congestion notification for QP 0x%06x at %s: packets it sent arrived ECN-marked "
              "(CE); it should lower its sending rate (DCQCN)",
              f.pkt.hdr.bth.dest_qp, addr_string(f.dst).c_str())});
    return notes;
  }
  if (auto m = cm_message(f)) {
    on_cm(f, *m, notes);
    return notes;
  }
  if (info.is_request()) {
    on_request(f, notes);
  } else {
    on_response(f, notes);
  }
  return notes;
}

void QpTracker::learn_mtu(const Frame& f) {
  const Position pos = f.info()->pos;
  if (pos != Position::kFirst && pos != Position::kMiddle) return;
  if (f.payload_len == 0 || (!mtu_.assumed && f.payload_len <= mtu_.bytes)) return;
  mtu_ = {static_cast<uint32_t>(f.payload_len), false,
          strf("from the largest FIRST/MIDDLE payload so far (%s in #%" PRIu64 ")",
               sv(f.info()->name).c_str(), f.index)};
  // READs recorded under a guessed MTU: recount their segments.
  for (RequestStream& s : streams_) {
    for (ReadRequest& r : s.reads) {
      if (r.last_segment == 0) r.segments = segments_for(r.len, mtu_.bytes);
    }
  }
}

uint32_t QpTracker::mtu_for_reads(uint32_t len, std::vector<Note>& notes) {
  if (mtu_.bytes == 0) {
    mtu_ = {1024, true,
            "no FIRST/MIDDLE packet seen yet; 1024 is what a 1500-byte Ethernet MTU gives"};
  }
  // Every MTU is at least 256 bytes: a guess only matters for longer READs.
  if (mtu_.assumed && !mtu_note_given_ && len > kValidMtus[0]) {
    mtu_note_given_ = true;
    notes.push_back({NoteKind::kReadRequest, "path MTU " + describe(mtu_)});
  }
  return mtu_.bytes;
}

void QpTracker::on_cm(const Frame& f, const wire::CmMessage& m, std::vector<Note>& notes) {
  using State = CmConnection::State;
  auto note = [&](std::string t) { notes.push_back({NoteKind::kConnection, std::move(t)}); };
  // A message names the connection by the sender's comm ID and (but for a REQ) the receiver's.
  auto find = [&](uint32_t local, uint32_t remote) -> CmConnection* {
    for (auto it = cm_.rbegin(); it != cm_.rend(); ++it) {  // the newest first
      CmConnection& c = *it;
      if (f.src == c.active && c.active_comm == local && f.dst == c.passive &&
          (remote == 0 || c.passive_comm == remote || c.passive_comm == 0))
        return &c;
      if (f.src == c.passive && f.dst == c.active && c.active_comm == remote &&
          (c.passive_comm == local || c.passive_comm == 0))
        return &c;
    }
    return nullptr;
  };
  const std::string from = addr_string(f.src), to = addr_string(f.dst);
  if (const auto* r = m.get<wire::CmReq>()) {
    if (CmConnection* c = find(r->local_comm_id, 0);
        c != nullptr && (c->state == State::kRequested || c->state == State::kReplied)) {
      note(strf("the REQ of #%" PRIu64 " again (comm ID 0x%08x): %s had no answer within its "
                "CM response timeout; %s since the first",
                c->req_frame, r->local_comm_id, from.c_str(),
                ms_string(f.rel_ns - c->req_ns).c_str()));
      return;
    }
    CmConnection c;
    c.active = f.src;
    c.passive = f.dst;
    c.active_comm = r->local_comm_id;
    c.active_qpn = r->local_qpn;
    c.req_psn = r->starting_psn;
    c.service_id = r->service_id;
    c.req_frame = f.index;
    c.req_ns = f.rel_ns;
    cm_.push_back(c);
    note(strf("connection request: %s QP 0x%06x asks %s for service %s (comm ID 0x%08x); it "
              "will receive from PSN %u, so the passive side's QP must send from there",
              from.c_str(), r->local_qpn, to.c_str(), service_id_string(r->service_id).c_str(),
              r->local_comm_id, r->starting_psn));
    return;
  }
  if (const auto* r = m.get<wire::CmRep>()) {
    CmConnection* c = find(r->local_comm_id, r->remote_comm_id);
    if (c == nullptr) {
      note(strf("REP for comm ID 0x%08x, whose REQ is not in the capture", r->remote_comm_id));
      return;
    }
    if (c->state != State::kRequested) {
      note(strf("the REP again (comm ID 0x%08x): %s saw no RTU in time, or the REQ came again",
                r->local_comm_id, from.c_str()));
      return;
    }
    c->passive_comm = r->local_comm_id;
    c->passive_qpn = r->local_qpn;
    c->rep_psn = r->starting_psn;
    c->rep_frame = f.index;
    c->state = State::kReplied;
    note(strf("accepted: connection %s QP 0x%06x <-> %s QP 0x%06x; the active side sends "
              "from PSN %u (this REP's), the passive side from PSN %u (the REQ's); the RTU "
              "comes next",
              addr_string(c->active).c_str(), c->active_qpn, addr_string(c->passive).c_str(),
              c->passive_qpn, c->rep_psn, c->req_psn));
    return;
  }
  if (const auto* r = m.get<wire::CmRtu>()) {
    CmConnection* c = find(r->local_comm_id, r->remote_comm_id);
    if (c == nullptr) return note("RTU for a connection not in the capture");
    if (c->state != State::kReplied) return note("the RTU again: the REP had come again");
    c->state = State::kEstablished;
    return note(strf("established: QP 0x%06x <-> QP 0x%06x may exchange data both ways",
                     c->active_qpn, c->passive_qpn));
  }
  if (const auto* r = m.get<wire::CmRej>()) {
    CmConnection* c = find(r->local_comm_id, r->remote_comm_id);
    if (c != nullptr) c->state = State::kRejected;
    return note(strf("%s refuses%s: reason %u, %s", from.c_str(),
                     c != nullptr ? "" : " a connection not in the capture",
                     static_cast<unsigned>(r->reason), sv(to_string(r->reason)).c_str()));
  }
  if (const auto* r = m.get<wire::CmMra>()) {
    return note(strf("%s needs more time before it answers (MRA): the other side waits 4.096 us "
                     "x 2^%u longer before it sends again",
                     from.c_str(), static_cast<unsigned>(r->service_timeout)));
  }
  if (const auto* r = m.get<wire::CmDreq>()) {
    CmConnection* c = find(r->local_comm_id, r->remote_comm_id);
    if (c == nullptr) return note("DREQ for a connection not in the capture");
    if (c->state == State::kDisconnecting)
      return note("the DREQ again: the DREP was lost or late");
    c->state = State::kDisconnecting;
    return note(strf("%s disconnects QP 0x%06x <-> QP 0x%06x; the other side answers DREP",
                     from.c_str(), c->active_qpn, c->passive_qpn));
  }
  if (const auto* r = m.get<wire::CmDrep>()) {
    CmConnection* c = find(r->local_comm_id, r->remote_comm_id);
    if (c == nullptr) return note("DREP for a connection not in the capture");
    c->state = State::kClosed;
    return note("disconnected: both sides keep the comm IDs in time wait, so that late MADs of "
                "this connection are not taken for a new one");
  }
  if (const auto* r = m.get<wire::CmSidrReq>()) {
    return note(strf("UD service lookup (SIDR): %s asks %s which QP serves %s (request ID "
                     "0x%08x)",
                     from.c_str(), to.c_str(), service_id_string(r->service_id).c_str(),
                     r->request_id));
  }
  if (const auto* r = m.get<wire::CmSidrRep>()) {
    if (r->status != wire::SidrStatus::kValid)
      return note(strf("SIDR answer: no (status %u)", static_cast<unsigned>(r->status)));
    return note(strf("SIDR answer: send datagrams to QP 0x%06x with Q_Key 0x%08x", r->qpn,
                     r->qkey));
  }
}

void QpTracker::check_cm_psn(const StreamKey& key, Psn psn, std::vector<Note>& notes) {
  for (CmConnection& c : cm_) {
    if (c.state == CmConnection::State::kRequested || c.state == CmConnection::State::kRejected)
      continue;
    const bool to_passive = key.src == c.active && key.dst == c.passive && key.qpn == c.passive_qpn;
    const bool to_active = key.src == c.passive && key.dst == c.active && key.qpn == c.active_qpn;
    if (!to_passive && !to_active) continue;
    bool& checked = to_passive ? c.checked_to_passive : c.checked_to_active;
    if (checked) continue;
    checked = true;
    const uint32_t want = to_passive ? c.rep_psn : c.req_psn;
    const char* msg = to_passive ? "REP" : "REQ";
    notes.push_back(
        {NoteKind::kConnection,
         psn.value() == want
             ? strf("first PSN %u, as the CM's %s of #%" PRIu64 " announced", want, msg,
                    to_passive ? c.rep_frame : c.req_frame)
             : strf("first PSN %u, but the CM's %s announced %u: the receiver expects %u and "
                    "takes these as duplicates or a gap",
                    psn.value(), msg, want, want)});
    return;
  }
}

void QpTracker::on_request(const Frame& f, std::vector<Note>& notes) {
  const wire::OpcodeInfo& info = *f.info();
  const wire::RoceHeaders& h = f.pkt.hdr;
  const StreamKey key{f.src, f.dst, h.bth.dest_qp};
  const auto [it, fresh] = requests_.try_emplace(key, streams_.size());
  if (fresh) {
    streams_.emplace_back();
    streams_.back().key = key;
  }
  RequestStream& s = streams_[it->second];
  last_stream_ = static_cast<int64_t>(it->second);
  const Psn psn(h.bth.psn);
  const bool is_read = info.op == Operation::kReadRequest;
  ++s.req_packets;
  s.req_payload_bytes += f.payload_len;
  s.req_wire_bytes += f.orig_len;

  bool is_new = true;
  if (fresh) {
    s.transport = info.transport;
    s.first_frame = f.index;
    s.first_psn = psn;
    std::string t = strf(
        "new request stream %s (%s), first PSN %u: each new request packet "
        "should carry the next PSN",
        stream_name(key).c_str(), sv(to_string(info.transport)).c_str(), psn.value());
    if (info.transport == wire::Transport::kUd) t += "; UD has no ACKs and resends nothing";
    if (info.transport == wire::Transport::kUc) t += "; UC has no ACKs and resends nothing";
    notes.push_back({NoteKind::kNewStream, std::move(t)});
    if (info.transport != wire::Transport::kUd) check_cm_psn(key, psn, notes);
  } else {
    int32_t d = psn - s.next_psn;
    // A READ sent under a guessed MTU: the next request's PSN shows how many PSNs it used.
    if (d != 0 && mtu_.assumed && !s.reads.empty() && s.reads.back().last_segment == 0 &&
        s.reads.back().psn + static_cast<int32_t>(s.reads.back().segments) == s.next_psn) {
      ReadRequest& r = s.reads.back();
      const int32_t used = psn - r.psn;
      for (uint32_t v : kValidMtus) {
        if (used <= 0 || segments_for(r.len, v) != static_cast<uint32_t>(used)) continue;
        notes.push_back({NoteKind::kReadRequest,
                         strf("the READ request in #%" PRIu64 " used %d PSNs for %u bytes, so "
                              "the path MTU is %u, not the %u assumed",
                              r.frame, used, r.len, v, mtu_.bytes)});
        mtu_ = {v, false,
                strf("from the PSN spacing after the READ request in #%" PRIu64, r.frame)};
        r.segments = static_cast<uint32_t>(used);
        s.next_psn = r.psn + used;
        d = psn - s.next_psn;
        break;
      }
    }
    if (d == 0) {
      notes.push_back({NoteKind::kInOrder, strf("PSN %u is the expected next PSN of %s",
                                                psn.value(), stream_name(key).c_str())});
    } else if (d > 0) {
      // Packets the capture never saw: lost before the capture point, or not captured.
      ++s.gaps;
      s.missing += static_cast<uint64_t>(d);
      push_bounded(s.gap_log, GapRange{s.next_psn, static_cast<uint32_t>(d), f.index}, kMaxGapLog);
      std::string t = strf("gap: expected PSN %u, got %u — %d packet%s missing before this point",
                           s.next_psn.value(), psn.value(), d, s_if(static_cast<uint64_t>(d)));
      if (s.transport == wire::Transport::kRc || s.transport == wire::Transport::kXrc) {
        t += " (the responder will NAK with a PSN sequence error)";
      } else {
        t += " (nothing resends them on UC/UD)";
      }
      notes.push_back({NoteKind::kGap, std::move(t), d});
      s.msg = RequestStream::Msg::kUnknown;  // the missing packets may have ended a message
    } else {
      is_new = false;
    }
  }

  // PSNs this packet consumes: one, or one per READ response packet (with the MTU as just
  // refined by the PSN spacing above).
  uint32_t span = 1;
  uint32_t mtu = 0;
  if (is_read) {
    mtu = mtu_for_reads(h.ext.reth.dma_len, notes);
    span = segments_for(h.ext.reth.dma_len, mtu);
  }
  if (is_new) {
    ++s.new_packets;
    check_message_order(s, info, notes);
    s.next_psn = psn + static_cast<int32_t>(span);
  } else {
    retransmission(s, f, notes);
    ++s.retransmitted;
    if ((psn + static_cast<int32_t>(span)) - s.next_psn > 0)
      s.next_psn = psn + static_cast<int32_t>(span);
  }

  if (is_read) {
    ++s.reads_requested;
    const wire::RethRepr& r = h.ext.reth;
    // A retried READ replaces the earlier record with the same PSN.
    std::erase_if(s.reads, [&](const ReadRequest& q) { return q.psn == psn; });
    push_bounded(s.reads, ReadRequest{psn, span, r.va, r.dma_len, f.index, 0, 0}, kMaxOutstanding);
    const std::string psns =
        span == 1 ? strf("PSN %u", psn.value())
                  : strf("PSN %u..%u", psn.value(), (psn + static_cast<int32_t>(span) - 1).value());
    notes.push_back({NoteKind::kReadRequest,
                     strf("READ request for %u bytes at va 0x%016" PRIx64 ": expect %u READ "
                          "response packet%s, %s (path MTU %u)",
                          r.dma_len, r.va, span, s_if(span), psns.c_str(), mtu)});
  } else if (info.op == Operation::kFlush || info.op == Operation::kAtomicWrite) {
    // Answered as a READ of nothing: one READ RESPONSE ONLY at this PSN, no data.
    const wire::RethRepr& r = h.ext.reth;
    std::erase_if(s.reads, [&](const ReadRequest& q) { return q.psn == psn; });
    push_bounded(s.reads, ReadRequest{psn, 1, r.va, 0, f.index, 0, 0, info.op}, kMaxOutstanding);
    std::string t;
    if (info.op == Operation::kFlush) {
      const wire::FethRepr& x = h.ext.feth;
      const char* what = x.placement() == 1   ? "visible to every later reader"
                         : x.placement() == 2 ? "durable"
                         : x.placement() == 3 ? "visible and durable"
                                              : "(no valid placement type: an invalid request)";
      t = x.selectivity() == 1
              ? strf("FLUSH: make what was written to the whole memory region of R_Key 0x%08x %s",
                     r.rkey, what)
              : strf("FLUSH: make what was written to %u bytes at va 0x%016" PRIx64 " %s",
                     r.dma_len, r.va, what);
    } else {
      t = strf("ATOMIC WRITE: 8 bytes to va 0x%016" PRIx64 ", stored as one unit", r.va);
    }
    t += strf("; the answer is a READ RESPONSE ONLY without data, PSN %u", psn.value());
    notes.push_back({NoteKind::kReadRequest, std::move(t)});
  } else if (info.op == Operation::kFetchAdd || info.op == Operation::kCompareSwap) {
    ++s.atomics_requested;
    const wire::AtomicEthRepr& a = h.ext.atomic;
    std::erase_if(s.atomics, [&](const AtomicRequest& q) { return q.psn == psn; });
    push_bounded(s.atomics,
                 AtomicRequest{psn, info.op, a.va, a.swap_add, a.compare, f.index, false},
                 kMaxOutstanding);
    std::string t = info.op == Operation::kFetchAdd
                        ? strf("FETCH_ADD: add %" PRIu64 " to the 8 bytes at va 0x%016" PRIx64,
                               a.swap_add, a.va)
                        : strf("COMPARE_SWAP: if the 8 bytes at va 0x%016" PRIx64 " equal %" PRIu64
                               ", replace them with %" PRIu64,
                               a.va, a.compare, a.swap_add);
    t += strf("; the ATOMIC ACK with PSN %u will return the original value", psn.value());
    notes.push_back({NoteKind::kAtomicRequest, std::move(t)});
  }
}

void QpTracker::check_message_order(RequestStream& s, const wire::OpcodeInfo& info,
                                    std::vector<Note>& notes) {
  using Msg = RequestStream::Msg;
  const bool starts = info.pos == Position::kFirst || info.pos == Position::kOnly;
  if (s.msg == Msg::kBetween && !starts) {
    ++s.op_seq_errors;
    notes.push_back(
        {NoteKind::kOpSequence,
         strf("message order: %s without a FIRST packet before it", sv(info.name).c_str())});
  } else if (s.msg == Msg::kInside && starts) {
    ++s.op_seq_errors;
    notes.push_back({NoteKind::kOpSequence,
                     strf("message order: a new message starts, but the %s message before it "
                          "never got its LAST packet",
                          sv(to_string(s.msg_op)).c_str())});
  } else if (s.msg == Msg::kInside && info.op != s.msg_op) {
    ++s.op_seq_errors;
    notes.push_back(
        {NoteKind::kOpSequence, strf("message order: %s inside a %s message", sv(info.name).c_str(),
                                     sv(to_string(s.msg_op)).c_str())});
  }
  if (info.pos == Position::kFirst || info.pos == Position::kMiddle) {
    s.msg = Msg::kInside;
    s.msg_op = info.op;
  } else {
    s.msg = Msg::kBetween;
    ++s.messages;
  }
}

void QpTracker::retransmission(RequestStream& s, const Frame& f, std::vector<Note>& notes) {
  const Psn psn(f.pkt.hdr.bth.psn);
  const auto gap = std::find_if(s.gap_log.begin(), s.gap_log.end(),
                                [&](const GapRange& g) { return g.contains(psn); });
  if (gap != s.gap_log.end()) {
    notes.push_back({NoteKind::kRetransmission,
                     strf("retransmission of PSN %u, which this capture never saw (gap noticed "
                          "at #%" PRIu64 "); the next new PSN is %u",
                          psn.value(), gap->frame, s.next_psn.value())});
  } else {
    notes.push_back({NoteKind::kRetransmission,
                     strf("retransmission: PSN %u was sent before; the next new PSN is %u",
                          psn.value(), s.next_psn.value())});
  }
  bool explained = false;
  for (RnrEvent& r : s.rnr) {
    if (r.resent || r.psn != psn) continue;
    r.resent = true;
    r.resend_frame = f.index;
    r.wait_ns = f.rel_ns - r.nak_ns;
    const auto timer = static_cast<int64_t>(wire::rnr_timer_ns(r.timer_code));
    std::string t = strf("resent after the RNR NAK in #%" PRIu64
                         ": waited %s; the RNR timer asked "
                         "for at least %s",
                         r.nak_frame, ms_string(r.wait_ns).c_str(), ms_string(timer).c_str());
    if (r.wait_ns < timer) t += " (sooner than the timer allows)";
    if (s.nak_pending && s.nak_psn == psn) {
      t += strf("; the NAK in #%" PRIu64 " asked for the same PSN", s.nak_frame);
      s.nak_pending = false;
    }
    notes.push_back({NoteKind::kResend, std::move(t), r.wait_ns});
    explained = true;
    break;
  }
  if (!explained && s.nak_pending && s.nak_psn == psn) {
    s.nak_pending = false;
    notes.push_back(
        {NoteKind::kResend,
         strf("go-back-N: resending from PSN %u as the NAK in #%" PRIu64 " asked, %s after it",
              psn.value(), s.nak_frame, ms_string(f.rel_ns - s.nak_ns).c_str()),
         f.rel_ns - s.nak_ns});
  }
}

size_t QpTracker::pair(const Frame& f, std::vector<Note>& notes) {
  const StreamKey rkey{f.src, f.dst, f.pkt.hdr.bth.dest_qp};
  if (const auto it = responses_.find(rkey); it != responses_.end()) return it->second;

  // Responses go from the responder (a request's destination) back to the requester.
  std::vector<size_t> candidates;
  for (size_t i = 0; i < streams_.size(); ++i) {
    const RequestStream& s = streams_[i];
    // XRC: an initiator's responses come back in its own transport (an XRC ACK answers only
    // XRC requests).
    if (s.key.src == rkey.dst && s.key.dst == rkey.src &&
        s.transport == f.info()->transport &&
        (s.transport == wire::Transport::kRc || s.transport == wire::Transport::kXrc))
      candidates.push_back(i);
  }
  if (candidates.empty()) return kNone;
  const Psn psn(f.pkt.hdr.bth.psn);
  size_t pick = kNone;
  std::string why;
  if (candidates.size() == 1) {
    pick = candidates[0];
    why = "the only RC request stream between these hosts";
  } else {
    // Several QPs between the same hosts: the one whose PSN range holds this PSN.
    int32_t best = INT32_MAX;
    for (size_t i : candidates) {
      const RequestStream& s = streams_[i];
      const int32_t since_first = psn - s.first_psn;
      const int32_t before_last = s.last_psn() - psn;
      if (since_first < 0 || before_last < 0 || before_last >= best) continue;
      best = before_last;
      pick = i;
    }
    if (pick == kNone) return kNone;
    const RequestStream& s = streams_[pick];
    why = strf("PSN %u lies in its PSN range %u..%u", psn.value(), s.first_psn.value(),
               s.last_psn().value());
  }
  responses_[rkey] = pick;
  RequestStream& s = streams_[pick];
  s.paired = true;
  s.requester_qpn = rkey.qpn;
  notes.push_back({NoteKind::kPairing,
                   strf("responses to QP 0x%06x at %s belong to request stream %s (%s)", rkey.qpn,
                        addr_string(rkey.dst).c_str(), stream_name(s.key).c_str(), why.c_str())});
  return pick;
}

void QpTracker::on_response(const Frame& f, std::vector<Note>& notes) {
  const size_t idx = pair(f, notes);
  if (idx == kNone) {
    ++unmatched_;
    notes.push_back({NoteKind::kUnmatched,
                     strf("no request stream from %s to %s matches this response (the capture "
                          "may have started mid-flow)",
                          addr_string(f.dst).c_str(), addr_string(f.src).c_str())});
    return;
  }
  RequestStream& s = streams_[idx];
  last_stream_ = static_cast<int64_t>(idx);
  ++s.resp_packets;
  s.resp_payload_bytes += f.payload_len;
  s.resp_wire_bytes += f.orig_len;
  const wire::OpcodeInfo& info = *f.info();
  switch (info.op) {
    case Operation::kAck: on_aeth(s, f, true, notes); break;
    case Operation::kReadResponse:
      on_read_response(s, f, notes);
      if (info.has(wire::Ext::kAeth)) on_aeth(s, f, false, notes);
      break;
    case Operation::kAtomicAck:
      on_atomic_ack(s, f, notes);
      on_aeth(s, f, false, notes);
      break;
    default: break;
  }
}

void QpTracker::on_aeth(RequestStream& s, const Frame& f, bool explicit_ack,
                        std::vector<Note>& notes) {
  const wire::AethRepr& a = f.pkt.hdr.ext.aeth;
  const Psn psn(f.pkt.hdr.bth.psn);
  // Every ACK, NAK and RNR NAK also acknowledges what came before the PSN it names.
  auto ack_upto = [&s](Psn p) {
    if (!s.have_ack || p - s.acked > 0) {
      s.acked = p;
      s.have_ack = true;
    }
  };
  std::string msn_text;
  if (s.have_msn) {
    const uint32_t d = (a.msn - s.msn) & Psn::kMask;
    msn_text = strf("MSN %u: %u more message%s completed", a.msn, d, s_if(d));
  } else {
    msn_text = strf("MSN %u = messages the responder has completed", a.msn);
  }

  switch (a.kind()) {
    case wire::AckKind::kAck: {
      if (explicit_ack) {
        ++s.acks;
        const Psn from = s.have_ack ? s.acked + 1 : s.first_psn;
        const int32_t n = psn - from + 1;
        if (n <= 0) {
          ++s.duplicate_acks;
          notes.push_back({NoteKind::kDuplicateAck,
                           strf("ACK of PSN %u acknowledges nothing new: PSNs up to %u were "
                                "already acknowledged",
                                psn.value(), s.acked.value())});
        } else {
          std::string t = n == 1
                              ? strf("ACK of PSN %u: acknowledges 1 packet", psn.value())
                              : strf(
                                    "ACK of PSN %u: acknowledges PSN %u..%u, %d packets with one "
                                    "coalesced ACK",
                                    psn.value(), from.value(), psn.value(), n);
          t += "; " + msn_text;
          if (psn - s.last_psn() > 0)
            t += strf("; beyond the last request PSN seen (%u)", s.last_psn().value());
          notes.push_back({NoteKind::kAck, std::move(t)});
        }
      }
      ack_upto(psn);
      if (s.nak_pending && psn - s.nak_psn >= 0) s.nak_pending = false;
      break;
    }
    case wire::AckKind::kNak: {
      const uint8_t code = a.value();
      ++s.naks[code];
      if (code == 0) {
        std::string t = strf(
            "NAK (PSN sequence error): the responder expected PSN %u and "
            "received a later one; the requester must resend from PSN %u",
            psn.value(), psn.value());
        const int32_t count = s.next_psn - psn;
        if (count > 0)
          t += strf(" (go-back-N: PSN %u..%u, %d packet%s)", psn.value(), s.last_psn().value(),
                    count, s_if(static_cast<uint64_t>(count)));
        const auto gap = std::find_if(s.gap_log.rbegin(), s.gap_log.rend(),
                                      [&](const GapRange& g) { return g.contains(psn); });
        const auto rnr = std::find_if(s.rnr.rbegin(), s.rnr.rend(),
                                      [&](const RnrEvent& r) { return r.psn == psn; });
        if (gap != s.gap_log.rend()) {
          t += strf(". PSN %u is missing from this capture too (gap noticed at #%" PRIu64
                    "): it was lost before the capture point",
                    psn.value(), gap->frame);
        } else if (rnr != s.rnr.rend() && !rnr->resent) {
          t += strf(
              ". The responder still waits for PSN %u, which it refused with the RNR NAK "
              "in #%" PRIu64 ", and later PSNs have arrived since",
              psn.value(), rnr->nak_frame);
        } else if (count > 0) {
          t += strf(". The capture saw PSN %u, so it was lost or dropped after the capture point",
                    psn.value());
        }
        notes.push_back({NoteKind::kNak, std::move(t)});
        s.nak_pending = true;
        s.nak_psn = psn;
        s.nak_frame = f.index;
        s.nak_ns = f.rel_ns;
      } else {
        std::string_view why;
        switch (code) {
          case 1:
            why =
                " (an operation the responder's QP does not allow, or a malformed or too long "
                "message)";
            break;
          case 2:
            why = " (the R_Key, address range or access rights do not allow the access)";
            break;
          case 3:
            why = " (the responder failed to carry the request out, e.g. a local memory error)";
            break;
          default: break;
        }
        notes.push_back(
            {NoteKind::kNak, strf("NAK (%s%s) for PSN %u: fatal — the requester completes the work "
                                  "request with an error and its QP enters the error state",
                                  code <= 4 ? sv(to_string(a.nak_code())).c_str()
                                            : strf("reserved code %u", code).c_str(),
                                  sv(why).c_str(), psn.value())});
      }
      ack_upto(psn - 1);
      break;
    }
    case wire::AckKind::kRnrNak: {
      ++s.rnr_naks;
      s.rnr.push_back(RnrEvent{f.index, f.rel_ns, psn, a.rnr_timer_code(), false, 0, 0});
      notes.push_back(
          {NoteKind::kRnrNak,
           strf("RNR NAK: no receive buffer was posted for PSN %u (receiver not ready); the "
                "requester waits at least %s (timer code %u), then resends from PSN %u",
                psn.value(),
                ms_string(static_cast<int64_t>(wire::rnr_timer_ns(a.rnr_timer_code()))).c_str(),
                a.rnr_timer_code(), psn.value())});
      ack_upto(psn - 1);
      break;
    }
    case wire::AckKind::kReserved:
      notes.push_back({NoteKind::kNak,
                       strf("reserved AETH syndrome 0x%02x: not a valid ACK or NAK", a.syndrome)});
      break;
  }
  s.msn = a.msn;
  s.have_msn = true;
}

void QpTracker::on_read_response(RequestStream& s, const Frame& f, std::vector<Note>& notes) {
  const Psn psn(f.pkt.hdr.bth.psn);
  ++s.read_responses;
  ReadRequest* r = nullptr;
  for (auto it = s.reads.rbegin(); it != s.reads.rend(); ++it) {
    const int32_t d = psn - it->psn;
    if (d >= 0 && static_cast<uint32_t>(d) < it->segments) {
      r = &*it;
      break;
    }
  }
  // READ data also acknowledges every request before it.
  if (!s.have_ack || psn - s.acked > 0) {
    s.acked = psn;
    s.have_ack = true;
  }
  if (r == nullptr) {
    ++unmatched_;
    notes.push_back(
        {NoteKind::kUnmatched,
         strf("READ response PSN %u matches no READ request in this capture", psn.value())});
    return;
  }
  const auto seg = static_cast<uint32_t>(psn - r->psn) + 1;
  if (r->op != Operation::kReadRequest) {
    const char* req = r->op == Operation::kFlush ? "FLUSH" : "ATOMIC WRITE";
    std::string t =
        strf("%s the %s request PSN %u (#%" PRIu64 "): a READ RESPONSE without data is its "
             "acknowledgement",
             r->last_segment != 0 ? "again answers" : "answers", req, r->psn.value(), r->frame);
    if (f.payload_len != 0) t += strf("; it carries %zu bytes it should not", f.payload_len);
    r->last_segment = 1;
    notes.push_back({NoteKind::kReadResponse, std::move(t), static_cast<int64_t>(r->frame)});
    return;
  }
  if (seg <= r->last_segment) {
    notes.push_back({NoteKind::kReadResponse,
                     strf("repeated READ response segment %u/%u for the READ request PSN %u "
                          "(#%" PRIu64 "): a responder resends READ data when the request is "
                          "retried",
                          seg, r->segments, r->psn.value(), r->frame),
                     static_cast<int64_t>(r->frame)});
    return;
  }
  if (r->last_segment == 0) ++s.read_matched;
  r->last_segment = seg;
  r->bytes += f.payload_len;
  std::string t = strf("READ response segment %u/%u for READ request PSN %u (#%" PRIu64
                       ", va 0x%016" PRIx64 ", len %u)",
                       seg, r->segments, r->psn.value(), r->frame, r->va, r->len);
  const Position got = f.info()->pos;
  const Position want = r->segments == 1     ? Position::kOnly
                        : seg == 1           ? Position::kFirst
                        : seg == r->segments ? Position::kLast
                                             : Position::kMiddle;
  const bool ends = got == Position::kLast || got == Position::kOnly;
  if (got != want) {
    if (ends && seg < r->segments) {
      t += strf("; the response ends after %u segment%s, not %u: the path MTU is larger than %u",
                seg, s_if(seg), r->segments, mtu_.bytes);
      r->segments = seg;
    } else {
      t += strf("; expected a %s packet here", sv(to_string(want)).c_str());
    }
  }
  if (ends) {
    ++s.reads_completed;
    t += strf(" — READ complete: %" PRIu64 " of %u bytes", r->bytes, r->len);
    if (r->bytes != r->len) t += " (data missing!)";
  }
  notes.push_back({NoteKind::kReadResponse, std::move(t), static_cast<int64_t>(r->frame)});
}

void QpTracker::on_atomic_ack(RequestStream& s, const Frame& f, std::vector<Note>& notes) {
  const Psn psn(f.pkt.hdr.bth.psn);
  ++s.atomic_acks;
  auto it = std::find_if(s.atomics.begin(), s.atomics.end(),
                         [&](const AtomicRequest& a) { return a.psn == psn; });
  if (it == s.atomics.end()) {
    ++unmatched_;
    notes.push_back(
        {NoteKind::kUnmatched,
         strf("ATOMIC ACK PSN %u matches no atomic request in this capture", psn.value())});
    return;
  }
  const uint64_t orig = f.pkt.hdr.ext.atomic_ack.orig;
  if (it->answered) {
    notes.push_back({NoteKind::kAtomicAck,
                     strf("repeated ATOMIC ACK for PSN %u: a responder replays the saved result "
                          "of a retried atomic instead of executing it twice",
                          psn.value())});
    return;
  }
  it->answered = true;
  ++s.atomic_matched;
  std::string t;
  if (it->op == Operation::kFetchAdd) {
    t = strf("ATOMIC ACK for FETCH_ADD PSN %u (#%" PRIu64 ", va 0x%016" PRIx64
             "): original value %" PRIu64 "; the target now holds %" PRIu64 " (original + %" PRIu64
             ")",
             psn.value(), it->frame, it->va, orig, orig + it->swap_add, it->swap_add);
  } else if (orig == it->compare) {
    t = strf("ATOMIC ACK for COMPARE_SWAP PSN %u (#%" PRIu64 ", va 0x%016" PRIx64
             "): original value %" PRIu64
             " equals the compare value, so the target now holds "
             "the swap value %" PRIu64,
             psn.value(), it->frame, it->va, orig, it->swap_add);
  } else {
    t = strf("ATOMIC ACK for COMPARE_SWAP PSN %u (#%" PRIu64 ", va 0x%016" PRIx64
             "): original value %" PRIu64 " differs from the compare value %" PRIu64
             ", so the target is unchanged",
             psn.value(), it->frame, it->va, orig, it->compare);
  }
  notes.push_back({NoteKind::kAtomicAck, std::move(t)});
}

}  // namespace uroce::dissect

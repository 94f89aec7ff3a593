// --ladder FILE.html: the capture as a ladder diagram, one self-contained page (no network
// fetches). The packets go into the page as JSON; ladder_page.cc holds the page (HTML, CSS
// and the script that draws the SVG).
#include <cinttypes>
#include <map>
#include <ostream>
#include <sstream>

#include "dissect/json.h"
#include "dissect/printer.h"

namespace uroce::dissect {

extern const char* const kLadderPageHead;
extern const char* const kLadderPageTail;

namespace {

// Explain text is kept for this many packets; past it the page shows the one-line form and
// the tracking notes (the page says so), so that a large capture stays a usable file.
constexpr uint64_t kExplainCap = 5000;

/// The arrow's class: what the legend explains and the colour shows.
std::string_view arrow_class(const Frame& f, const std::vector<Note>& notes) {
  if (f.kind == FrameKind::kMalformed) return "malformed";
  if (f.icrc_bad()) return "bad";
  if (cm_message(f)) return "cm";
  if (is_qp1_datagram(f)) return "cm";
  const wire::OpcodeInfo& info = *f.info();
  if (info.op == wire::Operation::kCnp) return "cnp";
  bool retx = false, gap = false, dup = false, unmatched = false;
  for (const Note& n : notes) {
    retx = retx || n.kind == NoteKind::kRetransmission;
    gap = gap || n.kind == NoteKind::kGap;
    dup = dup || n.kind == NoteKind::kDuplicateAck;
    unmatched = unmatched || n.kind == NoteKind::kUnmatched;
  }
  if (info.is_request()) return retx ? "retx" : gap ? "gap" : "req";
  if (unmatched) return "unmatched";
  if (f.has_ext(wire::Ext::kAeth)) {
    const wire::AethRepr& a = f.pkt.hdr.ext.aeth;
    if (a.is_rnr_nak()) return "rnr";
    if (a.is_nak()) return "nak";
  }
  if (info.op == wire::Operation::kReadResponse) return "rresp";
  if (info.op == wire::Operation::kAtomicAck) return "aack";
  return dup ? "dupack" : "ack";
}

/// The arrow's label: opcode, PSN, the AETH (ACK/NAK and MSN), payload length.
std::string arrow_label(const Frame& f) {
  if (f.kind == FrameKind::kMalformed)
    return "MALFORMED " + std::string(wire::error_name(f.error));
  std::string s(f.info()->name);
  if (auto m = cm_message(f)) return cm_compact(*m);
  s += strf(" psn=%u", f.pkt.hdr.bth.psn);
  if (f.has_ext(wire::Ext::kAeth)) s.append(" ").append(aeth_compact(f.pkt.hdr.ext.aeth));
  if (f.payload_len != 0) s += strf(" len=%zu", f.payload_len);
  return s;
}

/// The tracker's findings as short tags, as the one-line mode prints them.
std::string tag_text(const std::vector<Note>& notes) {
  std::string s;
  for (const Note& n : notes) {
    switch (n.kind) {
      case NoteKind::kGap: s += strf("[gap: %" PRId64 " missing] ", n.value); break;
      case NoteKind::kRetransmission: s += "[retransmission] "; break;
      case NoteKind::kResend: s += "[resend after " + ms_string(n.value) + "] "; break;
      case NoteKind::kOpSequence: s += "[message order] "; break;
      case NoteKind::kDuplicateAck: s += "[duplicate ACK] "; break;
      case NoteKind::kUnmatched: s += "[unmatched response] "; break;
      case NoteKind::kNotTracked: s += "[bad ICRC: dropped by the receiver] "; break;
      default: break;
    }
  }
  if (!s.empty()) s.pop_back();
  return s;
}

class LadderPrinter final : public Printer {
 public:
  LadderPrinter(std::ostream& out, const QpTracker* tracker)
      : out_(out), tracker_(tracker), explain_(make_explain_printer(explain_text_)) {}

  void begin(const CaptureInfo& info) override {
    path_ = info.path;
    explain_->begin(info);
    explain_text_.str("");
  }

  void packet(const Frame& f, const std::vector<Note>& notes) override {
    if (f.kind == FrameKind::kOther || !f.has_addrs) {
      ++other_;
      return;
    }
    std::string explain;
    if (explained_ < kExplainCap) {
      explain_->packet(f, notes);
      explain = explain_text_.str();
      explain_text_.str("");
      if (!explain.empty() && explain.front() == '\n') explain.erase(0, 1);
      ++explained_;
    }
    JsonWriter j;
    j.begin_object();
    j.field("i", f.index);
    j.field_raw("t", strf("%.3f", static_cast<double>(f.rel_ns) / 1000.0));  // microseconds
    j.field("s", lane(f.src));
    j.field("d", lane(f.dst));
    const int64_t stream = f.is_roce() ? tracker_->last_stream() : -1;
    j.field("c", stream);
    j.field("k", arrow_class(f, notes));
    j.field("l", arrow_label(f));
    j.field("g", tag_text(notes));
    for (const Note& n : notes)  // a READ response: its request's frame (the page brackets them)
      if (n.kind == NoteKind::kReadResponse) j.field("q", n.value);
    // The panel's text: --explain's for the first kExplainCap packets (it has the one-line
    // form and the tracking notes in it); after that the page makes a short one from these
    // fields and the addresses, which keeps a capture of 100,000 packets a ~30 MB page.
    if (!explain.empty()) j.field("x", explain);
    j.end_object();
    if (rows_n_++ != 0) rows_ += ',';
    rows_ += j.str();
  }

  void end(const CaptureEnd& e) override {
    JsonWriter meta;
    meta.begin_object();
    meta.field("capture", path_);
    meta.field("summary", summary_line(e.counts));
    meta.field("explained", explained_);
    meta.field("explain_cap", kExplainCap);
    meta.field("other", other_);
    meta.begin_array("lanes");
    for (const std::string& l : lanes_) meta.value(l);
    meta.end_array();
    meta.begin_array("conns");  // request streams: "A QP x → B (responses to QP y)"
    for (const RequestStream& s : e.tracker.streams()) {
      std::string name = QpTracker::stream_name(s.key);
      if (s.paired) name += strf(", responses to QP 0x%06x", s.requester_qpn);
      meta.value(name);
    }
    meta.end_array();
    meta.end_object();
    out_ << kLadderPageHead << "<script type=\"application/json\" id=\"meta\">"
         << safe(meta.str()) << "</script>\n<script type=\"application/json\" id=\"rows\">["
         << safe(rows_) << "]</script>\n"
         << kLadderPageTail;
  }

 private:
  /// JSON inside <script>: "</" would end the element.
  static std::string safe(const std::string& json) {
    std::string s;
    s.reserve(json.size());
    for (size_t i = 0; i < json.size(); ++i) {
      if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') {
        s += "<\\/";
        ++i;
      } else {
        s += json[i];
      }
    }
    return s;
  }

  uint64_t lane(const wire::Gid& g) {
    const std::string a = addr_string(g);
    const auto [it, fresh] = lane_of_.try_emplace(a, lanes_.size());
    if (fresh) lanes_.push_back(a);
    return it->second;
  }

  std::ostream& out_;
  const QpTracker* tracker_;
  std::ostringstream explain_text_;
  std::unique_ptr<Printer> explain_;
  std::string path_;
  std::string rows_;  // the rows' JSON objects, comma-separated
  uint64_t rows_n_ = 0, explained_ = 0, other_ = 0;
  std::vector<std::string> lanes_;
  std::map<std::string, uint64_t> lane_of_;
};

}  // namespace

std::unique_ptr<Printer> make_ladder_printer(std::ostream& out, const QpTracker& tracker) {
  return std::make_unique<LadderPrinter>(out, &tracker);
}

}  // namespace uroce::dissect

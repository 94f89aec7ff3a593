// --ladder FILE.html: the capture as a ladder diagram, one self-contained page (no network
// fetches). The packets go into the page as JSON; ladder_page.cc holds the page (HTML, CSS
// and the script that draws the SVG).
#include <algorithm>
#include <cinttypes>
#include <fstream>
#include <iostream>
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
  // A switch marked it congestion experienced: the receiver answers with a CNP.
  if (f.pkt.hdr.ecn() == wire::kEcnCe) s += " ECN=CE";
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

/// Text for SVG/XML: & < > " escaped.
std::string xml(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// The static SVG (--ladder FILE.svg): every row as the page draws it uncollapsed, no script.
constexpr size_t kSvgRows = 5000;
constexpr int kRowH = 22, kLaneW = 420, kLeft = 170, kTop = 40;
constexpr const char* kSvgStyle =
    "text{font:11px monospace}.lanehead{font:bold 12px sans-serif}.time{fill:#777}"
    ".tag{fill:#a00}.lane{stroke:#999;stroke-width:1.5}"
    ".req{--c:#2b6cb0}.retx{--c:#d97706}.gap{--c:#7c3aed}.ack{--c:#15803d}"
    ".dupack{--c:#86a88f}.nak{--c:#dc2626}.rnr{--c:#db2777}.rresp{--c:#0e7490}"
    ".aack{--c:#4d7c0f}.cm{--c:#555}.cnp{--c:#a16207}.bad{--c:#000}.malformed{--c:#000}"
    ".unmatched{--c:#999}.post{--c:#6b21a8}.comp{--c:#047857}.err{--c:#b91c1c}"
    ".state{--c:#374151}.timer{--c:#c2410c}"
    ".pkt line{stroke:var(--c);stroke-width:2}.pkt path,.verb circle{fill:var(--c)}"
    ".pkt text.lab{fill:var(--c)}.verb text.lab{fill:var(--c);font-style:italic}"
    ".bad line,.malformed line{stroke-dasharray:5 3}";

class LadderPrinter final : public Printer {
 public:
  LadderPrinter(std::ostream& out, const QpTracker* tracker, bool svg)
      : out_(out), tracker_(tracker), svg_(svg), explain_(make_explain_printer(explain_text_)) {}

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
    if (svg_) {
      svg_rows_.push_back({f.rel_ns, lane(f.src), lane(f.dst), std::string(arrow_class(f, notes)),
                           arrow_label(f), tag_text(notes), format_line(f), false});
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
    rows_.emplace_back(f.rel_ns, j.str());
  }

  void end(const CaptureEnd& e) override {
    const uint64_t verbs = read_verbs(e);
    if (svg_) {
      write_svg(e, verbs);
      return;
    }
    // Packets and verbs events in time order (a tie keeps the packet first).
    std::stable_sort(rows_.begin(), rows_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string rows;
    for (const auto& [t, json] : rows_) {
      if (!rows.empty()) rows += ',';
      rows += json;
    }
    JsonWriter meta;
    meta.begin_object();
    meta.field("capture", path_);
    meta.field("summary", summary_line(e.counts));
    meta.field("explained", explained_);
    meta.field("explain_cap", kExplainCap);
    meta.field("other", other_);
    meta.field("verbs", verbs);  // events read from CAPTURE.verbs (0: none there)
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
         << safe(rows) << "]</script>\n"
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

  /// The verbs side recorded beside the capture (CAPTURE.verbs, written by uroce with
  /// UROCE_PCAP: stack/verbs/verbs_trace_file.h), as rows on the local endpoint's lane.
  /// Returns how many events it read.
  uint64_t read_verbs(const CaptureEnd& e) {
    std::ifstream in(path_ + ".verbs");
    if (!in) return 0;
    std::string line, local;
    uint64_t n = 0, lineno = 0, bad = 0, first_bad = 0;
    // A line that is no event (junk, cut short, before the device line) is left out, and
    // said once on stderr: the page shows the rest.
    auto skip = [&] {
      if (bad++ == 0) first_bad = lineno;
    };
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> f;
      for (size_t a = 0;;) {
        const size_t b = line.find('\t', a);
        f.push_back(line.substr(a, b == std::string::npos ? std::string::npos : b - a));
        if (b == std::string::npos) break;
        a = b + 1;
      }
      if (f[0] == "device" && f.size() >= 3) {
        local = f[1] != "-" ? f[1] : f[2];
        continue;
      }
      if (f.size() < 8 || local.empty()) {
        skip();
        continue;
      }
      char* end = nullptr;
      const uint64_t t = std::strtoull(f[0].c_str(), &end, 10);
      if (f[0].empty() || *end != '\0') {
        skip();
        continue;
      }
      const uint32_t qpn = static_cast<uint32_t>(std::strtoul(f[2].c_str(), nullptr, 10));
      const std::string& ev = f[1];
      std::string label = ev;
      if (ev == "post_send" || ev == "completion") label += " " + f[4];
      if (ev == "qp_state") label = "QP 0x" + hex6(qpn) + " -> " + f[4];
      if (f[3] != "-") label += " wr_id=" + f[3];
      if (ev == "post_send" || ev == "post_recv" || ev == "completion") label += " len=" + f[5];
      if (ev == "completion") label += " " + f[6];
      if (ev == "role_state") {  // a transport role's state machine: role, from, to
        label = f[4] + " of QP 0x" + hex6(qpn) + ": " + f[5] + " -> " + f[6] + " psn=" + f[7];
      } else if (ev == "rate") {  // DCQCN: cause, rate, alpha, target
        label = "DCQCN " + f[4] + ": QP 0x" + hex6(qpn) + " at " + f[5] + " Mb/s (target " +
                f[7] + ", alpha " + f[6] + ")";
      } else if (ev == "rate_limit") {  // ibv_modify_qp_rate_limit / IBV_QP_RATE_LIMIT
        label = f[5] == "0" ? "rate limit of QP 0x" + hex6(qpn) + " lifted"
                            : "rate limit: QP 0x" + hex6(qpn) + " at most " + f[5] + " kb/s" +
                                  (f[6] == "0" ? "" : " (bursts of " + f[6] + " bytes)");
      } else if (f[7] != "-") {
        label += " psn=" + f[7];
      }
      const std::string kind = ev == "post_send" || ev == "post_recv" ? "post"
                               : ev == "completion" ? (f[6] == "success" ? "comp" : "err")
                               : ev == "qp_state" || ev == "rate" || ev == "role_state" ||
                                         ev == "rate_limit"
                                     ? "state"
                                                    : "timer";
      JsonWriter j;
      j.begin_object();
      j.field("i", uint64_t{0});
      const int64_t rel = static_cast<int64_t>(t - e.first_ts_ns);
      j.field_raw("t", strf("%.3f", static_cast<double>(rel) / 1000.0));
      const uint64_t l = lane_of_name(local);
      j.field("s", l);
      j.field("d", l);
      j.field("c", stream_of(e.tracker, local, qpn));
      j.field("k", "verb");
      j.field("v", kind);
      j.field("l", label);
      j.field("g", "");
      j.field("p", uint64_t{qpn});
      j.end_object();
      rows_.emplace_back(rel, j.str());
      if (svg_) svg_rows_.push_back({rel, l, l, kind, label, "", line, true});
      ++n;
    }
    if (bad != 0)
      std::cerr << "uroce-dissect: " << path_ << ".verbs: " << bad << " line" << (bad == 1 ? " is" : "s are")
                << " no verbs event (the first: line " << first_bad
                << (local.empty() ? ", and no device line came first" : "")
                << "); the page shows the " << n << " that are\n";
    return n;
  }

  static std::string hex6(uint32_t v) { return strf("%06x", v); }

  struct SvgRow {
    int64_t t;
    uint64_t s, d;
    std::string cls, label, tags, title;
    bool verb;
  };

  void write_svg(const CaptureEnd& e, uint64_t verbs) {
    std::stable_sort(svg_rows_.begin(), svg_rows_.end(),
                     [](const SvgRow& a, const SvgRow& b) { return a.t < b.t; });
    const size_t n = std::min(svg_rows_.size(), kSvgRows);
    const int lanes = static_cast<int>(std::max<size_t>(lanes_.size(), 1));
    const int width = kLeft + 80 + (lanes - 1) * kLaneW + 420;
    const int height = kTop + static_cast<int>(n) * kRowH + 60;
    auto x = [](uint64_t l) { return kLeft + static_cast<int>(l) * kLaneW; };
    out_ << strf("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                 "viewBox=\"0 0 %d %d\">\n<style>%s</style>\n",
                 width, height, width, height, kSvgStyle)
         << "<title>" << xml(path_) << ": " << xml(summary_line(e.counts)) << "</title>\n";
    for (size_t l = 0; l < lanes_.size(); ++l) {
      out_ << strf("<line class=\"lane\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", x(l),
                   kTop - 10, x(l), height - 40)
           << strf("<text class=\"lanehead\" x=\"%d\" y=\"18\" text-anchor=\"middle\">", x(l))
           << xml(lanes_[l]) << "</text>\n";
    }
    for (size_t i = 0; i < n; ++i) {
      const SvgRow& r = svg_rows_[i];
      const int y = kTop + static_cast<int>(i) * kRowH + 12;
      out_ << "<g class=\"" << (r.verb ? "verb " : "pkt ") << r.cls << "\"><title>" << xml(r.title)
           << "</title>"
           << strf("<text class=\"time\" x=\"4\" y=\"%d\">%.3f ms</text>", y + 3,
                   static_cast<double>(r.t) / 1e6);
      if (r.verb) {
        out_ << strf("<circle cx=\"%d\" cy=\"%d\" r=\"4\"/><text class=\"lab\" x=\"%d\" y=\"%d\">",
                     x(r.s), y, x(r.s) + 10, y + 4)
             << xml(r.label) << "</text></g>\n";
        continue;
      }
      const int x1 = x(r.s), x2 = x(r.d), dir = x2 > x1 ? 1 : -1;
      out_ << strf("<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>", x1, y, x2 - dir * 7, y)
           << strf("<path d=\"M%d %d l%d -5 v10 z\"/>", x2, y, -dir * 9)
           << strf("<text class=\"lab\" x=\"%d\" y=\"%d\">", std::min(x1, x2) + 12, y - 4)
           << xml(r.label) << "</text>";
      if (!r.tags.empty())
        out_ << strf("<text class=\"tag\" x=\"%d\" y=\"%d\">", std::max(x1, x2) + 14, y + 4)
             << xml(r.tags) << "</text>";
      out_ << "</g>\n";
    }
    std::string foot = strf("%zu rows", n);
    if (svg_rows_.size() > n)
      foot += strf(" of %zu: the HTML page (--ladder FILE.html) pages through all of them",
                   svg_rows_.size());
    if (verbs != 0) foot += strf("; %" PRIu64 " verbs events from the .verbs file", verbs);
    out_ << strf("<text class=\"time\" x=\"4\" y=\"%d\">", height - 20) << xml(foot)
         << "</text>\n</svg>\n";
  }

  /// The request stream local QP `qpn` at `local` takes part in: as the requester (the
  /// responses come back to it) or as the responder. -1 if none.
  static int64_t stream_of(const QpTracker& t, const std::string& local, uint32_t qpn) {
    for (size_t i = 0; i < t.streams().size(); ++i) {
      const RequestStream& s = t.streams()[i];
      if ((addr_string(s.key.src) == local && s.paired && s.requester_qpn == qpn) ||
          (addr_string(s.key.dst) == local && s.key.qpn == qpn))
        return static_cast<int64_t>(i);
    }
    return -1;
  }

  uint64_t lane_of_name(const std::string& a) {
    const auto [it, fresh] = lane_of_.try_emplace(a, lanes_.size());
    if (fresh) lanes_.push_back(a);
    return it->second;
  }

  uint64_t lane(const wire::Gid& g) {
    const std::string a = addr_string(g);
    const auto [it, fresh] = lane_of_.try_emplace(a, lanes_.size());
    if (fresh) lanes_.push_back(a);
    return it->second;
  }

  std::ostream& out_;
  const QpTracker* tracker_;
  bool svg_;
  std::vector<SvgRow> svg_rows_;
  std::ostringstream explain_text_;
  std::unique_ptr<Printer> explain_;
  std::string path_;
  std::vector<std::pair<int64_t, std::string>> rows_;  // (time, JSON object) per row
  uint64_t explained_ = 0, other_ = 0;
  std::vector<std::string> lanes_;
  std::map<std::string, uint64_t> lane_of_;
};

}  // namespace

std::unique_ptr<Printer> make_ladder_printer(std::ostream& out, const QpTracker& tracker,
                                             bool svg) {
  return std::make_unique<LadderPrinter>(out, &tracker, svg);
}

}  // namespace uroce::dissect

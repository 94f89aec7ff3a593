// The default output: one line per frame, anomalies found by the tracker as [tags].
#include <cinttypes>
#include <ostream>

#include "dissect/printer.h"

namespace uroce::dissect {

std::string summary_line(const Counts& c) {
  std::string s = strf("summary: %" PRIu64 " packets: RoCE %" PRIu64 " (bad ICRC %" PRIu64
                       "), other %" PRIu64 ", malformed %" PRIu64,
                       c.packets, c.roce, c.bad_icrc, c.other, c.malformed);
  if (c.malformed != 0) {
    std::string why;
    for (size_t e = 0; e < c.errors.size(); ++e) {
      if (c.errors[e] == 0) continue;
      const std::string_view n = wire::error_name(static_cast<wire::ParseError>(e));
      why += strf("%s%.*s %" PRIu64, why.empty() ? "" : ", ", static_cast<int>(n.size()), n.data(),
                  c.errors[e]);
    }
    s += " (" + why + ")";
  }
  if (c.snapped != 0) s += strf(", snapped %" PRIu64, c.snapped);
  std::string ops;
  for (size_t op = 0; op < c.opcodes.size(); ++op) {
    if (c.opcodes[op] == 0) continue;
    const std::string_view n = wire::opcode_info(static_cast<uint8_t>(op)).name;
    ops += strf("%s%.*s %" PRIu64, ops.empty() ? "" : ", ", static_cast<int>(n.size()), n.data(),
                c.opcodes[op]);
  }
  if (!ops.empty()) s += "; " + ops;
  return s;
}

namespace {

/// Short markers for what the tracker found unusual about a packet.
std::string tags(const std::vector<Note>& notes) {
  std::string s;
  bool retx = false;
  for (const Note& n : notes) {
    switch (n.kind) {
      case NoteKind::kGap: s += strf("  [gap: %" PRId64 " missing]", n.value); break;
      case NoteKind::kRetransmission:
        if (!retx) s += "  [retransmission]";
        retx = true;
        break;
      case NoteKind::kResend: s += strf("  [resend after %s]", ms_string(n.value).c_str()); break;
      case NoteKind::kOpSequence: s += "  [message order]"; break;
      case NoteKind::kDuplicateAck: s += "  [duplicate ACK]"; break;
      case NoteKind::kUnmatched: s += "  [unmatched response]"; break;
      default: break;
    }
  }
  return s;
}

class LinePrinter final : public Printer {
 public:
  explicit LinePrinter(std::ostream& out) : out_(out) {}
  void begin(const CaptureInfo&) override {}
  void packet(const Frame& f, const std::vector<Note>& notes) override {
    out_ << format_line(f) << tags(notes) << '\n';
  }
  void end(const CaptureEnd& e) override {
    out_ << summary_line(e.counts);
    if (!e.complete) out_ << " (capture incomplete)";
    out_ << '\n';
  }

 private:
  std::ostream& out_;
};

}  // namespace

std::unique_ptr<Printer> make_line_printer(std::ostream& out) {
  return std::make_unique<LinePrinter>(out);
}

}  // namespace uroce::dissect

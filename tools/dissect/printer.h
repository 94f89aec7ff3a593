// The three output modes of uroce-dissect behind one interface: the run loop decodes and
// tracks, a Printer decides what the reader sees.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "dissect/dissector.h"
#include "dissect/qp_tracker.h"

namespace uroce::dissect {

struct CaptureInfo {
  std::string path;
  PathMtu mtu;
};

struct CaptureEnd {
  const Counts& counts;
  const QpTracker& tracker;
  bool complete = true;  // false: reading stopped at a truncated or corrupt record
  std::string problem;   // why, when !complete
  uint64_t first_ts_ns = 0;  // the first frame's timestamp (rel_ns counts from it)
};

class Printer {
 public:
  virtual ~Printer() = default;
  virtual void begin(const CaptureInfo& info) = 0;
  virtual void packet(const Frame& f, const std::vector<Note>& notes) = 0;
  virtual void end(const CaptureEnd& end) = 0;
};

/// One line per frame, then one summary line.
std::unique_ptr<Printer> make_line_printer(std::ostream& out);
/// Teaching mode: every field of every RoCE packet with its meaning, tracking, per-QP summary.
std::unique_ptr<Printer> make_explain_printer(std::ostream& out);
/// JSON Lines: one object per frame, then {"summary": ...}.
std::unique_ptr<Printer> make_json_printer(std::ostream& out);
/// --ladder: a self-contained HTML page drawing the capture as a ladder diagram (ladder.cc),
/// or with `svg` a static SVG of it. Asks `tracker` which request stream each packet is of.
std::unique_ptr<Printer> make_ladder_printer(std::ostream& out, const QpTracker& tracker,
                                             bool svg = false);

/// The summary line of the one-line mode (also used at the end of --explain).
std::string summary_line(const Counts& c);

}  // namespace uroce::dissect

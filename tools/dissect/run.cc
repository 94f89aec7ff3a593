#include "dissect/run.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ostream>

#include "dissect/printer.h"
#include "pcap/pcap_file.h"

namespace uroce::dissect {

namespace {

/// Why reading stopped after `read` packets.
std::string read_problem(uint64_t read, const std::string& pcap_error) {
  const bool truncated = pcap_error.find("truncated") != std::string::npos;
  const char* what = truncated ? "truncated" : "corrupt";
  if (read == 0)
    return strf("capture is %s in its first packet (libpcap: %s)", what, pcap_error.c_str());
  return strf("capture is %s after packet %" PRIu64 " (libpcap: %s)", what, read,
              pcap_error.c_str());
}

std::unique_ptr<Printer> make_printer(Mode mode, std::ostream& out, const QpTracker& tracker) {
  switch (mode) {
    case Mode::kExplain: return make_explain_printer(out);
    case Mode::kJson: return make_json_printer(out);
    case Mode::kLadder: return make_ladder_printer(out, tracker);
    case Mode::kLadderSvg: return make_ladder_printer(out, tracker, true);
    case Mode::kLine: break;
  }
  return make_line_printer(out);
}

}  // namespace

int dissect_file(const std::string& path, Mode mode, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& problem) {
    out.flush();
    err << "uroce-dissect: " << path << ": " << problem << '\n';
    return 1;
  };

  if (const std::string problem = drivers::capture_problem(path); !problem.empty()) return fail(problem);

  // Pass 1: the path MTU, which READ tracking needs before the first READ response shows it.
  MtuScanner scanner;
  {
    drivers::PcapReader scan(path);
    if (!scan.ok()) return fail(drivers::open_problem(scan.error()));
    drivers::PcapRecord rec;
    uint64_t n = 0;
    while (scan.next(rec)) scanner.observe(decode_frame(++n, 0, rec.data, rec.orig_len));
    // A read error shows up again, at the same record, in pass 2.
  }

  // Pass 2: decode, track and print.
  drivers::PcapReader reader(path);
  if (!reader.ok()) return fail(drivers::open_problem(reader.error()));
  const PathMtu mtu = scanner.result();
  QpTracker tracker(mtu);
  std::unique_ptr<Printer> printer = make_printer(mode, out, tracker);
  printer->begin({path, mtu});
  Counts counts;
  drivers::PcapRecord rec;
  uint64_t index = 0;
  uint64_t t0 = 0;
  while (reader.next(rec)) {
    if (++index == 1) t0 = rec.ts_ns;
    const auto rel = static_cast<int64_t>(rec.ts_ns - t0);  // wraps to negative if time goes back
    const Frame f = decode_frame(index, rel, rec.data, rec.orig_len);
    counts.add(f);
    const std::vector<Note> notes = tracker.observe(f);
    printer->packet(f, notes);
  }
  const bool complete = reader.error().empty();
  const std::string problem = complete ? std::string() : read_problem(index, reader.error());
  printer->end({counts, tracker, complete, problem, t0});
  if (!complete) return fail(problem);
  out.flush();
  return 0;
}

}  // namespace uroce::dissect

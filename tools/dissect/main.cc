// uroce-dissect: decode RoCEv2 captures. See docs/dissect.md.
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "dissect/run.h"

namespace {

constexpr const char* kUsage =
    "usage: uroce-dissect [--explain | --json | --ladder OUT.html|OUT.svg] FILE.pcap\n"
    "\n"
    "Decodes the RoCEv2 packets of an Ethernet pcap/pcapng capture.\n"
    "  (default)   one line per packet, then a summary line\n"
    "  --explain   teaching mode: every header field of every RoCE packet with its meaning,\n"
    "              per-QP tracking (gaps, retransmissions, NAKs, RNR waits, READ and atomic\n"
    "              matching) and a per-QP summary\n"
    "  --json      JSON Lines: one object per packet, then one {\"summary\": ...} object\n"
    "  --ladder OUT.html\n"
    "              a ladder diagram, one self-contained page: a lane per endpoint, an arrow\n"
    "              per packet (opcode, PSN, MSN, length), NAKs, retransmissions and bad\n"
    "              packets coloured, hover for the --explain text; open it in a browser.\n"
    "              OUT.svg: the same diagram as a static picture (no collapsing, no\n"
    "              panel; up to 5000 rows)\n"
    "  --help      show this text\n"
    "\n"
    "Exit status: 0 ok; 1 the capture cannot be opened, is not Ethernet, or is truncated or\n"
    "corrupt (one line on stderr says which); 2 bad usage.\n";

int usage_error(const std::string& problem) {
  std::cerr << "uroce-dissect: " << problem << "\n\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using uroce::dissect::Mode;
  Mode mode = Mode::kLine;
  bool mode_set = false;
  std::string path;
  bool have_path = false;
  bool options_done = false;
  std::string ladder_out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!options_done && (arg == "--help" || arg == "-h")) {
      std::cout << kUsage;
      return 0;
    }
    if (!options_done && (arg == "--explain" || arg == "--json")) {
      const Mode m = arg == "--json" ? Mode::kJson : Mode::kExplain;
      if (mode == Mode::kLadder) return usage_error("--ladder cannot be combined with --explain or --json");
      if (mode_set && m != mode) return usage_error("--explain and --json cannot be combined");
      mode = m;
      mode_set = true;
      continue;
    }
    if (!options_done && arg == "--ladder") {
      if (mode_set && mode != Mode::kLadder)
        return usage_error("--ladder cannot be combined with --explain or --json");
      if (i + 1 >= argc) return usage_error("--ladder needs the page's file name (OUT.html)");
      ladder_out = argv[++i];
      mode = Mode::kLadder;
      mode_set = true;
      continue;
    }
    if (!options_done && arg == "--") {
      options_done = true;
      continue;
    }
    if (!options_done && arg.size() > 1 && arg[0] == '-') {
      return usage_error("unknown option '" + arg + "'");
    }
    if (have_path) return usage_error("one capture file at a time");
    path = arg;
    have_path = true;
  }
  if (!have_path) return usage_error("no capture file given");
  if (mode == Mode::kLadder) {
    if (ladder_out.size() > 4 && ladder_out.compare(ladder_out.size() - 4, 4, ".svg") == 0)
      mode = Mode::kLadderSvg;
    std::ofstream page(ladder_out, std::ios::binary | std::ios::trunc);
    if (!page) {
      std::cerr << "uroce-dissect: " << ladder_out << ": cannot write the page: "
                << std::strerror(errno) << '\n';
      return 1;
    }
    const int rc = uroce::dissect::dissect_file(path, mode, page, std::cerr);
    page.close();
    if (!page) {
      std::cerr << "uroce-dissect: " << ladder_out << ": writing the page failed\n";
      return 1;
    }
    if (rc == 0) std::cout << "uroce-dissect: wrote " << ladder_out << " (open it in a browser)\n";
    return rc;
  }
  return uroce::dissect::dissect_file(path, mode, std::cout, std::cerr);
}

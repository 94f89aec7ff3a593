// uroce-dissect: decode RoCEv2 captures. See docs/dissect.md.
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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
    // OUT is a page (.html, .htm or .svg), never the capture: with the two swapped, a capture
    // would be written over. The page is written beside OUT and renamed over it only once
    // whole, so a failed run leaves an earlier page as it was.
    auto ends_with = [&](const char* ext) {
      const size_t n = std::strlen(ext);
      return ladder_out.size() > n && strcasecmp(ladder_out.c_str() + ladder_out.size() - n, ext) == 0;
    };
    if (ends_with(".svg")) {
      mode = Mode::kLadderSvg;
    } else if (!ends_with(".html") && !ends_with(".htm")) {
      return usage_error("--ladder '" + ladder_out +
                         "': the page's name must end in .html or .svg (the capture comes last: "
                         "uroce-dissect --ladder OUT.html FILE.pcap)");
    }
    struct stat out_st{}, in_st{};
    if (stat(ladder_out.c_str(), &out_st) == 0 && stat(path.c_str(), &in_st) == 0 &&
        out_st.st_dev == in_st.st_dev && out_st.st_ino == in_st.st_ino)
      return usage_error("--ladder '" + ladder_out + "' is the capture itself");
    const size_t slash = ladder_out.rfind('/');
    std::string tmp = (slash == std::string::npos ? std::string() : ladder_out.substr(0, slash + 1)) +
                      ".uroce-dissect-XXXXXX";
    const int fd = mkstemp(tmp.data());
    if (fd < 0) {
      std::cerr << "uroce-dissect: " << ladder_out << ": cannot write the page: "
                << std::strerror(errno) << '\n';
      return 1;
    }
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);  // as a file the program created (mkstemp's is 0600)
    close(fd);
    std::ofstream page(tmp, std::ios::binary | std::ios::trunc);
    const int rc = page ? uroce::dissect::dissect_file(path, mode, page, std::cerr) : 1;
    page.close();
    if (rc == 0 && !page) std::cerr << "uroce-dissect: " << ladder_out << ": writing the page failed\n";
    if (rc != 0 || !page || std::rename(tmp.c_str(), ladder_out.c_str()) != 0) {
      if (rc == 0 && page)
        std::cerr << "uroce-dissect: " << ladder_out << ": cannot write the page: "
                  << std::strerror(errno) << '\n';
      std::remove(tmp.c_str());
      return rc != 0 ? rc : 1;
    }
    std::cout << "uroce-dissect: wrote " << ladder_out << " (open it in a browser)\n";
    return 0;
  }
  return uroce::dissect::dissect_file(path, mode, std::cout, std::cerr);
}

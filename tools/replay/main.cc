// uroce-replay: replay a RoCEv2 capture against uroce and compare. See docs/replay.md.
#include <cstdlib>
#include <iostream>
#include <string>

#include "replay/replay.h"

namespace {

constexpr const char* kUsage =
    "usage: uroce-replay [--role requester|responder] [--qpn QPN] [--scenario FILE]\n"
    "                    [--json | --brief] FILE.pcap\n"
    "\n"
    "uroce takes the place of one host of a recorded RoCEv2 conversation: the other host's\n"
    "packets are fed to a uroce engine in capture order and what uroce sends is compared,\n"
    "semantically, with what the recorded host sent.\n"
    "  --role R       which host uroce replaces: the requester (sender of the first request)\n"
    "                 or the responder\n"
    "  --qpn QPN      replay only the connection of this QP of the replaced host\n"
    "  --scenario F   setup and expected outcome (default: FILE.scenario next to the capture,\n"
    "                 if it exists); what it leaves open is inferred from the capture\n"
    "  --json         JSON Lines: one object per step, then one {\"summary\": ...} object\n"
    "  --brief        only the setup, the divergences and the summary\n"
    "  --help         show this text\n"
    "\n"
    "Exit status: 0 uroce conforms (or the outcome is the one the scenario expects);\n"
    "1 it diverges; 2 bad usage or input (one line on stderr says which).\n";

int usage_error(const std::string& problem) {
  std::cerr << "uroce-replay: " << problem << "\n\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  uroce::replay::Options o;
  bool have_path = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string& v) {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "--brief") {
      o.brief = true;
    } else if (arg == "--role") {
      if (!value(v)) return usage_error("--role needs a value");
      if (v == "requester") o.role = uroce::replay::Role::kRequester;
      else if (v == "responder") o.role = uroce::replay::Role::kResponder;
      else return usage_error("--role must be requester or responder");
    } else if (arg == "--qpn") {
      if (!value(v)) return usage_error("--qpn needs a value");
      char* end = nullptr;
      const unsigned long q = std::strtoul(v.c_str(), &end, 0);
      if (v.empty() || *end != '\0' || q > 0xFFFFFF) return usage_error("bad --qpn '" + v + "'");
      o.qpn = static_cast<uint32_t>(q);
    } else if (arg == "--scenario") {
      if (!value(o.scenario)) return usage_error("--scenario needs a file");
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage_error("unknown option '" + arg + "'");
    } else {
      if (have_path) return usage_error("one capture file at a time");
      o.pcap = arg;
      have_path = true;
    }
  }
  if (!have_path) return usage_error("no capture file given");
  if (o.json && o.brief) return usage_error("--json and --brief cannot be combined");
  return uroce::replay::run_tool(o, std::cout, std::cerr);
}

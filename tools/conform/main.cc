// uroce-conform: RoCEv2 conformance cases against any verbs device (docs/conformance.md).
#include <dirent.h>
#include <getopt.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "conform.h"
#include "dissect/run.h"

namespace {

using uroce::conform::Case;
using uroce::conform::CaseResult;
using uroce::conform::Verdict;

void usage(FILE* f) {
  fprintf(f,
          "usage: uroce-conform --iface IFACE --agent HOST[:PORT] [options] CASE|DIR...\n"
          "       uroce-conform --check CASE|DIR...\n"
          "Runs RoCEv2 conformance cases against a device under test: uroce-conform-agent runs\n"
          "beside the device (any verbs device: the kernel's rxe, an RNIC, uroce) and this program\n"
          "plays the peer on the device's link, packet by packet.\n"
          "\n"
          "  --iface IFACE      our interface on the device's link (a packet socket: needs root or CAP_NET_RAW)\n"
          "  --agent HOST:PORT  where uroce-conform-agent listens (port 18600 by default)\n"
          "  --ip ADDR          our IPv4 address (default: IFACE's first)\n"
          "  --dut-mac MAC      the device's MAC (default: what the agent reports)\n"
          "  --out DIR          a capture of each case, DIR/CASE.pcap, and its ladder diagram, DIR/CASE.html\n"
          "  --json FILE        the results as JSON\n"
          "  --time-scale K     multiply every time bound by K (a slow device: an emulated VM)\n"
          "  --check            only read the cases and report the first error in each\n"
          "  -v, --verbose      every step, request and answer\n"
          "\n"
          "Prints one line per case (PASS, NOTE: a difference the spec allows, FAIL, ERROR: the\n"
          "case could not run), then a summary. Exit status 0 when nothing failed, 1 otherwise,\n"
          "2 for a usage error.\n");
}

void collect(const std::string& path, std::vector<std::string>* out) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::vector<std::string> names;
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n.size() > 5 && n.compare(n.size() - 5, 5, ".case") == 0) names.push_back(path + "/" + n);
      }
      closedir(d);
    }
    std::sort(names.begin(), names.end());
    out->insert(out->end(), names.begin(), names.end());
  } else {
    out->push_back(path);
  }
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
      continue;
    }
    o += c;
  }
  return o + "\"";
}

void write_json(const std::string& path, const std::string& dut, const std::vector<CaseResult>& rs) {
  std::ofstream f(path);
  f << "{\"dut\": " << json_str(dut) << ", \"cases\": [\n";
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    f << "  {\"name\": " << json_str(r.name) << ", \"verdict\": " << json_str(to_string(r.verdict))
      << ", \"title\": " << json_str(r.title) << ", \"clauses\": [";
    for (size_t k = 0; k < r.clauses.size(); ++k) f << (k ? ", " : "") << json_str(r.clauses[k]);
    f << "], \"message\": " << json_str(r.message) << ", \"line\": " << r.failed_line
      << ", \"frames_sent\": " << r.frames_sent << ", \"frames_received\": " << r.frames_received
      << ", \"seconds\": " << r.seconds << ", \"pcap\": " << json_str(r.pcap)
      << ", \"ladder\": " << json_str(r.ladder) << "}"
      << (i + 1 < rs.size() ? ",\n" : "\n");
  }
  f << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  uroce::conform::Options opt;
  bool check_only = false;
  static const option longs[] = {
      {"iface", required_argument, nullptr, 'i'},  {"agent", required_argument, nullptr, 'a'},
      {"ip", required_argument, nullptr, 'I'},     {"dut-mac", required_argument, nullptr, 'm'},
      {"out", required_argument, nullptr, 'o'},    {"json", required_argument, nullptr, 'j'},
      {"time-scale", required_argument, nullptr, 't'}, {"check", no_argument, nullptr, 'c'},
      {"verbose", no_argument, nullptr, 'v'},      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "vh", longs, nullptr)) != -1;) {
    switch (c) {
      case 'i': opt.iface = optarg; break;
      case 'a': opt.agent = optarg; break;
      case 'I': opt.local_ip = optarg; break;
      case 'm': opt.dut_mac = optarg; break;
      case 'o': opt.out_dir = optarg; break;
      case 'j': opt.json_path = optarg; break;
      case 't': opt.time_scale = atof(optarg); break;
      case 'c': check_only = true; break;
      case 'v': opt.verbose = true; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  std::vector<std::string> files;
  for (int i = optind; i < argc; ++i) collect(argv[i], &files);
  if (files.empty() || opt.time_scale <= 0) {
    usage(stderr);
    return 2;
  }
  std::vector<Case> cases;
  int bad = 0;
  for (const auto& f : files) {
    std::string err;
    auto c = uroce::conform::load_case(f, &err);
    if (!c) {
      fprintf(stderr, "uroce-conform: %s\n", err.c_str());
      ++bad;
      continue;
    }
    cases.push_back(std::move(*c));
  }
  if (check_only) {
    printf("%zu cases read, %d with errors\n", cases.size(), bad);
    return bad ? 1 : 0;
  }
  if (bad) return 2;
  if (opt.iface.empty() || opt.agent.empty()) {
    fprintf(stderr, "uroce-conform: --iface and --agent say where the device under test is (--help)\n");
    return 2;
  }
  if (!opt.out_dir.empty()) mkdir(opt.out_dir.c_str(), 0755);
  std::string err;
  auto runner = uroce::conform::Runner::open(opt, &err);
  if (!runner) {
    fprintf(stderr, "uroce-conform: %s\n", err.c_str());
    return 1;
  }
  printf("device under test: %s\n", runner->dut_description().c_str());
  std::vector<CaseResult> results;
  int count[4] = {0, 0, 0, 0};
  for (const auto& c : cases) {
    CaseResult r = runner->run(c);
    if (!r.pcap.empty()) {  // the capture as a ladder diagram: a failure is a picture
      const std::string html = opt.out_dir + "/" + r.name + ".html";
      std::ofstream page(html);
      std::ostringstream why;
      if (page && uroce::dissect::dissect_file(r.pcap, uroce::dissect::Mode::kLadder, page, why) == 0) r.ladder = html;
    }
    ++count[static_cast<int>(r.verdict)];
    printf("%-5s %-34s %s%s%s\n", to_string(r.verdict), r.name.c_str(), r.clauses.front().c_str(),
           r.message.empty() ? "" : "\n      ", r.message.c_str());
    fflush(stdout);
    results.push_back(std::move(r));
  }
  printf("%zu cases: %d passed, %d with notes, %d failed, %d could not run\n", results.size(), count[0], count[1],
         count[2], count[3]);
  if (!opt.json_path.empty()) write_json(opt.json_path, runner->dut_description(), results);
  return count[2] + count[3] ? 1 : 0;
}

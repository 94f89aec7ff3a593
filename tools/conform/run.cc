// The scripted side's runner: the link and the agent opened once, each case carried out on
// them (case_run.h).
#include <sstream>

#include "case_run.h"

namespace uroce::conform {

namespace {

// What the agent's hello said.
std::map<std::string, std::string> hello_fields(const std::string& r) {
  std::vector<std::string> w;
  std::istringstream in(r);
  for (std::string x; in >> x;) w.push_back(x);
  return key_values(w, 1);
}

}  // namespace

std::unique_ptr<Runner> Runner::open(const Options& opt, std::string* error) {
  auto r = std::unique_ptr<Runner>(new Runner(opt));
  r->link_ = Link::open(opt, error);
  if (!r->link_) return nullptr;
  r->agent_ = Agent::connect(opt.agent, error);
  if (!r->agent_) return nullptr;
  const std::string h = r->agent_->call("hello");
  if (h.rfind("ok", 0) != 0) {
    *error = "the agent's hello: " + h;
    return nullptr;
  }
  r->dut_ = h.substr(3);
  return r;
}

Runner::Runner(const Options& opt) : opt_(opt) {}
Runner::~Runner() = default;

CaseResult Runner::run(const Case& c) {
  static uint32_t n_cases = 0;
  CaseResult res;
  res.name = c.name;
  res.title = c.title;
  res.file = c.file;
  res.clauses = c.clauses;
  const uint64_t t0 = now_ns();
  const auto hello = hello_fields("ok " + dut_);
  std::string mac = opt_.dut_mac.empty() ? (hello.count("mac") ? hello.at("mac") : "-") : opt_.dut_mac;
  const auto dmac = wire::parse_mac(mac);
  const auto dip = wire::parse_ipv4(hello.count("ip") ? hello.at("ip") : "");
  if (!dmac || !dip) {
    res.verdict = Verdict::kError;
    res.message = "the DUT's MAC or IPv4 address is unknown (the agent said '" + dut_ + "'; --dut-mac gives the MAC)";
    return res;
  }
  std::unique_ptr<drivers::PcapWriter> pcap;
  if (!opt_.out_dir.empty()) {
    res.pcap = opt_.out_dir + "/" + c.name + ".pcap";
    pcap = std::make_unique<drivers::PcapWriter>(res.pcap);
    if (!pcap->ok()) pcap.reset();
  }
  // Leftovers of the case before (late retransmissions) are not this case's.
  std::vector<uint8_t> junk;
  while (link_->receive(now_ns(), &junk)) {
  }
  link_->record_to(pcap.get());
  const std::string cleared = agent_->call("clear");
  CaseRun run(opt_, *link_, *agent_, *dmac, *dip, 0x0C0100 + 0x10 * (++n_cases % 0x1000));
  if (cleared.rfind("ok", 0) != 0) {
    res.verdict = Verdict::kError;
    res.message = "the agent: " + cleared;
  }
  for (size_t i = 0; i < c.steps.size() && res.verdict != Verdict::kError && res.verdict != Verdict::kFail; ++i) {
    const Step& s = c.steps[i];
    if (opt_.verbose) printf(" %s:%d: %s\n", c.name.c_str(), s.line, s.text.c_str());
    const auto f = run.step(s);
    if (!f) continue;
    const std::string where = "line " + std::to_string(s.line) + ": " + f->message;
    if (s.impl && f->verdict == Verdict::kFail) {
      res.notes.push_back(where);
      res.verdict = Verdict::kNote;
      continue;
    }
    res.verdict = f->verdict;
    res.message = where;
    res.failed_line = s.line;
  }
  link_->record_to(nullptr);
  if (res.verdict == Verdict::kNote) {
    for (const auto& n : res.notes) res.message += (res.message.empty() ? "" : "; ") + n;
  }
  res.frames_sent = run.sent;
  res.frames_received = run.received;
  res.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  return res;
}

}  // namespace uroce::conform

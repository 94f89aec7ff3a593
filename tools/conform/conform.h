// uroce-conform: a scripted RoCEv2 peer against a device under test (DUT).
//
// The DUT side is uroce-conform-agent, an ordinary verbs program driven over TCP; this side
// speaks the wire itself (frames built and parsed with uroce's wire layer, sent and received
// through a packet socket on the DUT's link), so that a case sends exactly the packets it
// wants and checks the DUT's answers packet by packet. Cases are text files
// (docs/conformance.md has the language); each names the IBA clauses it checks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wire/addr.h"
#include "wire/packet.h"

namespace uroce::conform {

// ---- cases ---------------------------------------------------------------------------------

enum class StepKind : uint8_t {
  kDut,      // a request to the agent, with an optional "=> expectation"
  kConnect,  // the DUT's QP to RTS against ours
  kSend,     // a packet from us
  kExpect,   // a packet from the DUT (or none)
  kCmSend,   // a CM MAD from our QP1
  kCmExpect, // a CM MAD from the DUT's QP1 (or none)
};

struct Step {
  StepKind kind = StepKind::kDut;
  int line = 0;
  std::string text;                // the line as written, comments stripped
  std::vector<std::string> words;  // after the keyword
  std::string expectation;         // kDut: after "=>"
  bool impl = false;               // the spec leaves this to the implementation: a mismatch is a note
};

struct Case {
  std::string file;
  std::string name;    // the file's name without .case
  std::string title;
  std::vector<std::string> clauses;
  std::vector<Step> steps;
};

/// Reads a case file; nullopt and *error ("FILE:LINE: what") when it does not parse.
std::optional<Case> load_case(const std::string& path, std::string* error);

/// key=value words into a map (words without '=' map to "").
std::map<std::string, std::string> key_values(const std::vector<std::string>& words, size_t from);

/// A number: decimal, 0x hex, or a negative decimal (-1); false if it is none.
bool parse_number(const std::string& s, int64_t* out);

// ---- the link and the agent ------------------------------------------------------------------

struct Options {
  std::string iface;           // the scripted side's interface on the DUT's link
  std::string agent;           // host[:port] of uroce-conform-agent
  std::string local_ip;        // ours (default: the interface's first IPv4 address)
  std::string dut_mac;         // override what the agent says
  std::string out_dir;         // a pcap per case (none: no captures)
  std::string json_path;       // results as JSON
  double time_scale = 1.0;     // every time bound multiplied (a slow DUT: an emulated VM)
  bool verbose = false;
};

class Agent {
 public:
  /// Connects; nullptr and *error on failure.
  static std::unique_ptr<Agent> connect(const std::string& where, std::string* error);
  ~Agent();
  /// Sends one line, returns the answer line ("ok ..." or "err ..."); "err agent gone" when
  /// the connection broke.
  std::string call(const std::string& line);

 private:
  explicit Agent(int fd) : fd_(fd) {}
  int fd_;
  std::string buf_;
};

class Link;  // the scripted side's port (run.cc)

enum class Verdict : uint8_t { kPass, kNote, kFail, kError };
const char* to_string(Verdict v);

struct CaseResult {
  std::string name, title, file;
  std::vector<std::string> clauses;
  Verdict verdict = Verdict::kPass;
  std::string message;             // why it failed, or the notes
  std::vector<std::string> notes;  // implementation-defined differences seen
  int failed_line = 0;
  uint64_t frames_sent = 0, frames_received = 0;
  double seconds = 0;
  std::string pcap;
  std::string ladder;  // the capture drawn (uroce-dissect --ladder)
};

class Runner {
 public:
  /// Opens the link and the agent; nullptr and *error on failure.
  static std::unique_ptr<Runner> open(const Options& opt, std::string* error);
  ~Runner();
  CaseResult run(const Case& c);
  std::string dut_description() const { return dut_; }

 private:
  explicit Runner(const Options& opt);
  Options opt_;
  std::unique_ptr<Link> link_;
  std::unique_ptr<Agent> agent_;
  std::string dut_;
};

}  // namespace uroce::conform

// Case files: one step per line (docs/conformance.md).
//
//   title   A duplicate SEND is acknowledged again and delivered once
//   clause  IBA 9.7.4: the responder answers a duplicate request without redoing it
//   dut     mr m len=4096 access=lw,rw          (a request to the agent)
//   dut     poll c n=1 wait=500 => 1:success:recv:100
//   connect q mtu=1024
//   send    q SEND_ONLY psn=0 len=100 seed=3 ackreq
//   expect  q ACKNOWLEDGE psn=0 syndrome=ack within=200
//   cm_send REQ as=q port=7471                  (a CM MAD from our QP1)
//   cm_expect REP                               (the DUT's CM answers)
//   impl expect q ...                           (the spec leaves it open: a difference is a note)
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "conform.h"

namespace uroce::conform {

namespace {

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::string base_name(const std::string& path) {
  std::string b = path.substr(path.find_last_of('/') + 1);
  if (b.size() > 5 && b.compare(b.size() - 5, 5, ".case") == 0) b.resize(b.size() - 5);
  return b;
}

}  // namespace

bool parse_number(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const bool neg = s[0] == '-';
  const unsigned long long v = std::strtoull(s.c_str() + (neg ? 1 : 0), &end, 0);
  if (errno != 0 || end == nullptr || *end != '\0' || end == s.c_str() + (neg ? 1 : 0)) return false;
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

std::map<std::string, std::string> key_values(const std::vector<std::string>& words, size_t from) {
  std::map<std::string, std::string> kv;
  for (size_t i = from; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    if (eq == std::string::npos) kv[words[i]] = "";
    else kv[words[i].substr(0, eq)] = words[i].substr(eq + 1);
  }
  return kv;
}

std::optional<Case> load_case(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot read it";
    return std::nullopt;
  }
  Case c;
  c.file = path;
  c.name = base_name(path);
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    const auto where = [&] { return path + ":" + std::to_string(line) + ": "; };
    std::string text = trim(raw.substr(0, raw.find('#')));
    if (text.empty()) continue;
    Step s;
    s.line = line;
    if (text.rfind("impl ", 0) == 0) {
      s.impl = true;
      text = trim(text.substr(5));
    }
    s.text = text;
    const size_t sp = text.find_first_of(" \t");
    const std::string key = text.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : trim(text.substr(sp));
    if (key == "title") {
      c.title = rest;
      continue;
    }
    if (key == "clause") {
      c.clauses.push_back(rest);
      continue;
    }
    if (key == "dut") {
      s.kind = StepKind::kDut;
      const size_t arrow = rest.find("=>");
      s.words = split_words(rest.substr(0, arrow));
      if (arrow != std::string::npos) s.expectation = trim(rest.substr(arrow + 2));
    } else if (key == "connect" || key == "send" || key == "expect") {
      s.kind = key == "connect" ? StepKind::kConnect : key == "send" ? StepKind::kSend : StepKind::kExpect;
      s.words = split_words(rest);
    } else if (key == "cm_send" || key == "cm_expect") {
      s.kind = key == "cm_send" ? StepKind::kCmSend : StepKind::kCmExpect;
      s.words = split_words(rest);
    } else {
      *error = where() + "a step begins with title, clause, dut, connect, send, expect, cm_send, cm_expect or impl (not '" +
               key + "')";
      return std::nullopt;
    }
    if (s.words.empty()) {
      *error = where() + key + " needs what to do";
      return std::nullopt;
    }
    if ((s.kind == StepKind::kSend || s.kind == StepKind::kExpect) && s.words.size() < 2) {
      *error = where() + key + " QP OPCODE ...: which QP, and which packet";
      return std::nullopt;
    }
    c.steps.push_back(std::move(s));
  }
  if (c.title.empty() || c.clauses.empty()) {
    *error = path + ": a case needs a title and at least one clause line";
    return std::nullopt;
  }
  return c;
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "PASS";
    case Verdict::kNote: return "NOTE";
    case Verdict::kFail: return "FAIL";
    case Verdict::kError: return "ERROR";
  }
  return "?";
}

}  // namespace uroce::conform

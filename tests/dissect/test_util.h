// Helpers shared by the dissector tests: run the library over a capture, run the built tool,
// write small pcap files, and check JSON syntax.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dissect/dissector.h"
#include "dissect/qp_tracker.h"
#include "pcap/pcap_file.h"

namespace uroce::dissect::test {

inline std::string pcap_path(const std::string& name) {
  return std::string(UROCE_PCAP_DIR) + "/" + name;
}

/// Everything the library says about a capture, kept after the frames are gone.
struct CaptureRun {
  Counts counts;
  QpTracker tracker;
  std::map<uint64_t, std::string> lines;        // frame index -> format_line()
  std::map<uint64_t, std::vector<Note>> notes;  // frame index -> tracker notes
  std::string error;                            // reader error, if any

  /// Notes of one kind, with the frame they belong to.
  std::vector<std::pair<uint64_t, Note>> of_kind(NoteKind k) const {
    std::vector<std::pair<uint64_t, Note>> out;
    for (const auto& [idx, ns] : notes)
      for (const Note& n : ns)
        if (n.kind == k) out.emplace_back(idx, n);
    return out;
  }
  bool has_note(uint64_t idx, NoteKind k, const std::string& text_part) const {
    const auto it = notes.find(idx);
    if (it == notes.end()) return false;
    for (const Note& n : it->second)
      if (n.kind == k && n.text.find(text_part) != std::string::npos) return true;
    return false;
  }
  const RequestStream* stream(const std::string& src, const std::string& dst, uint32_t qpn) const {
    for (const RequestStream& s : tracker.streams())
      if (addr_string(s.key.src) == src && addr_string(s.key.dst) == dst && s.key.qpn == qpn)
        return &s;
    return nullptr;
  }
};

/// Runs decode + track over a capture the way the tool does (with the MTU pre-scan unless
/// `prescan` is false, which is how a single-pass user such as a replay tool would run).
inline CaptureRun run_capture(const std::string& path, bool prescan = true) {
  PathMtu mtu;
  if (prescan) {
    MtuScanner scan;
    drivers::PcapReader r(path);
    drivers::PcapRecord rec;
    uint64_t n = 0;
    while (r.next(rec)) scan.observe(decode_frame(++n, 0, rec.data, rec.orig_len));
    mtu = scan.result();
  }
  CaptureRun run{Counts{}, QpTracker(mtu), {}, {}, {}};
  drivers::PcapReader r(path);
  if (!r.ok()) {
    run.error = r.error();
    return run;
  }
  drivers::PcapRecord rec;
  uint64_t idx = 0, t0 = 0;
  while (r.next(rec)) {
    if (++idx == 1) t0 = rec.ts_ns;
    const Frame f = decode_frame(idx, static_cast<int64_t>(rec.ts_ns - t0), rec.data, rec.orig_len);
    run.counts.add(f);
    run.notes[idx] = run.tracker.observe(f);
    run.lines[idx] = format_line(f);
  }
  run.error = r.error();
  return run;
}

/// The frames of a capture as (bytes, orig_len, ts_ns).
struct RawFrame {
  std::vector<uint8_t> bytes;
  uint32_t orig_len = 0;
  uint64_t ts_ns = 0;
};
inline std::vector<RawFrame> read_frames(const std::string& path) {
  std::vector<RawFrame> out;
  drivers::PcapReader r(path);
  drivers::PcapRecord rec;
  while (r.next(rec)) out.push_back({{rec.data.begin(), rec.data.end()}, rec.orig_len, rec.ts_ns});
  return out;
}

/// Writes a classic little-endian microsecond pcap with the given link type; each frame keeps
/// its own caplen (bytes.size()) and orig_len, so snapped frames can be made.
inline void write_pcap(const std::string& path, uint32_t linktype,
                       const std::vector<RawFrame>& fs) {
  std::ofstream o(path, std::ios::binary);
  auto u32 = [&](uint32_t v) { o.write(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [&](uint16_t v) { o.write(reinterpret_cast<const char*>(&v), 2); };
  u32(0xa1b2c3d4);
  u16(2);
  u16(4);
  u32(0);
  u32(0);
  u32(65535);
  u32(linktype);
  for (const RawFrame& f : fs) {
    u32(static_cast<uint32_t>(f.ts_ns / 1'000'000'000));
    u32(static_cast<uint32_t>(f.ts_ns % 1'000'000'000 / 1000));
    u32(static_cast<uint32_t>(f.bytes.size()));
    u32(f.orig_len);
    o.write(reinterpret_cast<const char*>(f.bytes.data()),
            static_cast<std::streamsize>(f.bytes.size()));
  }
}

inline std::string read_file(const std::string& path) {
  std::ifstream i(path, std::ios::binary);
  std::stringstream ss;
  ss << i.rdbuf();
  return ss.str();
}

inline std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

/// A scratch directory, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    dir_ = std::filesystem::temp_directory_path() /
           ("uroce-dissect-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path dir_;
};

struct ToolResult {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs the built uroce-dissect with `args` (each shell-quoted).
inline ToolResult run_tool(const std::vector<std::string>& args) {
  TempDir tmp;
  std::string cmd = std::string("'") + UROCE_DISSECT_BIN + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  const std::string out = tmp.path("out"), err = tmp.path("err");
  cmd += " >'" + out + "' 2>'" + err + "'";
  const int rc = std::system(cmd.c_str());
  ToolResult r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

/// A strict JSON syntax check (RFC 8259 grammar), enough to validate --json output without a
/// JSON library. Returns true when `s` is exactly one JSON value (surrounding blanks allowed).
class JsonCheck {
 public:
  static bool valid(const std::string& s) {
    JsonCheck c(s);
    c.ws();
    if (!c.value()) return false;
    c.ws();
    return c.i_ == s.size();
  }

 private:
  explicit JsonCheck(const std::string& s) : s_(s) {}
  bool eof() const { return i_ >= s_.size(); }
  char peek() const { return eof() ? '\0' : s_[i_]; }
  void ws() {
    while (!eof() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool lit(const char* w) {
    const std::string t(w);
    if (s_.compare(i_, t.size(), t) != 0) return false;
    i_ += t.size();
    return true;
  }
  bool value() {
    switch (peek()) {
      case '{': return object();
      case '[': return array();
      case '"': return string();
      case 't': return lit("true");
      case 'f': return lit("false");
      case 'n': return lit("null");
      default: return number();
    }
  }
  bool object() {
    ++i_;
    ws();
    if (peek() == '}') return ++i_, true;
    for (;;) {
      ws();
      if (!string()) return false;
      ws();
      if (peek() != ':') return false;
      ++i_;
      ws();
      if (!value()) return false;
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') return ++i_, true;
      return false;
    }
  }
  bool array() {
    ++i_;
    ws();
    if (peek() == ']') return ++i_, true;
    for (;;) {
      ws();
      if (!value()) return false;
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == ']') return ++i_, true;
      return false;
    }
  }
  bool string() {
    if (peek() != '"') return false;
    ++i_;
    while (!eof()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (eof()) return false;
      const char e = s_[i_++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k)
          if (eof() || !std::isxdigit(static_cast<unsigned char>(s_[i_++]))) return false;
      } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
        return false;
      }
    }
    return false;
  }
  bool number() {
    const size_t start = i_;
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
    } else if (std::isdigit(static_cast<unsigned char>(peek()))) {
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++i_;
    } else {
      return false;
    }
    if (peek() == '.') {
      ++i_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return false;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) return false;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++i_;
    }
    return i_ > start;
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace uroce::dissect::test

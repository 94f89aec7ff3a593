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

/// "01 07 ..." -> bytes; whitespace is skipped (the strings are the tests' own).
inline std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out;
  std::string digits;
  for (char c : s)
    if (c != ' ' && c != '\n') digits += c;
  for (size_t i = 0; i + 1 < digits.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoul(digits.substr(i, 2), nullptr, 16)));
  return out;
}

/// An rdma_cm REQ as a Linux host sends it over RoCEv2 (IBA table 106 offsets, MAD bytes
/// 24 + offset): rping-style connect from 10.77.0.12 port 46870 to 10.77.0.11 port 7471,
/// QP 0x11, starting PSN 0x3a4b5c (3820380).
inline std::vector<uint8_t> cm_req_mad() {
  std::vector<uint8_t> m = from_hex(
      "01 07 02 03 0000 0000 0000000a00000001 0010 0000 00000000"  // MAD header: CM Send REQ
      "9a7b3c01 00000000"                                          //   0 local comm ID
      "00000000 01061d2f"                                          //   8 service ID TCP:7471
      "505400ff fe770012 00000000"                                 //  16 CA GUID, reserved
      "00000000"                                                   //  28 Q_Key
      "000011 01 000000 01"                                        //  32 QPN 0x11 RR 1, EECN ID 1
      "000000 a1"                                                  //  40 10100 00 1
      "3a4b5c a7"                                                  //  44 PSN; 10100 111
      "ffff 37 f0"                                                 //  48 P_Key; MTU 3 RNR 7; 15
      "ffff ffff"                                                  //  52 LIDs
      "00000000 00000000 0000ffff 0a4d000c"                        //  56 local GID
      "00000000 00000000 0000ffff 0a4d000b"                        //  72 remote GID
      "00000003 00 40 00 90");                                     //  88 rate 3; hop 64; ACK 18
  m.resize(24 + 140, 0);                                           //  96 no alternate path
  const auto cma = from_hex("00 40 b716"                           // 140 cma_hdr: IPv4, 46870
                            "00000000 00000000 00000000 0a4d000c"
                            "00000000 00000000 00000000 0a4d000b");
  m.insert(m.end(), cma.begin(), cma.end());
  m.resize(256, 0);
  return m;
}

/// The passive side's REJ of that REQ: reason 28, consumer reject (IBA table 108).
inline std::vector<uint8_t> cm_rej_mad() {
  std::vector<uint8_t> m = from_hex(
      "01 07 02 03 0000 0000 0000000b00000007 0012 0000 00000000"
      "00000000 9a7b3c01 00 00 001c");
  m.resize(256, 0);
  return m;
}

/// A UD SEND_ONLY from QP1 to `dest_qp` (Q_Key 0x80010000), 10.77.0.12 -> 10.77.0.11,
/// carrying `mad`.
inline std::vector<uint8_t> qp1_frame(const std::vector<uint8_t>& mad, uint32_t psn,
                                      uint32_t dest_qp = 1) {
  wire::RoceHeaders h;
  h.eth.src = {0x52, 0x54, 0x00, 0x77, 0x00, 0x12};
  h.eth.dst = {0x52, 0x54, 0x00, 0x77, 0x00, 0x11};
  h.ip4.src = {10, 77, 0, 12};
  h.ip4.dst = {10, 77, 0, 11};
  h.ip4.ttl = 64;
  h.ip4.dont_frag = true;
  h.udp.src_port = 0xd5a1;
  h.bth.opcode = wire::opcode::kUdSendOnly;
  h.bth.pkey = 0xffff;
  h.bth.dest_qp = dest_qp;
  h.bth.psn = psn;
  h.ext.deth = {0x80010000, 0, 1};
  std::vector<uint8_t> frame(1500);
  frame.resize(wire::build_frame(h, mad, frame));
  return frame;
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

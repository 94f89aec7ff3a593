// The scripted side: the link (a packet socket on the DUT's link), the agent's connection,
// and a case's steps carried out one after another.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>

#include "conform.h"
#include "wire/cm_mad.h"
#include "packet/packet_port.h"
#include "pattern.h"
#include "pcap/pcap_file.h"

namespace uroce::conform {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

// ---- the agent -------------------------------------------------------------------------------

std::unique_ptr<Agent> Agent::connect(const std::string& where, std::string* error) {
  std::string host = where, port = "18600";
  if (const size_t c = where.rfind(':'); c != std::string::npos) {
    host = where.substr(0, c);
    port = where.substr(c + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    *error = "--agent " + where + ": not a host[:port]";
    return nullptr;
  }
  int fd = -1;
  // The agent may still be starting: try for 10 s.
  for (int i = 0; i < 100 && fd < 0; ++i) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
      usleep(100 * 1000);
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    *error = "--agent " + where + ": no uroce-conform-agent answers there (start it on the DUT first)";
    return nullptr;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::unique_ptr<Agent>(new Agent(fd));
}

Agent::~Agent() {
  (void)!write(fd_, "bye\n", 4);
  close(fd_);
}

std::string Agent::call(const std::string& line) {
  const std::string l = line + "\n";
  for (size_t w = 0; w < l.size();) {
    const ssize_t k = write(fd_, l.data() + w, l.size() - w);
    if (k <= 0) return "err agent gone";
    w += static_cast<size_t>(k);
  }
  for (;;) {
    if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
      std::string answer = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return answer;
    }
    char tmp[65536];
    const ssize_t k = read(fd_, tmp, sizeof tmp);
    if (k <= 0) return "err agent gone";
    buf_.append(tmp, static_cast<size_t>(k));
  }
}

// ---- the link --------------------------------------------------------------------------------

class Link {
 public:
  static std::unique_ptr<Link> open(const Options& opt, std::string* error) {
    auto link = std::unique_ptr<Link>(new Link);
    drivers::PacketConfig pc;
    pc.iface = opt.iface;
    pc.gso = false;
    pc.frames = 512;
    link->port_ = drivers::PacketPort::open(pc, error);
    if (!link->port_) return nullptr;
    link->mac_ = link->port_->mac();
    std::string ip = opt.local_ip;
    if (ip.empty()) {
      ifaddrs* ifs = nullptr;
      if (getifaddrs(&ifs) == 0) {
        for (ifaddrs* i = ifs; i; i = i->ifa_next)
          if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && opt.iface == i->ifa_name) {
            char b[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, b, sizeof b);
            ip = b;
            break;
          }
        freeifaddrs(ifs);
      }
    }
    const auto a = wire::parse_ipv4(ip);
    if (!a) {
      *error = opt.iface + " has no IPv4 address: give one with --ip (the DUT's QPs are pointed at it)";
      return nullptr;
    }
    link->ip_ = *a;
    // The kernel sees the DUT's RoCE frames for our address too: a UDP socket on 4791 keeps it
    // from answering them with ICMP port unreachable (what it queues is never read; when full,
    // the kernel drops quietly).
    link->absorb_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(4791);
    memcpy(&sa.sin_addr, a->data(), 4);
    int small = 4096;
    setsockopt(link->absorb_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    if (bind(link->absorb_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      close(link->absorb_);
      link->absorb_ = -1;  // something else has the port (a RoCE device here): it answers nothing
    }
    return link;
  }
  ~Link() {
    if (absorb_ >= 0) close(absorb_);
  }

  const wire::MacAddr& mac() const { return mac_; }
  const wire::Ipv4Addr& ip() const { return ip_; }
  void record_to(drivers::PcapWriter* w) { pcap_ = w; }

  bool send(std::span<const uint8_t> bytes) {
    Frame* f = port_->alloc_frame();
    if (!f || bytes.size() > f->cap) {
      if (f) port_->free_frame(f);
      return false;
    }
    memcpy(f->data, bytes.data(), bytes.size());
    f->len = static_cast<uint32_t>(bytes.size());
    if (pcap_) pcap_->write(wall_ns(), bytes);
    Frame* one[1] = {f};
    if (port_->tx_burst(now_ns(), one) != 1) {
      port_->free_frame(f);
      return false;
    }
    return true;
  }

  /// The next frame the interface received, until `deadline`; false when none came.
  bool receive(uint64_t deadline, std::vector<uint8_t>* out) {
    for (;;) {
      Frame* f[1];
      if (port_->rx_burst(now_ns(), f) == 1) {
        out->assign(f[0]->data, f[0]->data + f[0]->len);
        port_->free_frame(f[0]);
        if (pcap_) pcap_->write(wall_ns(), *out);
        return true;
      }
      const uint64_t t = now_ns();
      if (t >= deadline) return false;
      pollfd p{port_->wait_fd(), POLLIN, 0};
      const uint64_t left_ms = (deadline - t + 999999) / 1000000;
      poll(&p, 1, static_cast<int>(std::min<uint64_t>(left_ms, 10)));
    }
  }

 private:
  static uint64_t wall_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }
  std::unique_ptr<drivers::PacketPort> port_;
  wire::MacAddr mac_{};
  wire::Ipv4Addr ip_{};
  int absorb_ = -1;
  drivers::PcapWriter* pcap_ = nullptr;
};

// ---- a case ----------------------------------------------------------------------------------

namespace {

// Our end of one of the DUT's QPs.
struct Peer {
  wire::Transport type = wire::Transport::kRc;
  uint32_t qpn = 0;      // ours
  uint32_t dut_qpn = 0;  // the DUT's
  uint32_t psn0 = 0;     // our first request PSN
  uint32_t dpsn0 = 0;    // the DUT's
  uint32_t next = 0;     // our next request PSN, relative to psn0
  uint32_t mtu = 1024;
  std::deque<std::vector<uint8_t>> waiting;  // received for this QP, not yet expected
};

struct Failure {
  Verdict verdict;
  std::string message;
};

class CaseRun {
 public:
  CaseRun(const Options& opt, Link& link, Agent& agent, const wire::MacAddr& dut_mac,
          const wire::Ipv4Addr& dut_ip, uint32_t qpn_base)
      : opt_(opt), link_(link), agent_(agent), dut_mac_(dut_mac), dut_ip_(dut_ip), qpn_base_(qpn_base) {
    cm_.local_comm_id = 0x5c000000 | qpn_base_;
  }

  /// nullopt: the step did what it should.
  std::optional<Failure> step(const Step& s) {
    switch (s.kind) {
      case StepKind::kDut: return dut(s);
      case StepKind::kConnect: return connect(s);
      case StepKind::kSend: return send(s);
      case StepKind::kExpect: return expect(s);
      case StepKind::kCmSend: return cm_send(s);
      case StepKind::kCmExpect: return cm_expect(s);
    }
    return Failure{Verdict::kError, "unknown step"};
  }
  uint64_t sent = 0, received = 0;
  std::vector<std::string> other;  // frames that belonged to no QP of the case

 private:
  // $name, $name+N, $name-N, anywhere after a '=' or as a whole word.
  std::optional<std::string> subst(const std::string& w, std::string* bad) const {
    const size_t d = w.find('$');
    if (d == std::string::npos) return w;
    size_t e = d + 1;
    while (e < w.size() && (isalnum(static_cast<unsigned char>(w[e])) || w[e] == '_' || w[e] == '.')) ++e;
    const std::string name = w.substr(d + 1, e - d - 1);
    if (name == "ip") return w.substr(0, d) + wire::to_string(link_.ip()) + w.substr(e);  // ours
    const auto it = vars_.find(name);
    if (it == vars_.end()) {
      *bad = "$" + name + " is not known here (names come from earlier dut mr/qp steps and expects)";
      return std::nullopt;
    }
    int64_t v = it->second, k = 0;
    if (e < w.size() && (w[e] == '+' || w[e] == '-')) {
      if (!parse_number(w.substr(e + 1), &k)) {
        *bad = w + ": after $" + name + " only +N or -N";
        return std::nullopt;
      }
      v += w[e] == '+' ? k : -k;
      e = w.size();
    }
    return w.substr(0, d) + hex(static_cast<uint64_t>(v)) + w.substr(e);
  }

  std::optional<std::vector<std::string>> subst_all(const std::vector<std::string>& words, std::string* bad) const {
    std::vector<std::string> out;
    for (const auto& w : words) {
      auto s = subst(w, bad);
      if (!s) return std::nullopt;
      out.push_back(*s);
    }
    return out;
  }

  int64_t num(const std::map<std::string, std::string>& kv, const std::string& key, int64_t dflt) const {
    const auto it = kv.find(key);
    int64_t v = dflt;
    if (it != kv.end() && !parse_number(it->second, &v)) return dflt;
    return v;
  }

  uint32_t scaled_ms(int64_t ms) const { return static_cast<uint32_t>(static_cast<double>(ms) * opt_.time_scale); }

  std::string call(const std::string& line) {
    if (opt_.verbose) printf("  -> %s\n", line.c_str());
    std::string r = agent_.call(line);
    if (opt_.verbose) printf("  <- %s\n", r.substr(0, 200).c_str());
    return r;
  }

  std::optional<Failure> dut(const Step& s) {
    std::string bad;
    auto words = subst_all(s.words, &bad);
    if (!words) return Failure{Verdict::kError, bad};
    const std::string cmd = (*words)[0];
    std::string ex = s.expectation;
    for (size_t d; (d = ex.find('$')) != std::string::npos;) {  // names in the expectation
      size_t e = d + 1;
      while (e < ex.size() && (isalnum(static_cast<unsigned char>(ex[e])) || ex[e] == '_' || ex[e] == '.')) ++e;
      const auto v = subst(ex.substr(d, e - d), &bad);
      if (!v) return Failure{Verdict::kError, bad};
      ex = ex.substr(0, d) + *v + ex.substr(e);
    }
    auto kv = key_values(*words, 1);
    // Polls and event reads wait as long as the expectation needs.
    if (cmd == "cm_event" && !kv.count("wait") && !ex.empty())
      words->push_back("wait=" + std::to_string(scaled_ms(ex == "none" ? 100 : 3000)));
    if (cmd == "poll" || cmd == "events") {
      const bool none = ex == "none";
      size_t n = 0;
      if (!ex.empty() && !none) n = 1 + static_cast<size_t>(std::count(ex.begin(), ex.end(), ';'));
      if (cmd == "poll" && !kv.count("n")) words->push_back("n=" + std::to_string(n ? n : 1));
      if (!kv.count("wait")) words->push_back("wait=" + std::to_string(scaled_ms(ex.empty() ? 0 : none ? 100 : 2000)));
    }
    std::string line;
    for (const auto& w : *words) line += (line.empty() ? "" : " ") + w;
    const std::string r = call(line);
    const bool ok = r.rfind("ok", 0) == 0;
    if (ex == "err") return ok ? std::optional<Failure>(Failure{Verdict::kFail, "the DUT did it: " + r}) : std::nullopt;
    if (!ok) return Failure{ex.empty() ? Verdict::kError : Verdict::kFail, "the agent said: " + r};
    const auto got = key_values(split(r), 1);
    // Names for later steps.
    if ((cmd == "mr" || cmd == "qp") && words->size() > 1) {
      const std::string& nm = (*words)[1];
      for (const auto& [k, v] : got) {
        int64_t x;
        if (parse_number(v, &x)) vars_[nm + "." + k] = x;
      }
      if (cmd == "qp") {
        Peer p;
        const std::string t = kv.count("type") ? kv.at("type") : "rc";
        p.type = t == "uc" ? wire::Transport::kUc : t == "ud" ? wire::Transport::kUd : wire::Transport::kRc;
        p.qpn = qpn_base_ + static_cast<uint32_t>(peers_.size());
        p.dut_qpn = static_cast<uint32_t>(vars_[nm + ".qpn"]);
        vars_[nm + ".peer"] = p.qpn;
        peers_[nm] = p;
      }
    }
    if ((cmd == "cm_accept" || cmd == "cm_connect") && kv.count("qp") && got.count("qpn")) {
      int64_t x;
      if (parse_number(got.at("qpn"), &x)) vars_[kv.at("qp") + ".qpn"] = x;
    }
    if (cmd == "cm_event") {  // => ESTABLISHED, => REJECTED, => none
      const std::string ev = got.count("ev") ? got.at("ev") : "";
      if (ex.empty() || ev == ex) return std::nullopt;
      return Failure{Verdict::kFail, "CM event " + ev + " (status " + (got.count("status") ? got.at("status") : "?") +
                                         "), expected " + ex};
    }
    if (ex.empty() || ex == "ok") return std::nullopt;
    if (cmd == "poll") return check_poll(got, ex);
    if (cmd == "get") return check_get(got, ex, kv);
    if (cmd == "state") {
      if (got.count("state") && got.at("state") == ex) return std::nullopt;
      return Failure{Verdict::kFail, "QP state " + (got.count("state") ? got.at("state") : "?") + ", not " + ex};
    }
    if (cmd == "events") {
      const std::string ev = got.count("ev") ? got.at("ev") : "";
      if (ex == "none" ? ev.empty() : ev.find(ex) != std::string::npos) return std::nullopt;
      return Failure{Verdict::kFail, "async events '" + ev + "', expected " + ex};
    }
    return Failure{Verdict::kError, "=> " + ex + " after " + cmd + ": nothing to compare it with"};
  }

  static std::vector<std::string> split(const std::string& s, char sep = ' ') {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream in(s);
    while (std::getline(in, cur, sep))
      if (!cur.empty() || sep != ' ') out.push_back(cur);
    return out;
  }

  std::optional<Failure> check_poll(const std::map<std::string, std::string>& got, const std::string& ex) {
    const std::string wcs = got.count("wc") ? got.at("wc") : "";
    const auto have = wcs.empty() ? std::vector<std::string>{} : split(wcs, ';');
    const auto want = ex == "none" ? std::vector<std::string>{} : split(ex, ';');
    const auto fail = [&] {
      return Failure{Verdict::kFail, "completions [" + wcs + "], expected [" + (ex == "none" ? "" : ex) +
                                         "] (wr:status:opcode:byte_len:imm:src_qp)"};
    };
    if (have.size() != want.size()) return fail();
    for (size_t i = 0; i < want.size(); ++i) {
      const auto w = split(want[i], ':'), h = split(have[i], ':');
      for (size_t f = 0; f < w.size(); ++f) {
        if (w[f] == "*") continue;
        if (f >= h.size()) return fail();
        int64_t a, b;
        const bool same = w[f] == h[f] || (parse_number(w[f], &a) && parse_number(h[f], &b) && a == b);
        if (!same) return fail();
      }
    }
    return std::nullopt;
  }

  std::optional<Failure> check_get(const std::map<std::string, std::string>& got, const std::string& ex,
                                   const std::map<std::string, std::string>& kv) {
    const std::string h = got.count("hex") ? got.at("hex") : "";
    std::string want;
    int64_t seed = 0;
    if (ex.rfind("seed=", 0) == 0 && parse_number(ex.substr(5), &seed)) {
      for (size_t i = 0; i < h.size() / 2; ++i) {
        char b[3];
        snprintf(b, sizeof b, "%02x", pattern_byte(static_cast<uint32_t>(seed), i));
        want += b;
      }
    } else if (ex.rfind("hex=", 0) == 0) {
      want = ex.substr(4);
    } else {
      return Failure{Verdict::kError, "get => seed=S or hex=BYTES"};
    }
    if (h == want) return std::nullopt;
    size_t i = 0;
    while (i < h.size() && i < want.size() && h[i] == want[i]) ++i;
    (void)kv;
    return Failure{Verdict::kFail, "memory differs from byte " + std::to_string(i / 2) + ": " +
                                       h.substr(i & ~size_t{1}, 16) + " where " + want.substr(i & ~size_t{1}, 16) +
                                       " was expected"};
  }

  Peer* peer(const std::string& name, std::string* bad) {
    const auto it = peers_.find(name);
    if (it == peers_.end()) {
      *bad = name + " is no QP of this case (dut qp NAME ... makes one)";
      return nullptr;
    }
    return &it->second;
  }

  std::optional<Failure> connect(const Step& s) {
    std::string bad;
    auto words = subst_all(s.words, &bad);
    if (!words) return Failure{Verdict::kError, bad};
    Peer* p = peer((*words)[0], &bad);
    if (!p) return Failure{Verdict::kError, bad};
    const auto kv = key_values(*words, 1);
    const std::string& q = (*words)[0];
    p->mtu = static_cast<uint32_t>(num(kv, "mtu", 1024));
    p->psn0 = static_cast<uint32_t>(num(kv, "psn", 0x100)) & 0xFFFFFF;
    p->dpsn0 = static_cast<uint32_t>(num(kv, "dpsn", 0x800)) & 0xFFFFFF;
    p->next = 0;
    vars_[q + ".psn0"] = p->psn0;
    vars_[q + ".dpsn0"] = p->dpsn0;
    const std::string access = kv.count("access") ? kv.at("access") : "lw,rw,rr,ra";
    std::vector<std::string> lines;
    if (p->type == wire::Transport::kUd) {
      lines = {"init " + q + " qkey=" + hex(num(kv, "qkey", 0x11111111)), "rtr " + q,
               "rts " + q + " psn=" + hex(p->dpsn0)};
    } else {
      lines = {"init " + q + " access=" + access,
               "rtr " + q + " dqpn=" + hex(p->qpn) + " dip=" + wire::to_string(link_.ip()) + " psn=" + hex(p->psn0) +
                   " mtu=" + std::to_string(p->mtu) + " rd_atomic=" + std::to_string(num(kv, "rd_atomic", 4)) +
                   " min_rnr=" + std::to_string(num(kv, "min_rnr", 1)),
               "rts " + q + " psn=" + hex(p->dpsn0) + " timeout=" + std::to_string(num(kv, "timeout", 14)) +
                   " retry=" + std::to_string(num(kv, "retry", 7)) + " rnr_retry=" +
                   std::to_string(num(kv, "rnr_retry", 7)) + " rd_atomic=" + std::to_string(num(kv, "rd_atomic", 4))};
    }
    for (const auto& l : lines) {
      const std::string r = call(l);
      if (r.rfind("ok", 0) != 0) return Failure{Verdict::kError, l + ": " + r};
    }
    return std::nullopt;
  }

  // An opcode by name: RC_SEND_ONLY, or SEND_ONLY with the QP's transport, or 0x04.
  static std::optional<uint8_t> opcode_of(const std::string& w, wire::Transport t) {
    int64_t v;
    if (parse_number(w, &v) && v >= 0 && v < 256) return static_cast<uint8_t>(v);
    const char* pre = t == wire::Transport::kUc ? "UC_" : t == wire::Transport::kUd ? "UD_" : "RC_";
    for (int i = 0; i < 256; ++i) {
      const auto& info = wire::opcode_info(static_cast<uint8_t>(i));
      if (info.valid && (info.name == w || info.name == pre + w)) return static_cast<uint8_t>(i);
    }
    return std::nullopt;
  }

  static std::optional<uint8_t> syndrome_of(const std::string& s) {
    using wire::AethRepr;
    using wire::NakCode;
    if (s == "ack") return AethRepr::make_ack();
    if (s.rfind("rnr", 0) == 0) {
      int64_t t = 1;
      if (s.size() > 4 && !parse_number(s.substr(4), &t)) return std::nullopt;
      return AethRepr::make_rnr_nak(static_cast<uint8_t>(t));
    }
    if (s == "nak_seq") return AethRepr::make_nak(NakCode::kPsnSeqError);
    if (s == "nak_inv") return AethRepr::make_nak(NakCode::kInvalidRequest);
    if (s == "nak_acc") return AethRepr::make_nak(NakCode::kRemoteAccessError);
    if (s == "nak_op") return AethRepr::make_nak(NakCode::kRemoteOpError);
    int64_t v;
    if (parse_number(s, &v) && v >= 0 && v < 256) return static_cast<uint8_t>(v);
    return std::nullopt;
  }

  std::optional<Failure> send(const Step& s) {
    std::string bad;
    auto words = subst_all(s.words, &bad);
    if (!words) return Failure{Verdict::kError, bad};
    Peer* p = peer((*words)[0], &bad);
    if (!p) return Failure{Verdict::kError, bad};
    const auto op = opcode_of((*words)[1], p->type);
    if (!op) return Failure{Verdict::kError, "no opcode " + (*words)[1]};
    const auto& info = wire::opcode_info(*op);
    const auto kv = key_values(*words, 2);
    wire::RoceHeaders h;
    h.eth.dst = dut_mac_;
    h.eth.src = link_.mac();
    h.ip4.src = link_.ip();
    h.ip4.dst = dut_ip_;
    h.ip4.ident = ident_++;
    h.ip4.ecn = static_cast<uint8_t>(num(kv, "ecn", wire::kEcnNotEct));
    if (kv.count("ce")) h.ip4.ecn = wire::kEcnCe;
    h.udp.src_port = static_cast<uint16_t>(0xC000 | (p->qpn & 0x3FFF));
    h.bth.opcode = *op;
    h.bth.se = kv.count("se") > 0;
    h.bth.ack_req = kv.count("ackreq") > 0;
    h.bth.pkey = static_cast<uint16_t>(num(kv, "pkey", 0xFFFF));
    h.bth.tver = static_cast<uint8_t>(num(kv, "tver", 0));
    h.bth.becn = kv.count("becn") > 0;
    h.bth.dest_qp = static_cast<uint32_t>(num(kv, "dqpn", p->dut_qpn)) & 0xFFFFFF;
    const uint32_t dmalen = static_cast<uint32_t>(num(kv, "dmalen", num(kv, "len", 0)));
    if (info.is_request()) {
      const uint32_t rel = static_cast<uint32_t>(num(kv, "psn", p->next));
      h.bth.psn = (p->psn0 + rel) & 0xFFFFFF;
      uint32_t span = 1;
      if (info.op == wire::Operation::kReadRequest) span = std::max<uint32_t>(1, (dmalen + p->mtu - 1) / p->mtu);
      p->next = rel + span;
    } else {
      const int64_t rel = num(kv, "psn", vars_.count((*words)[0] + ".rpsn") ? vars_[(*words)[0] + ".rpsn"] : 0);
      h.bth.psn = (p->dpsn0 + static_cast<uint32_t>(rel)) & 0xFFFFFF;
    }
    h.ext.reth = {static_cast<uint64_t>(num(kv, "va", 0)), static_cast<uint32_t>(num(kv, "rkey", 0)), dmalen};
    h.ext.atomic.va = static_cast<uint64_t>(num(kv, "va", 0));
    h.ext.atomic.rkey = static_cast<uint32_t>(num(kv, "rkey", 0));
    h.ext.atomic.swap_add = static_cast<uint64_t>(num(kv, "swap", num(kv, "add", 0)));
    h.ext.atomic.compare = static_cast<uint64_t>(num(kv, "cmp", 0));
    if (kv.count("syndrome")) {
      const auto syn = syndrome_of(kv.at("syndrome"));
      if (!syn) return Failure{Verdict::kError, "syndrome=ack|rnr[:T]|nak_seq|nak_inv|nak_acc|nak_op|N"};
      h.ext.aeth.syndrome = *syn;
    }
    h.ext.aeth.msn = static_cast<uint32_t>(num(kv, "msn", 0)) & 0xFFFFFF;
    h.ext.atomic_ack.orig = static_cast<uint64_t>(num(kv, "orig", 0));
    h.ext.imm.imm = static_cast<uint32_t>(num(kv, "imm", 0));
    h.ext.ieth.rkey = static_cast<uint32_t>(num(kv, "inv", 0));
    h.ext.deth.qkey = static_cast<uint32_t>(num(kv, "qkey", 0x11111111));
    h.ext.deth.src_qp = p->qpn;
    const size_t len = info.has_payload ? static_cast<size_t>(num(kv, "len", 0)) : 0;
    const uint32_t seed = static_cast<uint32_t>(num(kv, "seed", 1));
    const size_t at = static_cast<size_t>(num(kv, "at", 0));
    std::vector<uint8_t> payload(len);
    for (size_t i = 0; i < len; ++i) payload[i] = pattern_byte(seed, at + i);
    std::vector<uint8_t> frame(wire::frame_len(h, len) + 64);
    const size_t n = wire::build_frame(h, payload, frame);
    if (n == 0) return Failure{Verdict::kError, "cannot build that packet"};
    frame.resize(n);
    if (kv.count("bad_icrc")) frame[n - 1] ^= 0x5A;
    if (!link_.send(frame)) return Failure{Verdict::kError, "the link did not take the frame"};
    ++sent;
    return std::nullopt;
  }

  // Sorts what the link received into the QPs' queues, until `p` has one or the deadline.
  // With `mads`, also stops (false) when a MAD for our QP1 came.
  bool next_for(Peer* p, uint64_t deadline, std::vector<uint8_t>* out, bool mads = false) {
    for (;;) {
      if (!p->waiting.empty()) {
        *out = std::move(p->waiting.front());
        p->waiting.pop_front();
        return true;
      }
      std::vector<uint8_t> f;
      if (!link_.receive(deadline, &f)) return false;
      wire::ParsedPacket pk;
      if (wire::parse_frame(f, pk) != wire::ParseError::kOk || pk.hdr.ipv6 || pk.hdr.ip4.src != dut_ip_ ||
          pk.hdr.ip4.dst != link_.ip())
        continue;  // not the DUT's RoCE to us (ARP, our own frames, ...)
      ++received;
      if (pk.hdr.bth.dest_qp == wire::kGsiQpn && pk.info->transport == wire::Transport::kUd) {
        cm_waiting_.push_back(std::move(f));
        if (mads) return false;
        continue;
      }
      bool mine = false;
      for (auto& [name, q] : peers_)
        if (pk.hdr.bth.dest_qp == q.qpn) {
          q.waiting.push_back(std::move(f));
          mine = true;
          break;
        }
      if (!mine) other.push_back(std::string(pk.info->name) + " to QP " + hex(pk.hdr.bth.dest_qp));
    }
  }

  std::string describe(const wire::ParsedPacket& pk, const Peer& p) const {
    const auto& info = *pk.info;
    const uint32_t base = info.is_request() ? p.dpsn0 : p.psn0;
    std::string d = std::string(info.name) + " psn=" + std::to_string((pk.hdr.bth.psn - base) & 0xFFFFFF);
    if (info.has(wire::Ext::kAeth)) {
      const auto& a = pk.hdr.ext.aeth;
      d += " syndrome=";
      if (a.is_ack()) d += "ack";
      else if (a.is_rnr_nak()) d += "rnr:" + std::to_string(a.rnr_timer_code());
      else d += std::string(wire::to_string(a.nak_code()));
      d += " msn=" + std::to_string(a.msn);
    }
    if (info.has_payload) d += " len=" + std::to_string(pk.payload.size());
    return d;
  }

  std::optional<Failure> expect(const Step& s) {
    std::string bad;
    auto words = subst_all(s.words, &bad);
    if (!words) return Failure{Verdict::kError, bad};
    const std::string& q = (*words)[0];
    Peer* p = peer(q, &bad);
    if (!p) return Failure{Verdict::kError, bad};
    const auto kv = key_values(*words, 2);
    const bool none = (*words)[1] == "none";
    // "fixed": a bound that says "not sooner than" is not stretched for a slow device.
    const int64_t within = num(kv, "within", none ? 100 : 1000);
    const uint64_t ms = kv.count("fixed") ? static_cast<uint64_t>(within) : scaled_ms(within);
    const uint64_t deadline = now_ns() + ms * 1000000;
    std::vector<uint8_t> f;
    if (none) {
      if (!next_for(p, deadline, &f)) return std::nullopt;
      wire::ParsedPacket pk;
      (void)wire::parse_frame(f, pk);
      return Failure{Verdict::kFail, "expected no packet, got " + describe(pk, *p)};
    }
    const auto op = opcode_of((*words)[1], p->type);
    if (!op) return Failure{Verdict::kError, "no opcode " + (*words)[1]};
    // skip=OPCODE[|OPCODE]: packets of these kinds may come first (in an order the spec leaves
    // open); they are set aside for later expects.
    std::vector<uint8_t> skip;
    if (kv.count("skip"))
      for (const auto& w : split(kv.at("skip"), '|')) {
        const auto o = opcode_of(w, p->type);
        if (!o) return Failure{Verdict::kError, "skip: no opcode " + w};
        skip.push_back(*o);
      }
    std::deque<std::vector<uint8_t>> aside;
    bool got = false;
    while ((got = next_for(p, deadline, &f))) {
      wire::ParsedPacket first;
      (void)wire::parse_frame(f, first);
      if (first.hdr.bth.opcode == *op || std::find(skip.begin(), skip.end(), first.hdr.bth.opcode) == skip.end())
        break;
      aside.push_back(std::move(f));
    }
    for (auto it = aside.rbegin(); it != aside.rend(); ++it) p->waiting.push_front(std::move(*it));
    if (!got) {
      return Failure{Verdict::kFail, "expected " + s.text.substr(s.text.find((*words)[1])) + ", got nothing within " +
                                         std::to_string(ms) + " ms"};
    }
    wire::ParsedPacket pk;
    (void)wire::parse_frame(f, pk);
    const auto& info = *pk.info;
    const uint32_t base = info.is_request() ? p->dpsn0 : p->psn0;
    const uint32_t rel = (pk.hdr.bth.psn - base) & 0xFFFFFF;
    std::string diff;
    const auto check = [&](const char* what, bool same) {
      if (!same && diff.empty()) diff = what;
    };
    check("opcode", pk.hdr.bth.opcode == *op);
    if (kv.count("psn")) check("psn", rel == static_cast<uint32_t>(num(kv, "psn", -1)));
    if (kv.count("syndrome")) {  // one, or alternatives: nak_inv|nak_acc
      const auto& a = pk.hdr.ext.aeth;
      bool any = false;
      for (const auto& sy : split(kv.at("syndrome"), '|')) {
        if (sy == "rnr") any = any || a.is_rnr_nak();
        else if (sy == "ack") any = any || a.is_ack();
        else any = any || syndrome_of(sy) == a.syndrome;
      }
      check("syndrome", any);
    }
    if (kv.count("msn")) check("msn", pk.hdr.ext.aeth.msn == static_cast<uint32_t>(num(kv, "msn", -1)));
    if (kv.count("len")) check("len", pk.payload.size() == static_cast<size_t>(num(kv, "len", -1)));
    if (kv.count("seed")) {
      const uint32_t seed = static_cast<uint32_t>(num(kv, "seed", 0));
      const size_t at = static_cast<size_t>(num(kv, "at", 0));
      bool same = true;
      for (size_t i = 0; i < pk.payload.size(); ++i) same = same && pk.payload[i] == pattern_byte(seed, at + i);
      check("payload", same);
    }
    if (kv.count("va")) {
      const uint64_t va = info.has(wire::Ext::kAtomicEth) ? pk.hdr.ext.atomic.va : pk.hdr.ext.reth.va;
      check("va", va == static_cast<uint64_t>(num(kv, "va", -1)));
    }
    if (kv.count("rkey")) {
      const uint32_t rk = info.has(wire::Ext::kAtomicEth) ? pk.hdr.ext.atomic.rkey : pk.hdr.ext.reth.rkey;
      check("rkey", rk == static_cast<uint32_t>(num(kv, "rkey", -1)));
    }
    if (kv.count("dmalen")) check("dmalen", pk.hdr.ext.reth.dma_len == static_cast<uint32_t>(num(kv, "dmalen", -1)));
    if (kv.count("orig")) check("orig", pk.hdr.ext.atomic_ack.orig == static_cast<uint64_t>(num(kv, "orig", -1)));
    if (kv.count("imm")) check("imm", pk.hdr.ext.imm.imm == static_cast<uint32_t>(num(kv, "imm", -1)));
    if (kv.count("ackreq")) check("ackreq", pk.hdr.bth.ack_req);
    if (kv.count("se")) check("se", pk.hdr.bth.se);
    if (kv.count("qkey")) check("qkey", pk.hdr.ext.deth.qkey == static_cast<uint32_t>(num(kv, "qkey", -1)));
    // What later steps may name: $Q.rpsn (a request's PSN, relative), $Q.va, $Q.rkey, $Q.dmalen.
    if (info.is_request()) {
      vars_[q + ".rpsn"] = rel;
      vars_[q + ".va"] = static_cast<int64_t>(info.has(wire::Ext::kAtomicEth) ? pk.hdr.ext.atomic.va : pk.hdr.ext.reth.va);
      vars_[q + ".rkey"] = info.has(wire::Ext::kAtomicEth) ? pk.hdr.ext.atomic.rkey : pk.hdr.ext.reth.rkey;
      vars_[q + ".dmalen"] = pk.hdr.ext.reth.dma_len;
      vars_[q + ".swap"] = static_cast<int64_t>(pk.hdr.ext.atomic.swap_add);
    } else if (info.has(wire::Ext::kAeth)) {
      vars_[q + ".msn"] = pk.hdr.ext.aeth.msn;
    }
    if (diff.empty()) return std::nullopt;
    return Failure{Verdict::kFail, "expected " + s.text.substr(s.text.find((*words)[1])) + ", got " + describe(pk, *p) +
                                       " (" + diff + " differs)"};
  }

  // ---- the connection manager: MADs between our QP1 and the DUT's --------------------------

  // The next MAD from the DUT's QP1, until the deadline.
  bool next_mad(uint64_t deadline, wire::CmMessage* out, std::string* raw_desc) {
    Peer none;  // next_for() sorts; a peer no packet is for
    none.qpn = 0xFFFFFFFF;
    for (;;) {
      if (!cm_waiting_.empty()) {
        std::vector<uint8_t> f = std::move(cm_waiting_.front());
        cm_waiting_.pop_front();
        wire::ParsedPacket pk;
        if (wire::parse_frame(f, pk) != wire::ParseError::kOk) continue;
        if (wire::CmMessage::parse(pk.payload, *out) == wire::ParseError::kOk) return true;
        *raw_desc = "a MAD uroce-conform cannot read";
        return true;
      }
      std::vector<uint8_t> f;
      (void)next_for(&none, deadline, &f, /*mads=*/true);
      if (cm_waiting_.empty()) return false;  // the deadline passed
    }
  }

  bool send_mad(const wire::CmMessage& m) {
    wire::RoceHeaders h;
    h.eth.dst = dut_mac_;
    h.eth.src = link_.mac();
    h.ip4.src = link_.ip();
    h.ip4.dst = dut_ip_;
    h.ip4.ident = ident_++;
    h.udp.src_port = 0xC001;
    h.bth.opcode = wire::opcode::kUdSendOnly;
    h.bth.dest_qp = wire::kGsiQpn;
    h.bth.psn = mad_psn_++ & 0xFFFFFF;
    h.ext.deth.qkey = wire::kGsiQkey;
    h.ext.deth.src_qp = wire::kGsiQpn;
    std::vector<uint8_t> mad(wire::kMadLen);
    m.emit(mad);
    std::vector<uint8_t> frame(wire::frame_len(h, mad.size()) + 64);
    const size_t n = wire::build_frame(h, mad, frame);
    frame.resize(n);
    if (n == 0 || !link_.send(frame)) return false;
    ++sent;
    return true;
  }

  // The peer a CM exchange is for: made by `as=Q` (cm_send REQ, cm_expect REQ).
  Peer* cm_peer(const std::map<std::string, std::string>& kv, bool make, std::string* bad) {
    if (kv.count("as")) cm_.peer = kv.at("as");
    if (cm_.peer.empty()) {
      *bad = "which QP is this connection for? (as=Q on the REQ)";
      return nullptr;
    }
    if (make && !peers_.count(cm_.peer)) {
      Peer p;
      p.qpn = qpn_base_ + static_cast<uint32_t>(peers_.size());
      // A CM message's starting PSN is the one its sender expects to receive: ours (the
      // DUT's first) we choose, the DUT's (our first) its REQ or REP tells.
      p.dpsn0 = static_cast<uint32_t>(num(kv, "dpsn", 0x800)) & 0xFFFFFF;
      p.mtu = static_cast<uint32_t>(num(kv, "mtu", 1024));
      peers_[cm_.peer] = p;
      vars_[cm_.peer + ".peer"] = p.qpn;
      vars_[cm_.peer + ".dpsn0"] = p.dpsn0;
    }
    return peer(cm_.peer, bad);
  }

  static uint8_t mtu_code(uint32_t bytes) {
    for (uint8_t c = 1; c <= 5; ++c)
      if (wire::ib_mtu_bytes(c) == bytes) return c;
    return 3;
  }

  std::optional<Failure> cm_send(const Step& s) {
    std::string bad;
    auto words = subst_all(s.words, &bad);
    if (!words) return Failure{Verdict::kError, bad};
    const std::string& kind = (*words)[0];
    const auto kv = key_values(*words, 1);
    if (kv.count("again")) {  // the same MAD once more (a retransmission)
      if (!cm_.last_sent || cm_.last_sent->name() != kind)
        return Failure{Verdict::kError, "cm_send " + kind + " again: no " + kind + " was sent before"};
      return send_mad(*cm_.last_sent) ? std::nullopt : std::optional<Failure>(Failure{Verdict::kError, "link"});
    }
    wire::CmMessage m;
    if (kind == "REQ") {
      Peer* p = cm_peer(kv, true, &bad);
      if (!p) return Failure{Verdict::kError, bad};
      wire::CmReq q;
      q.local_comm_id = cm_.local_comm_id;
      q.service_id = wire::ip_service_id(wire::kRdmaPsTcp, static_cast<uint16_t>(num(kv, "port", 7471)));
      q.local_ca_guid = 0x0200000000000001ull;
      q.local_qpn = p->qpn;
      q.responder_resources = static_cast<uint8_t>(num(kv, "rd", 4));
      q.initiator_depth = static_cast<uint8_t>(num(kv, "rd", 4));
      q.remote_cm_response_timeout = 20;
      q.transport_service_type = wire::kCmTransportRc;
      q.starting_psn = p->dpsn0;  // what we expect to receive
      q.local_cm_response_timeout = 20;
      q.retry_count = 7;
      q.pkey = 0xFFFF;
      q.path_mtu = mtu_code(p->mtu);
      q.rnr_retry_count = 7;
      q.max_cm_retries = 15;
      q.primary.local_gid = wire::ipv4_mapped_gid(link_.ip());
      q.primary.remote_gid = wire::ipv4_mapped_gid(dut_ip_);
      q.primary.hop_limit = 64;
      q.primary.subnet_local = true;
      q.primary.local_ack_timeout = static_cast<uint8_t>(num(kv, "timeout", 18));
      q.primary.packet_rate = 3;
      const auto cma = wire::CmaIpHeader::ipv4(static_cast<uint16_t>(num(kv, "sport", 0xC123)), link_.ip(), dut_ip_);
      cma.emit(q.private_data);
      cm_.tid = 0x75726f63650000ull + cm_.local_comm_id;
      m = wire::CmMessage::make(cm_.tid, q);
    } else if (kind == "REP") {
      Peer* p = cm_peer(kv, false, &bad);
      if (!p || !cm_.req) return Failure{Verdict::kError, p ? "cm_send REP: no REQ came before" : bad};
      wire::CmRep r;
      r.local_comm_id = cm_.local_comm_id;
      r.remote_comm_id = cm_.req->local_comm_id;
      r.local_qpn = p->qpn;
      r.starting_psn = p->dpsn0;  // what we expect to receive
      r.responder_resources = cm_.req->initiator_depth;
      r.initiator_depth = cm_.req->responder_resources;
      r.target_ack_delay = 0;
      r.rnr_retry_count = 7;
      r.local_ca_guid = 0x0200000000000001ull;
      m = wire::CmMessage::make(cm_.tid, r);
    } else if (kind == "RTU" || kind == "DREP") {
      wire::CmIdsAndPrivate<wire::cm_attr::kRtu> rtu;
      rtu.local_comm_id = cm_.local_comm_id;
      rtu.remote_comm_id = cm_.remote_comm_id;
      if (kind == "RTU") {
        m = wire::CmMessage::make(cm_.tid, rtu);
      } else {
        wire::CmDrep d;
        d.local_comm_id = cm_.local_comm_id;
        d.remote_comm_id = cm_.remote_comm_id;
        m = wire::CmMessage::make(cm_.dreq_tid, d);
      }
    } else if (kind == "REJ") {
      wire::CmRej r;
      r.local_comm_id = cm_.local_comm_id;
      r.remote_comm_id = cm_.remote_comm_id;
      const std::string msg = kv.count("msg") ? kv.at("msg") : "req";
      r.msg_rejected = msg == "rep" ? wire::CmMsgResponse::kRep : msg == "req" ? wire::CmMsgResponse::kReq
                                                                               : wire::CmMsgResponse::kOther;
      r.reason = static_cast<wire::CmRejReason>(num(kv, "reason", 28));
      m = wire::CmMessage::make(cm_.tid, r);
    } else if (kind == "DREQ") {
      Peer* p = cm_peer(kv, false, &bad);
      if (!p) return Failure{Verdict::kError, bad};
      wire::CmDreq d;
      d.local_comm_id = cm_.local_comm_id;
      d.remote_comm_id = cm_.remote_comm_id;
      d.remote_qpn_eecn = p->dut_qpn;
      m = wire::CmMessage::make(cm_.tid + 0x100, d);
    } else {
      return Failure{Verdict::kError, "cm_send REQ|REP|RTU|REJ|DREQ|DREP"};
    }
    cm_.last_sent = m;
    if (!send_mad(m)) return Failure{Verdict::kError, "the link did not take the MAD"};
    return std::nullopt;
  }

  std::optional<Failure> cm_expect(const Step& s) {
    std::string bad;
    auto words = subst_all(s.words, &bad);
    if (!words) return Failure{Verdict::kError, bad};
    const std::string& kind = (*words)[0];
    const auto kv = key_values(*words, 1);
    const bool none = kind == "none";
    const int64_t within = num(kv, "within", none ? 100 : 2000);
    const uint64_t deadline =
        now_ns() + (kv.count("fixed") ? static_cast<uint64_t>(within) : scaled_ms(within)) * 1000000;
    const auto skip = kv.count("skip") ? split(kv.at("skip"), '|') : std::vector<std::string>{};
    wire::CmMessage m;
    std::string unreadable;
    for (;;) {
      if (!next_mad(deadline, &m, &unreadable)) {
        if (none) return std::nullopt;
        return Failure{Verdict::kFail, "expected a " + kind + " from the DUT's CM, got nothing"};
      }
      if (!unreadable.empty()) return Failure{Verdict::kFail, "expected " + kind + ", got " + unreadable};
      if (stale(m, kv)) continue;
      if (none) return Failure{Verdict::kFail, "expected no MAD, got " + std::string(m.name())};
      if (m.name() == kind || std::find(skip.begin(), skip.end(), std::string(m.name())) == skip.end()) break;
    }
    const auto differs = [&](const std::string& what) {
      return Failure{Verdict::kFail, "expected " + s.text.substr(s.text.find(kind)) + ", got " +
                                         std::string(m.name()) + " (" + what + ")"};
    };
    if (m.name() != kind) return differs("another message");
    if (const auto* q = m.get<wire::CmReq>()) {
      Peer* p = cm_peer(kv, true, &bad);
      if (!p) return Failure{Verdict::kError, bad};
      // again: a retransmission of the REQ before, the same communication ID and QP.
      if (kv.count("again") && (!cm_.req || q->local_comm_id != cm_.req->local_comm_id ||
                                q->local_qpn != cm_.req->local_qpn))
        return differs("not the same communication ID and QP as the REQ before");
      cm_.req = *q;
      cm_.tid = m.hdr.tid;
      cm_.remote_comm_id = q->local_comm_id;
      p->dut_qpn = q->local_qpn;
      p->psn0 = q->starting_psn;  // what the DUT expects to receive
      if (wire::ib_mtu_bytes(q->path_mtu) != 0) p->mtu = wire::ib_mtu_bytes(q->path_mtu);
      vars_[cm_.peer + ".qpn"] = p->dut_qpn;
      vars_[cm_.peer + ".psn0"] = p->psn0;
      const auto sid = wire::decode_ip_service_id(q->service_id);
      if (kv.count("port") && (!sid || sid->port != num(kv, "port", -1))) return differs("service ID");
      if (q->transport_service_type != wire::kCmTransportRc) return differs("transport type");
      wire::CmaIpHeader h;
      if (sid && (wire::CmaIpHeader::parse(q->private_data, h) != wire::ParseError::kOk || !h.valid() ||
                  h.dst_gid() != wire::ipv4_mapped_gid(link_.ip()) || h.src_gid() != wire::ipv4_mapped_gid(dut_ip_)))
        return differs("rdma_cm's address header in the private data names other addresses");
      if (q->primary.remote_gid != wire::ipv4_mapped_gid(link_.ip())) return differs("the path's remote GID");
    } else if (const auto* r = m.get<wire::CmRep>()) {
      Peer* p = cm_peer(kv, false, &bad);
      if (!p) return Failure{Verdict::kError, bad};
      if (r->remote_comm_id != cm_.local_comm_id) return differs("it names another communication ID");
      cm_.remote_comm_id = r->local_comm_id;
      p->dut_qpn = r->local_qpn;
      p->psn0 = r->starting_psn;  // what the DUT expects to receive
      vars_[cm_.peer + ".qpn"] = p->dut_qpn;
      vars_[cm_.peer + ".psn0"] = p->psn0;
      if (kv.count("qpn") && r->local_qpn != static_cast<uint32_t>(num(kv, "qpn", -1))) return differs("QPN");
    } else if (const auto* j = m.get<wire::CmRej>()) {
      if (kv.count("reason") && static_cast<int64_t>(j->reason) != num(kv, "reason", -1))
        return differs("reason " + std::to_string(static_cast<int>(j->reason)));
      const std::string msg = j->msg_rejected == wire::CmMsgResponse::kReq   ? "req"
                              : j->msg_rejected == wire::CmMsgResponse::kRep ? "rep"
                                                                             : "other";
      if (kv.count("msg") && kv.at("msg") != msg) return differs("it rejects a " + msg);
      if (j->remote_comm_id != cm_.local_comm_id) return differs("it names another communication ID");
    } else if (const auto* d = m.get<wire::CmDreq>()) {
      Peer* p = cm_peer(kv, false, &bad);
      if (!p) return Failure{Verdict::kError, bad};
      if (d->remote_comm_id != cm_.local_comm_id) return differs("it names another communication ID");
      if (d->remote_qpn_eecn != p->qpn) return differs("it names another QP");
      cm_.dreq_tid = m.hdr.tid;
    } else if (const auto* t = m.get<wire::CmRtu>()) {
      if (t->remote_comm_id != cm_.local_comm_id || t->local_comm_id != cm_.remote_comm_id)
        return differs("other communication IDs");
    } else if (const auto* e = m.get<wire::CmDrep>()) {
      if (e->remote_comm_id != cm_.local_comm_id || e->local_comm_id != cm_.remote_comm_id)
        return differs("other communication IDs");
    }
    return std::nullopt;
  }

  // A MAD of an earlier case's connection (a late REJ or retransmission): it names another
  // communication ID than ours, or a REQ another port than the one this step waits for.
  bool stale(const wire::CmMessage& m, const std::map<std::string, std::string>& kv) {
    uint32_t remote = 0;
    std::visit(
        [&](const auto& b) {
          if constexpr (requires { b.remote_comm_id; }) remote = b.remote_comm_id;
        },
        m.body);
    if (const auto* q = m.get<wire::CmReq>()) {
      const auto sid = wire::decode_ip_service_id(q->service_id);
      if (kv.count("port") && sid && sid->port != num(kv, "port", -1)) return ++other_mads, true;
      return false;
    }
    if (remote != 0 && remote != cm_.local_comm_id) return ++other_mads, true;
    return false;
  }
  size_t other_mads = 0;

  struct CmState {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint64_t tid = 0, dreq_tid = 0;
    std::string peer;
    std::optional<wire::CmReq> req;  // the DUT's
    std::optional<wire::CmMessage> last_sent;
  } cm_;
  std::deque<std::vector<uint8_t>> cm_waiting_;
  uint32_t mad_psn_ = 0x10;

  const Options& opt_;
  Link& link_;
  Agent& agent_;
  wire::MacAddr dut_mac_;
  wire::Ipv4Addr dut_ip_;
  uint32_t qpn_base_;
  uint16_t ident_ = 1;
  std::map<std::string, int64_t> vars_;
  std::map<std::string, Peer> peers_;
};

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

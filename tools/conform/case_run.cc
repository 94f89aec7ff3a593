// A case's steps: the agent's (dut), connecting a QP, and the packets sent and expected.
#include <algorithm>
#include <sstream>

#include "case_run.h"
#include "pattern.h"

namespace uroce::conform {

std::optional<Failure> CaseRun::step(const Step& s) {
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

std::optional<std::string> CaseRun::subst(const std::string& w, std::string* bad) const {
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

std::optional<std::vector<std::string>> CaseRun::subst_all(const std::vector<std::string>& words, std::string* bad) const {
  std::vector<std::string> out;
  for (const auto& w : words) {
    auto s = subst(w, bad);
    if (!s) return std::nullopt;
    out.push_back(*s);
  }
  return out;
}

int64_t CaseRun::num(const std::map<std::string, std::string>& kv, const std::string& key, int64_t dflt) const {
  const auto it = kv.find(key);
  int64_t v = dflt;
  if (it != kv.end() && !parse_number(it->second, &v)) return dflt;
  return v;
}

std::string CaseRun::call(const std::string& line) {
  if (opt_.verbose) printf("  -> %s\n", line.c_str());
  std::string r = agent_.call(line);
  if (opt_.verbose) printf("  <- %s\n", r.substr(0, 200).c_str());
  return r;
}

std::optional<Failure> CaseRun::dut(const Step& s) {
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

std::vector<std::string> CaseRun::split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty() || sep != ' ') out.push_back(cur);
  return out;
}

std::optional<Failure> CaseRun::check_poll(const std::map<std::string, std::string>& got, const std::string& ex) {
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

std::optional<Failure> CaseRun::check_get(const std::map<std::string, std::string>& got, const std::string& ex,
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

Peer* CaseRun::peer(const std::string& name, std::string* bad) {
  const auto it = peers_.find(name);
  if (it == peers_.end()) {
    *bad = name + " is no QP of this case (dut qp NAME ... makes one)";
    return nullptr;
  }
  return &it->second;
}

std::optional<Failure> CaseRun::connect(const Step& s) {
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

std::optional<uint8_t> CaseRun::opcode_of(const std::string& w, wire::Transport t) {
  int64_t v;
  if (parse_number(w, &v) && v >= 0 && v < 256) return static_cast<uint8_t>(v);
  const char* pre = t == wire::Transport::kUc ? "UC_" : t == wire::Transport::kUd ? "UD_" : "RC_";
  for (int i = 0; i < 256; ++i) {
    const auto& info = wire::opcode_info(static_cast<uint8_t>(i));
    if (info.valid && (info.name == w || info.name == pre + w)) return static_cast<uint8_t>(i);
  }
  return std::nullopt;
}

std::optional<uint8_t> CaseRun::syndrome_of(const std::string& s) {
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

wire::RoceHeaders CaseRun::to_dut() {
  wire::RoceHeaders h;
  h.eth.dst = dut_mac_;
  h.eth.src = link_.mac();
  h.ip4.src = link_.ip();
  h.ip4.dst = dut_ip_;
  h.ip4.ident = ident_++;
  return h;
}

std::optional<Failure> CaseRun::send(const Step& s) {
  std::string bad;
  auto words = subst_all(s.words, &bad);
  if (!words) return Failure{Verdict::kError, bad};
  Peer* p = peer((*words)[0], &bad);
  if (!p) return Failure{Verdict::kError, bad};
  const auto op = opcode_of((*words)[1], p->type);
  if (!op) return Failure{Verdict::kError, "no opcode " + (*words)[1]};
  const auto& info = wire::opcode_info(*op);
  const auto kv = key_values(*words, 2);
  wire::RoceHeaders h = to_dut();
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
  // Damage below RoCE: the IPv4 header checksum (bytes 10-11 of the IP header, behind the
  // 14-byte Ethernet header: no VLAN tag here), or the frame cut short of the lengths its IP
  // and UDP headers give.
  if (kv.count("bad_ipsum")) frame[14 + 10] ^= 0xFF;
  if (const int64_t cut = num(kv, "cut", 0); cut > 0 && static_cast<size_t>(cut) < n - 14 - 20)
    frame.resize(n - static_cast<size_t>(cut));
  if (!link_.send(frame)) return Failure{Verdict::kError, "the link did not take the frame"};
  ++sent;
  return std::nullopt;
}

bool CaseRun::next_for(Peer* p, uint64_t deadline, std::vector<uint8_t>* out, bool mads) {
  for (;;) {
    if (p != nullptr && !p->waiting.empty()) {
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
    // Sorted to its QP's queue; a frame for no QP of this case (a late one of the case
    // before) is passed over.
    for (auto& [name, q] : peers_)
      if (pk.hdr.bth.dest_qp == q.qpn) {
        q.waiting.push_back(std::move(f));
        break;
      }
  }
}

std::string CaseRun::describe(const wire::ParsedPacket& pk, const Peer& p) const {
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

std::optional<Failure> CaseRun::expect(const Step& s) {
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

}  // namespace uroce::conform

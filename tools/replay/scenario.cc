// Scenario files (INI-ish) and inferring the setup from a capture. Format: docs/replay.md.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "replay/replay.h"

namespace uroce::replay {

using wire::Ext;
using wire::Operation;
using wire::Position;
using wire::Psn;

std::string_view to_string(Role r) { return r == Role::kRequester ? "requester" : "responder"; }

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool parse_u64(const std::string& s, uint64_t& v) {
  if (s.empty()) return false;
  size_t used = 0;
  try {
    v = std::stoull(s, &used, 0);
  } catch (...) {
    return false;
  }
  return used == s.size() && s[0] != '-';
}

bool parse_hex(std::string s, std::vector<uint8_t>& out) {
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == ' ' || c == ':'; }),
          s.end());
  if (s.rfind("0x", 0) == 0) s = s.substr(2);
  if (s.size() % 2 != 0) return false;
  out.clear();
  for (size_t i = 0; i < s.size(); i += 2) {
    uint64_t b = 0;
    if (!parse_u64("0x" + s.substr(i, 2), b)) return false;
    out.push_back(static_cast<uint8_t>(b));
  }
  return true;
}

bool parse_bool(const std::string& s, bool& b) {
  if (s == "yes" || s == "true" || s == "1") return b = true, true;
  if (s == "no" || s == "false" || s == "0") return b = false, true;
  return false;
}

}  // namespace

bool parse_scenario_text(const std::string& text, const std::string& name, Scenario& sc,
                         std::string& error) {
  std::istringstream in(text);
  std::string line, section;
  int lineno = 0;
  auto fail = [&](const std::string& why) {
    error = name + ":" + std::to_string(lineno) + ": " + why;
    return false;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (auto c = line.find_first_of("#;"); c != std::string::npos) line.resize(c);
    line = trim(line);
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']') return fail("unterminated section header");
      section = trim(line.substr(1, line.size() - 2));
      if (section == "qp") {
        sc.qps.emplace_back();
        sc.qps_set = true;
      } else if (section == "mr") {
        sc.mrs.emplace_back();
        sc.mrs_set = true;
      } else if (section != "replay" && section != "expect") {
        return fail("unknown section [" + section + "]");
      }
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) return fail("expected 'key = value'");
    const std::string key = trim(line.substr(0, eq));
    const std::string val = trim(line.substr(eq + 1));
    uint64_t n = 0;
    auto num = [&](uint64_t max) {
      if (!parse_u64(val, n) || n > max) return fail("bad number '" + val + "' for " + key);
      return true;
    };
    if (section == "replay") {
      if (key == "role") {
        if (val == "requester") sc.role = Role::kRequester;
        else if (val == "responder") sc.role = Role::kResponder;
        else if (val == "both") sc.both_roles = true;
        else return fail("role must be requester, responder or both");
        sc.role_set = !sc.both_roles;
      } else if (key == "qpn") {
        if (!num(0xFFFFFF)) return false;
        sc.only_qpn = static_cast<uint32_t>(n);
      } else if (key == "mtu") {
        if (!num(4096) || (n != 256 && n != 512 && n != 1024 && n != 2048 && n != 4096))
          return fail("mtu must be 256, 512, 1024, 2048 or 4096");
        sc.mtu = static_cast<uint32_t>(n);
      } else if (key == "srq") {
        if (!parse_bool(val, sc.srq)) return fail("srq must be yes or no");
      } else if (key == "app_writes") {
        if (!parse_bool(val, sc.app_writes_infer)) return fail("app_writes must be yes or no");
      } else if (key == "recv_size") {
        if (!num(1u << 30)) return false;
        sc.recv_size = static_cast<uint32_t>(n);
      } else if (key == "timeout") {
        if (!num(31)) return false;
        sc.timeout = static_cast<uint8_t>(n);
      } else if (key == "min_rnr_timer") {
        if (!num(31)) return false;
        sc.min_rnr_timer = static_cast<uint8_t>(n);
      } else {
        return fail("unknown key '" + key + "' in [replay]");
      }
    } else if (section == "qp") {
      QpSpec& q = sc.qps.back();
      if (key == "qpn") {
        if (!num(0xFFFFFF)) return false;
        q.qpn = static_cast<uint32_t>(n);
      } else if (key == "peer_qpn") {
        if (!num(0xFFFFFF)) return false;
        q.peer_qpn = static_cast<uint32_t>(n);
      } else if (key == "type") {
        if (val == "rc") q.type = QpType::kRc;
        else if (val == "uc") q.type = QpType::kUc;
        else if (val == "ud") q.type = QpType::kUd;
        else return fail("type must be rc, uc or ud");
      } else if (key == "sq_psn") {
        if (!num(0xFFFFFF)) return false;
        q.sq_psn = static_cast<uint32_t>(n);
      } else if (key == "rq_psn") {
        if (!num(0xFFFFFF)) return false;
        q.rq_psn = static_cast<uint32_t>(n);
      } else if (key == "qkey") {
        if (!num(0xFFFFFFFF)) return false;
        q.qkey = static_cast<uint32_t>(n);
      } else {
        return fail("unknown key '" + key + "' in [qp]");
      }
    } else if (section == "mr") {
      MrSpec& m = sc.mrs.back();
      if (key == "va") {
        if (!num(UINT64_MAX)) return false;
        m.va = n;
      } else if (key == "rkey") {
        if (!num(0xFFFFFFFF)) return false;
        m.rkey = static_cast<uint32_t>(n);
      } else if (key == "length") {
        if (!num(1u << 30)) return false;
        m.length = n;
      } else if (key == "fill") {
        if (!num(0xFF)) return false;
        m.init.assign(m.length, static_cast<uint8_t>(n));
      } else if (key == "data") {
        const auto sp = val.find(' ');
        std::vector<uint8_t> bytes;
        uint64_t off = 0;
        if (sp == std::string::npos || !parse_u64(val.substr(0, sp), off) ||
            !parse_hex(val.substr(sp + 1), bytes))
          return fail("data must be 'OFFSET HEXBYTES'");
        if (off + bytes.size() > m.length) return fail("data runs past the MR's length");
        if (m.init.size() < m.length) m.init.resize(m.length);
        std::copy(bytes.begin(), bytes.end(), m.init.begin() + static_cast<ptrdiff_t>(off));
      } else {
        return fail("unknown key '" + key + "' in [mr]");
      }
    } else if (section == "expect") {
      if (key == "result") {
        if (val == "conform") sc.expect_conform = true;
        else if (val == "diverge") sc.expect_conform = false;
        else return fail("result must be conform or diverge");
      } else if (key == "divergence") {
        sc.expect_text = val;
      } else if (key == "memory") {
        const auto sp = val.find(' ');
        MemExpect me;
        if (sp == std::string::npos || !parse_u64(val.substr(0, sp), me.va) ||
            !parse_hex(val.substr(sp + 1), me.bytes))
          return fail("memory must be 'VA HEXBYTES'");
        sc.expect_mem.push_back(std::move(me));
      } else {
        return fail("unknown key '" + key + "' in [expect]");
      }
    } else {
      return fail("key outside a section");
    }
  }
  for (const QpSpec& q : sc.qps)
    if (q.qpn == 0) return error = name + ": a [qp] section has no qpn", false;
  for (const MrSpec& m : sc.mrs)
    if (m.length == 0) return error = name + ": an [mr] section has no length", false;
  return true;
}

bool parse_scenario(const std::string& path, Scenario& sc, std::string& error) {
  std::ifstream f(path);
  if (!f) {
    error = path + ": cannot open the scenario file";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_scenario_text(ss.str(), path, sc, error);
}

namespace {

QpType type_of(const Pkt& p) {
  switch (p.info->transport) {
    case wire::Transport::kUc: return QpType::kUc;
    case wire::Transport::kUd: return QpType::kUd;
    default: return QpType::kRc;
  }
}

void keep_min(std::optional<uint32_t>& m, uint32_t psn) {
  if (!m || Psn(psn) < Psn(*m)) m = psn;
}

uint32_t npkts_for(uint32_t len, uint32_t mtu) { return len == 0 ? 1 : (len + mtu - 1) / mtu; }

struct Region {
  uint64_t lo = UINT64_MAX, hi = 0;
};

}  // namespace

bool infer_scenario(const Capture& cap, Scenario& sc, std::string& error) {
  const int x = replaced_host(sc);
  auto from_x = [&](const Pkt& p) { return cap.host_of(p) == x; };

  // ---- QPs set up by the connection manager: a REQ and the REP that answers it name both QPs,
  // the first PSN each side expects to receive, and the path MTU (the active side's offer: the
  // packets tell better when they can).
  uint32_t cm_mtu = 0;
  if (!sc.qps_set) {
    const wire::Gid xip = cap.ip[x];
    std::string frames;
    for (const CmMad& rep_mad : cap.cm) {
      const auto* rep = rep_mad.msg.get<wire::CmRep>();
      if (rep == nullptr) continue;
      for (const CmMad& req_mad : cap.cm) {
        const auto* req = req_mad.msg.get<wire::CmReq>();
        if (req == nullptr || req->local_comm_id != rep->remote_comm_id ||
            req_mad.src == rep_mad.src || req_mad.frame > rep_mad.frame)
          continue;
        if (req->transport_service_type != 0 && req->transport_service_type != 1) break;
        const bool x_active = req_mad.src == xip;
        QpSpec q;
        q.type = req->transport_service_type == 1 ? QpType::kUc : QpType::kRc;
        q.qpn = x_active ? req->local_qpn : rep->local_qpn;
        q.peer_qpn = x_active ? rep->local_qpn : req->local_qpn;
        // A starting PSN is what its sender expects to receive (IBA 12.7.23, ib_cm).
        q.rq_psn = x_active ? req->starting_psn : rep->starting_psn;
        q.sq_psn = x_active ? rep->starting_psn : req->starting_psn;
        if (std::none_of(sc.qps.begin(), sc.qps.end(),
                         [&](const QpSpec& o) { return o.qpn == q.qpn; })) {
          sc.qps.push_back(q);
          const uint32_t m = wire::ib_mtu_bytes(req->path_mtu);
          if (m != 0) cm_mtu = cm_mtu == 0 ? m : std::min(cm_mtu, m);
          frames += (frames.empty() ? "" : ", ") + std::to_string(req_mad.frame) + "/" +
                    std::to_string(rep_mad.frame);
        }
        break;
      }
    }
    if (!sc.qps.empty()) {
      sc.qps_set = true;
      std::sort(sc.qps.begin(), sc.qps.end(),
                [](const QpSpec& a, const QpSpec& b) { return a.qpn < b.qpn; });
      sc.notes.push_back(std::to_string(sc.qps.size()) +
                         " QP(s) and first PSNs from the CM REQ/REP (frames " + frames +
                         "); the " + std::to_string(cap.cm.size()) +
                         " CM MADs themselves are not replayed");
    }
  }

  // ---- QPs: which of the replaced host's QPs talks to which of the other host's.
  if (!sc.qps_set) {
    std::vector<uint32_t> xq, oq;  // in order of first appearance
    std::map<uint32_t, QpType> types;
    std::set<std::pair<uint32_t, uint32_t>> pairs;
    auto note_q = [](std::vector<uint32_t>& v, uint32_t q) {
      if (std::find(v.begin(), v.end(), q) == v.end()) v.push_back(q);
    };
    std::map<uint32_t, std::set<uint32_t>> req_x, req_o;  // dest QP -> request PSNs
    for (const Pkt& p : cap.pkts) {
      const bool fx = from_x(p);
      note_q(fx ? oq : xq, p.dest_qp());
      if (!fx) types[p.dest_qp()] = type_of(p);
      if (p.has(Ext::kDeth)) {
        note_q(fx ? xq : oq, p.hdr.ext.deth.src_qp);
        if (fx) pairs.insert({p.hdr.ext.deth.src_qp, p.dest_qp()});
        else pairs.insert({p.dest_qp(), p.hdr.ext.deth.src_qp});
        if (fx) types[p.hdr.ext.deth.src_qp] = QpType::kUd;
      }
      if (p.info->is_request()) (fx ? req_x : req_o)[p.dest_qp()].insert(p.psn());
    }
    // Responses pair by PSN with the requests going the other way.
    for (const Pkt& p : cap.pkts) {
      if (!p.info->is_response()) continue;
      const bool fx = from_x(p);
      const auto& reqs = fx ? req_o : req_x;  // requests this response answers
      std::vector<uint32_t> cands;
      for (const auto& [q, psns] : reqs)
        if (psns.count(p.psn()) != 0) cands.push_back(q);
      if (cands.size() != 1) continue;
      if (fx) pairs.insert({cands[0], p.dest_qp()});
      else pairs.insert({p.dest_qp(), cands[0]});
    }
    std::set<uint32_t> px, po;
    for (const auto& [a, b] : pairs) {
      if (px.count(a) != 0 || po.count(b) != 0) continue;  // keep the first pairing
      px.insert(a);
      po.insert(b);
      QpSpec q;
      q.qpn = a;
      q.peer_qpn = b;
      sc.qps.push_back(q);
    }
    std::vector<uint32_t> ux, uo;
    for (uint32_t q : xq) if (px.count(q) == 0) ux.push_back(q);
    for (uint32_t q : oq) if (po.count(q) == 0) uo.push_back(q);
    if (ux.size() != uo.size()) {
      error = "cannot tell which QPs talk to which (" + std::to_string(ux.size()) + " vs " +
              std::to_string(uo.size()) + " unpaired): give [qp] sections in a scenario file";
      return false;
    }
    for (size_t i = 0; i < ux.size(); ++i) {
      QpSpec q;
      q.qpn = ux[i];
      q.peer_qpn = uo[i];
      sc.qps.push_back(q);
      sc.notes.push_back("QP 0x" + [](uint32_t v) {
        char b[16];
        std::snprintf(b, sizeof b, "%06x", v);
        return std::string(b);
      }(ux[i]) + " paired by order of appearance");
    }
    for (QpSpec& q : sc.qps) {
      if (auto it = types.find(q.qpn); it != types.end()) q.type = it->second;
      else {
        // Only the replaced host's packets name it; take their transport.
        for (const Pkt& p : cap.pkts)
          if (from_x(p) && p.dest_qp() == q.peer_qpn) {
            q.type = type_of(p);
            break;
          }
      }
      for (const Pkt& p : cap.pkts)  // UD: the Q_Key others use to reach this QP
        if (!from_x(p) && p.dest_qp() == q.qpn && p.has(Ext::kDeth)) {
          q.qkey = p.hdr.ext.deth.qkey;
          break;
        }
    }
    std::sort(sc.qps.begin(), sc.qps.end(),
              [](const QpSpec& a, const QpSpec& b) { return a.qpn < b.qpn; });
  }
  if (sc.only_qpn) {
    std::erase_if(sc.qps, [&](const QpSpec& q) { return q.qpn != *sc.only_qpn; });
    if (sc.qps.empty()) {
      char b[64];
      std::snprintf(b, sizeof b, "QP 0x%06x of the %s does not appear in the capture",
                    *sc.only_qpn, std::string(to_string(sc.role)).c_str());
      error = b;
      return false;
    }
  }
  if (sc.qps.empty()) {
    error = "the capture has no QP of the " + std::string(to_string(sc.role));
    return false;
  }
  auto spec_of = [&](const Pkt& p) -> QpSpec* {
    for (QpSpec& q : sc.qps)
      if (from_x(p) ? p.dest_qp() == q.peer_qpn : p.dest_qp() == q.qpn) return &q;
    return nullptr;
  };

  // ---- Start PSNs: the lowest request PSN each way (a NAK can name an earlier one).
  {
    std::map<uint32_t, std::optional<uint32_t>> sq, rq;
    for (const Pkt& p : cap.pkts) {
      QpSpec* q = spec_of(p);
      if (q == nullptr) continue;
      if (p.info->is_request()) keep_min(from_x(p) ? sq[q->qpn] : rq[q->qpn], p.psn());
      if (p.has(Ext::kAeth) && p.hdr.ext.aeth.is_nak() &&
          p.hdr.ext.aeth.nak_code() == wire::NakCode::kPsnSeqError)
        keep_min(from_x(p) ? rq[q->qpn] : sq[q->qpn], p.psn());
    }
    for (QpSpec& q : sc.qps) {
      if (!q.sq_psn) q.sq_psn = sq[q.qpn].value_or(0);
      if (!q.rq_psn) q.rq_psn = rq[q.qpn].value_or(0);
    }
  }

  // ---- MTU: FIRST and MIDDLE packets carry exactly one MTU.
  if (sc.mtu == 0) {
    size_t mtu = 0, biggest = 0;
    for (const Pkt& p : cap.pkts) {
      if (spec_of(p) == nullptr) continue;
      biggest = std::max(biggest, p.payload_len);
      if (p.info->pos == Position::kFirst || p.info->pos == Position::kMiddle)
        mtu = std::max(mtu, p.payload_len);
    }
    if (mtu == 0 && cm_mtu != 0) {
      mtu = cm_mtu;
      sc.notes.push_back("path MTU " + std::to_string(mtu) +
                         " from the CM REQ (no multi-packet message in the capture)");
    }
    if (mtu == 0) {
      mtu = 1024;
      while (mtu < biggest && mtu < 4096) mtu *= 2;
      sc.notes.push_back("path MTU " + std::to_string(mtu) +
                         " assumed (no multi-packet message in the capture)");
    }
    uint32_t m = 256;
    while (m < mtu && m < 4096) m *= 2;
    sc.mtu = m;
  }

  // ---- Receive buffers: the largest message sent to the replaced peer.
  if (sc.recv_size == 0) {
    std::map<uint32_t, uint64_t> cur;  // per QP: bytes of the SEND being received
    uint64_t biggest = 0;
    bool ud = false;
    std::set<std::pair<uint32_t, uint32_t>> seen;  // (qpn, psn): count each packet once
    for (const Pkt& p : cap.pkts) {
      QpSpec* q = spec_of(p);
      if (q == nullptr || from_x(p) || p.info->op != Operation::kSend) continue;
      if (!seen.insert({q->qpn, p.psn()}).second) continue;
      if (p.info->starts_message()) cur[q->qpn] = 0;
      cur[q->qpn] += p.payload_len;
      biggest = std::max(biggest, cur[q->qpn]);
      ud = ud || q->type == QpType::kUd;
    }
    sc.recv_size = static_cast<uint32_t>(std::max<uint64_t>(biggest, 64)) + (ud ? 40 : 0);
  }

  // ---- Memory regions: R_Key + range from RETH and AtomicETH; contents from READ responses
  // and atomic originals, where the other host had not written first.
  if (!sc.mrs_set) {
    std::map<uint32_t, Region> regions;
    for (const Pkt& p : cap.pkts) {
      if (spec_of(p) == nullptr || from_x(p) || !p.info->is_request()) continue;
      if (p.has(Ext::kReth)) {
        Region& r = regions[p.hdr.ext.reth.rkey];
        r.lo = std::min(r.lo, p.hdr.ext.reth.va);
        r.hi = std::max(r.hi, p.hdr.ext.reth.va + std::max<uint32_t>(p.hdr.ext.reth.dma_len, 1));
      }
      if (p.has(Ext::kAtomicEth)) {
        Region& r = regions[p.hdr.ext.atomic.rkey];
        r.lo = std::min(r.lo, p.hdr.ext.atomic.va);
        r.hi = std::max(r.hi, p.hdr.ext.atomic.va + 8);
      }
    }
    for (const auto& [rkey, r] : regions) {
      if (r.hi - r.lo > (64u << 20)) {
        error = "memory region with R_Key " + std::to_string(rkey) +
                " spans more than 64 MiB: give an [mr] section";
        return false;
      }
      MrSpec m;
      m.va = r.lo;
      m.rkey = rkey;
      m.length = std::max<uint64_t>(r.hi - r.lo, 8);
      m.init.assign(m.length, 0);
      sc.mrs.push_back(std::move(m));
    }
    // Contents: replay the capture's writes and reads in order.
    std::vector<std::vector<uint8_t>> known(sc.mrs.size());
    for (size_t i = 0; i < sc.mrs.size(); ++i) known[i].assign(sc.mrs[i].length, 0);
    // What the memory holds as the capture goes on (valid: not since changed by an atomic),
    // and the packet (index + 1) whose WRITE changed each byte last.
    std::vector<std::vector<uint8_t>> cur(sc.mrs.size()), valid(sc.mrs.size());
    std::vector<std::vector<size_t>> written_by(sc.mrs.size());
    for (size_t i = 0; i < sc.mrs.size(); ++i) {
      cur[i].assign(sc.mrs[i].length, 0);
      valid[i].assign(sc.mrs[i].length, 0);
      written_by[i].assign(sc.mrs[i].length, 0);
    }
    auto locate = [&](uint32_t rkey, uint64_t va, uint64_t len) -> std::pair<int, uint64_t> {
      for (size_t i = 0; i < sc.mrs.size(); ++i) {
        const MrSpec& m = sc.mrs[i];
        if (m.rkey == rkey && va >= m.va && va + len <= m.va + m.length)
          return {static_cast<int>(i), va - m.va};
      }
      return {-1, 0};
    };
    struct Msg {
      uint32_t first = 0;
      uint32_t rkey = 0;
      uint64_t va = 0;
      uint32_t len = 0;
      bool atomic = false;
      size_t at = 0;  // Capture::pkts index of the request
    };
    std::map<uint32_t, Msg> write_msg;              // per QP: the WRITE in progress
    std::map<uint32_t, std::vector<Msg>> reads;     // per QP: READ and atomic requests
    for (size_t pi = 0; pi < cap.pkts.size(); ++pi) {
      const Pkt& p = cap.pkts[pi];
      QpSpec* q = spec_of(p);
      if (q == nullptr) continue;
      if (!from_x(p)) {
        if (p.info->op == Operation::kWrite) {
          Msg& w = write_msg[q->qpn];
          if (p.has(Ext::kReth))
            w = {p.psn(), p.hdr.ext.reth.rkey, p.hdr.ext.reth.va, 0, false, pi};
          const uint64_t off = static_cast<uint64_t>(Psn(p.psn()) - Psn(w.first)) * sc.mtu;
          auto [i, o] = locate(w.rkey, w.va + off, p.payload_len);
          if (i >= 0) {
            const auto mi = static_cast<size_t>(i);
            const auto at = static_cast<ptrdiff_t>(o);
            std::fill_n(known[mi].begin() + at, p.payload_len, uint8_t{1});
            std::copy(p.payload().begin(), p.payload().end(), cur[mi].begin() + at);
            std::fill_n(valid[mi].begin() + at, p.payload_len, uint8_t{1});
            std::fill_n(written_by[mi].begin() + at, p.payload_len, pi + 1);
          }
        } else if (p.info->op == Operation::kReadRequest) {
          reads[q->qpn].push_back({p.psn(), p.hdr.ext.reth.rkey, p.hdr.ext.reth.va,
                                   p.hdr.ext.reth.dma_len, false, pi});
        } else if (p.has(Ext::kAtomicEth)) {
          reads[q->qpn].push_back(
              {p.psn(), p.hdr.ext.atomic.rkey, p.hdr.ext.atomic.va, 8, true, pi});
        }
        continue;
      }
      // From the replaced peer: READ responses and atomic ACKs reveal its memory.
      if (p.info->op != Operation::kReadResponse && p.info->op != Operation::kAtomicAck) continue;
      const auto& rs = reads[q->qpn];
      for (auto it = rs.rbegin(); it != rs.rend(); ++it) {
        const int32_t d = Psn(p.psn()) - Psn(it->first);
        if (d < 0 || static_cast<uint32_t>(d) >= npkts_for(it->len, sc.mtu)) continue;
        if (it->atomic != (p.info->op == Operation::kAtomicAck)) break;
        std::vector<uint8_t> data;
        uint64_t va = it->va;
        if (it->atomic) {
          data.resize(8);
          std::memcpy(data.data(), &p.hdr.ext.atomic_ack.orig, 8);  // host order, as stored
        } else {
          va += static_cast<uint64_t>(d) * sc.mtu;
          const wire::Bytes pl = p.payload();
          data.assign(pl.begin(), pl.end());
        }
        auto [i, o] = locate(it->rkey, va, data.size());
        if (i < 0) break;
        const auto mi = static_cast<size_t>(i);
        auto& k = known[mi];
        auto& init = sc.mrs[mi].init;
        Scenario::AppWrite aw;  // the bytes the application must have changed since
        for (size_t b = 0; b < data.size(); ++b) {
          const size_t at = o + b;
          // A WRITE after this READ was requested: the response may show the older data,
          // and the memory now holds the WRITE's.
          if (written_by[mi][at] > it->at + 1) continue;
          if (k[at] == 0) {
            init[at] = data[b];
            k[at] = 1;
          } else if (sc.app_writes_infer && !it->atomic && valid[mi][at] != 0 &&
                     cur[mi][at] != data[b]) {
            if (!aw.bytes.empty() && aw.off + aw.bytes.size() != at) {
              sc.app_writes.push_back(aw);
              aw.bytes.clear();
            }
            if (aw.bytes.empty()) aw = {it->at, mi, at, {}};
            aw.bytes.push_back(data[b]);
          }
          cur[mi][at] = data[b];
          valid[mi][at] = it->atomic ? 0 : 1;  // an atomic changes what it answered
        }
        if (!aw.bytes.empty()) sc.app_writes.push_back(aw);
        break;
      }
    }
  }
  for (MrSpec& m : sc.mrs) m.init.resize(m.length);

  if (!sc.min_rnr_timer) {
    for (const Pkt& p : cap.pkts)
      if (from_x(p) && p.has(Ext::kAeth) && p.hdr.ext.aeth.is_rnr_nak()) {
        sc.min_rnr_timer = p.hdr.ext.aeth.rnr_timer_code();
        break;
      }
    if (!sc.min_rnr_timer) sc.min_rnr_timer = 12;
  }
  return true;
}

}  // namespace uroce::replay

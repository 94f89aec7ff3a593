// Printing the replay (text diff and JSON Lines) and the tool as a function.
#include <filesystem>
#include <ostream>

#include "dissect/json.h"
#include "replay/replay.h"

namespace uroce::replay {

using wire::Ext;

namespace {

std::string hx(uint64_t v, int w = 6) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%0*llx", w, static_cast<unsigned long long>(v));
  return b;
}

std::string_view kind_name(StepKind k) {
  switch (k) {
    case StepKind::kFed: return "fed";
    case StepKind::kPosted: return "posted";
    case StepKind::kTimer: return "timer";
    case StepKind::kEnd: return "end";
  }
  return "?";
}

}  // namespace

std::string describe(const Pkt& p) {
  std::string s = std::string(p.info->name) + " qp=" + hx(p.dest_qp()) + " psn=" + hx(p.psn());
  const auto& e = p.hdr.ext;
  if (p.has(Ext::kAeth)) {
    const auto& a = e.aeth;
    if (a.is_ack()) s += " ACK";
    else if (a.is_rnr_nak()) s += " RNR-NAK(" + std::to_string(a.rnr_timer_code()) + ")";
    else if (a.is_nak()) s += " NAK(" + std::string(wire::to_string(a.nak_code())) + ")";
    s += " msn=" + std::to_string(a.msn);
  }
  if (p.has(Ext::kReth))
    s += " va=" + hx(e.reth.va, 1) + " rkey=" + hx(e.reth.rkey, 1) +
         " len=" + std::to_string(e.reth.dma_len);
  if (p.has(Ext::kAtomicEth))
    s += " va=" + hx(e.atomic.va, 1) + " rkey=" + hx(e.atomic.rkey, 1) + " swap/add=" +
         hx(e.atomic.swap_add, 1) + " cmp=" + hx(e.atomic.compare, 1);
  if (p.has(Ext::kAtomicAckEth)) s += " orig=" + hx(e.atomic_ack.orig, 1);
  if (p.has(Ext::kImmDt)) s += " imm=" + hx(e.imm.imm, 8);
  if (p.has(Ext::kDeth)) s += " qkey=" + hx(e.deth.qkey, 8) + " src_qp=" + hx(e.deth.src_qp);
  if (p.info->has_payload) s += " payload=" + std::to_string(p.payload_len);
  return s;
}

void print_text(std::ostream& out, const Capture& cap, const Scenario& sc, const Replay& rp,
                const Verdict& v, const PrintOptions& opt) {
  const int x = replaced_host(sc);
  out << "uroce replaces the " << to_string(sc.role) << " " << Capture::name(cap.ip[x])
      << " (" << wire::to_string(cap.mac[x]) << "); fed: " << Capture::name(cap.ip[1 - x])
      << "; path MTU " << sc.mtu << "\n";
  for (const QpSpec& q : sc.qps)
    out << "  QP " << hx(q.qpn) << " <-> " << hx(q.peer_qpn) << " "
        << (q.type == QpType::kRc ? "RC" : q.type == QpType::kUc ? "UC" : "UD")
        << " sq_psn=" << hx(*q.sq_psn) << " rq_psn=" << hx(*q.rq_psn) << "\n";
  for (const MrSpec& m : sc.mrs)
    out << "  MR va=" << hx(m.va, 1) << " len=" << m.length << " recorded rkey=" << hx(m.rkey, 1)
        << "\n";
  for (const std::string& n : sc.notes) out << "  note: " << n << "\n";
  for (const std::string& n : rp.notes) out << "  note: " << n << "\n";
  const size_t first = v.divergences.empty() ? SIZE_MAX : v.divergences.front().step;
  // "#N": the frame number of a captured packet. Not `"#" + std::to_string(n)`: GCC 12 at -O3
  // sees an overlapping memcpy in `const char* + std::string&&` (a -Wrestrict false positive).
  auto frame_no = [&](size_t pkt) {
    return std::string("#").append(std::to_string(cap.pkts[pkt].frame));
  };
  if (!opt.brief) {
    for (size_t k = 0; k < rp.steps.size(); ++k) {
      const Step& st = rp.steps[k];
      if (st.kind == StepKind::kEnd && st.uroce.empty() && st.recorded.empty()) continue;
      std::string head;
      if (st.kind == StepKind::kFed)
        head = frame_no(st.pkt) + " fed     " + describe(cap.pkts[st.pkt]);
      else if (st.kind == StepKind::kPosted)
        head = frame_no(st.pkt) + " posted  " + st.what;
      else if (st.kind == StepKind::kTimer)
        head = "   timer   " + (st.what.empty() ? std::string("(uroce's timers fired)") : st.what);
      else
        head = "   end of capture";
      out << head << (st.kind == StepKind::kFed && !st.what.empty() ? "  [" + st.what + "]" : "")
          << "\n";
      for (size_t i : st.recorded)
        out << "      recorded  #" << cap.pkts[i].frame << " " << describe(cap.pkts[i]) << "\n";
      for (const Pkt& p : st.uroce) out << "      uroce        " << describe(p) << "\n";
      if (k == first) out << "  !!! first divergence: " << v.divergences.front().text << "\n";
    }
  }
  out << "allowed differences:";
  if (v.allowed.empty()) out << " none";
  out << "\n";
  for (const auto& [what, n] : v.allowed) out << "  " << what << ": " << n << "\n";
  if (!v.divergences.empty()) {
    out << "divergences: " << v.divergences.size() << "\n";
    for (size_t i = 0; i < v.divergences.size() && i < 20; ++i) {
      const Divergence& d = v.divergences[i];
      const Step& st = rp.steps[d.step];
      std::string where = st.kind == StepKind::kEnd ? "at the end"
                          : "at frame #" + std::to_string(st.pkt < cap.pkts.size()
                                                              ? cap.pkts[st.pkt].frame
                                                              : 0);
      out << "  " << (i == 0 ? "FIRST " : "") << where << ": " << d.text << "\n";
    }
  }
  size_t fed = 0, sent = 0;
  for (const Step& st : rp.steps) {
    fed += st.kind == StepKind::kFed;
    sent += st.uroce.size();
  }
  out << "summary: " << (v.conforms() ? "CONFORMS" : "DIVERGES") << "; " << fed << " packets fed, "
      << v.compared << " recorded packets compared, uroce sent " << sent << "; "
      << v.divergences.size() << " divergences; skipped frames: other " << cap.skipped_other
      << ", bad ICRC " << cap.skipped_bad_icrc << ", malformed " << cap.skipped_malformed
      << ", snapped " << cap.skipped_snapped << "\n";
}

void print_json(std::ostream& out, const Capture& cap, const Scenario& sc, const Replay& rp,
                const Verdict& v) {
  using dissect::JsonWriter;
  auto pkt_obj = [](JsonWriter& j, const Pkt& p, bool with_frame) {
    j.begin_object();
    if (with_frame) j.field("frame", p.frame);
    j.field("opcode", p.info->name);
    j.field("qp", p.dest_qp());
    j.field("psn", p.psn());
    if (p.has(Ext::kAeth)) {
      j.field("syndrome", p.hdr.ext.aeth.syndrome);
      j.field("msn", p.hdr.ext.aeth.msn);
    }
    j.field("payload", p.payload_len);
    j.field("text", describe(p));
    j.end_object();
  };
  const size_t first = v.divergences.empty() ? SIZE_MAX : v.divergences.front().step;
  for (size_t k = 0; k < rp.steps.size(); ++k) {
    const Step& st = rp.steps[k];
    JsonWriter j;
    j.begin_object();
    j.field("step", k);
    j.field("kind", kind_name(st.kind));
    if (st.pkt < cap.pkts.size() && st.kind != StepKind::kTimer) {
      j.field("frame", cap.pkts[st.pkt].frame);
    }
    j.field("t_ns", st.now_ns);
    if (st.kind == StepKind::kFed) j.field("fed", describe(cap.pkts[st.pkt]));
    if (!st.what.empty()) j.field("what", st.what);
    j.begin_array("recorded");
    for (size_t i : st.recorded) pkt_obj(j, cap.pkts[i], true);
    j.end_array();
    j.begin_array("uroce");
    for (const Pkt& p : st.uroce) pkt_obj(j, p, false);
    j.end_array();
    if (k == first) j.field("first_divergence", v.divergences.front().text);
    j.end_object();
    out << j.str() << "\n";
  }
  JsonWriter j;
  j.begin_object();
  j.begin_object("summary");
  j.field("conforms", v.conforms());
  j.field("role", to_string(sc.role));
  j.field("replaced_ip", Capture::name(cap.ip[replaced_host(sc)]));
  j.field("mtu", sc.mtu);
  j.field("compared", v.compared);
  j.begin_array("divergences");
  for (const Divergence& d : v.divergences) {
    j.begin_object();
    j.field("step", d.step);
    j.field("text", d.text);
    j.end_object();
  }
  j.end_array();
  j.begin_object("allowed");
  for (const auto& [what, n] : v.allowed) j.field(what, n);
  j.end_object();
  j.field("expected_conform", sc.expect_conform);
  j.end_object();
  j.end_object();
  out << j.str() << "\n";
}

int run_tool(const Options& o, std::ostream& out, std::ostream& err) {
  Scenario sc;
  std::string error;
  std::string scen = o.scenario;
  if (scen.empty()) {
    std::filesystem::path p(o.pcap);
    if (p.extension() == ".pcap" || p.extension() == ".pcapng") {
      p.replace_extension(".scenario");
      std::error_code ec;
      if (std::filesystem::exists(p, ec)) scen = p.string();
    }
  }
  if (!scen.empty() && !parse_scenario(scen, sc, error)) {
    err << "uroce-replay: " << error << "\n";
    return 2;
  }
  if (o.role) {
    sc.role = *o.role;
    sc.role_set = true;
  } else if (!sc.role_set) {
    err << "uroce-replay: no role: give --role requester|responder"
        << (sc.both_roles ? " (the scenario allows both)" : "") << "\n";
    return 2;
  }
  if (o.qpn) sc.only_qpn = o.qpn;
  Capture cap;
  if (!load_capture(o.pcap, cap, error)) {
    err << "uroce-replay: " << error << "\n";
    return 2;
  }
  if (!infer_scenario(cap, sc, error)) {
    err << "uroce-replay: " << o.pcap << ": " << error << "\n";
    return 2;
  }
  Replay rp;
  if (!run_replay(cap, sc, rp, error)) {
    err << "uroce-replay: " << o.pcap << ": " << error << "\n";
    return 2;
  }
  const Verdict v = compare(cap, sc, rp);
  if (o.json) print_json(out, cap, sc, rp, v);
  else print_text(out, cap, sc, rp, v, PrintOptions{o.brief});
  bool as_expected = v.conforms() == sc.expect_conform;
  if (!v.conforms() && !sc.expect_text.empty() &&
      v.divergences.front().text.find(sc.expect_text) == std::string::npos)
    as_expected = false;
  if (!sc.expect_conform && !o.json)
    out << "expected outcome: diverge" << (sc.expect_text.empty() ? "" : " (\"" + sc.expect_text + "\")")
        << " -> " << (as_expected ? "as expected" : "NOT as expected") << "\n";
  return as_expected ? 0 : 1;
}

}  // namespace uroce::replay

// The replay conformance suite (see tests/replay/CMakeLists.txt and docs/replay.md).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness.h"
#include "pcap/pcap_file.h"
#include "replay/replay.h"
#include "fault/fault_injector.h"
#include "trace/pcap_trace.h"

namespace uroce::replay {
namespace {

namespace fs = std::filesystem;

std::string pcap(const std::string& name) { return std::string(UROCE_PCAP_DIR) + "/" + name; }

fs::path tmp_dir() {
  return fs::temp_directory_path() / ("uroce-replay-test-" + std::to_string(getpid()));
}
// The scratch directory goes when the test binary exits.
struct TmpCleanup {
  ~TmpCleanup() {
    std::error_code ec;
    fs::remove_all(tmp_dir(), ec);
  }
} tmp_cleanup;

std::string tmp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string t = std::string(info->test_suite_name()) + "_" + info->name();
  for (char& c : t)
    if (c == '/') c = '_';
  const fs::path dir = tmp_dir();
  fs::create_directories(dir);
  return (dir / (t + "_" + name)).string();
}

struct Outcome {
  int code = -1;
  std::string out, err;
};

Outcome run_lib(const std::string& path, std::optional<Role> role, bool json = false,
                const std::string& scenario = {}) {
  Options o;
  o.pcap = path;
  o.role = role;
  o.json = json;
  o.scenario = scenario;
  std::ostringstream out, err;
  Outcome r;
  r.code = run_tool(o, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

Outcome run_cli(const std::string& args) {
  const std::string errf = tmp_path("stderr");
  const std::string cmd = std::string(UROCE_REPLAY_BIN) + " " + args + " 2>" + errf;
  Outcome r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(errf);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  return r;
}

/// Rewrites every frame of `in` through `f` (which may change the parsed headers; the frame
/// is then rebuilt with a fresh ICRC) and writes `out`.
void mutate(const std::string& in, const std::string& out,
            const std::function<bool(size_t frame, wire::RoceHeaders&, std::vector<uint8_t>&)>& f) {
  drivers::PcapReader rd(in);
  ASSERT_TRUE(rd.ok()) << rd.error();
  drivers::PcapWriter wr(out);
  ASSERT_TRUE(wr.ok());
  drivers::PcapRecord rec;
  size_t frame = 0;
  while (rd.next(rec)) {
    ++frame;
    std::vector<uint8_t> bytes(rec.data.begin(), rec.data.end());
    wire::ParsedPacket p;
    if (wire::parse_frame(bytes, p) == wire::ParseError::kOk) {
      wire::RoceHeaders h = p.hdr;
      std::vector<uint8_t> payload(p.payload.begin(), p.payload.end());
      if (f(frame, h, payload)) {
        std::vector<uint8_t> nb(bytes.size() + 9100);
        const size_t n = wire::build_frame(h, payload, nb);
        ASSERT_NE(n, 0u);
        nb.resize(n);
        bytes = nb;
      }
    }
    wr.write(rec.ts_ns, bytes);
  }
}

// ---- The kernel Soft-RoCE captures, both roles ---------------------------------------------

struct KernelCase {
  std::string file;
  Role role;
};
void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.file << " as " << to_string(c.role); }

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> v;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(UROCE_PCAP_DIR))
    if (e.path().extension() == ".pcap" && e.path().filename().string().rfind("kernel-rxe-", 0) == 0)
      files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    v.push_back({f, Role::kRequester});
    v.push_back({f, Role::kResponder});
  }
  return v;
}

std::string case_name(const std::string& file, Role r) {
  std::string n = file.substr(0, file.size() - 5) + "_" + std::string(to_string(r));
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

class KernelCapture : public ::testing::TestWithParam<KernelCase> {};

TEST_P(KernelCapture, Conforms) {
  const auto& c = GetParam();
  const Outcome r = run_lib(pcap(c.file), c.role);
  EXPECT_EQ(r.code, 0) << r.err << r.out.substr(r.out.size() > 3000 ? r.out.size() - 3000 : 0);
  EXPECT_NE(r.out.find("summary: CONFORMS"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(ReplayKernel, KernelCapture, ::testing::ValuesIn(kernel_cases()),
                         [](const auto& pinfo) { return case_name(pinfo.param.file, pinfo.param.role); });

// ---- Hand-made scenarios: every pcap in pcaps/scenarios/ with its .scenario ------------------

std::vector<KernelCase> scenario_cases() {
  std::vector<KernelCase> v;
  const fs::path dir = fs::path(UROCE_PCAP_DIR) / "scenarios";
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".pcap") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    Scenario sc;
    std::string err;
    fs::path s(f);
    s.replace_extension(".scenario");
    if (!fs::exists(s) || !parse_scenario(s.string(), sc, err)) {
      v.push_back({f, Role::kResponder});  // fails in the test, with the reason
      continue;
    }
    if (sc.both_roles || !sc.role_set || sc.role == Role::kRequester) v.push_back({f, Role::kRequester});
    if (sc.both_roles || !sc.role_set || sc.role == Role::kResponder) v.push_back({f, Role::kResponder});
    if (!sc.both_roles && sc.role_set) {
      std::erase_if(v, [&](const KernelCase& k) { return k.file == f && k.role != sc.role; });
    }
  }
  return v;
}

class ScenarioCapture : public ::testing::TestWithParam<KernelCase> {};

TEST_P(ScenarioCapture, OutcomeAsExpected) {
  const auto& c = GetParam();
  fs::path s(c.file);
  s.replace_extension(".scenario");
  ASSERT_TRUE(fs::exists(s)) << "every pcap in pcaps/scenarios needs a .scenario: " << s;
  const Outcome r = run_lib(c.file, c.role);
  EXPECT_EQ(r.code, 0) << r.err << r.out;
}

INSTANTIATE_TEST_SUITE_P(ReplayScenario, ScenarioCapture, ::testing::ValuesIn(scenario_cases()),
                         [](const auto& pinfo) {
                           return case_name(fs::path(pinfo.param.file).filename().string(),
                                            pinfo.param.role);
                         });

TEST(ReplayScenarioFiles, GeneratorReproducesTheCommittedCaptures) {
  const fs::path dir = fs::path(tmp_path("gen"));
  fs::create_directories(dir);
  ASSERT_EQ(std::system((std::string(UROCE_REPLAY_GEN_BIN) + " " + dir.string()).c_str()), 0);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path committed = fs::path(UROCE_PCAP_DIR) / "scenarios" / e.path().filename();
    ASSERT_TRUE(fs::exists(committed)) << committed;
    std::ifstream a(e.path(), std::ios::binary), b(committed, std::ios::binary);
    std::stringstream sa, sb;
    sa << a.rdbuf();
    sb << b.rdbuf();
    EXPECT_EQ(sa.str(), sb.str()) << "regenerate with uroce-replay-gen pcaps/scenarios: "
                                  << e.path().filename();
    ++n;
  }
  EXPECT_GE(n, 12u);
}

// ---- Negative tests: the runner must be able to fail ----------------------------------------

TEST(ReplayNegative, RecordedRnrNakTurnedIntoAckDiverges) {
  const std::string out = tmp_path("rnr.pcap");
  bool changed = false;
  mutate(pcap("kernel-rxe-rnr_send_bw_64-head.pcap"), out,
         [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>&) {
           if (changed || h.bth.opcode != wire::opcode::kRcAck || !h.ext.aeth.is_rnr_nak())
             return false;
           h.ext.aeth.syndrome = wire::AethRepr::make_ack();
           changed = true;
           return true;
         });
  ASSERT_TRUE(changed);
  const Outcome r = run_lib(out, Role::kResponder);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("summary: DIVERGES"), std::string::npos);
  // With no RNR NAK recorded, the replay gives uroce a receive buffer, so uroce accepts what
  // the recorded responder then NAKed as out of sequence.
  EXPECT_NE(r.out.find("the recorded responder sent NAK (PSN sequence error), uroce sent ACK"),
            std::string::npos)
      << r.out;
}

TEST(ReplayNegative, RecordedSeqNakTurnedIntoAckDiverges) {
  const std::string out = tmp_path("lossy.pcap");
  bool changed = false;
  mutate(pcap("kernel-rxe-lossy_write_bw_4096-head.pcap"), out,
         [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>&) {
           if (changed || h.bth.opcode != wire::opcode::kRcAck || !h.ext.aeth.is_nak()) return false;
           h.ext.aeth.syndrome = wire::AethRepr::make_ack();
           changed = true;
           return true;
         });
  ASSERT_TRUE(changed);
  const Outcome r = run_lib(out, Role::kResponder);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("NAK (PSN sequence error)"), std::string::npos) << r.out;
}

// ---- RoCEv2 over IPv6 ------------------------------------------------------------------------

// The capture with every RoCE packet moved to IPv6: global addresses (2001:db8::N, from the
// IPv4 address's last byte) or the link-local ones each host's MAC gives.
std::string to_ipv6(const std::string& file, bool link_local) {
  const std::string out = tmp_path(std::string(link_local ? "ll6-" : "v6-") + file);
  mutate(pcap(file), out, [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>&) {
    if (h.ipv6) return false;
    const auto addr = [&](const wire::Ipv4Addr& a, const wire::MacAddr& m) {
      if (link_local) return wire::link_local_gid(m);
      wire::Gid g{0x20, 0x01, 0x0d, 0xb8};
      g[15] = a[3];
      return g;
    };
    h.ipv6 = true;
    h.eth.ethertype = 0x86DD;
    h.ip6.src = addr(h.ip4.src, h.eth.src);
    h.ip6.dst = addr(h.ip4.dst, h.eth.dst);
    h.ip6.traffic_class = static_cast<uint8_t>(h.ip4.dscp << 2 | h.ip4.ecn);
    h.ip6.hop_limit = 64;
    return true;
  });
  return out;
}

TEST(ReplayIpv6, KernelCapturesConformOverIpv6InBothRoles) {
  for (const char* file : {"kernel-rxe-send_bw_64.pcap", "kernel-rxe-read_bw_4096-head.pcap",
                           "kernel-rxe-atomic_bw_cas.pcap", "kernel-rxe-lossy_write_bw_4096-head.pcap",
                           "kernel-rxe-ud_pingpong-head.pcap"})
    for (const bool ll : {false, true})
      for (const Role role : {Role::kResponder, Role::kRequester}) {
        const std::string v6 = to_ipv6(file, ll);
        const Outcome r = run_lib(v6, role);
        EXPECT_EQ(r.code, 0) << file << (ll ? " link-local" : " global") << " as " << to_string(role)
                             << ":\n" << r.out << r.err;
        EXPECT_NE(r.out.find(ll ? "fe80::" : "2001:db8::"), std::string::npos) << r.out;
      }
}

TEST(ReplayIpv6, ADivergenceOverIpv6IsFound) {
  // The MSN of the recorded responder's first ACK made wrong, after the move to IPv6.
  const std::string v6 = to_ipv6("kernel-rxe-send_bw_64.pcap", false);
  const std::string out = tmp_path("v6-msn.pcap");
  bool changed = false;
  mutate(v6, out, [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>&) {
    if (changed || h.bth.opcode != wire::opcode::kRcAck) return false;
    h.ext.aeth.msn += 5;
    changed = true;
    return true;
  });
  ASSERT_TRUE(changed);
  const Outcome r = run_lib(out, Role::kResponder);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("MSN"), std::string::npos) << r.out;
}

TEST(ReplayNegative, WrongMsnInRecordedAckDiverges) {
  const std::string out = tmp_path("send.pcap");
  int acks = 0;
  mutate(pcap("kernel-rxe-send_bw_64.pcap"), out,
         [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>&) {
           if (h.bth.opcode != wire::opcode::kRcAck || ++acks != 50) return false;
           h.ext.aeth.msn += 1;
           return true;
         });
  const Outcome r = run_lib(out, Role::kResponder);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("carries MSN"), std::string::npos) << r.out;
}

TEST(ReplayNegative, WrongAtomicOriginalDiverges) {
  const std::string out = tmp_path("fadd.pcap");
  int n = 0;
  mutate(pcap("kernel-rxe-atomic_bw_fadd.pcap"), out,
         [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>&) {
           if (h.bth.opcode != wire::opcode::kRcAtomicAck || ++n != 100) return false;
           h.ext.atomic_ack.orig += 1;
           return true;
         });
  const Outcome r = run_lib(out, Role::kResponder);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("original value"), std::string::npos) << r.out;
}

TEST(ReplayNegative, WrongReadResponseDataDiverges) {
  const std::string out = tmp_path("read.pcap");
  int n = 0;
  mutate(pcap("kernel-rxe-read_bw_64.pcap"), out,
         [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>& payload) {
           if (h.bth.opcode != wire::opcode::kRcReadResponseOnly || ++n != 150) return false;
           payload[3] ^= 0xFF;
           return true;
         });
  const Outcome r = run_lib(out, Role::kResponder);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("READ response data differs"), std::string::npos) << r.out;
}

TEST(ReplayNegative, ApplicationWritesAreOnlyInferredWhenTheScenarioSaysSo) {
  // rping's client rewrites the buffer the server READs before every ping; without the
  // scenario's app_writes the new data reads as a wrong READ response.
  const std::string none = tmp_path("none.scenario");
  std::ofstream(none) << "[replay]\n";
  const Outcome strict = run_lib(pcap("kernel-rxe-rping_cm.pcap"), Role::kRequester, false, none);
  EXPECT_EQ(strict.code, 1);
  EXPECT_NE(strict.out.find("READ response data differs"), std::string::npos) << strict.out;
  const Outcome inferred = run_lib(pcap("kernel-rxe-rping_cm.pcap"), Role::kRequester);
  EXPECT_EQ(inferred.code, 0) << inferred.out;
  EXPECT_NE(inferred.out.find("the application had changed"), std::string::npos) << inferred.out;
}

TEST(ReplayInference, QpsOfACmCaptureComeFromTheReqAndRep) {
  Capture cap;
  std::string err;
  ASSERT_TRUE(load_capture(pcap("kernel-rxe-rping_cm.pcap"), cap, err)) << err;
  ASSERT_EQ(cap.cm.size(), 5u);  // REQ, REP, RTU, DREQ, DREP
  const auto* req = cap.cm[0].msg.get<wire::CmReq>();
  const auto* rep = cap.cm[1].msg.get<wire::CmRep>();
  ASSERT_NE(req, nullptr);
  ASSERT_NE(rep, nullptr);
  for (Role role : {Role::kRequester, Role::kResponder}) {
    Scenario sc;
    sc.role = role;
    ASSERT_TRUE(infer_scenario(cap, sc, err)) << err;
    ASSERT_EQ(sc.qps.size(), 1u);
    // The client (the CM's active side) sends from the REP's PSN, the server from the REQ's.
    const bool client = role == Role::kRequester;
    EXPECT_EQ(sc.qps[0].sq_psn, client ? rep->starting_psn : req->starting_psn);
    EXPECT_EQ(sc.qps[0].rq_psn, client ? req->starting_psn : rep->starting_psn);
    EXPECT_EQ(sc.mtu, 1024u);
  }
}

TEST(ReplayNegative, RequesterThatSkipsAPsnDiverges) {
  // The hand-made capture's requester jumps from PSN 50 to 52: uroce, given the same two
  // messages, sends 51 — the runner reports the recorded PSN 52 as never sent.
  const Outcome r = run_lib(pcap("scenarios/negative_ack_across_gap.pcap"), Role::kRequester);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("psn=0x000034"), std::string::npos) << r.out;
}

TEST(ReplayNegative, ScenarioExpectingConformanceFailsOnDivergence) {
  const std::string sc = tmp_path("conform.scenario");
  std::ofstream(sc) << "[replay]\nrole = responder\n[expect]\nresult = conform\n";
  const Outcome r = run_lib(pcap("scenarios/negative_ack_across_gap.pcap"), std::nullopt, false, sc);
  EXPECT_EQ(r.code, 1) << r.out;
}

TEST(ReplayNegative, WrongExpectedMemoryDiverges) {
  const std::string sc = tmp_path("mem.scenario");
  std::ofstream(sc) << "[replay]\nrole = responder\nmtu = 256\n[mr]\nva = 0x1000\nrkey = 0x100\n"
                       "length = 512\n[expect]\nmemory = 0x1000 deadbeef\n";
  const Outcome r = run_lib(pcap("scenarios/psn_wrap.pcap"), std::nullopt, false, sc);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("memory at VA 0x1000"), std::string::npos) << r.out;
}

// ---- Captures uroce made itself: two engines over MemLink, traced -------------------------

/// Two uroce engines over the in-memory link exchange a mix of operations; the traffic is
/// traced at A's port. With `faults`, each side loses frames *before* the trace point (A's
/// losses under the tracer, B's on B's side), as on a bridge between two lossy hosts.
void make_uroce_capture(const std::string& path, const drivers::FaultConfig* faults, int rounds) {
  using namespace uroce::test;
  drivers::MemLink link;
  drivers::PcapTrace trace(link.a(), path);
  ASSERT_TRUE(trace.ok());
  std::unique_ptr<drivers::FaultInjector> fa, fb;
  if (faults != nullptr) {
    drivers::FaultConfig ca = *faults, cb = *faults;
    cb.seed = faults->seed * 31 + 7;
    fa = std::make_unique<drivers::FaultInjector>(trace, ca);
    fb = std::make_unique<drivers::FaultInjector>(link.b(), cb);
  }
  Side a(fa ? static_cast<Port&>(*fa) : static_cast<Port&>(trace), kIpA, 1);
  Side b(fb ? static_cast<Port&>(*fb) : static_cast<Port&>(link.b()), kIpB, 2);
  a.engine->set_neighbor(wire::ipv4_mapped_gid(kIpB), link.b().mac());
  b.engine->set_neighbor(wire::ipv4_mapped_gid(kIpA), link.a().mac());
  QpOptions oa, ob;
  oa.sq_psn = 0xFFFF00;
  ob.sq_psn = 0x123;
  ob.access |= UROCE_ACCESS_FLUSH_GLOBAL;
  oa.rq_psn = ob.sq_psn;
  ob.rq_psn = oa.sq_psn;
  Qp* qa = make_qp(a, oa);
  Qp* qb = make_qp(b, ob);
  ASSERT_EQ(connect_qp(a, qa, qb->qpn, kIpB, oa), 0);
  ASSERT_EQ(connect_qp(b, qb, qa->qpn, kIpA, ob), 0);
  std::vector<uint8_t> abuf(64 * 1024), bbuf(64 * 1024);
  for (size_t i = 0; i < abuf.size(); ++i) {
    abuf[i] = static_cast<uint8_t>(i * 13 + 1);
    bbuf[i] = static_cast<uint8_t>(i * 5 + 3);
  }
  mem::Mr* amr = a.reg(abuf, IBV_ACCESS_LOCAL_WRITE);
  mem::Mr* bmr = b.reg(bbuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 UROCE_ACCESS_FLUSH_GLOBAL);
  // B posts receives; A sends, writes, reads and runs atomics.
  for (int i = 0; i < 2 * rounds; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(bbuf.data() + 32768 + (i % 4) * 4096), 4096, bmr->key};
    ibv_recv_wr rw{};
    rw.sg_list = &sge;
    rw.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(b.engine->post_recv(qb, &rw, &bad), 0);
  }
  auto post = [&](ibv_wr_opcode op, size_t off, uint32_t len, uint64_t raddr) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(abuf.data() + off), len, amr->key};
    ibv_send_wr wr{};
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = bmr->key;
      wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 3 : 0;
      wr.wr.atomic.swap = 9;
    } else {
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = bmr->key;
    }
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(a.engine->post_send(qa, &wr, &bad), 0);
  };
  // A FLUSH of a range for global visibility, as ibv_wr_flush posts it.
  auto flush = [&](uint64_t raddr, uint32_t len) {
    ASSERT_EQ(a.engine->post_flush(qa, {0, raddr, bmr->key, len, UROCE_FLUSH_GLOBAL,
                                        UROCE_FLUSH_RANGE}),
              0);
  };
  const auto base = reinterpret_cast<uintptr_t>(bbuf.data());
  for (int r = 0; r < rounds; ++r) {
    post(IBV_WR_SEND, static_cast<size_t>(r) * 8, 3000, 0);
    post(IBV_WR_RDMA_WRITE, 4096, 5000, base + 1024 + static_cast<uint64_t>(r) * 8);
    post(IBV_WR_RDMA_READ, 16384, 2500, base + 8192);
    post(IBV_WR_ATOMIC_FETCH_AND_ADD, 24576, 8, base + 16384);
    post(IBV_WR_ATOMIC_CMP_AND_SWP, 24584, 8, base + 16384 + 8);
    post(IBV_WR_SEND, 100, 64, 0);
    post(IBV_WR_ATOMIC_WRITE, 24592, 8, base + 16384 + 16);
    flush(base + 1024, 5000);
  }
  const size_t want = 8 * static_cast<size_t>(rounds);
  uint64_t now = 1'000'000;
  size_t completions = 0;
  for (int i = 0; i < 2'000'000 && completions < want; ++i) {
    if (fa) fa->pump(now);
    if (fb) fb->pump(now);
    a.engine->poll(now);
    b.engine->poll(now);
    for (const ibv_wc& wc : drain(a)) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      ++completions;
    }
    drain(b);
    if (link.in_flight() == 0 && !a.engine->has_tx_work() && !b.engine->has_tx_work()) {
      const uint64_t next = std::min(a.engine->next_deadline(), b.engine->next_deadline());
      now = next == TimerWheel::kNever ? now + 1000 : std::max(now + 1000, next);
    } else {
      now += 1000;
    }
  }
  ASSERT_EQ(completions, want);
}

TEST(ReplayUroceCapture, BothRolesConform) {
  const std::string path = tmp_path("uroce.pcap");
  make_uroce_capture(path, nullptr, 1);
  for (Role r : {Role::kRequester, Role::kResponder}) {
    const Outcome o = run_lib(path, r);
    EXPECT_EQ(o.code, 0) << to_string(r) << "\n" << o.err << o.out;
  }
}

TEST(ReplayUroceCapture, LossyBothRolesConform) {
  const std::string path = tmp_path("uroce-lossy.pcap");
  drivers::FaultConfig f;
  f.seed = 5;
  f.loss = 0.03;
  make_uroce_capture(path, &f, 12);
  for (Role r : {Role::kRequester, Role::kResponder}) {
    const Outcome o = run_lib(path, r);
    EXPECT_EQ(o.code, 0) << to_string(r) << "\n" << o.err << o.out;
  }
  // The capture does hold recovery: sequence NAKs or retransmissions.
  const Outcome o = run_lib(path, Role::kResponder);
  EXPECT_NE(o.out.find("NAK(PSN sequence error)"), std::string::npos);
}

// ---- Inference and scenario parsing ---------------------------------------------------------

Scenario inferred(const std::string& file, Role role) {
  Capture cap;
  std::string err;
  EXPECT_TRUE(load_capture(pcap(file), cap, err)) << err;
  Scenario sc;
  sc.role = role;
  EXPECT_TRUE(infer_scenario(cap, sc, err)) << err;
  return sc;
}

TEST(ReplayInfer, WriteCaptureGivesQpsPsnsAndTheMemoryRegion) {
  const Scenario sc = inferred("kernel-rxe-write_bw_64.pcap", Role::kResponder);
  ASSERT_EQ(sc.qps.size(), 1u);
  EXPECT_EQ(sc.qps[0].qpn, 0x11u);
  EXPECT_EQ(sc.qps[0].peer_qpn, 0x11u);
  EXPECT_EQ(*sc.qps[0].rq_psn, 12481691u);  // the first WRITE's PSN
  EXPECT_EQ(sc.mtu, 1024u);                  // assumed: no multi-packet message
  ASSERT_EQ(sc.mrs.size(), 1u);
  EXPECT_EQ(sc.mrs[0].rkey, 0x27cu);
  EXPECT_EQ(sc.mrs[0].va, 0x55933e3b6000u);
}

TEST(ReplayInfer, MtuFromFirstAndMiddlePackets) {
  EXPECT_EQ(inferred("kernel-rxe-write_bw_4096-head.pcap", Role::kResponder).mtu, 1024u);
  EXPECT_EQ(inferred("kernel-rxe-mtu9000_write_bw_4096-head.pcap", Role::kResponder).mtu, 4096u);
}

TEST(ReplayInfer, MemoryFromAtomicOriginalAndReadResponses) {
  Capture cap;
  std::string err;
  ASSERT_TRUE(load_capture(pcap("kernel-rxe-atomic_bw_fadd.pcap"), cap, err));
  Scenario sc = inferred("kernel-rxe-atomic_bw_fadd.pcap", Role::kResponder);
  ASSERT_EQ(sc.mrs.size(), 1u);
  // The first ATOMIC ACK's original value is what the region held at its VA.
  for (const Pkt& p : cap.pkts) {
    if (p.info->op != wire::Operation::kFetchAdd) continue;
    const uint64_t va = p.hdr.ext.atomic.va;
    for (const Pkt& r : cap.pkts)
      if (r.info->op == wire::Operation::kAtomicAck && r.psn() == p.psn()) {
        uint64_t v = 0;
        std::memcpy(&v, sc.mrs[0].init.data() + (va - sc.mrs[0].va), 8);
        EXPECT_EQ(v, r.hdr.ext.atomic_ack.orig);
        break;
      }
    break;
  }
}

TEST(ReplayInfer, RnrTimerAndReceiveSize) {
  const Scenario sc = inferred("kernel-rxe-rnr_send_bw_64-head.pcap", Role::kResponder);
  EXPECT_EQ(sc.min_rnr_timer.value_or(0), 12);
  EXPECT_EQ(sc.recv_size, 64u);
  EXPECT_EQ(inferred("kernel-rxe-ud_pingpong-head.pcap", Role::kResponder).recv_size, 1024u + 40u);
}

TEST(ReplayInfer, SrqPingpongPairsManyQps) {
  const Scenario sc = inferred("kernel-rxe-srq_pingpong-head.pcap", Role::kResponder);
  EXPECT_GE(sc.qps.size(), 4u);
  for (const QpSpec& q : sc.qps) EXPECT_EQ(q.qpn, q.peer_qpn);  // both sides number alike
}

TEST(ReplayScenarioParse, ReadsEverySection) {
  Scenario sc;
  std::string err;
  ASSERT_TRUE(parse_scenario_text(
      "# c\n[replay]\nrole = requester\nmtu = 256\nsrq = yes\n[qp]\nqpn = 0x11\npeer_qpn = 0x12\n"
      "type = uc\nsq_psn = 0xfffffe\n[mr]\nva = 0x1000\nrkey = 5\nlength = 4\ndata = 1 aabb\n"
      "[expect]\nresult = diverge\ndivergence = NAK\nmemory = 0x1000 00aabb\n",
      "t", sc, err))
      << err;
  EXPECT_EQ(sc.role, Role::kRequester);
  EXPECT_EQ(sc.mtu, 256u);
  EXPECT_TRUE(sc.srq);
  ASSERT_EQ(sc.qps.size(), 1u);
  EXPECT_EQ(sc.qps[0].type, QpType::kUc);
  EXPECT_EQ(*sc.qps[0].sq_psn, 0xfffffeu);
  ASSERT_EQ(sc.mrs.size(), 1u);
  EXPECT_EQ(sc.mrs[0].init, (std::vector<uint8_t>{0, 0xaa, 0xbb, 0}));
  EXPECT_FALSE(sc.expect_conform);
  ASSERT_EQ(sc.expect_mem.size(), 1u);
}

TEST(ReplayScenarioParse, ErrorsNameTheLine) {
  Scenario sc;
  std::string err;
  EXPECT_FALSE(parse_scenario_text("[replay]\nmtu = 1000\n", "f", sc, err));
  EXPECT_EQ(err.rfind("f:2:", 0), 0u) << err;
  EXPECT_FALSE(parse_scenario_text("[replay]\nbogus = 1\n", "f", sc, err));
  EXPECT_FALSE(parse_scenario_text("[nope]\n", "f", sc, err));
  EXPECT_FALSE(parse_scenario_text("[mr]\nva = 1\n", "f", sc, err));  // no length
}

// ---- The comparison on a doctored replay ---------------------------------------------------

struct Replayed {
  Capture cap;
  Scenario sc;
  Replay rp;
};

Replayed replayed(const std::string& file, Role role) {
  Replayed r;
  std::string err;
  EXPECT_TRUE(load_capture(pcap(file), r.cap, err)) << err;
  r.sc.role = role;
  EXPECT_TRUE(infer_scenario(r.cap, r.sc, err)) << err;
  EXPECT_TRUE(run_replay(r.cap, r.sc, r.rp, err)) << err;
  return r;
}

TEST(ReplayCompare, AMissingAckIsCoalescingButAMissingLastAckIsNot) {
  Replayed r = replayed("kernel-rxe-write_bw_64.pcap", Role::kResponder);
  ASSERT_TRUE(compare(r.cap, r.sc, r.rp).conforms());
  // Drop uroce's first ACK: a later one covers it (ACKs are cumulative).
  for (Step& st : r.rp.steps)
    if (!st.uroce.empty()) {
      st.uroce.clear();
      break;
    }
  Verdict v = compare(r.cap, r.sc, r.rp);
  EXPECT_TRUE(v.conforms());
  EXPECT_GE(v.allowed["ACK coalescing (an ACK covered by a later one)"], 1u);
  // Drop every ACK: the recorded responder acknowledged PSNs uroce never did.
  for (Step& st : r.rp.steps) st.uroce.clear();
  v = compare(r.cap, r.sc, r.rp);
  ASSERT_FALSE(v.conforms());
  EXPECT_NE(v.divergences[0].text.find("never acknowledged"), std::string::npos);
}

TEST(ReplayCompare, AnAckAheadOfWhatWasReceivedDiverges) {
  Replayed r = replayed("kernel-rxe-write_bw_64.pcap", Role::kResponder);
  for (Step& st : r.rp.steps)
    if (!st.uroce.empty()) {
      st.uroce[0].hdr.bth.psn = (st.uroce[0].hdr.bth.psn + 5) & 0xFFFFFF;
      break;
    }
  const Verdict v = compare(r.cap, r.sc, r.rp);
  ASSERT_FALSE(v.conforms());
  EXPECT_NE(v.divergences[0].text.find("before that PSN was received"), std::string::npos)
      << v.divergences[0].text;
}

TEST(ReplayCompare, RequesterPayloadDifferenceDiverges) {
  Replayed r = replayed("kernel-rxe-send_bw_64.pcap", Role::kRequester);
  ASSERT_TRUE(compare(r.cap, r.sc, r.rp).conforms());
  for (Step& st : r.rp.steps)
    if (st.kind == StepKind::kPosted && !st.uroce.empty()) {
      Pkt& p = st.uroce[0];
      p.bytes[p.payload_off] ^= 1;
      break;
    }
  const Verdict v = compare(r.cap, r.sc, r.rp);
  ASSERT_FALSE(v.conforms());
  EXPECT_NE(v.divergences[0].text.find("payload differs"), std::string::npos);
}

TEST(ReplayCompare, ReadAndAtomicResultsAreChecked) {
  for (const char* file : {"kernel-rxe-read_bw_64.pcap", "kernel-rxe-atomic_bw_cas.pcap"}) {
    Replayed r = replayed(file, Role::kRequester);
    ASSERT_TRUE(compare(r.cap, r.sc, r.rp).conforms());
    size_t completed = 0;
    for (const auto& lr : r.rp.local_results) completed += lr.status == 0;
    EXPECT_GE(completed, 100u) << file;
    for (auto& lr : r.rp.local_results)
      if (lr.status == 0) {
        lr.data[0] ^= 0x5a;
        break;
      }
    const Verdict v = compare(r.cap, r.sc, r.rp);
    ASSERT_FALSE(v.conforms()) << file;
    EXPECT_NE(v.divergences[0].text.find("local buffer does not hold"), std::string::npos);
  }
}

// ---- Robustness: valid RoCE frames with nonsense fields must not crash the runner ------------

TEST(ReplayRobustness, RandomisedHeaderFieldsNeverCrash) {
  const char* files[] = {"kernel-rxe-rnr_send_bw_64-head.pcap", "kernel-rxe-read_bw_4096-head.pcap",
                         "kernel-rxe-atomic_bw_cas.pcap", "kernel-rxe-ud_pingpong-head.pcap",
                         "scenarios/psn_wrap.pcap", "scenarios/dup_read_subset.pcap"};
  const uint8_t ops[] = {0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0a, 0x0c, 0x0d, 0x0e,
                         0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x24, 0x64};
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  auto next = [&]() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  int verdicts = 0;
  const int rounds = std::getenv("UROCE_REPLAY_FUZZ_ROUNDS") != nullptr
                         ? std::atoi(std::getenv("UROCE_REPLAY_FUZZ_ROUNDS"))
                         : 36;
  if (const char* seed = std::getenv("UROCE_REPLAY_FUZZ_SEED")) rng += std::strtoull(seed, nullptr, 0);
  for (int round = 0; round < rounds; ++round) {
    const std::string out = tmp_path("fuzz" + std::to_string(round) + ".pcap");
    mutate(pcap(files[round % 6]), out,
           [&](size_t, wire::RoceHeaders& h, std::vector<uint8_t>& payload) {
             if (next() % 4 != 0) return false;
             switch (next() % 9) {
               case 0: h.bth.psn = static_cast<uint32_t>(next() & 0xFFFFFF); break;
               case 1: h.bth.opcode = ops[next() % sizeof ops]; break;
               case 2: h.bth.dest_qp = static_cast<uint32_t>(next() % 0x40); break;
               case 3: h.ext.reth.dma_len = static_cast<uint32_t>(next()); break;
               case 4: h.ext.reth.va = next(); break;
               case 5: h.ext.aeth.syndrome = static_cast<uint8_t>(next()); break;
               case 6: payload.resize(next() % 2048); break;
               case 7: h.ext.atomic.va = next() & ~uint64_t{7}; break;
               default: h.ext.deth.src_qp = static_cast<uint32_t>(next() & 0xFFFFFF); break;
             }
             std::vector<uint8_t> probe(9000);
             return wire::build_frame(h, payload, probe) != 0;
           });
    for (Role r : {Role::kRequester, Role::kResponder}) {
      const auto t0 = std::chrono::steady_clock::now();
      const Outcome o = run_lib(out, r, false, "/dev/null");
      if (std::getenv("UROCE_REPLAY_FUZZ_VERBOSE") != nullptr)
        std::cerr << "round " << round << " " << to_string(r) << " exit " << o.code << " "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - t0)
                         .count()
                  << " ms\n";
      EXPECT_TRUE(o.code == 0 || o.code == 1 || o.code == 2) << o.code;
      verdicts += o.code != 2;
      if (o.code == 2) {
        if (std::getenv("UROCE_REPLAY_FUZZ_VERBOSE") != nullptr) std::cerr << o.err;
        EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
      }
    }
  }
  EXPECT_GE(verdicts, rounds / 3);  // many doctored captures still replay to a verdict
}

// ---- The command line ------------------------------------------------------------------------

TEST(ReplayCli, ConformsExitsZeroAndPrintsTheDiff) {
  const Outcome r = run_cli("--role responder " + pcap("kernel-rxe-write_bw_64.pcap"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(" fed     RC_RDMA_WRITE_ONLY"), std::string::npos);
  EXPECT_NE(r.out.find("recorded  #"), std::string::npos);
  EXPECT_NE(r.out.find("allowed differences:"), std::string::npos);
}

TEST(ReplayCli, DefaultScenarioSidecarIsUsed) {
  const Outcome r = run_cli("--brief " + pcap("scenarios/dup_atomic.pcap"));  // role from it
  EXPECT_EQ(r.code, 2) << "role = both needs --role: " << r.err;
  EXPECT_NE(r.err.find("scenario allows both"), std::string::npos);
  const Outcome r2 = run_cli("--brief " + pcap("scenarios/dup_read_subset.pcap"));
  EXPECT_EQ(r2.code, 0) << r2.err << r2.out;
}

TEST(ReplayCli, JsonLinesEndWithASummary) {
  const Outcome r = run_cli("--json --role responder " + pcap("kernel-rxe-rnr_send_bw_64-head.pcap"));
  EXPECT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line, last;
  size_t n = 0;
  while (std::getline(in, line)) {
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
    last = line;
    ++n;
  }
  EXPECT_GT(n, 100u);
  EXPECT_EQ(last.rfind("{\"summary\":{\"conforms\":true", 0), 0u) << last;
}

TEST(ReplayCli, DivergenceExitsOneWithTheFirstOneExplained) {
  const Outcome r = run_cli("--role responder --scenario /dev/null " +
                            pcap("scenarios/negative_ack_across_gap.pcap"));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("!!! first divergence: QP 0x000012: at PSN 0x000033 uroce sent NAK (PSN "
                       "sequence error)"),
            std::string::npos)
      << r.out;
}

TEST(ReplayCli, BadUsageAndBadInputExitTwoWithOneLine) {
  EXPECT_EQ(run_cli("").code, 2);
  EXPECT_EQ(run_cli("--role sideways x.pcap").code, 2);
  EXPECT_EQ(run_cli("--qpn zz --role responder x.pcap").code, 2);
  EXPECT_EQ(run_cli("--help").code, 0);
  auto one_line = [](const Outcome& r) {
    return r.code == 2 && std::count(r.err.begin(), r.err.end(), '\n') == 1;
  };
  EXPECT_TRUE(one_line(run_cli("--role responder /nonexistent.pcap")));
  const std::string garbage = tmp_path("garbage.pcap");
  std::ofstream(garbage) << "this is not a capture at all, just some text\n";
  EXPECT_TRUE(one_line(run_cli("--role responder " + garbage)));
  // Truncated in the middle of a record.
  const std::string trunc = tmp_path("trunc.pcap");
  {
    std::ifstream in(pcap("kernel-rxe-write_bw_64.pcap"), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::ofstream(trunc, std::ios::binary) << ss.str().substr(0, 3000);
  }
  const Outcome t = run_cli("--role responder " + trunc);
  EXPECT_TRUE(one_line(t)) << t.err;
  EXPECT_NE(t.err.find("truncated"), std::string::npos) << t.err;
  // No RoCE at all: only the non-RoCE frames of a capture.
  const std::string tcp = tmp_path("tcp.pcap");
  mutate(pcap("kernel-rxe-write_bw_64.pcap"), tcp, [](size_t, wire::RoceHeaders&, std::vector<uint8_t>&) { return false; });
  {
    drivers::PcapReader rd(pcap("kernel-rxe-write_bw_64.pcap"));
    drivers::PcapWriter wr(tcp);
    drivers::PcapRecord rec;
    while (rd.next(rec)) {
      wire::ParsedPacket p;
      if (wire::parse_frame(rec.data, p) != wire::ParseError::kOk) wr.write(rec.ts_ns, rec.data);
    }
  }
  const Outcome n = run_cli("--role responder " + tcp);
  EXPECT_TRUE(one_line(n)) << n.err;
  EXPECT_NE(n.err.find("no RoCEv2 packets"), std::string::npos);
  // A QP that is not there.
  const Outcome q = run_cli("--role responder --qpn 0x99 " + pcap("kernel-rxe-write_bw_64.pcap"));
  EXPECT_TRUE(one_line(q)) << q.err;
}

}  // namespace
}  // namespace uroce::replay

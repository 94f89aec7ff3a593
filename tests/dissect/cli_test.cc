// End-to-end: the built uroce-dissect binary on good, broken and missing captures.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "test_util.h"
#include "wire/packet.h"

namespace uroce::dissect {
namespace {

using test::pcap_path;
using test::run_tool;
using test::split_lines;

TEST(DissectCli, GoodCaptureOneLinePerPacketAndSummary) {
  const auto r = run_tool({pcap_path("kernel-rxe-rnr_send_bw_64-head.pcap")});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 141u);  // tshark: 140 frames, plus the summary
  EXPECT_EQ(lines[0], "    1  0.000000  ARP who-has 10.77.0.11 tell 10.77.0.12");
  EXPECT_EQ(lines[62],
            "   63  0.158085  10.77.0.11 → 10.77.0.12  RC_ACKNOWLEDGE               qp=0x000011 "
            "psn=597903 RNR-NAK 0.64ms msn=2 payload=0  ICRC ok");
  EXPECT_EQ(lines[63],
            "   64  0.158236  10.77.0.11 → 10.77.0.12  RC_ACKNOWLEDGE               qp=0x000011 "
            "psn=597903 NAK PSN-seq-error msn=2 payload=0  ICRC ok");
  EXPECT_NE(lines[81].find("psn=597903 ackreq payload=64  ICRC ok  [retransmission]  [resend "
                           "after 8.154 ms]"),
            std::string::npos)
      << lines[81];
  // tshark: 115 InfiniBand frames (107 opcode 4, 8 opcode 0x11), 25 others.
  EXPECT_EQ(lines[140],
            "summary: 140 packets: RoCE 115 (bad ICRC 0), other 25, malformed 0; RC_SEND_ONLY 107, "
            "RC_ACKNOWLEDGE 8");
}

TEST(DissectCli, LossyCaptureTagsGaps) {
  // tshark: request PSN 2200680 is missing before frame 123 (2200679 -> 2200681).
  const auto r = run_tool({pcap_path("kernel-rxe-lossy_write_bw_4096-head.pcap")});
  EXPECT_EQ(r.status, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 201u);
  EXPECT_NE(lines[122].find("psn=2200681 ackreq payload=1024  ICRC ok  [gap: 1 missing]"),
            std::string::npos)
      << lines[122];
  size_t tagged = 0;
  for (const auto& l : lines) tagged += l.find("[gap: ") != std::string::npos ? 1 : 0;
  EXPECT_EQ(tagged, 4u);
}

TEST(DissectCli, ExplainModeTeachesAndSummarisesPerQp) {
  const auto r = run_tool({"--explain", pcap_path("kernel-rxe-rnr_send_bw_64-head.pcap")});
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* expected : {
           "RoCEv2 in brief",
           "BTH.AckReq          1                  — the requester asks the responder to "
           "acknowledge this packet",
           "UDP.DstPort         4791               — 4791 is the IANA port for RoCEv2",
           "AETH.Syndrome       0x2c               — RNR NAK, timer code 12 (0.640 ms)",
           "AETH.Syndrome       0x60               — NAK, code 0 (PSN sequence error): the "
           "responder expected PSN 597903",
           "IPv4.Flags          DF                 — don't fragment",
           "Per-QP summary",
           "#63 PSN 597903, timer 0.640 ms: resent after 8.154 ms (#82)",
           "#97 PSN 597905, timer 0.640 ms: no resend seen before the capture ends",
           "2 NAK (2 PSN sequence error), 2 RNR NAK",
       }) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << "missing: " << expected;
  }
}

TEST(DissectCli, ExplainReadCaptureMatchesSegments) {
  const auto r = run_tool({"--explain", pcap_path("kernel-rxe-read_bw_4096-head.pcap")});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("RETH.DMALen         4096               — bytes to read: the response "
                       "takes ceil(4096 / 1024) = 4 packets"),
            std::string::npos);
  EXPECT_NE(r.out.find("READ response segment 3/4 for READ request PSN 13676472"),
            std::string::npos);
  EXPECT_NE(r.out.find("READs       35 requests, 26 answered, 25 complete"), std::string::npos);
}

TEST(DissectCli, JsonEveryLineIsValidJsonAndTheSummaryCounts) {
  for (const char* capture :
       {"kernel-rxe-rnr_send_bw_64-head.pcap", "kernel-rxe-read_bw_4096-head.pcap",
        "kernel-rxe-atomic_bw_cas.pcap", "kernel-rxe-ud_pingpong-head.pcap"}) {
    const auto r = run_tool({"--json", pcap_path(capture)});
    EXPECT_EQ(r.status, 0) << r.err;
    const auto lines = split_lines(r.out);
    ASSERT_FALSE(lines.empty());
    for (size_t i = 0; i < lines.size(); ++i)
      ASSERT_TRUE(test::JsonCheck::valid(lines[i]))
          << capture << " line " << i + 1 << ": " << lines[i];
    EXPECT_EQ(lines.back().rfind("{\"summary\":{", 0), 0u) << lines.back();
  }
  const auto r = run_tool({"--json", pcap_path("kernel-rxe-rnr_send_bw_64-head.pcap")});
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 141u);
  // Frame 63: the RNR NAK with all its numbers as numbers.
  EXPECT_NE(lines[62].find("\"index\":63,\"time\":0.158085,"), std::string::npos) << lines[62];
  EXPECT_NE(lines[62].find("\"aeth\":{\"syndrome\":44,\"kind\":\"RNR NAK\",\"rnr_timer_code\":12,"
                           "\"rnr_timer_ns\":640000,\"msn\":2}"),
            std::string::npos)
      << lines[62];
  EXPECT_NE(lines[62].find("\"psn\":597903"), std::string::npos);
  EXPECT_NE(lines[62].find("\"tracking\":[{\"kind\":\"rnr_nak\""), std::string::npos);
  EXPECT_NE(lines[140].find("\"packets\":140,\"roce\":115,\"other\":25,\"malformed\":0,"
                            "\"bad_icrc\":0"),
            std::string::npos)
      << lines[140];
  EXPECT_NE(lines[140].find("\"opcodes\":{\"RC_SEND_ONLY\":107,\"RC_ACKNOWLEDGE\":8}"),
            std::string::npos);

  // The same check with Python's parser, when there is one.
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") == 0) {
    test::TempDir tmp;
    const std::string f = tmp.path("out.jsonl");
    std::ofstream(f) << r.out;
    const std::string cmd =
        "python3 -c 'import json,sys;[json.loads(l) for l in sys.stdin]' <'" + f + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
}

/// Byte offset where record `n` (1-based) of a classic pcap file starts.
size_t record_offset(const std::string& bytes, size_t n) {
  size_t off = 24;
  for (size_t i = 1; i < n; ++i) {
    uint32_t incl = 0;
    std::memcpy(&incl, bytes.data() + off + 8, 4);
    off += 16 + incl;
  }
  return off;
}

TEST(DissectCli, TruncatedCaptureExitsOneAfterPrintingWhatItRead) {
  const std::string full = test::read_file(pcap_path("kernel-rxe-write_bw_64.pcap"));
  ASSERT_EQ(full.substr(0, 4), std::string("\xd4\xc3\xb2\xa1", 4));  // classic pcap
  test::TempDir tmp;
  const std::string cut = tmp.path("cut.pcap");
  // Record 58's header is complete; 12 bytes of its data follow, then the file ends.
  std::ofstream(cut, std::ios::binary) << full.substr(0, record_offset(full, 58) + 16 + 12);
  const auto r = run_tool({cut});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(
      r.err.rfind("uroce-dissect: " + cut + ": capture is truncated after packet 57 (libpcap: ", 0),
      0u)
      << r.err;
  EXPECT_NE(r.err.find("only got 12"), std::string::npos) << r.err;
  EXPECT_EQ(split_lines(r.err).size(), 1u);
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 58u);  // 57 packets and the summary
  EXPECT_EQ(lines[57].rfind("summary: 57 packets", 0), 0u) << lines[57];

  const auto j = run_tool({"--json", cut});
  EXPECT_EQ(j.status, 1);
  EXPECT_NE(split_lines(j.out).back().find("\"complete\":false"), std::string::npos);
}

TEST(DissectCli, NotACaptureExitsOne) {
  test::TempDir tmp;
  const std::string f = tmp.path("notes.txt");
  std::ofstream(f) << "this is not a capture, just some text that is long enough\n";
  const auto r = run_tool({f});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("uroce-dissect: " + f + ": not a pcap or pcapng capture", 0), 0u) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(DissectCli, MissingFileExitsOne) {
  const auto r = run_tool({"/nonexistent/dir/capture.pcap"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err,
            "uroce-dissect: /nonexistent/dir/capture.pcap: cannot open: No such file or "
            "directory\n");
}

TEST(DissectCli, NonEthernetLinkTypeExitsOne) {
  test::TempDir tmp;
  const std::string f = tmp.path("raw.pcap");
  test::write_pcap(f, 101, {});  // LINKTYPE_RAW
  const auto r = run_tool({f});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("raw IP capture, not Ethernet"), std::string::npos) << r.err;
}

TEST(DissectCli, FlippedPayloadByteSaysIcrcBad) {
  auto frames = test::read_frames(pcap_path("kernel-rxe-rnr_send_bw_64-head.pcap"));
  frames.at(25).bytes.at(14 + 20 + 8 + 12 + 30) ^= 0x80;  // frame 26: a SEND_ONLY payload byte
  test::TempDir tmp;
  const std::string f = tmp.path("flipped.pcap");
  {
    drivers::PcapWriter w(f);
    ASSERT_TRUE(w.ok()) << w.error();
    for (const auto& fr : frames) w.write(fr.ts_ns, fr.bytes);
  }
  const auto r = run_tool({f});
  EXPECT_EQ(r.status, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 141u);
  // tshark shows frame 26's ICRC bytes as 0x2105bd26, i.e. the CRC value 0x26bd0521.
  EXPECT_NE(lines[25].find("psn=597901 ackreq payload=64  ICRC BAD (wire 0x26bd0521 calc 0x"),
            std::string::npos)
      << lines[25];
  EXPECT_NE(lines[26].find("ICRC ok"), std::string::npos);
  EXPECT_NE(lines[140].find("RoCE 115 (bad ICRC 1)"), std::string::npos) << lines[140];
}

TEST(DissectCli, SnappedCaptureIsParsedAsFarAsPossible) {
  auto frames = test::read_frames(pcap_path("kernel-rxe-read_bw_4096-head.pcap"));
  std::vector<test::RawFrame> snapped;
  for (size_t i : {0u, 46u, 48u}) {  // frame 1 (ARP), 47 (READ_RESPONSE_FIRST), 49 (MIDDLE)
    test::RawFrame f = frames.at(i);
    f.orig_len = static_cast<uint32_t>(f.bytes.size());
    if (f.bytes.size() > 64) f.bytes.resize(i == 48 ? 50 : 64);
    snapped.push_back(f);
  }
  test::TempDir tmp;
  const std::string path = tmp.path("snapped.pcap");
  test::write_pcap(path, 1, snapped);
  const auto r = run_tool({path});
  EXPECT_EQ(r.status, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[1].find("RC_RDMA_READ_RESPONSE_FIRST  qp=0x000011 psn=13676472 ACK msn=1 "
                          "payload=1024  ICRC not captured (truncated, snapped: captured 64 of "
                          "1086 bytes)"),
            std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("MALFORMED truncated"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find("RoCE 1 (bad ICRC 0), other 1, malformed 1 (truncated 1), snapped 2"),
            std::string::npos)
      << lines[3];
}

TEST(DissectCli, CmMadsInJsonAndExplain) {
  test::TempDir tmp;
  const std::string path = tmp.path("cm.pcap");
  const auto req = test::qp1_frame(test::cm_req_mad(), 100);
  const auto rej = test::qp1_frame(test::cm_rej_mad(), 101);
  test::write_pcap(path, 1,
                   {{req, static_cast<uint32_t>(req.size()), 1'000'000},
                    {rej, static_cast<uint32_t>(rej.size()), 1'250'000}});

  const auto j = run_tool({"--json", path});
  EXPECT_EQ(j.status, 0) << j.err;
  const auto lines = split_lines(j.out);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) EXPECT_TRUE(test::JsonCheck::valid(l)) << l;
  for (const char* expected : {
           R"("cm":{"message":"REQ","attr_id":16,"tid":42949672961,"method":3,)",
           R"("local_comm_id":2591767553,"service_id":17177903,"port_space":"TCP","port":7471,)",
           R"("local_qpn":17,"starting_psn":3820380,"responder_resources":1,"initiator_depth":1,)",
           R"("retry_count":7,"rnr_retry_count":7,"max_cm_retries":15,"pkey":65535,"path_mtu":3,)",
           R"("local_gid":"::ffff:10.77.0.12","remote_gid":"::ffff:10.77.0.11",)",
           R"("cma":{"ip_version":4,"src":"10.77.0.12","src_port":46870,"dst":"10.77.0.11",)"
           R"("dst_port":7471})",
       }) {
    EXPECT_NE(lines[0].find(expected), std::string::npos) << "missing: " << expected;
  }
  EXPECT_NE(lines[1].find(R"("cm":{"message":"REJ","attr_id":18,)"), std::string::npos);
  EXPECT_NE(lines[1].find(R"("local_comm_id":0,"remote_comm_id":2591767553,"msg_rejected":"REQ",)"
                          R"("reason":28,"reason_name":"consumer reject")"),
            std::string::npos)
      << lines[1];

  const auto e = run_tool({"--explain", path});
  EXPECT_EQ(e.status, 0) << e.err;
  for (const char* expected : {
           "DETH.Q_Key          0x80010000         — queue key: 0x80010000 is the well-known "
           "Q_Key of QP1",
           "MAD.AttributeID     0x0010 REQ         — CM REQ: connection request",
           "CM.ServiceID        0x0000000001061d2f — service ID of rdma_cm: port space TCP "
           "(0x0106), port 7471",
           "CM.LocalQPN         0x000011           — the QP the sender will use",
           "CM.StartingPSN      3820380 ",
           "CM.RespResources    1 ",
           "CM.PathMTU          3 (1024 bytes) ",
           "CMA.Src             10.77.0.12:46870 ",
           "CMA.Dst             10.77.0.11:7471 ",
           "MAD.AttributeID     0x0012 REJ ",
           "CM.RemoteCommID     0x9a7b3c01 ",
           "CM.Reason           28 consumer reject — the application refused the connection",
       }) {
    EXPECT_NE(e.out.find(expected), std::string::npos) << "missing: " << expected;
  }
}

TEST(DissectCli, UsageErrorsExitTwoAndHelpExitsZero) {
  const auto none = run_tool({});
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("usage: uroce-dissect"), std::string::npos);
  const auto bad = run_tool({"--frobnicate", pcap_path("kernel-rxe-write_bw_64.pcap")});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("unknown option '--frobnicate'"), std::string::npos);
  const auto both = run_tool({"--json", "--explain", pcap_path("kernel-rxe-write_bw_64.pcap")});
  EXPECT_EQ(both.status, 2);
  const auto two = run_tool({pcap_path("kernel-rxe-write_bw_64.pcap"), "x.pcap"});
  EXPECT_EQ(two.status, 2);
  const auto help = run_tool({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out.rfind("usage: uroce-dissect", 0), 0u);
  EXPECT_EQ(help.err, "");
}

TEST(DissectCli, LadderWritesOneSelfContainedPage) {
  const std::string cap = pcap_path("kernel-rxe-lossy_send_bw_4096-head.pcap");
  EXPECT_EQ(run_tool({"--ladder"}).status, 2);
  const auto mixed = run_tool({"--ladder", "x.html", "--json", cap});
  EXPECT_EQ(mixed.status, 2);
  EXPECT_NE(mixed.err.find("--ladder cannot be combined"), std::string::npos) << mixed.err;
  const auto nowhere = run_tool({"--ladder", "/nonexistent-dir/x.html", cap});
  EXPECT_EQ(nowhere.status, 1);
  EXPECT_NE(nowhere.err.find("cannot write the page"), std::string::npos) << nowhere.err;

  const std::string page = ::testing::TempDir() + "/ladder_cli.html";
  const auto ok = run_tool({"--ladder", page, cap});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("wrote " + page), std::string::npos);
  std::ifstream in(page);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // Opens offline: nothing is fetched (the only URL is the SVG namespace's name).
  for (const char* fetch : {"src=", "href=", "https://", "@import", "fetch("})
    EXPECT_EQ(html.find(fetch), std::string::npos) << fetch;
  size_t urls = 0;
  for (size_t at = html.find("http://"); at != std::string::npos; at = html.find("http://", at + 1)) {
    EXPECT_EQ(html.compare(at, 26, "http://www.w3.org/2000/svg"), 0);
    ++urls;
  }
  EXPECT_EQ(urls, 1u);
  // The NAK's frame is in the page's data; the data's own "</" cannot end its script early:
  // exactly the page's three script elements close.
  EXPECT_NE(html.find("\"i\":117,"), std::string::npos);
  size_t closes = 0;
  for (size_t at = html.find("</script>"); at != std::string::npos; at = html.find("</script>", at + 1))
    ++closes;
  EXPECT_EQ(closes, 3u);
  std::remove(page.c_str());
}

TEST(DissectCli, LadderNeverDestroysItsInputOrAnEarlierPage) {
  const std::string dir = ::testing::TempDir() + "/ladder_keep";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string cap = dir + "/victim.pcap";
  std::filesystem::copy_file(pcap_path("kernel-rxe-atomic_bw_cas.pcap"), cap);
  const auto size = std::filesystem::file_size(cap);
  // The two arguments swapped: refused before anything is opened for writing.
  const auto swapped = run_tool({"--ladder", cap, dir + "/new.html"});
  EXPECT_EQ(swapped.status, 2);
  EXPECT_NE(swapped.err.find("must end in .html or .svg (the capture comes last"), std::string::npos)
      << swapped.err;
  EXPECT_EQ(std::filesystem::file_size(cap), size) << "the capture survives";
  EXPECT_FALSE(std::filesystem::exists(dir + "/new.html"));
  // A page, then a run whose capture is junk: the page stays as it was.
  const std::string page = dir + "/page.html";
  ASSERT_EQ(run_tool({"--ladder", page, cap}).status, 0);
  const auto page_size = std::filesystem::file_size(page);
  ASSERT_GT(page_size, 0u);
  std::ofstream(dir + "/junk.pcap") << "not a capture";
  EXPECT_EQ(run_tool({"--ladder", page, dir + "/junk.pcap"}).status, 1);
  EXPECT_EQ(std::filesystem::file_size(page), page_size) << "the earlier page survives";
  const std::string same = dir + "/same.html";
  std::filesystem::copy_file(cap, same);
  EXPECT_EQ(run_tool({"--ladder", same, same}).status, 2) << "OUT is the capture itself";
  EXPECT_EQ(std::filesystem::file_size(same), size);
  // Nothing else left in the directory (the page is written beside OUT, then renamed).
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 4u) << "victim.pcap, page.html, junk.pcap, same.html";
  std::filesystem::remove_all(dir);
}

TEST(DissectCli, APayloadLongerThanAnyRoceMtuIsMalformed) {
  // Headers and ICRC agree, but no path MTU is larger than 4096 bytes: the second frame is
  // malformed, whatever its ICRC says.
  std::vector<test::RawFrame> frames;
  for (size_t payload : {size_t{4096}, size_t{59940}}) {
    wire::RoceHeaders h;
    h.ip4.src = {10, 77, 0, 12};
    h.ip4.dst = {10, 77, 0, 11};
    h.bth.opcode = wire::opcode::kRcSendOnly;
    h.bth.dest_qp = 0x11;
    std::vector<uint8_t> frame(65536);
    frame.resize(wire::build_frame(h, std::vector<uint8_t>(payload, 0x5A), frame));
    ASSERT_GT(frame.size(), payload);
    frames.push_back({frame, static_cast<uint32_t>(frame.size()), 1000 * frames.size()});
  }
  test::TempDir dir;
  const std::string cap = dir.path("oversize.pcap");
  test::write_pcap(cap, 1, frames);
  const auto r = run_tool({cap});
  EXPECT_EQ(r.status, 0) << r.err;
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_NE(lines[0].find("payload=4096  ICRC ok"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("MALFORMED bad_payload_len"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("longer than the largest RoCE MTU (4096)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("malformed 1"), std::string::npos) << lines[2];
}

TEST(DissectCli, AVerbsFileWithLinesThatAreNoEventsIsSaidSo) {
  test::TempDir dir;
  const std::string cap = dir.path("v.pcap");
  std::filesystem::copy_file(pcap_path("uroce-rc_pingpong-verbs.pcap"), cap);
  std::filesystem::copy_file(pcap_path("uroce-rc_pingpong-verbs.pcap.verbs"), cap + ".verbs");
  const auto good = run_tool({"--ladder", dir.path("good.html"), cap});
  ASSERT_EQ(good.status, 0) << good.err;
  EXPECT_EQ(good.err, "");
  std::ofstream(cap + ".verbs", std::ios::app) << "junk\n12345\tpost_send\t17\n";
  const auto bad = run_tool({"--ladder", dir.path("bad.html"), cap});
  ASSERT_EQ(bad.status, 0) << bad.err;
  EXPECT_NE(bad.err.find("v.pcap.verbs: 2 lines are no verbs event (the first: line "), std::string::npos)
      << bad.err;
  std::ofstream(cap + ".verbs") << "12345\tpost_send\t17\t1\tSEND\t8\t-\t5\n";
  const auto nodev = run_tool({"--ladder", dir.path("nodev.html"), cap});
  EXPECT_NE(nodev.err.find("1 line is no verbs event (the first: line 1, and no device line came first)"),
            std::string::npos)
      << nodev.err;
}

TEST(DissectCli, LadderShowsTheRateLimitsTheApplicationSet) {
  // The .verbs lines the provider writes for ibv_modify_qp_rate_limit (rate_limit QPN - -
  // KBPS BURST -): the ladder's verbs lane says each.
  test::TempDir dir;
  const std::string cap = dir.path("rl.pcap");
  std::filesystem::copy_file(pcap_path("uroce-rc_pingpong-verbs.pcap"), cap);
  std::filesystem::copy_file(pcap_path("uroce-rc_pingpong-verbs.pcap.verbs"), cap + ".verbs");
  std::string first_ts;
  {
    std::ifstream in(cap + ".verbs");
    for (std::string line; std::getline(in, line) && first_ts.empty();)
      if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0])))
        first_ts = line.substr(0, line.find('\t'));
  }
  ASSERT_FALSE(first_ts.empty());
  std::ofstream(cap + ".verbs", std::ios::app)
      << first_ts << "\trate_limit\t17\t-\t-\t1000\t4096\t-\n"
      << first_ts << "\trate_limit\t17\t-\t-\t0\t0\t-\n";
  const std::string svg = dir.path("rl.svg");
  const auto ok = run_tool({"--ladder", svg, cap});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.err, "");
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("rate limit: QP 0x000011 at most 1000 kb/s (bursts of 4096 bytes)"),
            std::string::npos);
  EXPECT_NE(text.find("rate limit of QP 0x000011 lifted"), std::string::npos);
}

TEST(DissectCli, LadderShowsCongestionMarksCnpsAndDcqcnCuts) {
  // uroce's rdma_verify with 30 % of its packets marked CE on the way out (UROCE_FAULT=ce=0.3):
  // the peer answers with CNPs, and the .verbs file beside the capture has DCQCN's cuts.
  const std::string cap = pcap_path("uroce-dcqcn_cnp.pcap");
  const std::string svg = ::testing::TempDir() + "/ladder_dcqcn.svg";
  const auto ok = run_tool({"--ladder", svg, cap});
  ASSERT_EQ(ok.status, 0) << ok.err;
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const auto summary = run_tool({cap});
  ASSERT_NE(summary.out.find("CNP 7"), std::string::npos) << summary.out;
  EXPECT_EQ(count("<g class=\"pkt cnp\">"), 7u);  // the CNP colour, one arrow each
  // Every packet marked CE says so on its arrow (the capture is taken after the marking).
  const auto json = run_tool({"--json", cap});
  size_t marked = 0;
  for (size_t at = json.out.find("\"ecn\":3,"); at != std::string::npos;
       at = json.out.find("\"ecn\":3,", at + 1))
    ++marked;
  EXPECT_EQ(marked, 13u);
  EXPECT_EQ(count("ECN=CE"), marked);
  EXPECT_GE(count("DCQCN cut: QP 0x000011 at "), 7u);
  std::remove(svg.c_str());
}

TEST(DissectCli, LadderAsSvgHasAnArrowPerPacket) {
  const std::string cap = pcap_path("kernel-rxe-lossy_send_bw_4096-head.pcap");
  const std::string svg = ::testing::TempDir() + "/ladder_cli.svg";
  const auto ok = run_tool({"--ladder", svg, cap});
  ASSERT_EQ(ok.status, 0) << ok.err;
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 7), "</svg>\n");
  EXPECT_EQ(text.find("<script"), std::string::npos);  // a picture, nothing runs
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  // 176 RoCE packets in this capture (its summary line): one arrow each; the one NAK and the
  // 37 retransmissions keep their classes.
  EXPECT_EQ(count("<g class=\"pkt "), 176u);
  EXPECT_EQ(count("<g class=\"pkt nak\">"), 1u);
  EXPECT_EQ(count("<g class=\"pkt retx\">"), 37u);
  std::remove(svg.c_str());
}

}  // namespace
}  // namespace uroce::dissect

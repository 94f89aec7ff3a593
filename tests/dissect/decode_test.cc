// Frame decoding and the one-line format, checked against facts read from the captures with
// tshark (frame numbers, opcodes, PSNs, RETH fields, ICRC bytes).
#include <algorithm>

#include <gtest/gtest.h>

#include "dissect/json.h"
#include "test_util.h"
#include "wire/addr.h"
#include "wire/ipv4.h"
#include "wire/packet.h"

namespace uroce::dissect {
namespace {

using test::pcap_path;
using test::run_capture;

TEST(DissectDecode, WriteBw64CountsMatchTshark) {
  // tshark: 422 frames, 400 InfiniBand (200 opcode 0x0a WRITE_ONLY + 200 opcode 0x11 ACK),
  // 2 ARP and 20 TCP.
  const auto run = run_capture(pcap_path("kernel-rxe-write_bw_64.pcap"));
  ASSERT_TRUE(run.error.empty()) << run.error;
  EXPECT_EQ(run.counts.packets, 422u);
  EXPECT_EQ(run.counts.roce, 400u);
  EXPECT_EQ(run.counts.other, 22u);
  EXPECT_EQ(run.counts.malformed, 0u);
  EXPECT_EQ(run.counts.bad_icrc, 0u);
  EXPECT_EQ(run.counts.opcodes[wire::opcode::kRcWriteOnly], 200u);
  EXPECT_EQ(run.counts.opcodes[wire::opcode::kRcAck], 200u);
  uint64_t other_opcodes = 0;
  for (size_t op = 0; op < 256; ++op)
    if (op != wire::opcode::kRcWriteOnly && op != wire::opcode::kRcAck)
      other_opcodes += run.counts.opcodes[op];
  EXPECT_EQ(other_opcodes, 0u);
}

TEST(DissectDecode, WriteOnlyLineShowsEveryField) {
  // tshark frame 30: 10.77.0.12 -> 10.77.0.11, opcode 10, QP 0x000011, PSN 12481699, A=1,
  // RETH va 0x000055933e3b6200 rkey 0x0000027c len 64, time 1.123287, ICRC bytes 54 82 c0 69
  // (the CRC value, least significant byte first on the wire, is 0x69c08254).
  const auto run = run_capture(pcap_path("kernel-rxe-write_bw_64.pcap"));
  EXPECT_EQ(run.lines.at(30),
            "   30  1.123287  10.77.0.12 → 10.77.0.11  RC_RDMA_WRITE_ONLY           qp=0x000011 "
            "psn=12481699 ackreq RETH va=0x000055933e3b6200 rkey=0x0000027c dlen=64 payload=64  "
            "ICRC ok");
}

TEST(DissectDecode, NonRoceFramesAreShownBriefly) {
  // tshark frames 1-3 of the RNR capture: ARP request, ARP reply, TCP SYN 33854 -> 18515.
  const auto run = run_capture(pcap_path("kernel-rxe-rnr_send_bw_64-head.pcap"));
  EXPECT_EQ(run.lines.at(1), "    1  0.000000  ARP who-has 10.77.0.11 tell 10.77.0.12");
  EXPECT_EQ(run.lines.at(2), "    2  0.006129  ARP 10.77.0.11 is-at 52:54:00:77:00:11");
  EXPECT_EQ(run.lines.at(3),
            "    3  0.009326  TCP 10.77.0.12:33854 → 10.77.0.11:18515 [SYN] len 0");
  // tshark frame 17: PSH, ACK with 108 bytes of TCP payload.
  EXPECT_EQ(run.lines.at(17),
            "   17  0.120401  TCP 10.77.0.12:33854 → 10.77.0.11:18515 [PSH, ACK] len 108");
}

TEST(DissectDecode, AethCompactForms) {
  // tshark frames 38, 63, 64 of the RNR capture: syndromes 31, 44 (0x2c), 96 (0x60).
  const auto run = run_capture(pcap_path("kernel-rxe-rnr_send_bw_64-head.pcap"));
  EXPECT_NE(run.lines.at(38).find("psn=597901 ACK msn=1 "), std::string::npos) << run.lines.at(38);
  EXPECT_NE(run.lines.at(63).find("psn=597903 RNR-NAK 0.64ms msn=2 "), std::string::npos)
      << run.lines.at(63);
  EXPECT_NE(run.lines.at(64).find("psn=597903 NAK PSN-seq-error msn=2 "), std::string::npos)
      << run.lines.at(64);

  wire::AethRepr a;
  a.syndrome = wire::AethRepr::make_rnr_nak(12);
  a.msn = 7;
  EXPECT_EQ(aeth_compact(a), "RNR-NAK 0.64ms msn=7");
  a.syndrome = wire::AethRepr::make_nak(wire::NakCode::kRemoteAccessError);
  EXPECT_EQ(aeth_compact(a), "NAK remote-access-error msn=7");
  a.syndrome = wire::AethRepr::make_ack(5);  // credit code 5 = 6 credits (IBA table 44)
  EXPECT_EQ(aeth_compact(a), "ACK credits=6 msn=7");
}

TEST(DissectDecode, RnrTimerAndCreditTables) {
  // IBA table 45 (RNR timer) and table 44 (credits), spot values.
  EXPECT_EQ(rnr_timer_string(0), "655.36ms");
  EXPECT_EQ(rnr_timer_string(1), "0.01ms");
  EXPECT_EQ(rnr_timer_string(12), "0.64ms");
  EXPECT_EQ(rnr_timer_string(31), "491.52ms");
  EXPECT_EQ(credits_from_code(0), 0);
  EXPECT_EQ(credits_from_code(4), 4);
  EXPECT_EQ(credits_from_code(5), 6);
  EXPECT_EQ(credits_from_code(6), 8);
  EXPECT_EQ(credits_from_code(7), 12);
  EXPECT_EQ(credits_from_code(29), 24576);
  EXPECT_EQ(credits_from_code(30), 32768);
  EXPECT_EQ(credits_from_code(31), -1);
}

TEST(DissectDecode, UdDatagramShowsDeth) {
  // tshark frame 15 of ud_pingpong: Q_Key 0x11111111, source QP 0x000011, UDP length 1056
  // = 8 + 12 (BTH) + 8 (DETH) + 1024 + 4.
  const auto run = run_capture(pcap_path("kernel-rxe-ud_pingpong-head.pcap"));
  const std::string& l = run.lines.at(15);
  EXPECT_NE(l.find("UD_SEND_ONLY"), std::string::npos) << l;
  EXPECT_NE(l.find("DETH qkey=0x11111111 src-qp=0x000011 payload=1024  ICRC ok"), std::string::npos)
      << l;
  EXPECT_EQ(run.counts.opcodes[wire::opcode::kUdSendOnly], 106u);  // tshark: 106 opcode 100
}

/// The frame bytes of a capture's frame `index` (1-based).
test::RawFrame frame_of(const std::string& capture, size_t index) {
  return test::read_frames(pcap_path(capture)).at(index - 1);
}

TEST(DissectDecode, FlippedPayloadByteIsBadIcrcWithBothValues) {
  test::RawFrame f = frame_of("kernel-rxe-rnr_send_bw_64-head.pcap", 26);
  ASSERT_EQ(f.bytes.size(), 122u);
  f.bytes[14 + 20 + 8 + 12 + 5] ^= 0x01;  // a payload byte of the SEND_ONLY
  const Frame d = decode_frame(1, 0, f.bytes, f.orig_len);
  EXPECT_EQ(d.kind, FrameKind::kRoce);
  EXPECT_TRUE(d.icrc_bad());
  // tshark shows the frame's ICRC bytes as 0x2105bd26: CRC value 0x26bd0521.
  EXPECT_EQ(d.pkt.icrc_wire, 0x26bd0521u);
  EXPECT_NE(d.pkt.icrc_calc, 0x26bd0521u);
  const std::string line = format_line(d);
  EXPECT_NE(line.find(strf("ICRC BAD (wire 0x26bd0521 calc 0x%08x)", d.pkt.icrc_calc)),
            std::string::npos)
      << line;
  Counts c;
  c.add(d);
  EXPECT_EQ(c.roce, 1u);
  EXPECT_EQ(c.bad_icrc, 1u);
}

TEST(DissectDecode, SnappedRoceFrameKeepsItsHeaders) {
  // READ_RESPONSE_FIRST, tshark frame 47 of read_bw_4096: 1086 bytes, AETH msn 1.
  test::RawFrame f = frame_of("kernel-rxe-read_bw_4096-head.pcap", 47);
  ASSERT_EQ(f.bytes.size(), 1086u);
  f.bytes.resize(60);  // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 = 58 bytes of headers
  const Frame d = decode_frame(1, 0, f.bytes, 1086);
  EXPECT_TRUE(d.snapped());
  EXPECT_EQ(d.kind, FrameKind::kRoce);
  EXPECT_EQ(d.error, wire::ParseError::kTruncated);
  EXPECT_EQ(d.pkt.hdr.bth.opcode, wire::opcode::kRcReadResponseFirst);
  EXPECT_EQ(d.pkt.hdr.bth.psn, 13676472u);
  EXPECT_EQ(d.pkt.hdr.ext.aeth.msn, 1u);
  EXPECT_EQ(d.payload_len, 1024u);  // from the UDP length, not from the bytes captured
  const std::string line = format_line(d);
  EXPECT_NE(line.find("ICRC not captured (truncated, snapped: captured 60 of 1086 bytes)"),
            std::string::npos)
      << line;
}

TEST(DissectDecode, SnappedInsideTheBthIsMalformed) {
  test::RawFrame f = frame_of("kernel-rxe-read_bw_4096-head.pcap", 47);
  f.bytes.resize(50);  // 8 bytes of the 12-byte BTH
  const Frame d = decode_frame(1, 0, f.bytes, 1086);
  EXPECT_EQ(d.kind, FrameKind::kMalformed);
  EXPECT_EQ(d.error, wire::ParseError::kTruncated);
  EXPECT_EQ(d.pkt.reached, wire::Layer::kUdp);
  const std::string line = format_line(d);
  EXPECT_NE(line.find("10.77.0.11 → 10.77.0.12  MALFORMED truncated (frame ends before a header "
                      "or the ICRC) [snapped: captured 50 of 1086 bytes]; parsed: Ethernet, IPv4, "
                      "UDP 49441→4791"),
            std::string::npos)
      << line;
}

TEST(DissectDecode, SnappedTcpIsStillOtherTraffic) {
  test::RawFrame f = frame_of("kernel-rxe-rnr_send_bw_64-head.pcap", 17);  // TCP, 174 bytes
  f.bytes.resize(64);
  const Frame d = decode_frame(17, 0, f.bytes, 174);
  EXPECT_EQ(d.kind, FrameKind::kOther);
  EXPECT_EQ(d.brief, "TCP 10.77.0.12:33854 → 10.77.0.11:18515 [PSH, ACK] len 108");
}

TEST(DissectDecode, MalformedPadCountIsNamed) {
  // A SEND_FIRST must not be padded (IBA 9.2: only the last packet of a message is).
  test::RawFrame f = frame_of("kernel-rxe-send_bw_4096-head.pcap", 26);
  const Frame good = decode_frame(1, 0, f.bytes, f.orig_len);
  ASSERT_EQ(good.kind, FrameKind::kRoce);
  ASSERT_EQ(good.pkt.hdr.bth.opcode, wire::opcode::kRcSendFirst);
  f.bytes[14 + 20 + 8 + 1] |= 0x20;  // PadCnt = 2
  const Frame d = decode_frame(1, 0, f.bytes, f.orig_len);
  EXPECT_EQ(d.kind, FrameKind::kMalformed);
  EXPECT_EQ(d.error, wire::ParseError::kBadPad);
  const std::string line = format_line(d);
  EXPECT_NE(line.find("MALFORMED bad_pad ("), std::string::npos) << line;
  EXPECT_NE(line.find("BTH RC_SEND_FIRST qp=0x000011"), std::string::npos) << line;
}

TEST(DissectDecode, CmMadsOnQp1AreNamedWithTheirFields) {
  // The REQ's bytes are hand-written in test_util.h from IBA table 106.
  const auto req_bytes = test::qp1_frame(test::cm_req_mad(), 100);
  const Frame req = decode_frame(1, 0, req_bytes, static_cast<uint32_t>(req_bytes.size()));
  ASSERT_EQ(req.kind, FrameKind::kRoce);
  ASSERT_TRUE(req.icrc_ok());
  EXPECT_TRUE(is_qp1_datagram(req));
  const auto m = cm_message(req);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->attr_id(), wire::cm_attr::kReq);
  EXPECT_EQ(m->hdr.tid, 0x0000000a00000001u);
  const auto cma = cma_header(*m);
  ASSERT_TRUE(cma.has_value());
  EXPECT_EQ(cma->src_port, 46870);
  EXPECT_EQ(format_summary(req, false),
            "10.77.0.12 → 10.77.0.11  UD_SEND_ONLY qp=0x000001 psn=100 DETH qkey=0x80010000 "
            "src-qp=0x000001 payload=256 CM REQ comm=0x9a7b3c01 sid=TCP:7471 qpn=0x000011 "
            "psn=3820380 rr=1 id=1 mtu=1024 retry=7 rnr=7 pkey=0xffff "
            "ip=10.77.0.12:46870→10.77.0.11:7471  ICRC ok");

  const auto rej_bytes = test::qp1_frame(test::cm_rej_mad(), 101);
  const Frame rej = decode_frame(2, 0, rej_bytes, static_cast<uint32_t>(rej_bytes.size()));
  EXPECT_NE(format_line(rej).find("payload=256 CM REJ comm=0x00000000 remote=0x9a7b3c01 "
                                  "reason=28 (consumer reject) rejects=REQ  ICRC ok"),
            std::string::npos)
      << format_line(rej);
}

TEST(DissectDecode, Qp1PayloadsThatAreNotCmMessages) {
  // A subnet administration MAD (class 0x03, Get PathRecord) on QP1.
  std::vector<uint8_t> sa = test::from_hex("01 03 02 01 0000 0000 0000000000000001 0035 0000 "
                                           "00000000");
  sa.resize(256, 0);
  auto bytes = test::qp1_frame(sa, 1);
  Frame f = decode_frame(1, 0, bytes, static_cast<uint32_t>(bytes.size()));
  EXPECT_FALSE(cm_message(f).has_value());
  EXPECT_NE(format_line(f).find("payload=256 MAD class=0x03 method=0x01 attr=0x0035  ICRC ok"),
            std::string::npos)
      << format_line(f);
  // A CM LAP: known to be CM, not decoded.
  std::vector<uint8_t> lap = test::cm_rej_mad();
  lap[17] = 0x19;
  bytes = test::qp1_frame(lap, 2);
  f = decode_frame(1, 0, bytes, static_cast<uint32_t>(bytes.size()));
  EXPECT_NE(format_line(f).find("payload=256 CM LAP (not a message this tool decodes)  ICRC ok"),
            std::string::npos)
      << format_line(f);
  // A REQ snapped after 100 bytes of its MAD: named, not decoded.
  bytes = test::qp1_frame(test::cm_req_mad(), 3);
  const auto orig = static_cast<uint32_t>(bytes.size());
  bytes.resize(14 + 20 + 8 + 12 + 8 + 100);
  f = decode_frame(1, 0, bytes, orig);
  ASSERT_EQ(f.kind, FrameKind::kRoce);
  EXPECT_FALSE(cm_message(f).has_value());
  EXPECT_NE(format_line(f).find("payload=256 CM REQ (payload not captured)  ICRC not captured"),
            std::string::npos)
      << format_line(f);
  // The same REQ bytes sent to another QP are just a datagram.
  bytes = test::qp1_frame(test::cm_req_mad(), 4, 0x11);
  f = decode_frame(1, 0, bytes, static_cast<uint32_t>(bytes.size()));
  EXPECT_FALSE(is_qp1_datagram(f));
  EXPECT_FALSE(cm_message(f).has_value());
  EXPECT_EQ(format_line(f).find("CM "), std::string::npos) << format_line(f);
}

TEST(DissectDecode, ServiceIdStrings) {
  EXPECT_EQ(service_id_string(0x0000000001061d2f), "TCP:7471");
  EXPECT_EQ(service_id_string(0x0000000001111388), "UDP:5000");
  EXPECT_EQ(service_id_string(0x00000000013f0001), "IB:1");
  EXPECT_EQ(service_id_string(0x1000000000000001), "0x1000000000000001");
}

TEST(DissectJson, QuoteEscapesWhatJsonRequires) {
  std::string out;
  json_quote(out, "a\"b\\c\nd\x01 → e");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\nd\\u0001 → e\"");
  EXPECT_TRUE(test::JsonCheck::valid(out));
}

TEST(DissectJson, WriterPlacesCommasAndNests) {
  JsonWriter j;
  j.begin_object();
  j.field("a", uint32_t{1});
  j.field("b", "x");
  j.begin_object("c");
  j.field("d", true);
  j.field("e", int64_t{-5});
  j.end_object();
  j.begin_array("f");
  j.value(uint64_t{2});
  j.value("y");
  j.end_array();
  j.field_raw("t", "0.000001");
  j.end_object();
  EXPECT_EQ(j.str(), R"({"a":1,"b":"x","c":{"d":true,"e":-5},"f":[2,"y"],"t":0.000001})");
  EXPECT_TRUE(test::JsonCheck::valid(j.str()));
}

TEST(DissectJson, CheckerRejectsBrokenJson) {
  EXPECT_FALSE(test::JsonCheck::valid("{\"a\":1,}"));
  EXPECT_FALSE(test::JsonCheck::valid("{\"a\" 1}"));
  EXPECT_FALSE(test::JsonCheck::valid("\"tab\there\""));
  EXPECT_FALSE(test::JsonCheck::valid("[01]"));
  EXPECT_FALSE(test::JsonCheck::valid("{} {}"));
  EXPECT_TRUE(test::JsonCheck::valid(" [1, -2.5e3, \"\\u00e9\", null, {\"k\": []}] "));
}

// A frame as uroce's UDP-socket port shows it: the socket gives neither Ethernet addresses
// (made up from the IP ones) nor the IPv4 identification (0, DF): the kernel's rxe sent it
// with one of its own, so the ICRC only agrees once that is solved for.
test::RawFrame as_udp_port_shows(test::RawFrame f) {
  uint8_t* ip = f.bytes.data() + 14;
  const wire::MacAddr dst = wire::socket_port_mac(wire::ipv4_mapped_gid({ip[16], ip[17], ip[18], ip[19]}));
  const wire::MacAddr src = wire::socket_port_mac(wire::ipv4_mapped_gid({ip[12], ip[13], ip[14], ip[15]}));
  std::copy(dst.begin(), dst.end(), f.bytes.begin());
  std::copy(src.begin(), src.end(), f.bytes.begin() + 6);
  ip[4] = ip[5] = 0;
  ip[6] = 0x40;  // DF
  ip[10] = ip[11] = 0;
  const uint16_t csum = wire::internet_checksum({ip, 20});
  ip[10] = static_cast<uint8_t>(csum >> 8);
  ip[11] = static_cast<uint8_t>(csum);
  return f;
}

TEST(DissectDecode, TheUdpPortsFramesHaveTheirIdentificationSolvedFor) {
  const test::RawFrame orig = frame_of("kernel-rxe-rnr_send_bw_64-head.pcap", 26);
  const uint16_t ident = static_cast<uint16_t>(orig.bytes[14 + 4] << 8 | orig.bytes[14 + 5]);
  ASSERT_NE(ident, 0);  // rxe's own: what the socket hides
  const test::RawFrame f = as_udp_port_shows(orig);
  const Frame d = decode_frame(1, 0, f.bytes, f.orig_len);
  ASSERT_TRUE(d.icrc_ok()) << format_line(d);
  EXPECT_TRUE(d.ident_solved);
  EXPECT_EQ(d.pkt.hdr.ip4.ident, ident);
  EXPECT_NE(format_line(d).find(strf("ICRC ok (IPv4 ID 0x%04x solved for)", ident)),
            std::string::npos)
      << format_line(d);
  // The kernel's own frame needs nothing solved; one damaged in the payload stays bad.
  const Frame plain = decode_frame(1, 0, orig.bytes, orig.orig_len);
  EXPECT_TRUE(plain.icrc_ok());
  EXPECT_FALSE(plain.ident_solved);
  test::RawFrame bad = f;
  bad.bytes[14 + 20 + 8 + 12 + 5] ^= 0x01;
  const Frame b = decode_frame(1, 0, bad.bytes, bad.orig_len);
  EXPECT_TRUE(b.icrc_bad());
  EXPECT_FALSE(b.ident_solved);
}

TEST(DissectDecode, OnlyTheUdpPortsFramesAreSolvedFor) {
  // The same hidden identification behind ordinary Ethernet addresses: a damaged packet.
  const test::RawFrame orig = frame_of("kernel-rxe-rnr_send_bw_64-head.pcap", 26);
  test::RawFrame f = as_udp_port_shows(orig);
  std::copy(orig.bytes.begin(), orig.bytes.begin() + 12, f.bytes.begin());
  const Frame d = decode_frame(1, 0, f.bytes, f.orig_len);
  EXPECT_TRUE(d.icrc_bad());
  EXPECT_FALSE(d.ident_solved);
}

}  // namespace
}  // namespace uroce::dissect

// Per-QP tracking over the kernel captures, with expectations taken from tshark listings of
// the same files (frame numbers, PSNs, AETH syndromes), and over synthetic frames for the
// cases the captures do not contain (PSN wrap, an unknown MTU).
#include <gtest/gtest.h>

#include "test_util.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::dissect {
namespace {

using test::pcap_path;
using test::run_capture;

TEST(DissectTracker, RnrCaptureShowsRnrNaksSequenceNaksAndTheWait) {
  // tshark: RNR NAKs (syndrome 0x2c = RNR, timer code 12) in frames 63 (PSN 597903) and 97
  // (PSN 597905); PSN-sequence-error NAKs (0x60) in frames 64 and 98 for the same PSNs;
  // PSN 597903 is sent again in frame 82, 0.166239 - 0.158085 = 8.154 ms after frame 63.
  const auto run = run_capture(pcap_path("kernel-rxe-rnr_send_bw_64-head.pcap"));
  ASSERT_EQ(run.tracker.streams().size(), 1u);
  const RequestStream* s = run.stream("10.77.0.12", "10.77.0.11", 0x11);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rnr_naks, 2u);
  EXPECT_EQ(s->naks[0], 2u);  // PSN sequence error
  EXPECT_EQ(s->nak_total(), 2u);
  EXPECT_EQ(s->acks, 4u);  // frames 38, 62, 95, 96
  EXPECT_EQ(s->req_packets, 107u);
  EXPECT_EQ(s->retransmitted, 50u);  // request PSNs at or below the highest seen so far
  EXPECT_EQ(s->new_packets, 57u);    // PSN 597901..597957
  EXPECT_EQ(s->gaps, 0u);
  EXPECT_EQ(s->first_psn.value(), 597901u);
  EXPECT_EQ(s->last_psn().value(), 597957u);

  ASSERT_EQ(s->rnr.size(), 2u);
  EXPECT_EQ(s->rnr[0].nak_frame, 63u);
  EXPECT_EQ(s->rnr[0].psn.value(), 597903u);
  EXPECT_EQ(s->rnr[0].timer_code, 12u);
  EXPECT_EQ(wire::rnr_timer_ns(s->rnr[0].timer_code), 640'000u);
  EXPECT_TRUE(s->rnr[0].resent);
  EXPECT_EQ(s->rnr[0].resend_frame, 82u);
  EXPECT_EQ(s->rnr[0].wait_ns, 8'154'000);
  EXPECT_EQ(s->rnr[1].nak_frame, 97u);
  EXPECT_EQ(s->rnr[1].psn.value(), 597905u);
  EXPECT_FALSE(s->rnr[1].resent);  // the capture ends before PSN 597905 is sent again

  EXPECT_TRUE(run.has_note(63, NoteKind::kRnrNak, "PSN 597903"));
  EXPECT_TRUE(run.has_note(63, NoteKind::kRnrNak, "at least 0.640 ms (timer code 12)"));
  EXPECT_TRUE(run.has_note(64, NoteKind::kNak, "PSN sequence error"));
  EXPECT_TRUE(run.has_note(64, NoteKind::kNak, "expected PSN 597903"));
  EXPECT_TRUE(run.has_note(64, NoteKind::kNak, "refused with the RNR NAK in #63"));
  EXPECT_TRUE(run.has_note(82, NoteKind::kRetransmission, "PSN 597903"));
  EXPECT_TRUE(run.has_note(82, NoteKind::kResend, "RNR NAK in #63: waited 8.154 ms"));
  EXPECT_TRUE(run.has_note(38, NoteKind::kAck, "ACK of PSN 597901"));
  EXPECT_TRUE(run.has_note(62, NoteKind::kAck, "MSN 2: 1 more message completed"));
}

TEST(DissectTracker, CmCaptureFollowsTheConnectionAndChecksItsFirstPsns) {
  // tshark / the one-line output: REQ #3 (10.77.0.12 QP 0x11, PSN 5981128), REP #4
  // (10.77.0.11 QP 0x11, PSN 13111208), RTU #5; the client's first SEND #6 carries PSN
  // 13111208, the server's first READ request #8 PSN 5981128; DREQ #76, DREP #77.
  const auto run = run_capture(pcap_path("kernel-rxe-rping_cm.pcap"));
  ASSERT_EQ(run.tracker.connections().size(), 1u);
  const CmConnection& c = run.tracker.connections()[0];
  EXPECT_EQ(c.active_qpn, 0x11u);
  EXPECT_EQ(c.passive_qpn, 0x11u);
  EXPECT_EQ(c.req_psn, 5981128u);
  EXPECT_EQ(c.rep_psn, 13111208u);
  EXPECT_EQ(c.state, CmConnection::State::kClosed);
  EXPECT_TRUE(run.has_note(3, NoteKind::kConnection, "asks 10.77.0.11 for service TCP:7174"));
  EXPECT_TRUE(run.has_note(4, NoteKind::kConnection, "the active side sends from PSN 13111208"));
  EXPECT_TRUE(run.has_note(5, NoteKind::kConnection, "established"));
  EXPECT_TRUE(run.has_note(6, NoteKind::kConnection, "first PSN 13111208, as the CM's REP of #4"));
  EXPECT_TRUE(run.has_note(8, NoteKind::kConnection, "first PSN 5981128, as the CM's REQ of #3"));
  EXPECT_TRUE(run.has_note(76, NoteKind::kConnection, "disconnects"));
  EXPECT_TRUE(run.has_note(77, NoteKind::kConnection, "disconnected"));
  // QP1's datagrams are the CM's, not a UD request stream of their own.
  EXPECT_EQ(run.stream("10.77.0.12", "10.77.0.11", 1), nullptr);
}

TEST(DissectTracker, AFirstPsnOtherThanTheCmAnnouncedIsPointedOut) {
  // The REP's starting PSN changed (and the packet re-sealed): the client's first SEND no
  // longer starts where the REP said.
  auto frames = test::read_frames(pcap_path("kernel-rxe-rping_cm.pcap"));
  auto& rep = frames[3].bytes;  // #4
  const size_t psn_at = 14 + 20 + 8 + 12 + 8 + 24 + 20;  // the REP's starting PSN (24 bits)
  rep[psn_at + 2] ^= 0x01;
  wire::store_icrc(&rep[rep.size() - 4],
                   wire::icrc_compute({&rep[14], rep.size() - 14 - 4}, false, 20));
  const std::string path = ::testing::TempDir() + "rping_cm_bad_rep_psn.pcap";
  test::write_pcap(path, 1, frames);
  const auto run = run_capture(path);
  EXPECT_TRUE(run.has_note(6, NoteKind::kConnection, "but the CM's REP announced 13111209"));
}

TEST(DissectTracker, LossyWriteCaptureReportsGapsAndTheNak) {
  // tshark: request PSNs jump at frames 123 (2200679 -> 2200681), 143 (2200698 -> 2200700),
  // 150 (2200706 -> 2200708) and 196 (2200753 -> 2200755); frame 137 is a NAK (0x60) for
  // PSN 2200680; no request PSN repeats.
  const auto run = run_capture(pcap_path("kernel-rxe-lossy_write_bw_4096-head.pcap"));
  const RequestStream* s = run.stream("10.77.0.12", "10.77.0.11", 0x11);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->gaps, 4u);
  EXPECT_EQ(s->missing, 4u);
  EXPECT_EQ(s->retransmitted, 0u);
  EXPECT_EQ(s->naks[0], 1u);
  const auto gaps = run.of_kind(NoteKind::kGap);
  ASSERT_EQ(gaps.size(), 4u);
  EXPECT_EQ(gaps[0].first, 123u);
  EXPECT_EQ(gaps[1].first, 143u);
  EXPECT_EQ(gaps[2].first, 150u);
  EXPECT_EQ(gaps[3].first, 196u);
  EXPECT_NE(gaps[0].second.text.find("expected PSN 2200680, got 2200681 — 1 packet missing"),
            std::string::npos)
      << gaps[0].second.text;
  EXPECT_TRUE(run.has_note(137, NoteKind::kNak, "expected PSN 2200680"));
  EXPECT_TRUE(run.has_note(137, NoteKind::kNak, "gap noticed at #123"));
}

TEST(DissectTracker, LossySendCaptureReportsGoBackN) {
  // tshark: frame 117 NAKs PSN 7847827 (lost before the capture point: frame 38 carries
  // 7847828 after 7847826); frames 156.. resend from 7847827; 37 request PSNs repeat.
  const auto run = run_capture(pcap_path("kernel-rxe-lossy_send_bw_4096-head.pcap"));
  const RequestStream* s = run.stream("10.77.0.12", "10.77.0.11", 0x11);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->retransmitted, 37u);
  EXPECT_EQ(s->gaps, 2u);
  EXPECT_EQ(s->naks[0], 1u);
  EXPECT_TRUE(run.has_note(38, NoteKind::kGap, "expected PSN 7847827, got 7847828"));
  EXPECT_TRUE(run.has_note(117, NoteKind::kNak, "go-back-N: PSN 7847827..7847903, 77 packets"));
  EXPECT_TRUE(run.has_note(156, NoteKind::kRetransmission, "never saw (gap noticed at #38)"));
  EXPECT_TRUE(run.has_note(156, NoteKind::kResend, "as the NAK in #117 asked"));
}

TEST(DissectTracker, ReadResponsesAreMatchedWithSegmentCounts) {
  // tshark: READ requests of 4096 bytes at frames 24 (PSN 13676472), 25 (13676476), ...;
  // responses FIRST 47 (13676472), MIDDLE 49, 50, LAST 51 (13676475); MTU 1024 from the
  // 1024-byte READ_RESPONSE_MIDDLE payloads. 35 requests, 26 FIRST, 51 MIDDLE, 25 LAST.
  const auto run = run_capture(pcap_path("kernel-rxe-read_bw_4096-head.pcap"));
  EXPECT_EQ(run.tracker.mtu().bytes, 1024u);
  EXPECT_FALSE(run.tracker.mtu().assumed);
  const RequestStream* s = run.stream("10.77.0.12", "10.77.0.11", 0x11);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->reads_requested, 35u);
  EXPECT_EQ(s->read_responses, 26u + 51u + 25u);
  EXPECT_EQ(s->read_matched, 26u);
  EXPECT_EQ(s->reads_completed, 25u);
  EXPECT_EQ(s->gaps, 0u);  // each READ consumed 4 PSNs, so the next one is in order
  EXPECT_EQ(run.tracker.unmatched(), 0u);
  EXPECT_TRUE(run.has_note(24, NoteKind::kReadRequest,
                           "expect 4 READ response packets, PSN 13676472..13676475"));
  EXPECT_TRUE(run.has_note(25, NoteKind::kInOrder, "PSN 13676476"));
  EXPECT_TRUE(run.has_note(49, NoteKind::kReadResponse,
                           "READ response segment 2/4 for READ request PSN 13676472 (#24, va "
                           "0x0000560398ba5000, len 4096)"));
  EXPECT_TRUE(run.has_note(51, NoteKind::kReadResponse, "segment 4/4"));
  EXPECT_TRUE(run.has_note(51, NoteKind::kReadResponse, "READ complete: 4096 of 4096 bytes"));
  EXPECT_TRUE(
      run.has_note(52, NoteKind::kReadResponse, "segment 1/4 for READ request PSN 13676476 (#25"));
}

TEST(DissectTracker, AtomicAcksAreMatchedWithTheOriginalValue) {
  // tshark: frame 222 FETCH_ADD PSN 6120282 va 0x0000562ba7d0e980 add 1; frame 240 ATOMIC ACK
  // PSN 6120282, original remote data 12757096143145725723.
  const auto run = run_capture(pcap_path("kernel-rxe-atomic_bw_fadd.pcap"));
  const RequestStream* s = run.stream("10.77.0.12", "10.77.0.11", 0x11);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->atomics_requested, 200u);
  EXPECT_EQ(s->atomic_acks, 200u);
  EXPECT_EQ(s->atomic_matched, 200u);
  EXPECT_TRUE(run.has_note(240, NoteKind::kAtomicAck,
                           "ATOMIC ACK for FETCH_ADD PSN 6120282 (#222, va 0x0000562ba7d0e980): "
                           "original value 12757096143145725723; the target now holds "
                           "12757096143145725724 (original + 1)"));

  // Compare-and-swap, compare 0 against random memory: tshark frame 22 CAS PSN 7505988.
  const auto cas = run_capture(pcap_path("kernel-rxe-atomic_bw_cas.pcap"));
  const RequestStream* c = cas.stream("10.77.0.12", "10.77.0.11", 0x11);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->atomic_matched, 200u);
  EXPECT_EQ(cas.of_kind(NoteKind::kAtomicAck).size(), 200u);
  EXPECT_NE(cas.of_kind(NoteKind::kAtomicAck)[0].second.text.find(
                "ATOMIC ACK for COMPARE_SWAP PSN 7505988 (#22"),
            std::string::npos);
}

TEST(DissectTracker, CoalescedAckCoversAWholeWriteMessage) {
  // tshark: WRITE FIRST/MIDDLE/MIDDLE/LAST PSN 13510151..13510154 (frames 22-25); the ACK in
  // frame 36 names PSN 13510154 with MSN 1.
  const auto run = run_capture(pcap_path("kernel-rxe-write_bw_4096-head.pcap"));
  EXPECT_TRUE(run.has_note(36, NoteKind::kAck,
                           "ACK of PSN 13510154: acknowledges PSN 13510151..13510154, 4 packets"));
  EXPECT_TRUE(run.has_note(37, NoteKind::kAck, "PSN 13510155..13510158"));
  const RequestStream* s = run.stream("10.77.0.12", "10.77.0.11", 0x11);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->op_seq_errors, 0u);
}

TEST(DissectTracker, SeveralQpsBetweenTheSameHostsArePairedByPsnRange) {
  // tshark: srq_pingpong uses QPs 0x11..0x14 in both directions; ACKs from 10.77.0.11 to
  // 10.77.0.12: 3 to QP 0x11, 0x12, 0x13 and 2 to QP 0x14; the ACK in frame 69 (to QP 0x14,
  // PSN 15582244) answers the requests to QP 0x14 (PSN 15582241..15582244, frames 62-65).
  const auto run = run_capture(pcap_path("kernel-rxe-srq_pingpong-head.pcap"));
  EXPECT_EQ(run.tracker.streams().size(), 8u);
  EXPECT_EQ(run.tracker.unmatched(), 0u);
  const uint32_t acks[] = {3, 3, 3, 2};
  for (uint32_t q = 0; q < 4; ++q) {
    const RequestStream* s = run.stream("10.77.0.12", "10.77.0.11", 0x11 + q);
    ASSERT_NE(s, nullptr) << q;
    EXPECT_EQ(s->acks, acks[q]) << q;
    EXPECT_TRUE(s->paired);
    EXPECT_EQ(s->requester_qpn, 0x11 + q);
  }
  EXPECT_TRUE(run.has_note(69, NoteKind::kPairing, "PSN 15582244 lies in its PSN range"));
}

TEST(DissectTracker, PingPongHasOneStreamEachWay) {
  // tshark: send_lat_64 has 201 SEND_ONLY and 201 ACK in each direction; each direction
  // sends one PSN twice: 109329 from 10.77.0.11 (frame 345), 16736650 from 10.77.0.12
  // (frame 509).
  const auto run = run_capture(pcap_path("kernel-rxe-send_lat_64.pcap"));
  ASSERT_EQ(run.tracker.streams().size(), 2u);
  for (const char* dir : {"10.77.0.12", "10.77.0.11"}) {
    const std::string src = dir, dst = src == "10.77.0.12" ? "10.77.0.11" : "10.77.0.12";
    const RequestStream* s = run.stream(src, dst, 0x11);
    ASSERT_NE(s, nullptr) << src;
    EXPECT_EQ(s->req_packets, 201u);
    EXPECT_EQ(s->acks, 201u);
    EXPECT_EQ(s->gaps, 0u);
    EXPECT_EQ(s->retransmitted, 1u);
    EXPECT_TRUE(s->paired);
  }
  EXPECT_TRUE(run.has_note(345, NoteKind::kRetransmission, "PSN 109329 was sent before"));
  EXPECT_TRUE(run.has_note(509, NoteKind::kRetransmission, "PSN 16736650 was sent before"));
  EXPECT_EQ(run.of_kind(NoteKind::kRetransmission).size(), 2u);
}

TEST(DissectTracker, MtuIsInferredOrAssumed) {
  // mtu9000: only WRITE_ONLY, 4096-byte payloads (tshark: UDP length 4136 = 8+12+16+4096+4).
  MtuScanner a;
  for (const auto& f : test::read_frames(pcap_path("kernel-rxe-mtu9000_write_bw_4096-head.pcap")))
    a.observe(decode_frame(1, 0, f.bytes, f.orig_len));
  EXPECT_EQ(a.result().bytes, 4096u);
  EXPECT_TRUE(a.result().assumed);
  // send_bw_4096: SEND_FIRST/MIDDLE carry 1024 bytes.
  MtuScanner b;
  for (const auto& f : test::read_frames(pcap_path("kernel-rxe-send_bw_4096-head.pcap")))
    b.observe(decode_frame(1, 0, f.bytes, f.orig_len));
  EXPECT_EQ(b.result().bytes, 1024u);
  EXPECT_FALSE(b.result().assumed);
  // send_bw_64: nothing to go by.
  MtuScanner c;
  for (const auto& f : test::read_frames(pcap_path("kernel-rxe-send_bw_64.pcap")))
    c.observe(decode_frame(1, 0, f.bytes, f.orig_len));
  EXPECT_EQ(c.result().bytes, 1024u);
  EXPECT_TRUE(c.result().assumed);
}

// ---- synthetic frames ----

constexpr wire::Ipv4Addr kA{10, 0, 0, 1};
constexpr wire::Ipv4Addr kB{10, 0, 0, 2};

std::vector<uint8_t> make(uint8_t opcode, wire::Ipv4Addr src, wire::Ipv4Addr dst, uint32_t qpn,
                          uint32_t psn, size_t payload, void (*ext)(wire::ExtHeaders&) = nullptr) {
  wire::RoceHeaders h;
  h.ip4.src = src;
  h.ip4.dst = dst;
  h.bth.opcode = opcode;
  h.bth.dest_qp = qpn;
  h.bth.psn = psn;
  h.bth.ack_req = true;
  if (ext != nullptr) ext(h.ext);
  const std::vector<uint8_t> data(payload, 0xab);
  std::vector<uint8_t> out(wire::frame_len(h, payload));
  EXPECT_EQ(wire::build_frame(h, data, out), out.size());
  return out;
}

struct Feed {
  QpTracker tracker;
  uint64_t index = 0;
  std::vector<Note> operator()(const std::vector<uint8_t>& bytes) {
    ++index;
    const Frame f = decode_frame(index, static_cast<int64_t>(index) * 1000, bytes,
                                 static_cast<uint32_t>(bytes.size()));
    EXPECT_EQ(f.kind, FrameKind::kRoce);
    return tracker.observe(f);
  }
};

bool has(const std::vector<Note>& ns, NoteKind k, const std::string& part = "") {
  for (const Note& n : ns)
    if (n.kind == k && n.text.find(part) != std::string::npos) return true;
  return false;
}

TEST(DissectTracker, PsnWrapIsInOrderAndGapsAcrossTheWrapAreCounted) {
  using namespace wire::opcode;
  Feed feed{QpTracker(PathMtu{1024, false, "test"})};
  feed(make(kRcSendOnly, kA, kB, 0x22, 0xFFFFFE, 8));
  // In order across the wrap: 16777215 -> 0 -> 1.
  EXPECT_TRUE(has(feed(make(kRcSendOnly, kA, kB, 0x22, 0xFFFFFF, 8)), NoteKind::kInOrder));
  EXPECT_TRUE(has(feed(make(kRcSendOnly, kA, kB, 0x22, 0, 8)), NoteKind::kInOrder, "PSN 0 "));
  EXPECT_TRUE(has(feed(make(kRcSendOnly, kA, kB, 0x22, 1, 8)), NoteKind::kInOrder));
  // 2 is skipped.
  EXPECT_TRUE(has(feed(make(kRcSendOnly, kA, kB, 0x22, 3, 8)), NoteKind::kGap,
                  "expected PSN 2, got 3 — 1 packet missing"));
  // 16777215 again: a retransmission, not a jump forward of ~16 million.
  EXPECT_TRUE(has(feed(make(kRcSendOnly, kA, kB, 0x22, 0xFFFFFF, 8)), NoteKind::kRetransmission,
                  "PSN 16777215 was sent before; the next new PSN is 4"));
  // One ACK for everything up to PSN 0: three packets across the wrap.
  EXPECT_TRUE(has(feed(make(kRcAck, kB, kA, 0x33, 0, 0)), NoteKind::kAck,
                  "acknowledges PSN 16777214..0, 3 packets"));
  const RequestStream& s = feed.tracker.streams().at(0);
  EXPECT_EQ(s.gaps, 1u);
  EXPECT_EQ(s.missing, 1u);
  EXPECT_EQ(s.retransmitted, 1u);
  EXPECT_EQ(s.next_psn.value(), 4u);
}

TEST(DissectTracker, SinglePassLearnsTheMtuFromReadPsnSpacing) {
  using namespace wire::opcode;
  // No pre-scan: the tracker assumes 1024 for the first READ (4 PSNs for 4096 bytes) and
  // must notice from the next request's PSN that only 2 were used, i.e. the MTU is 2048.
  Feed feed{QpTracker(PathMtu{})};
  auto read4096 = [](wire::ExtHeaders& x) {
    x.reth.va = 0x1000;
    x.reth.rkey = 7;
    x.reth.dma_len = 4096;
  };
  const auto n1 = feed(make(kRcReadRequest, kA, kB, 0x22, 100, 0, read4096));
  EXPECT_TRUE(has(n1, NoteKind::kReadRequest, "path MTU 1024 bytes, assumed"));
  const auto n2 = feed(make(kRcReadRequest, kA, kB, 0x22, 102, 0, read4096));
  EXPECT_FALSE(has(n2, NoteKind::kGap));
  EXPECT_FALSE(has(n2, NoteKind::kRetransmission));
  EXPECT_TRUE(
      has(n2, NoteKind::kReadRequest, "used 2 PSNs for 4096 bytes, so the path MTU is 2048"));
  EXPECT_EQ(feed.tracker.mtu().bytes, 2048u);
  EXPECT_TRUE(has(n2, NoteKind::kReadRequest, "expect 2 READ response packets, PSN 102..103"));
  auto ack = [](wire::ExtHeaders& x) { x.aeth.msn = 1; };
  EXPECT_TRUE(has(feed(make(kRcReadResponseFirst, kB, kA, 0x33, 100, 2048, ack)),
                  NoteKind::kReadResponse, "segment 1/2 for READ request PSN 100"));
  EXPECT_TRUE(has(feed(make(kRcReadResponseLast, kB, kA, 0x33, 101, 2048, ack)),
                  NoteKind::kReadResponse, "READ complete: 4096 of 4096 bytes"));
}

TEST(DissectTracker, BadIcrcPacketsAreNotTracked) {
  using namespace wire::opcode;
  Feed feed{QpTracker(PathMtu{1024, false, "test"})};
  feed(make(kRcSendOnly, kA, kB, 0x22, 10, 8));
  auto bad = make(kRcSendOnly, kA, kB, 0x22, 11, 8);
  bad[bad.size() - 6] ^= 0xFF;  // a payload byte
  const Frame f = decode_frame(2, 0, bad, static_cast<uint32_t>(bad.size()));
  ASSERT_TRUE(f.icrc_bad());
  EXPECT_TRUE(has(feed.tracker.observe(f), NoteKind::kNotTracked));
  // For the receiver PSN 11 never arrived: 12 is a gap.
  EXPECT_TRUE(
      has(feed(make(kRcSendOnly, kA, kB, 0x22, 12, 8)), NoteKind::kGap, "expected PSN 11, got 12"));
}

TEST(DissectTracker, FatalNakAndUnmatchedResponse) {
  using namespace wire::opcode;
  Feed feed{QpTracker(PathMtu{1024, false, "test"})};
  // A response with no request stream in the capture.
  EXPECT_TRUE(has(feed(make(kRcAck, kB, kA, 0x33, 5, 0)), NoteKind::kUnmatched));
  feed(make(kRcWriteOnly, kA, kB, 0x22, 5, 8, [](wire::ExtHeaders& x) { x.reth.dma_len = 8; }));
  auto access = [](wire::ExtHeaders& x) {
    x.aeth.syndrome = wire::AethRepr::make_nak(wire::NakCode::kRemoteAccessError);
  };
  EXPECT_TRUE(has(feed(make(kRcAck, kB, kA, 0x33, 5, 0, access)), NoteKind::kNak,
                  "NAK (remote access error"));
  EXPECT_EQ(feed.tracker.streams().at(0).naks[2], 1u);
  EXPECT_EQ(feed.tracker.unmatched(), 1u);
}

TEST(DissectTracker, MessageOrderProblemsAreFlagged) {
  using namespace wire::opcode;
  Feed feed{QpTracker(PathMtu{1024, false, "test"})};
  feed(make(kRcSendOnly, kA, kB, 0x22, 1, 8));
  // A MIDDLE right after a complete message, with no PSN missing.
  EXPECT_TRUE(has(feed(make(kRcSendMiddle, kA, kB, 0x22, 2, 1024)), NoteKind::kOpSequence,
                  "RC_SEND_MIDDLE without a FIRST"));
  EXPECT_EQ(feed.tracker.streams().at(0).op_seq_errors, 1u);
}

TEST(DissectTracker, FlushAndAtomicWriteAreAnsweredByAnEmptyReadResponse) {
  // IBA 1.5: both are answered as a READ of nothing, at their own PSN.
  using namespace wire::opcode;
  Feed feed{QpTracker(PathMtu{1024, false, "test"})};
  auto flush = [](wire::ExtHeaders& x) {
    x.reth = {0x1000, 0x77, 256};
    x.feth.raw = 1;  // global visibility, the range
  };
  EXPECT_TRUE(has(feed(make(kRcFlush, kA, kB, 0x22, 7, 0, flush)), NoteKind::kReadRequest,
                  "FLUSH: make what was written to 256 bytes at va 0x0000000000001000 visible"));
  auto ack = [](wire::ExtHeaders& x) { x.aeth.syndrome = 0x1F; };
  EXPECT_TRUE(has(feed(make(kRcReadResponseOnly, kB, kA, 0x33, 7, 0, ack)),
                  NoteKind::kReadResponse, "answers the FLUSH request PSN 7"));
  auto aw = [](wire::ExtHeaders& x) { x.reth = {0x2000, 0x77, 8}; };
  EXPECT_TRUE(has(feed(make(kRcAtomicWrite, kA, kB, 0x22, 8, 8, aw)), NoteKind::kReadRequest,
                  "ATOMIC WRITE: 8 bytes to va 0x0000000000002000"));
  EXPECT_TRUE(has(feed(make(kRcReadResponseOnly, kB, kA, 0x33, 8, 0, ack)),
                  NoteKind::kReadResponse, "answers the ATOMIC WRITE request PSN 8"));
  EXPECT_EQ(feed.tracker.unmatched(), 0u);
  EXPECT_EQ(feed.tracker.streams().at(0).reads_requested, 0u);  // neither is a READ
}

}  // namespace
}  // namespace uroce::dissect

// Whole frames: parse_frame / build_frame / frame_len.
//
// Known frames (captured or independently modelled, see known_frames.h) must parse to the
// expected headers and be rebuilt byte for byte; every valid opcode must survive
// build -> parse over IPv4/IPv6, with and without VLAN; and every way a frame can be wrong
// must produce its named ParseError, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "known_frames.h"
#include "pcap/pcap_file.h"
#include "wire/packet.h"
#include "wire_test_util.h"

namespace uroce::wire {
namespace {

using test::hex;
using test::Rand;

constexpr MacAddr kMac11 = {0x52, 0x54, 0x00, 0x77, 0x00, 0x11};
constexpr MacAddr kMac12 = {0x52, 0x54, 0x00, 0x77, 0x00, 0x12};
constexpr Ipv6Addr kFd00A = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a};
constexpr Ipv6Addr kFd00B = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b};

/// Builds `h` + `payload` into a right-sized vector.
std::vector<uint8_t> build(const RoceHeaders& h, Bytes payload, const BuildExtras& x = {}) {
  std::vector<uint8_t> buf(frame_len(h, payload.size(), x.trailer.size()) + 32, 0xCC);
  const size_t n = build_frame(h, payload, buf, x);
  EXPECT_NE(n, 0u) << "build_frame failed for opcode " << int{h.bth.opcode};
  buf.resize(n);
  return buf;
}

std::vector<uint8_t> to_vec(Bytes b) { return {b.begin(), b.end()}; }

ParseError parse(Bytes frame, ParsedPacket& p) { return parse_frame(frame, p); }

// ---------------------------------------------------------------------------------------
// Known frames: field by field, and rebuilt byte for byte

RoceHeaders captured_write_only_headers() {
  RoceHeaders h;
  h.eth = {.dst = kMac11, .src = kMac12, .ethertype = kEtherTypeIpv4};
  h.ip4.ident = 0xE67E;
  h.ip4.dont_frag = true;
  h.ip4.ttl = 64;
  h.ip4.src = {10, 77, 0, 12};
  h.ip4.dst = {10, 77, 0, 11};
  h.udp = {.src_port = 49441, .dst_port = 4791, .length = 0, .checksum = 0};
  h.bth.opcode = opcode::kRcWriteOnly;
  h.bth.pkey = 0xFFFF;
  h.bth.dest_qp = 0x11;
  h.bth.ack_req = true;
  h.bth.psn = 12481691;
  h.ext.reth = {0x000055933E3B6000, 0x27C, 64};
  return h;
}

TEST(Frame, CapturedFramesAreTheRecordsOfTheCapture) {
  // known_frames.h copies records 1, 3, 22 and 150 (1-based) of this capture.
  drivers::PcapReader r(std::string(UROCE_PCAP_DIR) + "/kernel-rxe-write_bw_64.pcap");
  ASSERT_TRUE(r.ok()) << r.error();
  drivers::PcapRecord rec;
  size_t n = 0, found = 0;
  while (r.next(rec)) {
    ++n;
    const char* want = n == 1     ? test::kCapturedArp
                       : n == 3   ? test::kCapturedTcpSyn
                       : n == 22  ? test::kCapturedWriteOnly
                       : n == 150 ? test::kCapturedAck
                                  : nullptr;
    if (want == nullptr) continue;
    EXPECT_EQ(to_vec(rec.data), hex(want)) << "record " << n;
    ++found;
  }
  EXPECT_EQ(found, 4u);
}

TEST(Frame, ParsesCapturedRdmaWriteOnly) {
  const auto frame = hex(test::kCapturedWriteOnly);
  ParsedPacket p;
  ASSERT_EQ(parse(frame, p), ParseError::kOk);
  EXPECT_EQ(p.reached, Layer::kComplete);
  EXPECT_EQ(p.info, &opcode_info(0x0A));
  EXPECT_EQ(p.l3_offset, 14u);
  EXPECT_EQ(p.l4_offset, 34u);
  EXPECT_EQ(p.bth_offset, 42u);

  const RoceHeaders& h = p.hdr;
  EXPECT_EQ(h.eth.dst, kMac11);
  EXPECT_EQ(h.eth.src, kMac12);
  EXPECT_FALSE(h.eth.has_vlan);
  EXPECT_EQ(h.eth.ethertype, kEtherTypeIpv4);
  EXPECT_FALSE(h.ipv6);
  EXPECT_EQ(h.ip4.total_len, 124);
  EXPECT_EQ(h.ip4.ident, 0xE67E);
  EXPECT_EQ(h.ip4.ttl, 64);
  EXPECT_EQ(h.ip4.checksum, 0x3F42);
  EXPECT_EQ(h.ip4.src, (Ipv4Addr{10, 77, 0, 12}));
  EXPECT_EQ(h.udp.src_port, 49441);
  EXPECT_EQ(h.udp.dst_port, 4791);
  EXPECT_EQ(h.udp.length, 104);
  EXPECT_EQ(h.bth.opcode, 0x0A);
  EXPECT_EQ(h.bth.pad_count, 0);
  EXPECT_EQ(h.bth.dest_qp, 0x11u);
  EXPECT_EQ(h.bth.psn, 12481691u);
  EXPECT_TRUE(h.bth.ack_req);
  EXPECT_EQ(h.ext.reth.va, 0x000055933E3B6000u);
  EXPECT_EQ(h.ext.reth.rkey, 0x27Cu);
  EXPECT_EQ(h.ext.reth.dma_len, 64u);
  ASSERT_EQ(p.payload.size(), 64u);
  EXPECT_EQ(p.payload.data(), frame.data() + 70);
  EXPECT_EQ(p.payload[0], 0xE9);
  EXPECT_EQ(p.payload[63], 0x3C);
  EXPECT_TRUE(p.pad.empty());
  EXPECT_TRUE(p.trailer.empty());
  EXPECT_EQ(p.icrc_wire, test::kCapturedWriteOnlyIcrc);
  EXPECT_EQ(p.icrc_calc, test::kCapturedWriteOnlyIcrc);
  EXPECT_TRUE(p.icrc_ok());

  RoceHeaders want = captured_write_only_headers();
  want.ip4.total_len = 124;
  want.ip4.checksum = 0x3F42;
  want.udp.length = 104;
  EXPECT_EQ(h, want);
}

TEST(Frame, RebuildsCapturedRdmaWriteOnly) {
  const auto frame = hex(test::kCapturedWriteOnly);
  const Bytes payload = Bytes(frame).subspan(70, 64);
  EXPECT_EQ(frame_len(captured_write_only_headers(), 64), 138u);
  EXPECT_EQ(build(captured_write_only_headers(), payload), frame);
}

TEST(Frame, ParsesAndRebuildsCapturedAck) {
  RoceHeaders h;
  h.eth = {.dst = kMac12, .src = kMac11, .ethertype = kEtherTypeIpv4};
  h.ip4.ident = 0xF2D8;
  h.ip4.src = {10, 77, 0, 11};
  h.ip4.dst = {10, 77, 0, 12};
  h.udp.src_port = 49441;
  h.bth.opcode = opcode::kRcAck;
  h.bth.dest_qp = 0x11;
  h.bth.psn = 12481691;
  h.ext.aeth = {0x1F, 1};
  const auto frame = hex(test::kCapturedAck);
  EXPECT_EQ(build(h, {}), frame);

  ParsedPacket p;
  ASSERT_EQ(parse(frame, p), ParseError::kOk);
  h.ip4.total_len = 48;
  h.ip4.checksum = 0x3334;
  h.udp.length = 28;
  EXPECT_EQ(p.hdr, h);
  EXPECT_TRUE(p.payload.empty());
  EXPECT_TRUE(p.hdr.ext.aeth.is_ack());
  EXPECT_EQ(p.icrc_wire, test::kCapturedAckIcrc);
}

TEST(Frame, ParsesAndRebuildsUdOverIpv6WithVlan) {
  RoceHeaders h;
  h.eth = {.dst = {0x02, 0, 0, 0, 0, 0x0b},
           .src = {0x02, 0, 0, 0, 0, 0x0a},
           .has_vlan = true,
           .pcp = 3,
           .vid = 100,
           .ethertype = 0};
  h.ipv6 = true;
  h.ip6 = {.traffic_class = 0x6A, .flow_label = 0xABCDE, .hop_limit = 64, .src = kFd00A,
           .dst = kFd00B};
  h.udp = {.src_port = 0xE000, .dst_port = 4791, .length = 0, .checksum = 0x1357};
  h.bth.opcode = opcode::kUdSendOnlyImm;
  h.bth.se = true;
  h.bth.becn = true;
  h.bth.dest_qp = 0xAB;
  h.bth.psn = 0x10;
  h.ext.deth = {0x11111111, 0, 0xCD};
  h.ext.imm.imm = 0xDEADBEEF;
  const std::string_view hello = "hello";
  const std::vector<uint8_t> payload(hello.begin(), hello.end());
  const auto frame = hex(test::kModelUdImmIpv6Vlan);
  EXPECT_EQ(frame_len(h, payload.size()), 102u);
  EXPECT_EQ(build(h, payload), frame);

  ParsedPacket p;
  ASSERT_EQ(parse(frame, p), ParseError::kOk);
  EXPECT_EQ(p.l3_offset, 18u);
  EXPECT_EQ(p.l4_offset, 58u);
  EXPECT_EQ(p.bth_offset, 66u);
  h.eth.ethertype = kEtherTypeIpv6;
  h.ip6.payload_len = 44;
  h.udp.length = 44;
  h.bth.pad_count = 3;
  EXPECT_EQ(p.hdr, h);
  EXPECT_EQ(to_vec(p.payload), payload);
  EXPECT_EQ(to_vec(p.pad), (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_TRUE(p.icrc_ok());
  EXPECT_EQ(p.icrc_wire, test::kModelUdImmIpv6VlanIcrc);
}

TEST(Frame, ParsesAndRebuildsCompareSwapWithIpv4Options) {
  RoceHeaders h;
  h.eth = {.dst = {0x02, 0, 0, 0, 0, 0x02}, .src = {0x02, 0, 0, 0, 0, 0x01}};
  h.ip4.dscp = 26;
  h.ip4.ecn = 2;
  h.ip4.ident = 0x1234;
  h.ip4.src = {192, 168, 1, 1};
  h.ip4.dst = {192, 168, 1, 2};
  h.ip4.options_len = 4;
  h.ip4.options[0] = 0x94;
  h.ip4.options[1] = 0x04;
  h.udp.src_port = 0xD00D;
  h.bth.opcode = opcode::kRcCompareSwap;
  h.bth.dest_qp = 0x102;
  h.bth.ack_req = true;
  h.bth.psn = 7;
  h.ext.atomic = {0x00007F0000001000, 0x1234, 5, 4};
  const auto frame = hex(test::kModelCasIpv4Options);
  EXPECT_EQ(build(h, {}), frame);

  ParsedPacket p;
  ASSERT_EQ(parse(frame, p), ParseError::kOk);
  EXPECT_EQ(p.l4_offset, 38u);
  EXPECT_EQ(p.bth_offset, 46u);
  h.ip4.total_len = 76;
  h.ip4.checksum = 0x0FAB;
  h.udp.length = 52;
  EXPECT_EQ(p.hdr, h);
  EXPECT_EQ(p.icrc_wire, test::kModelCasIpv4OptionsIcrc);
}

// ---------------------------------------------------------------------------------------
// build -> parse for every valid opcode

/// Payload sizes each opcode may carry: none, exactly 8 (ATOMIC WRITE), whole words only
/// for packets that do not end a message (they are never padded), anything otherwise.
std::vector<size_t> payload_sizes(const OpcodeInfo& i) {
  if (!i.has_payload) return {0};
  if (i.fixed_payload != 0) return {i.fixed_payload};
  if (!i.ends_message()) return {0, 4, 8, 256};
  return {0, 1, 2, 3, 4, 5, 6, 7, 255, 1021};
}

TEST(Frame, EveryValidOpcodeRoundTrips) {
  constexpr size_t kPadFor[4] = {0, 3, 2, 1};  // payload length % 4 -> pad bytes
  Rand r(0xF2A3E);
  size_t cases = 0;
  for (uint8_t op : test::valid_opcodes()) {
    const OpcodeInfo& info = opcode_info(op);
    for (bool ipv6 : {false, true}) {
      for (bool vlan : {false, true}) {
        for (size_t size : payload_sizes(info)) {
          SCOPED_TRACE(::testing::Message() << info.name << (ipv6 ? " IPv6" : " IPv4")
                                            << (vlan ? " VLAN" : "") << " payload " << size);
          const RoceHeaders h = test::random_headers(r, op, ipv6, vlan);
          const std::vector<uint8_t> payload = r.bytes(size);
          const std::vector<uint8_t> frame = build(h, payload);
          const size_t pad = kPadFor[size % 4];
          const size_t l2 = vlan ? 18 : 14;
          const size_t iph = ipv6 ? size_t{40} : size_t{20} + h.ip4.options_len;
          const size_t udp_len = 8 + info.length + size + pad + 4;
          ASSERT_EQ(frame.size(), l2 + iph + udp_len);

          ParsedPacket p;
          ASSERT_EQ(parse(frame, p), ParseError::kOk);
          ParsedPacket q;
          ASSERT_EQ(parse_frame(frame, q, {.verify_icrc = true, .crc = CrcImpl::kReference}),
                    ParseError::kOk);
          EXPECT_EQ(p.reached, Layer::kComplete);
          EXPECT_EQ(p.info, &info);
          EXPECT_EQ(p.l3_offset, l2);
          EXPECT_EQ(p.l4_offset, l2 + iph);
          EXPECT_EQ(p.bth_offset, l2 + iph + 8);

          RoceHeaders want = h;
          want.eth.ethertype = ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4;
          want.bth.pad_count = static_cast<uint8_t>(pad);
          want.udp.length = static_cast<uint16_t>(udp_len);
          if (ipv6) {
            want.ip6.payload_len = static_cast<uint16_t>(udp_len);
          } else {
            want.ip4.total_len = static_cast<uint16_t>(iph + udp_len);
            const Bytes ip_hdr = Bytes(frame).subspan(l2, iph);
            EXPECT_EQ(test::ref_checksum(ip_hdr), 0) << "IPv4 header checksum";
            want.ip4.checksum = load_be16(&ip_hdr[10]);
          }
          EXPECT_EQ(p.hdr, want);
          EXPECT_EQ(to_vec(p.payload), payload);
          EXPECT_EQ(p.pad.size(), pad);
          EXPECT_TRUE(std::all_of(p.pad.begin(), p.pad.end(), [](uint8_t b) { return b == 0; }));
          EXPECT_TRUE(p.trailer.empty());
          EXPECT_TRUE(p.icrc_ok());
          EXPECT_EQ(q.icrc_calc, p.icrc_calc);
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 500u);
}

TEST(Frame, RandomFramesRoundTripAtMtuSizes) {
  Rand r(4096);
  const uint8_t ops[] = {opcode::kRcSendOnly, opcode::kRcWriteLastImm,
                         opcode::kRcReadResponseOnly, opcode::kUcWriteOnlyImm,
                         opcode::kUdSendOnly, opcode::kRcSendOnlyInv};
  for (size_t size : {1020u, 1024u, 2047u, 4093u, 4096u, 4097u, 8999u, 59940u}) {
    for (uint8_t op : ops) {
      const bool ipv6 = r.coin();
      const bool vlan = r.coin();
      const RoceHeaders h = test::random_headers(r, op, ipv6, vlan);
      const auto payload = r.bytes(size);
      const auto frame = build(h, payload);
      ParsedPacket p;
      if (size > kMaxRocePayload) {
        // Headers and ICRC agree, but no path MTU is that large: malformed.
        EXPECT_EQ(parse(frame, p), ParseError::kBadPayloadLen) << opcode_info(op).name << " " << size;
        continue;
      }
      ASSERT_EQ(parse(frame, p), ParseError::kOk) << opcode_info(op).name << " " << size;
      EXPECT_EQ(to_vec(p.payload), payload);
    }
  }
}

TEST(Frame, FrameLenKnownValues) {
  RoceHeaders h;
  h.bth.opcode = opcode::kRcSendOnly;
  EXPECT_EQ(frame_len(h, 0), 14u + 20 + 8 + 12 + 4);
  EXPECT_EQ(frame_len(h, 5), 14u + 20 + 8 + 12 + 5 + 3 + 4);
  EXPECT_EQ(frame_len(h, 5, 6), 14u + 20 + 8 + 12 + 5 + 3 + 4 + 6);
  h.eth.has_vlan = true;
  h.ipv6 = true;
  h.bth.opcode = opcode::kRcWriteOnlyImm;
  EXPECT_EQ(frame_len(h, 4096), 18u + 40 + 8 + 32 + 4096 + 4);
  h.ipv6 = false;
  h.ip4.options_len = 40;
  h.bth.opcode = opcode::kRcCompareSwap;
  EXPECT_EQ(frame_len(h, 0), 18u + 60 + 8 + 40 + 4);
}

TEST(Frame, TrailerAndCustomPadBytes) {
  Rand r(7);
  RoceHeaders h = test::random_headers(r, opcode::kRcSendLast, false, false);
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
  const std::vector<uint8_t> pad = {0xAA, 0xBB, 0xCC};
  const std::vector<uint8_t> trailer = {0xEE, 0xEE, 0xEE, 0xEE, 0xEE, 0xEE};
  const auto frame = build(h, payload, {.pad = pad, .trailer = trailer});
  ASSERT_EQ(frame.size(), frame_len(h, 5, 6));
  ParsedPacket p;
  ASSERT_EQ(parse(frame, p), ParseError::kOk);
  EXPECT_EQ(to_vec(p.payload), payload);
  EXPECT_EQ(to_vec(p.pad), pad);
  EXPECT_EQ(to_vec(p.trailer), trailer);
  // The trailer is outside the IP datagram: shortening it keeps the frame valid.
  for (size_t cut = 1; cut <= trailer.size(); ++cut) {
    ParsedPacket q;
    ASSERT_EQ(parse(Bytes(frame).first(frame.size() - cut), q), ParseError::kOk) << cut;
    EXPECT_EQ(q.trailer.size(), trailer.size() - cut);
  }
  // Fewer pad values than pad bytes: the rest are zero.
  const auto short_pad = build(h, payload, {.pad = Bytes(pad).first(1), .trailer = {}});
  ParsedPacket s;
  ASSERT_EQ(parse(short_pad, s), ParseError::kOk);
  EXPECT_EQ(to_vec(s.pad), (std::vector<uint8_t>{0xAA, 0, 0}));
  // The pad is covered by the ICRC.
  auto bad = frame;
  bad[frame.size() - trailer.size() - kIcrcLen - 1] ^= 1;
  ParsedPacket b;
  EXPECT_EQ(parse(bad, b), ParseError::kBadIcrc);
}

// ---------------------------------------------------------------------------------------
// build_frame failures

TEST(Frame, BuildFailsWhenTheBufferIsTooSmall) {
  const RoceHeaders h = captured_write_only_headers();
  const std::vector<uint8_t> payload(64, 0x42);
  const size_t need = frame_len(h, payload.size());
  ASSERT_EQ(need, 138u);
  for (size_t n = 0; n < need; ++n) {
    std::vector<uint8_t> buf(n, 0x5C);
    EXPECT_EQ(build_frame(h, payload, buf), 0u) << n;
    EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0x5C; }))
        << "wrote into a buffer it rejected, size " << n;
  }
  std::vector<uint8_t> exact(need);
  EXPECT_EQ(build_frame(h, payload, exact), need);
  // A trailer needs room too: every size short of frame + trailer is refused.
  const std::vector<uint8_t> trailer(10, 0x7E);
  for (size_t n = need; n < need + trailer.size(); ++n) {
    std::vector<uint8_t> buf(n, 0x5C);
    EXPECT_EQ(build_frame(h, payload, buf, {.pad = {}, .trailer = trailer}), 0u) << n;
  }
  std::vector<uint8_t> with_trailer(need + trailer.size());
  EXPECT_EQ(build_frame(h, payload, with_trailer, {.pad = {}, .trailer = trailer}),
            need + trailer.size());
  EXPECT_EQ(with_trailer.back(), 0x7E);
}

TEST(Frame, BuildFailsWhenTheLengthFieldsCannotDescribeTheDatagram) {
  // IPv4 total length and IPv6 payload length are 16 bits. Find the largest payload each
  // can carry from the header sizes (IPv4 20 + UDP 8 + BTH 12 + ICRC 4; IPv6 counts from
  // UDP), check it builds and parses, and that one more word is refused rather than
  // written with wrapped length fields.
  RoceHeaders h;
  h.bth.opcode = opcode::kRcSendOnly;
  for (bool ipv6 : {false, true}) {
    SCOPED_TRACE(ipv6 ? "IPv6" : "IPv4");
    h.ipv6 = ipv6;
    const size_t max_payload = 0xFFFF - (ipv6 ? 0 : 20) - 8 - 12 - 4;  // a multiple of 4 minus 1
    const size_t fits = max_payload & ~size_t{3};                       // no pad needed
    std::vector<uint8_t> buf(70000, 0x5C);
    const std::vector<uint8_t> payload(fits + 8, 0x42);
    const size_t n = build_frame(h, Bytes(payload).first(fits), buf);
    ASSERT_EQ(n, frame_len(h, fits));
    ParsedPacket p;
    // Built as asked; a parser then finds it longer than any path MTU (kMaxRocePayload).
    EXPECT_EQ(parse(Bytes(buf).first(n), p), ParseError::kBadPayloadLen);
    EXPECT_EQ(p.payload.size(), fits);
    for (size_t size = fits + 1; size <= fits + 8; ++size) {
      EXPECT_EQ(build_frame(h, Bytes(payload).first(size), buf), 0u) << size;
      EXPECT_EQ(emit_headers(h, size, buf).len, 0u) << size;
    }
  }
}

TEST(Frame, BuildFailsForEveryInvalidOpcode) {
  std::vector<uint8_t> buf(4096, 0x5C);
  size_t invalid = 0;
  for (unsigned op = 0; op < 256; ++op) {
    if (opcode_info(static_cast<uint8_t>(op)).valid) continue;
    RoceHeaders h;
    h.bth.opcode = static_cast<uint8_t>(op);
    EXPECT_EQ(build_frame(h, {}, buf), 0u) << op;
    ++invalid;
  }
  EXPECT_EQ(invalid, 193u);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0x5C; }));
}

// ---------------------------------------------------------------------------------------
// Zero-copy build: emit_headers, copy the payload in place, seal_frame

TEST(Frame, EmitHeadersThenSealEqualsBuildFrame) {
  Rand r(0x5EA1);
  for (uint8_t op : {opcode::kRcSendOnly, opcode::kRcWriteOnlyImm, opcode::kUdSendOnlyImm,
                     opcode::kRcReadResponseMiddle, opcode::kRcAck, opcode::kCnp}) {
    const OpcodeInfo& info = opcode_info(op);
    for (size_t size : payload_sizes(info)) {
      const bool ipv6 = r.coin();
      const bool vlan = r.coin();
      const RoceHeaders h = test::random_headers(r, op, ipv6, vlan);
      const auto payload = r.bytes(size);
      const auto want = build(h, payload);
      SCOPED_TRACE(::testing::Message() << info.name << " payload " << size);

      std::vector<uint8_t> buf(want.size(), 0xCC);  // garbage where the pad will go
      const FrameLayout lay = emit_headers(h, size, buf);
      ASSERT_EQ(lay.len, want.size());
      EXPECT_EQ(lay.l3_off, vlan ? 18u : 14u);
      EXPECT_EQ(lay.ipv6, ipv6);
      EXPECT_EQ(lay.ip_hdr_len, h.ip_header_len());
      EXPECT_EQ(lay.payload_off, lay.l3_off + lay.ip_hdr_len + 8 + info.length);
      EXPECT_EQ(lay.icrc_off, lay.len - 4);
      std::copy(payload.begin(), payload.end(),
                buf.begin() + static_cast<std::ptrdiff_t>(lay.payload_off));
      seal_frame(buf, lay);
      EXPECT_EQ(buf, want);
    }
  }
}

TEST(Frame, EmitHeadersFailsLikeBuildFrame) {
  const RoceHeaders h = captured_write_only_headers();
  std::vector<uint8_t> small(frame_len(h, 64) - 1);
  EXPECT_EQ(emit_headers(h, 64, small).len, 0u);
  RoceHeaders bad = h;
  bad.bth.opcode = 0x15;
  std::vector<uint8_t> big(4096);
  EXPECT_EQ(emit_headers(bad, 0, big).len, 0u);
}

// ---------------------------------------------------------------------------------------
// Truncation

TEST(Frame, TruncatedAtEveryLength) {
  // The IP length fields cover every byte up to the ICRC, so any cut is a truncated IP
  // datagram (or Ethernet header), whatever the layer it falls in.
  const char* const frames[] = {test::kCapturedWriteOnly, test::kCapturedAck,
                                test::kModelUdImmIpv6Vlan, test::kModelCasIpv4Options};
  for (const char* h : frames) {
    const auto frame = hex(h);
    ParsedPacket whole;
    ASSERT_EQ(parse(frame, whole), ParseError::kOk);
    for (size_t n = 0; n < frame.size(); ++n) {
      // A copy of exactly n bytes so AddressSanitizer catches any read past the cut.
      const std::vector<uint8_t> cut(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(n));
      ParsedPacket p;
      EXPECT_EQ(parse(cut, p), ParseError::kTruncated) << "length " << n << " of "
                                                       << frame.size();
    }
  }
}

TEST(Frame, TruncationReportsHowFarParsingGot) {
  const auto frame = hex(test::kModelUdImmIpv6Vlan);  // 18 + 40 + ...
  auto reached_at = [&](size_t n) {
    ParsedPacket p;
    EXPECT_EQ(parse(Bytes(frame).first(n), p), ParseError::kTruncated);
    return p.reached;
  };
  EXPECT_EQ(reached_at(0), Layer::kNone);
  EXPECT_EQ(reached_at(13), Layer::kNone);
  EXPECT_EQ(reached_at(17), Layer::kNone);  // the VLAN tag is cut
  EXPECT_EQ(reached_at(18), Layer::kEthernet);
  EXPECT_EQ(reached_at(57), Layer::kEthernet);
  EXPECT_EQ(reached_at(58), Layer::kEthernet);  // IPv6 header complete, payload not
  EXPECT_EQ(reached_at(frame.size() - 1), Layer::kEthernet);
}

/// The captured WRITE ONLY frame cut to `roce_len` bytes of UDP payload, with the IP total
/// length, IP checksum and UDP length rewritten to match: a consistent frame whose RoCE
/// part is short.
std::vector<uint8_t> with_roce_len(const char* frame_hex, size_t roce_len) {
  auto f = hex(frame_hex);
  f.resize(14 + 20 + 8 + roce_len);
  uint8_t* ip = f.data() + 14;
  store_be16(ip + 2, static_cast<uint16_t>(20 + 8 + roce_len));
  test::fix_ipv4_checksum(ip);
  store_be16(ip + 20 + 4, static_cast<uint16_t>(8 + roce_len));
  return f;
}

TEST(Frame, ShortRocePartIsTruncatedAtTheRightLayer) {
  // WRITE ONLY: BTH 12 + RETH 16, then at least the 4-byte ICRC.
  for (size_t len = 0; len < 12; ++len) {
    ParsedPacket p;
    EXPECT_EQ(parse(with_roce_len(test::kCapturedWriteOnly, len), p), ParseError::kTruncated)
        << len;
    EXPECT_EQ(p.reached, Layer::kUdp) << len;
  }
  for (size_t len = 12; len < 12 + 16 + 4; ++len) {
    ParsedPacket p;
    EXPECT_EQ(parse(with_roce_len(test::kCapturedWriteOnly, len), p), ParseError::kTruncated)
        << len;
    EXPECT_EQ(p.reached, Layer::kBth) << len;
    EXPECT_EQ(p.hdr.bth.opcode, opcode::kRcWriteOnly);
    EXPECT_EQ(p.info, &opcode_info(opcode::kRcWriteOnly));
  }
  // ACK: BTH 12 + AETH 4 + ICRC 4.
  for (size_t len = 12; len < 20; ++len) {
    ParsedPacket p;
    EXPECT_EQ(parse(with_roce_len(test::kCapturedAck, len), p), ParseError::kTruncated) << len;
  }
}

// ---------------------------------------------------------------------------------------
// Not RoCE

TEST(Frame, NonIpEtherTypesAreNotIp) {
  ParsedPacket p;
  EXPECT_EQ(parse(hex(test::kCapturedArp), p), ParseError::kNotIp);
  EXPECT_EQ(p.reached, Layer::kEthernet);
  EXPECT_EQ(p.hdr.eth.ethertype, kEtherTypeArp);
  for (int type : {0x88CC, 0x8906, 0x88A8, 0x8100, 0x0000, 0x0805, 0x86DC}) {
    auto frame = hex(test::kCapturedWriteOnly);
    store_be16(&frame[12], static_cast<uint16_t>(type));
    if (type == kEtherTypeVlan) store_be16(&frame[16], 0x8100);  // tag, then another tag
    ParsedPacket q;
    EXPECT_TRUE(is_not_roce(parse(frame, q)));
    EXPECT_EQ(parse(frame, q), ParseError::kNotIp) << std::hex << type;
  }
  // Tagged ARP.
  auto tagged = hex("ffffffffffff 525400770012 8100 0005 0806");
  const auto arp = hex(test::kCapturedArp);
  tagged.insert(tagged.end(), arp.begin() + 14, arp.end());
  EXPECT_EQ(parse(tagged, p), ParseError::kNotIp);
  EXPECT_EQ(p.hdr.eth.vid, 5);
}

TEST(Frame, TcpIsNotUdp) {
  ParsedPacket p;
  EXPECT_EQ(parse(hex(test::kCapturedTcpSyn), p), ParseError::kNotUdp);
  EXPECT_EQ(p.hdr.ip4.protocol, 6);
  EXPECT_EQ(p.reached, Layer::kIp);  // the IP header is filled in
  // IPv6: TCP, a hop-by-hop extension header, ICMPv6.
  for (int next : {6, 0, 58}) {
    auto frame = hex(test::kModelUdImmIpv6Vlan);
    frame[18 + 6] = static_cast<uint8_t>(next);
    ParsedPacket q;
    EXPECT_EQ(parse(frame, q), ParseError::kNotUdp) << next;
    EXPECT_TRUE(q.hdr.ipv6);
  }
}

TEST(Frame, OtherUdpPortsAreNotRoce) {
  for (int port : {0, 4790, 4792, 53, 0xB712, 0xFFFF}) {
    auto frame = hex(test::kCapturedWriteOnly);
    store_be16(&frame[34 + 2], static_cast<uint16_t>(port));
    ParsedPacket p;
    EXPECT_EQ(parse(frame, p), ParseError::kNotRoce) << port;
    EXPECT_EQ(p.hdr.udp.dst_port, port);
    EXPECT_EQ(p.reached, Layer::kIp);
  }
  // 4791 as the source port does not make it RoCE.
  auto swapped = hex(test::kCapturedWriteOnly);
  store_be16(&swapped[34], 4791);
  store_be16(&swapped[36], 49441);
  ParsedPacket p;
  EXPECT_EQ(parse(swapped, p), ParseError::kNotRoce);
}

TEST(Frame, ErrorNamesAndNotRoceGroup) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < static_cast<size_t>(ParseError::kCount); ++i) {
    const auto e = static_cast<ParseError>(i);
    EXPECT_FALSE(error_name(e).empty());
    EXPECT_FALSE(error_text(e).empty());
    names.insert(error_name(e));
    const bool not_roce =
        e == ParseError::kNotIp || e == ParseError::kNotUdp || e == ParseError::kNotRoce;
    EXPECT_EQ(is_not_roce(e), not_roce) << error_name(e);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ParseError::kCount));
  EXPECT_EQ(error_name(ParseError::kOk), "ok");
  EXPECT_EQ(error_name(ParseError::kTruncated), "truncated");
  EXPECT_EQ(error_name(ParseError::kBadIcrc), "bad_icrc");
  EXPECT_EQ(error_name(ParseError::kUnknownOpcode), "unknown_opcode");
  EXPECT_EQ(error_name(ParseError::kCount), "unknown");
}

// ---------------------------------------------------------------------------------------
// Malformed IP / UDP inside a frame

TEST(Frame, MalformedIpAndUdp) {
  struct Case {
    const char* what;
    void (*edit)(std::vector<uint8_t>&);
    ParseError want;
  };
  const Case cases[] = {
      {"IPv4 version 6",
       [](std::vector<uint8_t>& f) {
         f[14] = 0x65;
         test::fix_ipv4_checksum(&f[14]);
       },
       ParseError::kBadIpVersion},
      {"IHL 4", [](std::vector<uint8_t>& f) { f[14] = 0x44; }, ParseError::kBadIpHeaderLen},
      {"total length 19",
       [](std::vector<uint8_t>& f) {
         store_be16(&f[16], 19);
         test::fix_ipv4_checksum(&f[14]);
       },
       ParseError::kBadIpTotalLen},
      {"total length past the frame",
       [](std::vector<uint8_t>& f) {
         store_be16(&f[16], 125);
         test::fix_ipv4_checksum(&f[14]);
       },
       ParseError::kTruncated},
      {"bad IPv4 checksum", [](std::vector<uint8_t>& f) { f[24] ^= 0xFF; },
       ParseError::kBadIpChecksum},
      {"more fragments",
       [](std::vector<uint8_t>& f) {
         f[20] = 0x20;
         test::fix_ipv4_checksum(&f[14]);
       },
       ParseError::kIpFragment},
      {"fragment offset",
       [](std::vector<uint8_t>& f) {
         f[21] = 0x10;
         test::fix_ipv4_checksum(&f[14]);
       },
       ParseError::kIpFragment},
      {"total length one short (the UDP datagram no longer fits)",
       [](std::vector<uint8_t>& f) {
         store_be16(&f[16], 123);
         test::fix_ipv4_checksum(&f[14]);
       },
       ParseError::kBadUdpLen},
      {"UDP length one short", [](std::vector<uint8_t>& f) { store_be16(&f[38], 103); },
       ParseError::kBadUdpLen},
      {"UDP length one long", [](std::vector<uint8_t>& f) { store_be16(&f[38], 105); },
       ParseError::kBadUdpLen},
      {"UDP length 7", [](std::vector<uint8_t>& f) { store_be16(&f[38], 7); },
       ParseError::kBadUdpLen},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto frame = hex(test::kCapturedWriteOnly);
    c.edit(frame);
    ParsedPacket p;
    EXPECT_EQ(parse(frame, p), c.want);
  }
  // The EtherType and the IP version must agree, both ways round.
  auto v6_as_v4 = hex(test::kModelUdImmIpv6Vlan);
  store_be16(&v6_as_v4[16], kEtherTypeIpv4);
  ParsedPacket p;
  EXPECT_EQ(parse(v6_as_v4, p), ParseError::kBadIpVersion);
  auto v4_as_v6 = hex(test::kCapturedWriteOnly);
  store_be16(&v4_as_v6[12], kEtherTypeIpv6);
  EXPECT_EQ(parse(v4_as_v6, p), ParseError::kBadIpVersion);
  // IPv6 payload length past the frame.
  auto long6 = hex(test::kModelUdImmIpv6Vlan);
  store_be16(&long6[18 + 4], 45);
  EXPECT_EQ(parse(long6, p), ParseError::kTruncated);
  // IPv6 payload length shorter than the UDP datagram says.
  auto short6 = hex(test::kModelUdImmIpv6Vlan);
  store_be16(&short6[18 + 4], 43);
  EXPECT_EQ(parse(short6, p), ParseError::kBadUdpLen);
}

// ---------------------------------------------------------------------------------------
// Malformed transport

TEST(Frame, TransportVersionOtherThanZero) {
  Rand r(11);
  for (uint8_t tver = 1; tver < 16; ++tver) {
    RoceHeaders h = test::random_headers(r, opcode::kRcSendOnly, tver % 2 == 0, false);
    h.bth.tver = tver;
    ParsedPacket p;
    EXPECT_EQ(parse(build(h, std::vector<uint8_t>(8, 1)), p), ParseError::kBadVersion)
        << int{tver};
    EXPECT_EQ(p.reached, Layer::kBth);
    EXPECT_EQ(p.hdr.bth.tver, tver);
  }
}

TEST(Frame, EveryInvalidOpcodeIsUnknownEvenWithAWrongIcrc) {
  // Overwriting the opcode breaks the ICRC; the opcode check must come first.
  size_t n = 0;
  for (unsigned op = 0; op < 256; ++op) {
    if (opcode_info(static_cast<uint8_t>(op)).valid) continue;
    auto frame = hex(test::kCapturedWriteOnly);
    frame[42] = static_cast<uint8_t>(op);
    ParsedPacket p;
    EXPECT_EQ(parse(frame, p), ParseError::kUnknownOpcode) << op;
    EXPECT_EQ(p.reached, Layer::kBth);
    EXPECT_EQ(p.info, nullptr);
    EXPECT_EQ(p.hdr.bth.opcode, op);
    ++n;
  }
  EXPECT_EQ(n, 193u);
}

TEST(Frame, PadCountOnlyOnTheLastPacketOfAMessage) {
  Rand r(12);
  for (uint8_t op : test::valid_opcodes()) {
    const OpcodeInfo& info = opcode_info(op);
    if (!info.has_payload || info.fixed_payload != 0) continue;
    for (size_t size : {1u, 2u, 3u, 5u}) {
      const RoceHeaders h = test::random_headers(r, op, false, r.coin());
      ParsedPacket p;
      const ParseError e = parse(build(h, r.bytes(size)), p);
      // Expect: FIRST/MIDDLE packets carry whole MTUs, so a pad count there is malformed.
      EXPECT_EQ(e, info.ends_message() ? ParseError::kOk : ParseError::kBadPad)
          << info.name << " payload " << size;
    }
  }
}

TEST(Frame, PadCountLargerThanThePayload) {
  Rand r(13);
  struct Case {
    uint8_t op;
    size_t payload;
    uint8_t pad;
  };
  const Case cases[] = {
      {opcode::kRcSendOnly, 0, 1},  {opcode::kRcSendOnly, 0, 3},
      {opcode::kUdSendOnly, 0, 2},  {opcode::kRcAck, 0, 1},
      {opcode::kRcReadRequest, 0, 3},
  };
  for (const Case& c : cases) {
    const RoceHeaders h = test::random_headers(r, c.op, false, false);
    auto frame = build(h, r.bytes(c.payload));
    const size_t bth = h.eth.header_len() + h.ip_header_len() + 8;
    frame[bth + 1] = static_cast<uint8_t>((frame[bth + 1] & 0xCF) | (c.pad << 4));
    ParsedPacket p;
    EXPECT_EQ(parse(frame, p), ParseError::kBadPad) << opcode_info(c.op).name;
  }
}

// Found by the frame fuzzer: a SEND of 3 payload bytes with pad count 2 (payload + pad = 5)
// parsed, and the rebuilt frame (pad count 1) did not match it.
TEST(Frame, PayloadPlusPadNotAWholeNumberOfWords) {
  Rand r(16);
  for (uint8_t op : {opcode::kRcSendOnly, opcode::kRcSendLast, opcode::kUdSendOnly,
                     opcode::kRcWriteOnly, opcode::kRcReadResponseOnly}) {
    // Cutting 4 bytes must parse (it checks the length edits); cutting 1-3 must not.
    for (size_t cut = 1; cut <= 4; ++cut) {
      for (uint8_t pad = 0; pad <= 3; ++pad) {
        // IPv6: no header checksum to redo when the lengths shrink.
        const RoceHeaders h = test::random_headers(r, op, true, r.coin());
        auto frame = build(h, r.bytes(8));  // 8 bytes: no pad
        const size_t ip = h.eth.header_len(), udp = ip + 40, bth = udp + 8;
        const size_t payload_end = frame.size() - kIcrcLen;
        frame.erase(frame.begin() + static_cast<ptrdiff_t>(payload_end - cut),
                    frame.begin() + static_cast<ptrdiff_t>(payload_end));
        store_be16(&frame[ip + 4], static_cast<uint16_t>(load_be16(&frame[ip + 4]) - cut));
        store_be16(&frame[udp + 4], static_cast<uint16_t>(load_be16(&frame[udp + 4]) - cut));
        frame[bth + 1] = static_cast<uint8_t>((frame[bth + 1] & 0xCF) | (pad << 4));
        ParsedPacket p;
        EXPECT_EQ(parse_frame(frame, p, {.verify_icrc = false}),
                  cut == 4 ? ParseError::kOk : ParseError::kBadPad)
            << opcode_info(op).name << " cut " << cut << " pad " << int{pad};
      }
    }
  }
}

TEST(Frame, PayloadWhereTheOpcodeAllowsNone) {
  Rand r(14);
  for (uint8_t op : test::valid_opcodes()) {
    const OpcodeInfo& info = opcode_info(op);
    if (info.has_payload) continue;
    for (size_t size : {1u, 3u, 4u, 8u, 100u}) {
      const RoceHeaders h = test::random_headers(r, op, r.coin(), false);
      ParsedPacket p;
      EXPECT_EQ(parse(build(h, r.bytes(size)), p), ParseError::kBadPayloadLen)
          << info.name << " payload " << size;
    }
  }
}

TEST(Frame, AtomicWriteCarriesExactlyEightBytes) {
  Rand r(15);
  for (size_t size = 0; size <= 16; ++size) {
    const RoceHeaders h = test::random_headers(r, opcode::kRcAtomicWrite, false, false);
    ParsedPacket p;
    EXPECT_EQ(parse(build(h, r.bytes(size)), p),
              size == 8 ? ParseError::kOk : ParseError::kBadPayloadLen)
        << size;
  }
}

// ---------------------------------------------------------------------------------------
// ICRC mismatch

TEST(Frame, FlippedBitIsBadIcrcWithEveryHeaderFilledIn) {
  const auto good = hex(test::kCapturedWriteOnly);
  ParsedPacket ref;
  ASSERT_EQ(parse(good, ref), ParseError::kOk);
  // Every payload byte, and the ICRC itself.
  for (size_t i = 70; i < good.size(); ++i) {
    SCOPED_TRACE(i);
    auto frame = good;
    frame[i] ^= static_cast<uint8_t>(1u << (i % 8));
    ParsedPacket p;
    ASSERT_EQ(parse(frame, p), ParseError::kBadIcrc);
    EXPECT_EQ(p.reached, Layer::kComplete);
    EXPECT_EQ(p.info, ref.info);
    EXPECT_EQ(p.hdr, ref.hdr);
    EXPECT_EQ(p.payload.size(), 64u);
    EXPECT_EQ(p.payload.data(), frame.data() + 70);
    EXPECT_NE(p.icrc_calc, p.icrc_wire);
    EXPECT_FALSE(p.icrc_ok());
    if (i < good.size() - 4) {
      EXPECT_EQ(p.icrc_wire, test::kCapturedWriteOnlyIcrc);
    } else {
      EXPECT_EQ(p.icrc_calc, test::kCapturedWriteOnlyIcrc);
    }
    // Without ICRC verification the same frame is accepted.
    ParsedPacket q;
    EXPECT_EQ(parse_frame(frame, q, {.verify_icrc = false}), ParseError::kOk);
    EXPECT_TRUE(q.icrc_ok());
    ParsedPacket s;
    EXPECT_EQ(parse_frame(frame, s, {.crc = CrcImpl::kReference}), ParseError::kBadIcrc);
  }
}

TEST(Frame, ChangedInvariantHeaderFieldIsBadIcrc) {
  // PSN, P_Key, destination QP, R_Key, source IP (with its checksum fixed), UDP source port.
  const size_t offsets[] = {42 + 11, 42 + 2, 42 + 7, 42 + 12 + 11, 34 + 1};
  for (size_t off : offsets) {
    auto frame = hex(test::kCapturedWriteOnly);
    frame[off] ^= 0x01;
    ParsedPacket p;
    EXPECT_EQ(parse(frame, p), ParseError::kBadIcrc) << off;
  }
  auto frame = hex(test::kCapturedWriteOnly);
  frame[14 + 15] ^= 0x01;
  test::fix_ipv4_checksum(&frame[14]);
  ParsedPacket p;
  EXPECT_EQ(parse(frame, p), ParseError::kBadIcrc);
}

TEST(Frame, ReusedParsedPacketGetsFreshOffsets) {
  const auto ud = hex(test::kModelUdImmIpv6Vlan);
  const auto ack = hex(test::kCapturedAck);
  const auto arp = hex(test::kCapturedArp);
  ParsedPacket p;
  ASSERT_EQ(parse(ud, p), ParseError::kOk);
  ASSERT_EQ(parse(ack, p), ParseError::kOk);
  EXPECT_FALSE(p.hdr.ipv6);
  EXPECT_FALSE(p.hdr.eth.has_vlan);
  EXPECT_EQ(p.l3_offset, 14u);
  EXPECT_EQ(p.bth_offset, 42u);
  EXPECT_EQ(p.info, &opcode_info(opcode::kRcAck));
  EXPECT_TRUE(p.payload.empty());
  EXPECT_TRUE(p.pad.empty());
  EXPECT_TRUE(p.trailer.empty());
  EXPECT_EQ(p.hdr.ext.aeth.msn, 1u);
  // A frame that stops before the BTH leaves no opcode behind.
  EXPECT_EQ(parse(arp, p), ParseError::kNotIp);
  EXPECT_EQ(p.info, nullptr);
  EXPECT_EQ(p.reached, Layer::kEthernet);
}

}  // namespace
}  // namespace uroce::wire

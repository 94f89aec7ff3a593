// AETH: the 8-bit syndrome (ACK with credits / RNR NAK with a timer code / NAK with a code)
// and the 24-bit MSN. The RNR timer values are IBA table 45, written here in microseconds.
#include <gtest/gtest.h>

#include <array>

#include "wire/aeth.h"
#include "wire_test_util.h"

namespace uroce::wire {
namespace {

using test::emit_bytes;
using test::expect_fixed_codec;
using test::hex;

TEST(Aeth, ParsesCapturedAck) {
  // Frame 150 of the write_bw capture: ACK, credits not reported (31), MSN 1.
  const auto wire = hex("1f 000001");
  AethView v(wire);
  EXPECT_EQ(v.syndrome(), 0x1F);
  EXPECT_EQ(v.msn(), 1u);
  AethRepr r;
  ASSERT_EQ(AethRepr::parse(wire, r), ParseError::kOk);
  EXPECT_TRUE(r.is_ack());
  EXPECT_FALSE(r.is_nak());
  EXPECT_FALSE(r.is_rnr_nak());
  EXPECT_EQ(r.kind(), AckKind::kAck);
  EXPECT_EQ(r.credit_code(), 31);
  expect_fixed_codec<AethView>(wire, AethRepr{0x1F, 1});
}

TEST(Aeth, DefaultIsAckWithoutCredits) {
  const AethRepr r;
  EXPECT_EQ(r.syndrome, 0x1F);
  EXPECT_TRUE(r.is_ack());
  EXPECT_EQ(r.credit_code(), 31);
}

TEST(Aeth, AckWithCreditCount) {
  // 0 00 01010: ACK, credit code 10.
  const auto wire = hex("0a ffffff");
  AethRepr r;
  ASSERT_EQ(AethRepr::parse(wire, r), ParseError::kOk);
  EXPECT_TRUE(r.is_ack());
  EXPECT_EQ(r.credit_code(), 10);
  EXPECT_EQ(r.msn, 0xFFFFFFu);
  expect_fixed_codec<AethView>(wire, AethRepr{0x0A, 0xFFFFFF});
}

TEST(Aeth, RnrNakWithTimerCode) {
  // 0 01 01110: RNR NAK, timer code 14 (1.28 ms).
  const auto wire = hex("2e 00a1b2");
  AethRepr r;
  ASSERT_EQ(AethRepr::parse(wire, r), ParseError::kOk);
  EXPECT_EQ(r.kind(), AckKind::kRnrNak);
  EXPECT_TRUE(r.is_rnr_nak());
  EXPECT_FALSE(r.is_ack());
  EXPECT_FALSE(r.is_nak());
  EXPECT_EQ(r.rnr_timer_code(), 14);
  EXPECT_EQ(rnr_timer_ns(r.rnr_timer_code()), 1'280'000u);
  EXPECT_EQ(r.msn, 0xA1B2u);
  expect_fixed_codec<AethView>(wire, AethRepr{0x2E, 0xA1B2});
}

TEST(Aeth, NakWithCode) {
  // 0 11 00010: NAK, remote access error.
  const auto wire = hex("62 000007");
  AethRepr r;
  ASSERT_EQ(AethRepr::parse(wire, r), ParseError::kOk);
  EXPECT_EQ(r.kind(), AckKind::kNak);
  EXPECT_TRUE(r.is_nak());
  EXPECT_EQ(r.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(r.msn, 7u);
  expect_fixed_codec<AethView>(wire, AethRepr{0x62, 7});
}

TEST(Aeth, KindIsBitsSixAndFive) {
  for (unsigned s = 0; s < 256; ++s) {
    SCOPED_TRACE(s);
    const AethRepr r{static_cast<uint8_t>(s), 0};
    const unsigned low7 = s & 0x7F;  // bit 7 is reserved and does not change the kind
    const AckKind want = low7 < 0x20   ? AckKind::kAck
                         : low7 < 0x40 ? AckKind::kRnrNak
                         : low7 < 0x60 ? AckKind::kReserved
                                       : AckKind::kNak;
    EXPECT_EQ(r.kind(), want);
    EXPECT_EQ(r.value(), s % 32);
    EXPECT_EQ(r.is_ack(), want == AckKind::kAck);
    EXPECT_EQ(r.is_rnr_nak(), want == AckKind::kRnrNak);
    EXPECT_EQ(r.is_nak(), want == AckKind::kNak);
  }
}

TEST(Aeth, RnrTimerTable) {
  // IBA table 45 in microseconds; code 0 is the longest wait.
  constexpr std::array<uint64_t, 32> kMicros = {
      655360, 10,    20,    30,    40,    60,    80,     120,    160,    240,   320,
      480,    640,   960,   1280,  1920,  2560,  3840,   5120,   7680,   10240, 15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  for (uint8_t code = 0; code < 32; ++code) {
    SCOPED_TRACE(static_cast<int>(code));
    EXPECT_EQ(rnr_timer_ns(code), kMicros[code] * 1000);
  }
  EXPECT_EQ(rnr_timer_ns(0), 655'360'000u);  // 655.36 ms
  EXPECT_EQ(rnr_timer_ns(1), 10'000u);       // 10 us
  EXPECT_EQ(rnr_timer_ns(14), 1'280'000u);   // 1.28 ms
  EXPECT_EQ(rnr_timer_ns(31), 491'520'000u); // 491.52 ms
  for (uint8_t code = 2; code < 32; ++code)
    EXPECT_GT(rnr_timer_ns(code), rnr_timer_ns(static_cast<uint8_t>(code - 1)));
}

TEST(Aeth, RnrTimerUsesTheFiveBitField) {
  // Codes come from a 5-bit field; anything wider must not index past the table.
  EXPECT_EQ(rnr_timer_ns(32), rnr_timer_ns(0));
  EXPECT_EQ(rnr_timer_ns(0x2E), rnr_timer_ns(14));
  EXPECT_EQ(rnr_timer_ns(0xFF), rnr_timer_ns(31));
}

TEST(Aeth, NakCodeNames) {
  EXPECT_EQ(to_string(NakCode::kPsnSeqError), "PSN sequence error");
  EXPECT_EQ(to_string(NakCode::kInvalidRequest), "invalid request");
  EXPECT_EQ(to_string(NakCode::kRemoteAccessError), "remote access error");
  EXPECT_EQ(to_string(NakCode::kRemoteOpError), "remote operational error");
  EXPECT_EQ(to_string(NakCode::kInvalidRdRequest), "invalid RD request");
  for (uint8_t c = 5; c < 32; ++c)
    EXPECT_EQ(to_string(static_cast<NakCode>(c)), "reserved NAK code") << static_cast<int>(c);
  // The same names come out of a parsed NAK syndrome.
  EXPECT_EQ(to_string(AethRepr{0x60, 0}.nak_code()), "PSN sequence error");
  EXPECT_EQ(to_string(AethRepr{0x63, 0}.nak_code()), "remote operational error");
  EXPECT_EQ(to_string(AethRepr{0x7F, 0}.nak_code()), "reserved NAK code");
}

TEST(Aeth, AckKindNames) {
  EXPECT_EQ(to_string(AckKind::kAck), "ACK");
  EXPECT_EQ(to_string(AckKind::kRnrNak), "RNR NAK");
  EXPECT_EQ(to_string(AckKind::kReserved), "reserved");
  EXPECT_EQ(to_string(AckKind::kNak), "NAK");
}

TEST(Aeth, MakeSyndromes) {
  static_assert(AethRepr::make_ack() == 0x1F);
  static_assert(AethRepr::make_ack(0) == 0x00);
  static_assert(AethRepr::make_ack(5) == 0x05);
  static_assert(AethRepr::make_ack(0x25) == 0x05);  // credits are 5 bits
  static_assert(AethRepr::make_rnr_nak(0) == 0x20);
  static_assert(AethRepr::make_rnr_nak(14) == 0x2E);
  static_assert(AethRepr::make_rnr_nak(31) == 0x3F);
  static_assert(AethRepr::make_rnr_nak(0x41) == 0x21);  // no spill into the kind bits
  static_assert(AethRepr::make_nak(NakCode::kPsnSeqError) == 0x60);
  static_assert(AethRepr::make_nak(NakCode::kInvalidRequest) == 0x61);
  static_assert(AethRepr::make_nak(NakCode::kRemoteAccessError) == 0x62);
  static_assert(AethRepr::make_nak(NakCode::kRemoteOpError) == 0x63);
  static_assert(AethRepr::make_nak(NakCode::kInvalidRdRequest) == 0x64);
  EXPECT_EQ(AethRepr::make_ack(), 0x1F);  // keep the test visible when it runs
}

TEST(Aeth, MakeRoundTripsThroughTheWire) {
  auto through_wire = [](uint8_t syndrome, uint32_t msn) {
    const AethRepr r{syndrome, msn};
    AethRepr back;
    EXPECT_EQ(AethRepr::parse(emit_bytes(r, 4), back), ParseError::kOk);
    EXPECT_EQ(back, r);
    return back;
  };
  for (uint8_t credits = 0; credits < 32; ++credits) {
    const AethRepr r = through_wire(AethRepr::make_ack(credits), 0x000100u + credits);
    EXPECT_TRUE(r.is_ack());
    EXPECT_EQ(r.credit_code(), credits);
  }
  for (uint8_t code = 0; code < 32; ++code) {
    const AethRepr r = through_wire(AethRepr::make_rnr_nak(code), 0xFFFFFE);
    EXPECT_TRUE(r.is_rnr_nak());
    EXPECT_EQ(r.rnr_timer_code(), code);
  }
  for (NakCode c : {NakCode::kPsnSeqError, NakCode::kInvalidRequest,
                    NakCode::kRemoteAccessError, NakCode::kRemoteOpError,
                    NakCode::kInvalidRdRequest}) {
    const AethRepr r = through_wire(AethRepr::make_nak(c), 0);
    EXPECT_TRUE(r.is_nak());
    EXPECT_EQ(r.nak_code(), c);
  }
}

TEST(Aeth, MsnMaskedOnEmit) {
  // A 32-bit MSN must not overwrite the syndrome byte.
  EXPECT_EQ(emit_bytes(AethRepr{0x62, 0xFF123456}, 4), hex("62 123456"));
  EXPECT_EQ(emit_bytes(AethRepr{0x00, 0x01000000}, 4), hex("00 000000"));
}

}  // namespace
}  // namespace uroce::wire

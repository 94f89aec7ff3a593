// The InfiniBand transport headers carried over UDP: BTH and the extension headers RETH,
// AtomicETH, AtomicAckETH, ImmDt, IETH, DETH and FETH (AETH has its own file).
//
// For each: hand-written bytes parse to the expected fields (through the View and the Repr),
// the Repr emits exactly those bytes, emit -> parse round-trips, and every shorter input is
// kTruncated. 24-bit fields must be masked on emit so they never clobber their neighbours.
#include <gtest/gtest.h>

#include "wire/atomic_eth.h"
#include "wire/bth.h"
#include "wire/deth.h"
#include "wire/feth.h"
#include "wire/xrceth.h"
#include "wire/ieth.h"
#include "wire/immdt.h"
#include "wire/reth.h"
#include "wire_test_util.h"

namespace uroce::wire {
namespace {

using test::emit_bytes;
using test::expect_fixed_codec;
using test::hex;

// ---------------------------------------------------------------------------------------
// BTH

TEST(Bth, ParsesHandWrittenBytes) {
  // opcode 0x0B; SE=1 M=0 Pad=2 TVer=0; P_Key 0x8001; FECN=1 BECN=0; QP 0x123456;
  // AckReq=1; PSN 0xABCDEF.
  const auto wire = hex("0b a0 8001 80 123456 80 abcdef");
  ASSERT_EQ(BthView::check(wire), ParseError::kOk);
  BthView v(wire);
  EXPECT_EQ(v.opcode(), 0x0B);
  EXPECT_TRUE(v.se());
  EXPECT_FALSE(v.mig());
  EXPECT_EQ(v.pad_count(), 2);
  EXPECT_EQ(v.tver(), 0);
  EXPECT_EQ(v.pkey(), 0x8001);
  EXPECT_TRUE(v.fecn());
  EXPECT_FALSE(v.becn());
  EXPECT_EQ(v.resv6(), 0);
  EXPECT_EQ(v.dest_qp(), 0x123456u);
  EXPECT_TRUE(v.ack_req());
  EXPECT_EQ(v.resv7(), 0);
  EXPECT_EQ(v.psn(), 0xABCDEFu);

  const BthRepr want{.opcode = 0x0B,
                     .se = true,
                     .mig = false,
                     .pad_count = 2,
                     .tver = 0,
                     .pkey = 0x8001,
                     .fecn = true,
                     .becn = false,
                     .resv6 = 0,
                     .dest_qp = 0x123456,
                     .ack_req = true,
                     .resv7 = 0,
                     .psn = 0xABCDEF};
  expect_fixed_codec<BthView>(wire, want);
}

TEST(Bth, ParsesTheOtherBits) {
  // SE=0 M=1 Pad=3 TVer=0xF; BECN=1 resv6=0x15; QP 1; AckReq=0 resv7=0x2A; PSN 0.
  const auto wire = hex("11 7f ffff 55 000001 2a 000000");
  const BthRepr want{.opcode = 0x11,
                     .se = false,
                     .mig = true,
                     .pad_count = 3,
                     .tver = 0xF,
                     .pkey = 0xFFFF,
                     .fecn = false,
                     .becn = true,
                     .resv6 = 0x15,
                     .dest_qp = 1,
                     .ack_req = false,
                     .resv7 = 0x2A,
                     .psn = 0};
  expect_fixed_codec<BthView>(wire, want);
  BthView v(wire);
  EXPECT_TRUE(v.mig());
  EXPECT_TRUE(v.becn());
  EXPECT_FALSE(v.fecn());
}

TEST(Bth, ParsesCapturedRdmaWriteOnly) {
  // Frame 22 of the write_bw capture: RC RDMA WRITE Only to QP 0x11, AckReq, PSN 12481691.
  const auto wire = hex("0a 00 ffff 00 000011 80 be749b");
  BthRepr r;
  ASSERT_EQ(BthRepr::parse(wire, r), ParseError::kOk);
  EXPECT_EQ(r.opcode, 0x0A);
  EXPECT_EQ(r.pkey, 0xFFFF);
  EXPECT_EQ(r.dest_qp, 0x11u);
  EXPECT_TRUE(r.ack_req);
  EXPECT_EQ(r.psn, 12481691u);
}

TEST(Bth, EmitMasksEveryNarrowField) {
  // Every field is one bit (or one nibble) too wide; none of the excess may reach the wire.
  const BthRepr r{.opcode = 0x04,
                  .pad_count = 0x04,
                  .tver = 0x10,
                  .pkey = 0,
                  .resv6 = 0xC0,
                  .dest_qp = 0x01000000,
                  .resv7 = 0x80,
                  .psn = 0x01000000};
  EXPECT_EQ(emit_bytes(r, 12), hex("04 00 0000 00 000000 00 000000"));
  // All-ones values keep exactly their own bits.
  const BthRepr s{.opcode = 0xFF,
                  .pad_count = 0xFF,
                  .tver = 0xFF,
                  .pkey = 0,
                  .resv6 = 0xFF,
                  .dest_qp = 0xFFFFFFFF,
                  .resv7 = 0xFF,
                  .psn = 0xFFFFFFFF};
  EXPECT_EQ(emit_bytes(s, 12), hex("ff 3f 0000 3f ffffff 7f ffffff"));
}

TEST(Bth, DestQpAndPsnDoNotClobberNeighbours) {
  const BthRepr r{.opcode = 0x01, .pkey = 0x1234, .fecn = true, .dest_qp = 0xEE654321,
                  .ack_req = true, .psn = 0xDD0A0B0C};
  EXPECT_EQ(emit_bytes(r, 12), hex("01 00 1234 80 654321 80 0a0b0c"));
}

// ---------------------------------------------------------------------------------------
// RETH

TEST(Reth, KnownBytes) {
  const auto wire = hex("0123456789abcdef deadbeef 00010000");
  RethView v(wire);
  EXPECT_EQ(v.va(), 0x0123456789ABCDEFu);
  EXPECT_EQ(v.rkey(), 0xDEADBEEFu);
  EXPECT_EQ(v.dma_len(), 0x10000u);
  expect_fixed_codec<RethView>(wire, RethRepr{0x0123456789ABCDEF, 0xDEADBEEF, 0x10000});
}

TEST(Reth, CapturedWriteOnly) {
  // Frame 22: VA 0x000055933e3b6000, R_Key 0x27c, DMA length 64.
  expect_fixed_codec<RethView>(hex("000055933e3b6000 0000027c 00000040"),
                               RethRepr{0x000055933E3B6000, 0x27C, 64});
}

// ---------------------------------------------------------------------------------------
// AtomicETH / AtomicAckETH

TEST(AtomicEth, KnownBytes) {
  const auto wire = hex("1122334455667788 99aabbcc 0102030405060708 f0e0d0c0b0a09080");
  AtomicEthView v(wire);
  EXPECT_EQ(v.va(), 0x1122334455667788u);
  EXPECT_EQ(v.rkey(), 0x99AABBCCu);
  EXPECT_EQ(v.swap_add(), 0x0102030405060708u);
  EXPECT_EQ(v.compare(), 0xF0E0D0C0B0A09080u);
  expect_fixed_codec<AtomicEthView>(
      wire, AtomicEthRepr{0x1122334455667788, 0x99AABBCC, 0x0102030405060708,
                          0xF0E0D0C0B0A09080});
}

TEST(AtomicAckEth, KnownBytes) {
  const auto wire = hex("fedcba9876543210");
  EXPECT_EQ(AtomicAckEthView(wire).orig(), 0xFEDCBA9876543210u);
  expect_fixed_codec<AtomicAckEthView>(wire, AtomicAckEthRepr{0xFEDCBA9876543210});
}

// ---------------------------------------------------------------------------------------
// ImmDt, IETH

TEST(ImmDt, KnownBytes) {
  const auto wire = hex("12345678");
  EXPECT_EQ(ImmDtView(wire).imm(), 0x12345678u);
  expect_fixed_codec<ImmDtView>(wire, ImmDtRepr{0x12345678});
  expect_fixed_codec<ImmDtView>(hex("80000001"), ImmDtRepr{0x80000001});
}

TEST(Ieth, KnownBytes) {
  const auto wire = hex("cafebabe");
  EXPECT_EQ(IethView(wire).rkey(), 0xCAFEBABEu);
  expect_fixed_codec<IethView>(wire, IethRepr{0xCAFEBABE});
}

// ---------------------------------------------------------------------------------------
// DETH

TEST(Deth, KnownBytes) {
  // Controlled Q_Key 0x80010000, source QP 0x11.
  const auto wire = hex("80010000 00 000011");
  DethView v(wire);
  EXPECT_EQ(v.qkey(), 0x80010000u);
  EXPECT_EQ(v.reserved(), 0);
  EXPECT_EQ(v.src_qp(), 0x11u);
  expect_fixed_codec<DethView>(wire, DethRepr{0x80010000, 0, 0x11});
  // The reserved byte is carried so a capture re-emits exactly.
  expect_fixed_codec<DethView>(hex("11111111 5a abcdef"), DethRepr{0x11111111, 0x5A, 0xABCDEF});
}

TEST(Deth, SourceQpMaskedOnEmit) {
  const DethRepr r{0x00000001, 0x5A, 0xFF000011};
  EXPECT_EQ(emit_bytes(r, 8), hex("00000001 5a 000011"));
}

// ---------------------------------------------------------------------------------------
// XRCETH

TEST(Xrceth, KnownBytes) {
  // A reserved byte, then XRC SRQ number 0x000123 (big-endian, 24 bits).
  const auto wire = hex("00 000123");
  XrcethView v(wire);
  EXPECT_EQ(v.reserved(), 0);
  EXPECT_EQ(v.srqn(), 0x123u);
  expect_fixed_codec<XrcethView>(wire, XrcethRepr{0, 0x123});
  expect_fixed_codec<XrcethView>(hex("a5 fedcba"), XrcethRepr{0xA5, 0xFEDCBA});
}

TEST(Xrceth, SrqNumberMaskedOnEmit) {
  const XrcethRepr r{0, 0xFF000011};
  EXPECT_EQ(emit_bytes(r, 4), hex("00 000011"));
}

// ---------------------------------------------------------------------------------------
// FETH

TEST(Feth, KnownBytes) {
  // Selectivity 2, placement type 1 (global visibility).
  const auto wire = hex("00000021");
  FethView v(wire);
  EXPECT_EQ(v.raw(), 0x21u);
  EXPECT_EQ(v.selectivity(), 2);
  EXPECT_EQ(v.placement(), 1);
  expect_fixed_codec<FethView>(wire, FethRepr{0x21});
  FethRepr r{0x21};
  EXPECT_EQ(r.selectivity(), 2);
  EXPECT_EQ(r.placement(), 1);
}

TEST(Feth, ReservedBitsDoNotLeakIntoFields) {
  const auto all = hex("0000003f");
  EXPECT_EQ(FethView(all).selectivity(), 3);
  EXPECT_EQ(FethView(all).placement(), 15);
  const auto reserved = hex("ffffffc0");
  EXPECT_EQ(FethView(reserved).selectivity(), 0);
  EXPECT_EQ(FethView(reserved).placement(), 0);
  // ...but they are carried through unchanged.
  expect_fixed_codec<FethView>(reserved, FethRepr{0xFFFFFFC0});
}

}  // namespace
}  // namespace uroce::wire

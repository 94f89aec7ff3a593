// Ethernet (+802.1Q), ARP, IPv4, IPv6 and UDP: parse known bytes, emit known values,
// round trip, truncation at every length, and each rejected field value.
//
// Most vectors are the bytes of real frames from pcaps/kernel-rxe-write_bw_64.pcap
// (Soft-RoCE between 10.77.0.11 and 10.77.0.12).
#include <gtest/gtest.h>

#include "wire/arp.h"
#include "wire/ethernet.h"
#include "wire/ipv4.h"
#include "wire/ipv6.h"
#include "wire/udp.h"
#include "wire_test_util.h"

namespace uroce::wire {
namespace {

using test::emit_bytes;
using test::expect_truncated_below;
using test::fix_ipv4_checksum;
using test::hex;

constexpr MacAddr kMac11 = {0x52, 0x54, 0x00, 0x77, 0x00, 0x11};
constexpr MacAddr kMac12 = {0x52, 0x54, 0x00, 0x77, 0x00, 0x12};

// ---------------------------------------------------------------------------------------
// Ethernet

TEST(Ethernet, ParsesUntaggedHeader) {
  // Frame 22 of the write_bw capture: 52:54:00:77:00:12 -> :11, IPv4.
  const auto wire = hex("525400770011 525400770012 0800 4500");
  ASSERT_EQ(EthernetView::check(wire), ParseError::kOk);
  EthernetView v(wire);
  EXPECT_EQ(v.dst(), kMac11);
  EXPECT_EQ(v.src(), kMac12);
  EXPECT_FALSE(v.has_vlan());
  EXPECT_EQ(v.tci(), 0);
  EXPECT_EQ(v.vid(), 0);
  EXPECT_EQ(v.ethertype(), 0x0800);
  EXPECT_EQ(v.header_len(), 14u);
  ASSERT_EQ(v.payload().size(), 2u);
  EXPECT_EQ(v.payload()[0], 0x45);

  EthernetRepr r;
  ASSERT_EQ(EthernetRepr::parse(wire, r), ParseError::kOk);
  const EthernetRepr want{.dst = kMac11, .src = kMac12, .ethertype = kEtherTypeIpv4};
  EXPECT_EQ(r, want);
  EXPECT_EQ(r.header_len(), 14u);
}

TEST(Ethernet, ParsesVlanTaggedHeader) {
  // TCI 0x6064: PCP 3, DEI 0, VID 100; inner EtherType IPv6.
  const auto wire = hex("02000000000b 02000000000a 8100 6064 86dd");
  ASSERT_EQ(EthernetView::check(wire), ParseError::kOk);
  EthernetView v(wire);
  EXPECT_TRUE(v.has_vlan());
  EXPECT_EQ(v.tci(), 0x6064);
  EXPECT_EQ(v.pcp(), 3);
  EXPECT_FALSE(v.dei());
  EXPECT_EQ(v.vid(), 100);
  EXPECT_EQ(v.ethertype(), kEtherTypeIpv6);
  EXPECT_EQ(v.header_len(), 18u);
  EXPECT_TRUE(v.payload().empty());

  EthernetRepr r;
  ASSERT_EQ(EthernetRepr::parse(wire, r), ParseError::kOk);
  const EthernetRepr want{.dst = {0x02, 0, 0, 0, 0, 0x0b},
                          .src = {0x02, 0, 0, 0, 0, 0x0a},
                          .has_vlan = true,
                          .pcp = 3,
                          .dei = false,
                          .vid = 100,
                          .ethertype = kEtherTypeIpv6};
  EXPECT_EQ(r, want);
  EXPECT_EQ(r.header_len(), 18u);
}

TEST(Ethernet, VlanTciAllBitsSet) {
  const auto wire = hex("ffffffffffff 000000000000 8100 ffff 0806");
  EthernetRepr r;
  ASSERT_EQ(EthernetRepr::parse(wire, r), ParseError::kOk);
  EXPECT_EQ(r.pcp, 7);
  EXPECT_TRUE(r.dei);
  EXPECT_EQ(r.vid, 0x0FFF);
  EXPECT_EQ(r.ethertype, kEtherTypeArp);
  EXPECT_EQ(emit_bytes(r, 18), wire);
}

TEST(Ethernet, EmitsKnownBytes) {
  const EthernetRepr plain{.dst = kMac11, .src = kMac12, .ethertype = kEtherTypeIpv4};
  EXPECT_EQ(emit_bytes(plain, 14), hex("525400770011 525400770012 0800"));

  const EthernetRepr tagged{.dst = kMac12,
                            .src = kMac11,
                            .has_vlan = true,
                            .pcp = 5,
                            .dei = true,
                            .vid = 0x123,
                            .ethertype = kEtherTypeIpv6};
  // TCI = 101 1 000100100011 = 0xB123.
  EXPECT_EQ(emit_bytes(tagged, 18), hex("525400770012 525400770011 8100 b123 86dd"));
}

TEST(Ethernet, EmitMasksPcpAndVid) {
  // Out-of-range PCP/VID must not spill into the neighbouring TCI bits.
  const EthernetRepr r{.has_vlan = true, .pcp = 0xF8, .dei = false, .vid = 0xF000,
                       .ethertype = 0x1234};
  EXPECT_EQ(emit_bytes(r, 18), hex("000000000000 000000000000 8100 0000 1234"));
  const EthernetRepr r2{.has_vlan = true, .pcp = 0x0A, .dei = false, .vid = 0xFFFF,
                        .ethertype = 0x1234};
  EXPECT_EQ(emit_bytes(r2, 18), hex("000000000000 000000000000 8100 4fff 1234"));
}

TEST(Ethernet, RoundTrip) {
  for (bool vlan : {false, true}) {
    const EthernetRepr r{.dst = {1, 2, 3, 4, 5, 6},
                         .src = {7, 8, 9, 10, 11, 12},
                         .has_vlan = vlan,
                         .pcp = static_cast<uint8_t>(vlan ? 6 : 0),
                         .dei = vlan,
                         .vid = static_cast<uint16_t>(vlan ? 4094 : 0),
                         .ethertype = 0x88B5};
    const auto bytes = emit_bytes(r, r.header_len());
    EthernetRepr back;
    ASSERT_EQ(EthernetRepr::parse(bytes, back), ParseError::kOk);
    EXPECT_EQ(back, r);
  }
}

TEST(Ethernet, TruncatedAtEveryLength) {
  const auto plain = hex("525400770011 525400770012 0800");
  expect_truncated_below<EthernetView, EthernetRepr>(plain, 14);
  // A tag announced at bytes 12..13 needs 18 bytes, so 14..17 are truncated too.
  const auto tagged = hex("525400770011 525400770012 8100 0001 0800");
  expect_truncated_below<EthernetView, EthernetRepr>(tagged, 18);
}

// ---------------------------------------------------------------------------------------
// ARP

// Frames 1 and 2 of the write_bw capture (after the Ethernet header).
const char* const kArpRequest = "0001 0800 06 04 0001 525400770012 0a4d000c 000000000000 0a4d000b";
const char* const kArpReply = "0001 0800 06 04 0002 525400770011 0a4d000b 525400770012 0a4d000c";

TEST(Arp, ParsesRequestAndReply) {
  const auto req = hex(kArpRequest);
  ASSERT_EQ(ArpView::check(req), ParseError::kOk);
  ArpView v(req);
  EXPECT_EQ(v.htype(), 1);
  EXPECT_EQ(v.ptype(), 0x0800);
  EXPECT_EQ(v.hlen(), 6);
  EXPECT_EQ(v.plen(), 4);
  EXPECT_EQ(v.oper(), ArpRepr::kRequest);
  EXPECT_EQ(v.sha(), kMac12);
  EXPECT_EQ(v.spa(), (Ipv4Addr{10, 77, 0, 12}));
  EXPECT_EQ(v.tha(), MacAddr{});
  EXPECT_EQ(v.tpa(), (Ipv4Addr{10, 77, 0, 11}));

  ArpRepr r;
  ASSERT_EQ(ArpRepr::parse(hex(kArpReply), r), ParseError::kOk);
  const ArpRepr want{.oper = ArpRepr::kReply,
                     .sha = kMac11,
                     .spa = {10, 77, 0, 11},
                     .tha = kMac12,
                     .tpa = {10, 77, 0, 12}};
  EXPECT_EQ(r, want);
}

TEST(Arp, EmitsKnownBytesAndRoundTrips) {
  const ArpRepr req{.oper = ArpRepr::kRequest,
                    .sha = kMac12,
                    .spa = {10, 77, 0, 12},
                    .tha = {},
                    .tpa = {10, 77, 0, 11}};
  EXPECT_EQ(emit_bytes(req, 28), hex(kArpRequest));
  ArpRepr back;
  ASSERT_EQ(ArpRepr::parse(emit_bytes(req, 28), back), ParseError::kOk);
  EXPECT_EQ(back, req);
}

TEST(Arp, TruncatedAtEveryLength) {
  expect_truncated_below<ArpView, ArpRepr>(hex(kArpRequest), ArpView::kLen);
}

TEST(Arp, RejectsOtherHardwareAndProtocolTypes) {
  struct Case {
    size_t off;
    std::vector<uint8_t> value;
    const char* what;
  };
  const Case cases[] = {
      {0, {0x00, 0x06}, "htype 6 (IEEE 802)"},
      {0, {0x00, 0x20}, "htype 32 (InfiniBand)"},
      {0, {0x00, 0x00}, "htype 0"},
      {2, {0x86, 0xDD}, "ptype IPv6"},
      {4, {0x08}, "hlen 8"},
      {4, {0x14}, "hlen 20 (IPoIB)"},
      {5, {0x10}, "plen 16"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto wire = hex(kArpRequest);
    for (size_t i = 0; i < c.value.size(); ++i) wire[c.off + i] = c.value[i];
    ArpRepr r;
    EXPECT_EQ(ArpRepr::parse(wire, r), ParseError::kBadEthernet);
  }
}

// ---------------------------------------------------------------------------------------
// IPv4

// The classic worked example: 192.168.0.1 -> 192.168.0.199, UDP, total length 115,
// checksum 0xB861.
std::vector<uint8_t> wikipedia_ipv4() {
  auto b = hex("4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7");
  b.resize(0x73, 0);  // the datagram's payload
  return b;
}

// Frame 22 of the write_bw capture: 10.77.0.12 -> 10.77.0.11, total length 124.
const char* const kCapturedIpv4 = "4500 007c e67e 4000 4011 3f42 0a4d 000c 0a4d 000b";

// IHL 7 with a Router Alert option and a second 4-byte option; checksum from an
// independent model.
const char* const kIpv4WithOptions =
    "47 b8 001c beef 4000 01 11 0e22 0a000001 0a000002 94040000 01010100";

TEST(Ipv4, InternetChecksumKnownVectors) {
  // RFC 1071 section 3 example: the words sum to 0xDDF2.
  EXPECT_EQ(internet_checksum(hex("0001 f203 f4f5 f6f7")), 0x220D);
  EXPECT_EQ(internet_checksum(hex("4500 0073 0000 4000 4011 0000 c0a8 0001 c0a8 00c7")),
            0xB861);
  // A header that carries its checksum sums to zero.
  EXPECT_EQ(internet_checksum(hex("4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7")), 0);
  EXPECT_EQ(internet_checksum(hex(kCapturedIpv4)), 0);
  // Odd length: the last byte is the high half of a zero-padded word.
  EXPECT_EQ(internet_checksum(hex("01")), 0xFEFF);
  EXPECT_EQ(internet_checksum(hex("0001 f2")), 0x0DFE);
  EXPECT_EQ(internet_checksum(Bytes{}), 0xFFFF);
  // End-around carry: 0xFFFF + 0x0001 = 0x10000 -> 0x0001.
  EXPECT_EQ(internet_checksum(hex("ffff 0001")), 0xFFFE);
}

TEST(Ipv4, ParsesKnownHeader) {
  const auto wire = wikipedia_ipv4();
  ASSERT_EQ(Ipv4View::check(wire), ParseError::kOk);
  Ipv4View v(wire);
  EXPECT_EQ(v.version(), 4);
  EXPECT_EQ(v.header_len(), 20u);
  EXPECT_EQ(v.dscp(), 0);
  EXPECT_EQ(v.ecn(), 0);
  EXPECT_EQ(v.total_len(), 115);
  EXPECT_EQ(v.ident(), 0);
  EXPECT_TRUE(v.dont_frag());
  EXPECT_FALSE(v.more_frags());
  EXPECT_EQ(v.frag_offset(), 0);
  EXPECT_FALSE(v.is_fragment());
  EXPECT_EQ(v.ttl(), 64);
  EXPECT_EQ(v.protocol(), kIpProtoUdp);
  EXPECT_EQ(v.checksum(), 0xB861);
  EXPECT_TRUE(v.checksum_ok());
  EXPECT_EQ(v.src(), (Ipv4Addr{192, 168, 0, 1}));
  EXPECT_EQ(v.dst(), (Ipv4Addr{192, 168, 0, 199}));
  EXPECT_TRUE(v.options().empty());
  EXPECT_EQ(v.payload().size(), 95u);

  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::parse(wire, r), ParseError::kOk);
  Ipv4Repr want;
  want.total_len = 115;
  want.dont_frag = true;
  want.ttl = 64;
  want.protocol = 17;
  want.checksum = 0xB861;
  want.src = {192, 168, 0, 1};
  want.dst = {192, 168, 0, 199};
  EXPECT_EQ(r, want);
}

TEST(Ipv4, ParsesDscpAndEcn) {
  // TOS 0x6A = DSCP 26 (AF31), ECN 2 (ECT(0)).
  auto wire = hex("456a 0014 0000 0000 4011 0000 0a000001 0a000002");
  fix_ipv4_checksum(wire.data());
  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::parse(wire, r), ParseError::kOk);
  EXPECT_EQ(r.dscp, 26);
  EXPECT_EQ(r.ecn, 2);
  EXPECT_FALSE(r.dont_frag);
  EXPECT_EQ(Ipv4View(wire).payload().size(), 0u);
}

TEST(Ipv4, EmitsKnownBytesWithComputedChecksum) {
  Ipv4Repr r;
  r.total_len = 124;
  r.ident = 0xE67E;
  r.dont_frag = true;
  r.ttl = 64;
  r.protocol = 17;
  r.checksum = 0x1234;  // ignored: emit writes a fresh checksum
  r.src = {10, 77, 0, 12};
  r.dst = {10, 77, 0, 11};
  EXPECT_EQ(emit_bytes(r, 20), hex(kCapturedIpv4));

  Ipv4Repr w;
  w.total_len = 115;
  w.src = {192, 168, 0, 1};
  w.dst = {192, 168, 0, 199};
  EXPECT_EQ(emit_bytes(w, 20), hex("4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7"));
}

TEST(Ipv4, EmitMasksEcnAndWritesClearedFlags) {
  Ipv4Repr r;
  r.dscp = 0x3F;
  r.ecn = 0xFF;  // only the low two bits belong to ECN
  r.total_len = 20;
  r.dont_frag = false;
  r.ttl = 1;
  r.protocol = 6;
  auto want = hex("45ff 0014 0000 0000 0106 0000 00000000 00000000");
  fix_ipv4_checksum(want.data());
  EXPECT_EQ(emit_bytes(r, 20), want);
}

TEST(Ipv4, OptionsAreCarriedThrough) {
  const auto wire = hex(kIpv4WithOptions);
  ASSERT_EQ(Ipv4View::check(wire), ParseError::kOk);
  Ipv4View v(wire);
  EXPECT_EQ(v.header_len(), 28u);
  EXPECT_EQ(v.dscp(), 46);  // EF
  EXPECT_EQ(v.ecn(), 0);
  EXPECT_TRUE(v.checksum_ok());
  ASSERT_EQ(v.options().size(), 8u);
  EXPECT_EQ(std::vector<uint8_t>(v.options().begin(), v.options().end()),
            hex("94040000 01010100"));

  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::parse(wire, r), ParseError::kOk);
  EXPECT_EQ(r.options_len, 8);
  EXPECT_EQ(r.header_len(), 28u);
  EXPECT_EQ(r.total_len, 28);
  EXPECT_EQ(r.ident, 0xBEEF);
  EXPECT_EQ(r.ttl, 1);
  EXPECT_EQ(r.checksum, 0x0E22);
  EXPECT_EQ(r.options[0], 0x94);
  EXPECT_EQ(r.options[4], 0x01);
  EXPECT_EQ(r.options[7], 0x00);
  EXPECT_EQ(r.options[8], 0x00);

  Ipv4Repr e;
  e.dscp = 46;
  e.total_len = 28;
  e.ident = 0xBEEF;
  e.ttl = 1;
  e.src = {10, 0, 0, 1};
  e.dst = {10, 0, 0, 2};
  e.options_len = 8;
  const auto opt = hex("94040000 01010100");
  for (size_t i = 0; i < opt.size(); ++i) e.options[i] = opt[i];
  EXPECT_EQ(emit_bytes(e, 28), wire);
}

TEST(Ipv4, RoundTripWithMaximumOptions) {
  Ipv4Repr r;
  r.dscp = 10;
  r.ecn = 1;
  r.total_len = 60;
  r.ident = 0xABCD;
  r.ttl = 200;
  r.src = {1, 2, 3, 4};
  r.dst = {5, 6, 7, 8};
  r.options_len = 40;
  for (size_t i = 0; i < 40; ++i) r.options[i] = static_cast<uint8_t>(i + 1);
  const auto bytes = emit_bytes(r, 60);
  EXPECT_EQ(bytes[0], 0x4F);
  Ipv4Repr back;
  ASSERT_EQ(Ipv4Repr::parse(bytes, back), ParseError::kOk);
  r.checksum = back.checksum;  // the only field emit() computes
  EXPECT_EQ(back, r);
  EXPECT_EQ(test::ref_checksum(bytes), 0);
}

TEST(Ipv4, TruncatedAtEveryLength) {
  // Shorter than the fixed header, shorter than IHL, and shorter than the total length.
  expect_truncated_below<Ipv4View, Ipv4Repr>(hex(kIpv4WithOptions), 28);
  expect_truncated_below<Ipv4View, Ipv4Repr>(wikipedia_ipv4(), 115);
}

TEST(Ipv4, PayloadExcludesLinkPadding) {
  auto wire = wikipedia_ipv4();
  wire.resize(wire.size() + 6, 0xEE);  // e.g. Ethernet minimum-size padding
  Ipv4Repr r;
  ASSERT_EQ(Ipv4Repr::parse(wire, r), ParseError::kOk);
  EXPECT_EQ(Ipv4View(wire).payload().size(), 95u);
}

TEST(Ipv4, RejectsEveryVersionButFour) {
  for (unsigned ver = 0; ver < 16; ++ver) {
    if (ver == 4) continue;
    SCOPED_TRACE(ver);
    auto wire = wikipedia_ipv4();
    wire[0] = static_cast<uint8_t>(ver << 4 | 5);
    fix_ipv4_checksum(wire.data());
    Ipv4Repr r;
    EXPECT_EQ(Ipv4View::check(wire), ParseError::kBadIpVersion);
    EXPECT_EQ(Ipv4Repr::parse(wire, r), ParseError::kBadIpVersion);
  }
}

TEST(Ipv4, RejectsIhlBelowFive) {
  for (uint8_t ihl = 0; ihl < 5; ++ihl) {
    SCOPED_TRACE(static_cast<int>(ihl));
    auto wire = wikipedia_ipv4();
    wire[0] = static_cast<uint8_t>(0x40 | ihl);
    Ipv4Repr r;
    EXPECT_EQ(Ipv4View::check(wire), ParseError::kBadIpHeaderLen);
    EXPECT_EQ(Ipv4Repr::parse(wire, r), ParseError::kBadIpHeaderLen);
  }
}

TEST(Ipv4, TotalLengthTooShortOrTooLong) {
  Ipv4Repr r;
  for (int total : {0, 1, 19}) {
    SCOPED_TRACE(total);
    auto wire = wikipedia_ipv4();
    wire[2] = static_cast<uint8_t>(total >> 8);
    wire[3] = static_cast<uint8_t>(total);
    fix_ipv4_checksum(wire.data());
    EXPECT_EQ(Ipv4Repr::parse(wire, r), ParseError::kBadIpTotalLen);
  }
  // Shorter than IHL = 7 (28 bytes) but not shorter than 20.
  auto opt = hex(kIpv4WithOptions);
  opt[3] = 24;
  fix_ipv4_checksum(opt.data());
  EXPECT_EQ(Ipv4Repr::parse(opt, r), ParseError::kBadIpTotalLen);
  // Exactly the header: a valid, empty datagram.
  auto exact = wikipedia_ipv4();
  exact[3] = 20;
  fix_ipv4_checksum(exact.data());
  EXPECT_EQ(Ipv4Repr::parse(exact, r), ParseError::kOk);
  EXPECT_EQ(r.total_len, 20);
  // Longer than the bytes present: the datagram was cut short.
  auto longer = wikipedia_ipv4();
  longer[3] = 0x74;
  fix_ipv4_checksum(longer.data());
  EXPECT_EQ(Ipv4Repr::parse(longer, r), ParseError::kTruncated);
  longer[2] = 0xFF;
  longer[3] = 0xFF;
  fix_ipv4_checksum(longer.data());
  EXPECT_EQ(Ipv4Repr::parse(longer, r), ParseError::kTruncated);
}

TEST(Ipv4, RejectsBadChecksum) {
  Ipv4Repr r;
  auto wire = wikipedia_ipv4();
  wire[11] = 0x62;  // 0xB862
  EXPECT_EQ(Ipv4Repr::parse(wire, r), ParseError::kBadIpChecksum);
  EXPECT_FALSE(Ipv4View(wire).checksum_ok());
  // Any changed header byte with the old checksum fails, including an option byte.
  for (size_t i : {1u, 4u, 8u, 12u, 19u}) {
    SCOPED_TRACE(i);
    auto w = wikipedia_ipv4();
    w[i] ^= 0x10;
    EXPECT_EQ(Ipv4Repr::parse(w, r), ParseError::kBadIpChecksum);
  }
  auto opt = hex(kIpv4WithOptions);
  opt[25] ^= 0x01;
  EXPECT_EQ(Ipv4Repr::parse(opt, r), ParseError::kBadIpChecksum);
}

TEST(Ipv4, RejectsFragmentsButNotDontFragment) {
  struct Case {
    uint8_t b6, b7;
    ParseError want;
    const char* what;
  };
  const Case cases[] = {
      {0x40, 0x00, ParseError::kOk, "DF only"},
      {0x00, 0x00, ParseError::kOk, "no flags"},
      {0x20, 0x00, ParseError::kIpFragment, "MF (first fragment)"},
      {0x60, 0x00, ParseError::kIpFragment, "DF+MF"},
      {0x00, 0x01, ParseError::kIpFragment, "offset 1 (last fragment)"},
      {0x1F, 0xFF, ParseError::kIpFragment, "offset 0x1FFF"},
      {0x20, 0xB9, ParseError::kIpFragment, "MF, offset 185"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto wire = wikipedia_ipv4();
    wire[6] = c.b6;
    wire[7] = c.b7;
    fix_ipv4_checksum(wire.data());
    Ipv4Repr r;
    EXPECT_EQ(Ipv4View::check(wire), ParseError::kOk);  // structure is fine either way
    EXPECT_EQ(Ipv4Repr::parse(wire, r), c.want);
    if (c.want == ParseError::kOk) {
      EXPECT_EQ(r.dont_frag, (c.b6 & 0x40) != 0);
    }
  }
  auto mf = wikipedia_ipv4();
  mf[6] = 0x3F;
  mf[7] = 0x02;
  Ipv4View v(mf);
  EXPECT_TRUE(v.more_frags());
  EXPECT_FALSE(v.dont_frag());
  EXPECT_EQ(v.frag_offset(), 0x1F02);
}

// ---------------------------------------------------------------------------------------
// IPv6

// TC 0x6A, flow label 0xABCDE, payload length 44, UDP, hop limit 64, fd00::a -> fd00::b.
std::vector<uint8_t> known_ipv6() {
  auto b = hex(
      "66aabcde 002c 11 40"
      "fd00 0000 0000 0000 0000 0000 0000 000a"
      "fd00 0000 0000 0000 0000 0000 0000 000b");
  b.resize(40 + 44, 0x77);
  return b;
}
constexpr Ipv6Addr kFd00A = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a};
constexpr Ipv6Addr kFd00B = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b};

TEST(Ipv6, ParsesKnownHeader) {
  const auto wire = known_ipv6();
  ASSERT_EQ(Ipv6View::check(wire), ParseError::kOk);
  Ipv6View v(wire);
  EXPECT_EQ(v.version(), 6);
  EXPECT_EQ(v.traffic_class(), 0x6A);
  EXPECT_EQ(v.flow_label(), 0xABCDEu);
  EXPECT_EQ(v.payload_len(), 44);
  EXPECT_EQ(v.next_header(), 17);
  EXPECT_EQ(v.hop_limit(), 64);
  EXPECT_EQ(v.src(), kFd00A);
  EXPECT_EQ(v.dst(), kFd00B);
  EXPECT_EQ(v.payload().size(), 44u);

  Ipv6Repr r;
  ASSERT_EQ(Ipv6Repr::parse(wire, r), ParseError::kOk);
  const Ipv6Repr want{.traffic_class = 0x6A,
                      .flow_label = 0xABCDE,
                      .payload_len = 44,
                      .next_header = 17,
                      .hop_limit = 64,
                      .src = kFd00A,
                      .dst = kFd00B};
  EXPECT_EQ(r, want);
}

TEST(Ipv6, EmitsKnownBytesAndRoundTrips) {
  const Ipv6Repr r{.traffic_class = 0x6A,
                   .flow_label = 0xABCDE,
                   .payload_len = 44,
                   .next_header = 17,
                   .hop_limit = 64,
                   .src = kFd00A,
                   .dst = kFd00B};
  const auto want = known_ipv6();
  EXPECT_EQ(emit_bytes(r, 40), std::vector<uint8_t>(want.begin(), want.begin() + 40));

  const Ipv6Repr s{.traffic_class = 0xFF,
                   .flow_label = 0xFFFFF,
                   .payload_len = 0,
                   .next_header = 59,
                   .hop_limit = 255,
                   .src = kFd00B,
                   .dst = kFd00A};
  const auto bytes = emit_bytes(s, 40);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8), hex("6fffffff 0000 3b ff"));
  Ipv6Repr back;
  ASSERT_EQ(Ipv6Repr::parse(bytes, back), ParseError::kOk);
  EXPECT_EQ(back, s);
}

TEST(Ipv6, EmitMasksFlowLabelTo20Bits) {
  const Ipv6Repr r{.traffic_class = 0x00, .flow_label = 0xFFF12345, .payload_len = 8};
  const auto bytes = emit_bytes(r, 40);
  // Version stays 6 and the traffic class stays 0.
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8), hex("60012345 0008 11 40"));
}

TEST(Ipv6, TruncatedAtEveryLength) {
  // Below 40 bytes the header is cut; from 40 to 83 the payload is.
  expect_truncated_below<Ipv6View, Ipv6Repr>(known_ipv6(), 84);
}

TEST(Ipv6, RejectsEveryVersionButSix) {
  for (unsigned ver = 0; ver < 16; ++ver) {
    if (ver == 6) continue;
    SCOPED_TRACE(ver);
    auto wire = known_ipv6();
    wire[0] = static_cast<uint8_t>(ver << 4 | (wire[0] & 0x0F));
    Ipv6Repr r;
    EXPECT_EQ(Ipv6View::check(wire), ParseError::kBadIpVersion);
    EXPECT_EQ(Ipv6Repr::parse(wire, r), ParseError::kBadIpVersion);
  }
}

// ---------------------------------------------------------------------------------------
// UDP

// The UDP datagram of frame 22: 49441 -> 4791, length 104, checksum 0, 96 payload bytes.
std::vector<uint8_t> captured_udp() {
  auto b = hex("c121 12b7 0068 0000");
  b.resize(104, 0x5A);
  return b;
}

TEST(Udp, ParsesKnownHeader) {
  const auto wire = captured_udp();
  ASSERT_EQ(UdpView::check(wire), ParseError::kOk);
  UdpView v(wire);
  EXPECT_EQ(v.src_port(), 49441);
  EXPECT_EQ(v.dst_port(), kRoceV2Port);
  EXPECT_EQ(v.length(), 104);
  EXPECT_EQ(v.checksum(), 0);
  EXPECT_EQ(v.payload().size(), 96u);

  UdpRepr r;
  ASSERT_EQ(UdpRepr::parse(wire, r), ParseError::kOk);
  const UdpRepr want{.src_port = 49441, .dst_port = 4791, .length = 104, .checksum = 0};
  EXPECT_EQ(r, want);
}

TEST(Udp, EmitsKnownBytesAndRoundTrips) {
  const UdpRepr r{.src_port = 0xD00D, .dst_port = 4791, .length = 8, .checksum = 0xBEEF};
  const auto bytes = emit_bytes(r, 8);
  EXPECT_EQ(bytes, hex("d00d 12b7 0008 beef"));
  UdpRepr back;
  ASSERT_EQ(UdpRepr::parse(bytes, back), ParseError::kOk);
  EXPECT_EQ(back, r);
}

TEST(Udp, TruncatedAtEveryLength) {
  const auto wire = captured_udp();
  for (size_t n = 0; n < 8; ++n) {
    UdpRepr r;
    EXPECT_EQ(UdpView::check(Bytes(wire).first(n)), ParseError::kTruncated) << n;
    EXPECT_EQ(UdpRepr::parse(Bytes(wire).first(n), r), ParseError::kTruncated) << n;
  }
}

TEST(Udp, LengthBelowHeaderOrDifferentFromIpPayload) {
  UdpRepr r;
  for (uint16_t len = 0; len < 8; ++len) {
    SCOPED_TRACE(len);
    auto wire = hex("c121 12b7 0000 0000");
    wire[5] = static_cast<uint8_t>(len);
    EXPECT_EQ(UdpView::check(wire), ParseError::kBadUdpLen);
    EXPECT_EQ(UdpRepr::parse(wire, r), ParseError::kBadUdpLen);
  }
  // The UDP length must equal the IP payload exactly, in both directions.
  for (int len : {103, 105, 8, 0xFFFF}) {
    SCOPED_TRACE(len);
    auto wire = captured_udp();
    wire[4] = static_cast<uint8_t>(len >> 8);
    wire[5] = static_cast<uint8_t>(len);
    EXPECT_EQ(UdpRepr::parse(wire, r), ParseError::kBadUdpLen);
  }
}

}  // namespace
}  // namespace uroce::wire

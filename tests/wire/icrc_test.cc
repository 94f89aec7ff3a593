// CRC-32 and the RoCEv2 ICRC: standard check values for both implementations, zlib-style
// chaining, the ICRC of real and independently modelled frames, fast == reference on
// thousands of random frames, and exactly which bits the ICRC ignores.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

#include "known_frames.h"
#include "wire/icrc.h"
#include "wire/packet.h"
#include "wire_test_util.h"

namespace uroce::wire {
namespace {

using test::hex;
using test::Rand;

constexpr CrcImpl kImpls[] = {CrcImpl::kFast, CrcImpl::kReference};

const char* impl_name(CrcImpl i) { return i == CrcImpl::kFast ? "fast" : "reference"; }

Bytes text(std::string_view s) {
  return Bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// ---------------------------------------------------------------------------------------
// CRC-32

TEST(Crc32, CheckValues) {
  const std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF);
  for (CrcImpl impl : kImpls) {
    SCOPED_TRACE(impl_name(impl));
    EXPECT_EQ(crc32(0, text("123456789"), impl), 0xCBF43926u);
    EXPECT_EQ(crc32(0, text("The quick brown fox jumps over the lazy dog"), impl), 0x414FA339u);
    EXPECT_EQ(crc32(0, text("a"), impl), 0xE8B7BE43u);
    EXPECT_EQ(crc32(0, zeros, impl), 0x190A55ADu);
    EXPECT_EQ(crc32(0, ones, impl), 0xFF6CAB0Bu);
  }
}

TEST(Crc32, EmptyInputLeavesTheCrcUnchanged) {
  for (CrcImpl impl : kImpls) {
    SCOPED_TRACE(impl_name(impl));
    EXPECT_EQ(crc32(0, Bytes{}, impl), 0u);
    EXPECT_EQ(crc32(0xCBF43926, Bytes{}, impl), 0xCBF43926u);
  }
}

TEST(Crc32, ChainingEqualsOneShot) {
  Rand r(0xC4C32);
  const std::vector<uint8_t> data = r.bytes(1000);
  const Bytes all(data);
  const uint32_t whole = crc32(0, all, CrcImpl::kReference);
  EXPECT_EQ(crc32(0, all, CrcImpl::kFast), whole);
  for (size_t split = 0; split <= data.size(); ++split) {
    SCOPED_TRACE(split);
    const Bytes a = all.first(split), b = all.subspan(split);
    for (CrcImpl first : kImpls)
      for (CrcImpl second : kImpls) EXPECT_EQ(crc32(crc32(0, a, first), b, second), whole);
  }
  // One byte at a time.
  uint32_t c = 0;
  for (uint8_t byte : data) c = crc32(c, Bytes(&byte, 1), CrcImpl::kFast);
  EXPECT_EQ(c, whole);
}

TEST(Crc32, FastEqualsReferenceAtEveryAlignmentAndLength) {
  Rand r(0xA119);
  const std::vector<uint8_t> data = r.bytes(2200);
  for (size_t len = 0; len <= 2100; len += (len < 300 ? 1 : 37)) {
    for (size_t off = 0; off < 16; off += (len < 300 ? 1 : 5)) {
      const Bytes b = Bytes(data).subspan(off, len);
      const uint32_t seed = r.u32();
      ASSERT_EQ(crc32(seed, b, CrcImpl::kFast), crc32(seed, b, CrcImpl::kReference))
          << "len " << len << " offset " << off;
    }
  }
}

// ---------------------------------------------------------------------------------------
// ICRC of known frames

struct KnownFrame {
  const char* name;
  const char* hex;
  size_t l2_len;
  bool ipv6;
  size_t ip_hdr_len;
  uint32_t icrc;
};

const KnownFrame kKnown[] = {
    {"captured RDMA WRITE ONLY", test::kCapturedWriteOnly, 14, false, 20,
     test::kCapturedWriteOnlyIcrc},
    {"captured ACK", test::kCapturedAck, 14, false, 20, test::kCapturedAckIcrc},
    {"model UD over IPv6 + VLAN", test::kModelUdImmIpv6Vlan, 18, true, 40,
     test::kModelUdImmIpv6VlanIcrc},
    {"model CAS over IPv4 + options", test::kModelCasIpv4Options, 14, false, 24,
     test::kModelCasIpv4OptionsIcrc},
};

/// The ICRC input of a frame: IP header .. last pad byte.
Bytes l3_without_icrc(const std::vector<uint8_t>& frame, size_t l2_len) {
  return Bytes(frame).subspan(l2_len, frame.size() - l2_len - kIcrcLen);
}

TEST(Icrc, KnownFramesVerify) {
  for (const KnownFrame& k : kKnown) {
    SCOPED_TRACE(k.name);
    const auto frame = hex(k.hex);
    // The ICRC is stored least significant byte first.
    EXPECT_EQ(load_icrc(&frame[frame.size() - 4]), k.icrc);
    for (CrcImpl impl : kImpls) {
      SCOPED_TRACE(impl_name(impl));
      EXPECT_EQ(icrc_compute(l3_without_icrc(frame, k.l2_len), k.ipv6, k.ip_hdr_len, impl),
                k.icrc);
    }
  }
}

TEST(Icrc, StoreAndLoadAreLittleEndian) {
  uint8_t b[4] = {};
  store_icrc(b, 0x11223344);
  EXPECT_EQ(b[0], 0x44);
  EXPECT_EQ(b[1], 0x33);
  EXPECT_EQ(b[2], 0x22);
  EXPECT_EQ(b[3], 0x11);
  EXPECT_EQ(load_icrc(b), 0x11223344u);
  const uint8_t wire[4] = {0xbb, 0xb3, 0x45, 0xec};
  EXPECT_EQ(load_icrc(wire), 0xEC45B3BBu);
}

// ---------------------------------------------------------------------------------------
// Fast == reference on random frames

TEST(Icrc, FastEqualsReferenceOnRandomFrames) {
  Rand r(20240611);
  const std::vector<uint8_t> ops = test::valid_opcodes();
  std::vector<uint8_t> with_payload;
  for (uint8_t op : ops)
    if (opcode_info(op).has_payload) with_payload.push_back(op);
  std::vector<uint8_t> buf(9000);
  size_t frames = 0;
  // Every payload size from 0 to just past a 4096-byte MTU, alternating IPv4 and IPv6.
  for (size_t size = 0; size <= 4100; ++size) {
    const bool ipv6 = (size % 2) == 1;
    const uint8_t op = size == 0 ? ops[r.below(ops.size())]
                                 : with_payload[r.below(with_payload.size())];
    const RoceHeaders h = test::random_headers(r, op, ipv6, r.coin());
    const std::vector<uint8_t> payload = r.bytes(size);
    const size_t n = build_frame(h, payload, buf);
    ASSERT_EQ(n, frame_len(h, size)) << "size " << size;
    const size_t l2 = h.eth.header_len();
    const Bytes l3(buf.data() + l2, n - l2 - kIcrcLen);
    const uint32_t ref = icrc_compute(l3, ipv6, h.ip_header_len(), CrcImpl::kReference);
    ASSERT_EQ(icrc_compute(l3, ipv6, h.ip_header_len(), CrcImpl::kFast), ref)
        << "size " << size << " opcode " << int{op};
    ASSERT_EQ(load_icrc(&buf[n - kIcrcLen]), ref) << "build_frame stored a different ICRC";
    ++frames;
  }
  EXPECT_EQ(frames, 4101u);
}

// A sender that never reads its frame back (engine build_packet + gather): the headers
// emitted on their own, the ICRC started over them and carried on over the payload as it is
// copied, then sealed. The frame must be byte for byte build_frame's, and a running CRC
// carried on from any split point must end where icrc_compute over the whole ends.
TEST(Icrc, CarriedOnFromTheHeadersAndThePayloadsSourceIsTheSame) {
  Rand r(20261127);
  const std::vector<uint8_t> ops = test::valid_opcodes();
  std::vector<uint8_t> with_payload;
  for (uint8_t op : ops)
    if (opcode_info(op).has_payload) with_payload.push_back(op);
  std::vector<uint8_t> whole(9000), carried(9000);
  for (size_t size : {0, 1, 2, 3, 4, 63, 64, 65, 255, 1024, 1027, 4095, 4096}) {
    for (int round = 0; round < 20; ++round) {
      const bool ipv6 = r.coin();
      const uint8_t op = size == 0 ? ops[r.below(ops.size())]
                                   : with_payload[r.below(with_payload.size())];
      const RoceHeaders h = test::random_headers(r, op, ipv6, r.coin());
      const std::vector<uint8_t> payload = r.bytes(size);
      const size_t n = build_frame(h, payload, whole);
      ASSERT_EQ(n, frame_len(h, size));
      const size_t l2 = h.eth.header_len();
      const Bytes l3(whole.data() + l2, n - l2 - kIcrcLen);
      const uint32_t icrc = icrc_compute(l3, ipv6, h.ip_header_len());
      for (size_t k = h.ip_header_len() + 20; k <= l3.size(); k += 1 + r.below(97))
        ASSERT_EQ(crc32(icrc_compute(l3.first(k), ipv6, h.ip_header_len()), l3.subspan(k)), icrc)
            << "split at " << k << " of " << l3.size();

      std::array<uint8_t, 256> hdr{};
      std::fill(carried.begin(), carried.end(), 0xA5);  // what a reused slot would hold
      FrameLayout lay = emit_header_bytes(h, size, hdr, carried.size());
      ASSERT_EQ(lay.len, n);
      std::copy(hdr.begin(), hdr.begin() + static_cast<ptrdiff_t>(lay.payload_off), carried.begin());
      std::fill(carried.begin() + static_cast<ptrdiff_t>(lay.payload_off + size),
                carried.begin() + static_cast<ptrdiff_t>(lay.icrc_off), 0);
      lay.crc_len = lay.payload_off - lay.l3_off;
      lay.crc = icrc_compute(Bytes(hdr.data() + lay.l3_off, lay.crc_len), ipv6, lay.ip_hdr_len);
      std::copy(payload.begin(), payload.end(),
                carried.begin() + static_cast<ptrdiff_t>(lay.payload_off));
      payload_crc(lay, crc32(lay.crc, payload), size);
      EXPECT_EQ(lay.crc_len, lay.icrc_off - lay.l3_off) << "the pad is carried too";
      seal_frame(carried, lay);
      ASSERT_TRUE(std::equal(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(n), carried.begin()))
          << "payload " << size << " opcode " << int{op};
    }
  }
}

// ---------------------------------------------------------------------------------------
// Which bits the ICRC covers

/// IBA A17.3.3, written out independently: the variant bits, as offsets into the IP header
/// (then UDP, then BTH). Everything else is covered.
bool is_variant_bit(bool ipv6, size_t ip_hdr_len, size_t byte, unsigned bit) {
  if (ipv6) {
    if (byte == 0) return bit < 4;      // the top nibble of the traffic class
    if (byte >= 1 && byte <= 3) return true;  // rest of the traffic class + flow label
    if (byte == 7) return true;         // hop limit
  } else {
    if (byte == 1) return true;                 // TOS (DSCP + ECN)
    if (byte == 8) return true;                 // TTL
    if (byte == 10 || byte == 11) return true;  // header checksum
  }
  const size_t udp = ip_hdr_len, bth = ip_hdr_len + 8;
  if (byte == udp + 6 || byte == udp + 7) return true;  // UDP checksum
  if (byte == bth + 4) return true;                     // FECN, BECN, reserved
  return false;
}

TEST(Icrc, EverySingleBitFlipChangesTheIcrcUnlessTheBitIsVariant) {
  for (const KnownFrame& k : kKnown) {
    SCOPED_TRACE(k.name);
    const auto frame = hex(k.hex);
    std::vector<uint8_t> l3(frame.begin() + static_cast<std::ptrdiff_t>(k.l2_len),
                            frame.end() - static_cast<std::ptrdiff_t>(kIcrcLen));
    size_t variant = 0;
    for (size_t byte = 0; byte < l3.size(); ++byte) {
      for (unsigned bit = 0; bit < 8; ++bit) {
        l3[byte] ^= static_cast<uint8_t>(1u << bit);
        const bool want_same = is_variant_bit(k.ipv6, k.ip_hdr_len, byte, bit);
        variant += want_same ? 1 : 0;
        for (CrcImpl impl : kImpls) {
          const uint32_t c = icrc_compute(l3, k.ipv6, k.ip_hdr_len, impl);
          EXPECT_EQ(c == k.icrc, want_same)
              << impl_name(impl) << ": byte " << byte << " bit " << bit;
        }
        l3[byte] ^= static_cast<uint8_t>(1u << bit);
      }
    }
    // IPv4: 4 bytes of IP + 2 UDP + 1 BTH; IPv6: 4 bits + 3 bytes + hop limit, + 3 bytes.
    EXPECT_EQ(variant, k.ipv6 ? 4u + 8 * (3 + 1 + 2 + 1) : 8u * (4 + 2 + 1));
  }
}

/// Applies `edit` to a copy of the known frame and reports whether the ICRC still matches.
template <typename Edit>
bool icrc_survives(const KnownFrame& k, Edit edit) {
  auto frame = hex(k.hex);
  uint8_t* ip = frame.data() + k.l2_len;
  edit(ip, ip + k.ip_hdr_len, ip + k.ip_hdr_len + 8);
  const uint32_t fast = icrc_compute(l3_without_icrc(frame, k.l2_len), k.ipv6, k.ip_hdr_len);
  const uint32_t ref = icrc_compute(l3_without_icrc(frame, k.l2_len), k.ipv6, k.ip_hdr_len,
                                    CrcImpl::kReference);
  EXPECT_EQ(fast, ref);
  return fast == k.icrc;
}

TEST(Icrc, RouterRewritableFieldsAreMasked) {
  const KnownFrame& v4 = kKnown[0];
  const KnownFrame& v6 = kKnown[2];
  // IPv4: TTL, TOS (ECN CE marking), header checksum; UDP checksum; FECN/BECN.
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[8] = 63; }));
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[1] = 0x03; }));
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[1] = 0xB8; }));
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[10] ^= 0x5A; }));
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t*, uint8_t* udp, uint8_t*) {
    udp[6] = 0x12;
    udp[7] = 0x34;
  }));
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[4] = 0x80; }));
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[4] = 0x40; }));
  EXPECT_TRUE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[4] = 0xFF; }));
  // IPv6: traffic class, flow label, hop limit; UDP checksum; FECN/BECN.
  EXPECT_TRUE(icrc_survives(v6, [](uint8_t* ip, uint8_t*, uint8_t*) {
    ip[0] = 0x60;  // traffic class 0x0_ (top nibble)
    ip[1] = 0x3A;  // traffic class low nibble 3, flow label top nibble A
  }));
  EXPECT_TRUE(icrc_survives(v6, [](uint8_t* ip, uint8_t*, uint8_t*) {
    ip[2] = 0x00;
    ip[3] = 0x01;
  }));
  EXPECT_TRUE(icrc_survives(v6, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[7] = 1; }));
  EXPECT_TRUE(icrc_survives(v6, [](uint8_t*, uint8_t* udp, uint8_t*) { udp[6] = 0; }));
  EXPECT_TRUE(icrc_survives(v6, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[4] = 0x80; }));
}

TEST(Icrc, InvariantFieldsAreCovered) {
  const KnownFrame& v4 = kKnown[0];
  const KnownFrame& v6 = kKnown[2];
  // PSN, P_Key, destination QP, opcode, a payload byte, the IP source, the UDP ports.
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[11] ^= 1; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[2] = 0x7F; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[7] = 0x12; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[0] = 0x06; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[8] = 0x00; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[12 + 16] ^= 0x80; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[15] = 0x0d; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[4] ^= 1; }));
  EXPECT_FALSE(icrc_survives(v4, [](uint8_t*, uint8_t* udp, uint8_t*) { udp[1] ^= 1; }));
  EXPECT_FALSE(icrc_survives(v6, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[8 + 15] = 0x0c; }));
  EXPECT_FALSE(icrc_survives(v6, [](uint8_t* ip, uint8_t*, uint8_t*) { ip[6] = 0x12; }));
  EXPECT_FALSE(icrc_survives(v6, [](uint8_t*, uint8_t*, uint8_t* bth) { bth[9] = 0x01; }));
}

TEST(Icrc, RoutedFrameStillParses) {
  // A router decrements TTL, marks ECN CE and fixes the IPv4 checksum: still a good packet.
  auto frame = hex(test::kCapturedWriteOnly);
  uint8_t* ip = frame.data() + 14;
  ip[8] = static_cast<uint8_t>(ip[8] - 1);
  ip[1] |= 0x03;
  test::fix_ipv4_checksum(ip);
  ParsedPacket p;
  ASSERT_EQ(parse_frame(frame, p), ParseError::kOk);
  EXPECT_TRUE(p.icrc_ok());
  EXPECT_EQ(p.hdr.ip4.ttl, 63);
  EXPECT_EQ(p.hdr.ip4.ecn, 3);
}

// ---------------------------------------------------------------------------------------
// The ICRC's linearity: a change patched in without reading the packet again, and the IPv4
// identification a UDP socket does not show, solved for.

/// A random IPv4 RoCEv2 frame without options (as the kernel sends them) of `payload` bytes.
std::vector<uint8_t> random_v4_frame(Rand& r, size_t payload, RoceHeaders* out) {
  RoceHeaders h = test::random_headers(r, 0x0A /* RC WRITE_ONLY */, false, false);
  h.ip4.options_len = 0;
  std::vector<uint8_t> buf(9000);
  buf.resize(build_frame(h, r.bytes(payload), buf));
  *out = h;
  return buf;
}

TEST(IcrcLinear, APatchedFieldGivesTheIcrcOfTheWholePacketRecomputed) {
  Rand r(7);
  for (int i = 0; i < 300; ++i) {
    RoceHeaders h;
    std::vector<uint8_t> f = random_v4_frame(r, r.below(4200), &h);
    const Bytes l3(f.data() + 14, f.size() - 14 - kIcrcLen);
    const uint32_t before = icrc_compute(l3, false, 20);
    // Anywhere the ICRC covers and does not mask: the identification, DF, the UDP source
    // port, a BTH or payload byte; one to four bytes of difference.
    const size_t covered[] = {4, 5, 6, 9, 12, 20, 21, 28, 31, 34, l3.size() - 1};
    const size_t off = covered[r.below(std::size(covered))];
    const size_t len = std::min<size_t>(1 + r.below(4), l3.size() - off);
    std::vector<uint8_t> diff = r.bytes(len);
    for (size_t k = 0; k < len; ++k) {
      if (off + k == 8 || off + k == 10 || off + k == 11 || off + k == 1 || off + k == 26 ||
          off + k == 27 || off + k == 32)
        diff[k] = 0;  // masked bytes (TTL, checksums, TOS, BTH byte 4) stay as they are
      f[14 + off + k] ^= diff[k];
    }
    const uint32_t patched = before ^ icrc_delta(diff, icrc_shift(l3.size() - off - len));
    ASSERT_EQ(patched, icrc_compute(l3, false, 20, CrcImpl::kReference))
        << "frame " << i << ": " << len << " bytes at l3 offset " << off;
  }
}

TEST(IcrcLinear, ShiftByZeroIsOneAndShiftsCompose) {
  EXPECT_EQ(icrc_shift(0), 1u << 31);  // x^0, reflected
  const uint8_t d[3] = {0x12, 0x34, 0x56};
  // The difference carried over 1000 zero bytes, then 24 more == over 1024 at once.
  const uint32_t a = icrc_delta(Bytes(d, 3), icrc_shift(1000));
  std::vector<uint8_t> both(d, d + 3);
  both.insert(both.end(), 1000 + 24, 0);
  EXPECT_EQ(icrc_delta(both, icrc_shift(0)), icrc_delta(Bytes(d, 3), icrc_shift(1024)));
  EXPECT_NE(a, icrc_delta(Bytes(d, 3), icrc_shift(1024)));
}

TEST(IcrcLinear, TheIdentificationAndDfASocketHidesAreSolvedFor) {
  Rand r(11);
  for (int i = 0; i < 500; ++i) {
    RoceHeaders h;
    std::vector<uint8_t> f = random_v4_frame(r, r.below(4200), &h);
    const Bytes l3(f.data() + 14, f.size() - 14 - kIcrcLen);
    const uint32_t wire = load_icrc(&f[f.size() - kIcrcLen]);
    // What a receiver that sees no identification computes: its guess (0, DF) in the header.
    std::vector<uint8_t> g = f;
    g[14 + 4] = g[14 + 5] = 0;
    g[14 + 6] = 0x40;
    const uint32_t calc = icrc_compute(Bytes(g.data() + 14, l3.size()), false, 20);
    Ipv4Ident got;
    ASSERT_TRUE(icrc_solve_ipv4_ident(calc, wire, l3.size(), {0, true}, &got)) << "frame " << i;
    EXPECT_EQ(got.ident, h.ip4.ident) << "frame " << i;
    EXPECT_EQ(got.dont_frag, h.ip4.dont_frag) << "frame " << i;
  }
}

TEST(IcrcLinear, TheKernelsRandomIdentificationIsFoundInARealCapture) {
  std::vector<uint8_t> f = hex(test::kCapturedWriteOnly);  // rxe: identification 0xe67e, DF
  const size_t l3_len = f.size() - 14 - kIcrcLen;
  f[14 + 4] = f[14 + 5] = 0;
  const uint32_t calc = icrc_compute(Bytes(f.data() + 14, l3_len), false, 20);
  Ipv4Ident got;
  ASSERT_TRUE(icrc_solve_ipv4_ident(calc, test::kCapturedWriteOnlyIcrc, l3_len, {0, true}, &got));
  EXPECT_EQ(got.ident, 0xe67e);
  EXPECT_TRUE(got.dont_frag);
}

TEST(IcrcLinear, DamageElsewhereIsNotExplainedByTheIdentification) {
  // 15 bits still check: of 3000 packets damaged in their payload (1 to 4 random bytes), the
  // solver may wrongly explain about 0.1 in expectation. Seeded: the count is what it is.
  Rand r(12);
  int explained = 0;
  for (int i = 0; i < 3000; ++i) {
    RoceHeaders h;
    std::vector<uint8_t> f = random_v4_frame(r, 64 + r.below(2000), &h);
    const size_t l3_len = f.size() - 14 - kIcrcLen;
    const uint32_t wire = load_icrc(&f[f.size() - kIcrcLen]);
    const size_t n = 1 + r.below(4);
    for (size_t k = 0; k < n; ++k) f[14 + 40 + r.below(l3_len - 40)] ^= static_cast<uint8_t>(1 + r.below(255));
    f[14 + 4] = f[14 + 5] = 0;
    f[14 + 6] = 0x40;
    const uint32_t calc = icrc_compute(Bytes(f.data() + 14, l3_len), false, 20);
    Ipv4Ident got;
    if (calc != wire && icrc_solve_ipv4_ident(calc, wire, l3_len, {0, true}, &got)) ++explained;
  }
  EXPECT_LE(explained, 1);
}

}  // namespace
}  // namespace uroce::wire

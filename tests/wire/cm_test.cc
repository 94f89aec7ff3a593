// Communication Manager MADs (wire/cm.h): the common MAD header, REQ, MRA, REJ, REP, RTU,
// DREQ, DREP, SIDR_REQ, SIDR_REP, the whole-MAD CmMessage, rdma_cm's service IDs and its
// private-data header.
//
// Every expected byte below is written by hand from the offsets of IBA vol 1 tables 106-120
// (the same offsets as Linux include/rdma/ibta_vol1_c12.h, where CM data offset 0 is MAD
// byte 24), never produced by the code under test. tshark 4.0 decodes the REQ, REP, RTU,
// REJ, DREQ and DREP images to the same field values (it does not decode MRA and SIDR, and
// it reads a REQ path's flow label and packet rate from the wrong bytes: see CmReq below).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "wire/cm_mad.h"
#include "wire_test_util.h"

namespace uroce::wire {
namespace {

using test::emit_bytes;
using test::hex;
using test::Rand;

/// `n` bytes counting up from `first` (a recognisable private-data pattern).
std::vector<uint8_t> pattern(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(first + i);
  return v;
}

template <size_t N>
std::array<uint8_t, N> pattern_array(uint8_t first) {
  std::array<uint8_t, N> a{};
  for (size_t i = 0; i < N; ++i) a[i] = static_cast<uint8_t>(first + i);
  return a;
}

std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// The checks every message shares: `image` (232 bytes of CM data) parses to `want`, `want`
/// emits exactly `image` into a dirty buffer without writing past it, parse -> emit is
/// byte-exact, trailing bytes are ignored, and every shorter input is kTruncated.
template <typename Repr>
void expect_cm_codec(const std::vector<uint8_t>& image, const Repr& want) {
  ASSERT_EQ(image.size(), kCmDataLen);
  ASSERT_EQ(Repr::kLen, kCmDataLen);
  Repr got;
  ASSERT_EQ(Repr::parse(image, got), ParseError::kOk);
  EXPECT_EQ(got, want);
  EXPECT_EQ(emit_bytes(want, kCmDataLen), image);
  EXPECT_EQ(emit_bytes(got, kCmDataLen), image);
  std::vector<uint8_t> longer = image;
  longer.insert(longer.end(), {0xDE, 0xAD});
  Repr from_longer;
  ASSERT_EQ(Repr::parse(longer, from_longer), ParseError::kOk);
  EXPECT_EQ(from_longer, want);
  for (size_t n = 0; n < kCmDataLen; ++n) {
    Repr r;
    ASSERT_EQ(Repr::parse(Bytes(image).first(n), r), ParseError::kTruncated) << "length " << n;
  }
}

/// Emits `r` and checks that exactly the bytes in `nonzero` are set (to those values) and
/// every other byte of the `len`-byte image is zero: a field at (or beyond) its maximum
/// stays inside its own bits.
template <typename Repr>
void expect_only(const Repr& r, size_t len, const std::map<size_t, uint8_t>& nonzero,
                 const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<uint8_t> out = emit_bytes(r, len);
  for (size_t i = 0; i < len; ++i) {
    const auto it = nonzero.find(i);
    EXPECT_EQ(out[i], it == nonzero.end() ? 0 : it->second) << "byte " << i;
  }
}

/// Reserved bits of a message, per byte (IBA tables 106-120): parse ignores them, emit
/// writes them as zero.
using Reserved = std::map<size_t, uint8_t>;

/// Random CM data parses and emits back identically except for the reserved bits, which
/// come back zero. With every non-reserved bit random, a field that parse or emit drops,
/// shifts or truncates shows up as a differing byte.
template <typename Repr>
void expect_random_round_trips(const Reserved& reserved, size_t len, uint32_t seed) {
  Rand rng(seed);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<uint8_t> in = rng.bytes(len);
    if (iter == 0) in.assign(len, 0xFF);  // every bit set
    std::vector<uint8_t> want = in;
    for (const auto& [off, mask] : reserved) want[off] &= static_cast<uint8_t>(~mask);
    Repr r;
    ASSERT_EQ(Repr::parse(in, r), ParseError::kOk);
    ASSERT_EQ(emit_bytes(r, len), want) << "iteration " << iter;
  }
}

Reserved path_reserved(size_t base) {
  // +38: flow label (low 4 bits) | reserved (4); +39: reserved (2) | packet rate (6);
  // +42: SL (4) | subnet local (1) | reserved (3); +43: ACK timeout (5) | reserved (3).
  return {{base + 38, 0x0F}, {base + 39, 0xC0}, {base + 42, 0x07}, {base + 43, 0x07}};
}

// ---------------------------------------------------------------------------------------
// Common MAD header

// base 1, class 0x07 (CM), class version 2, method Send; status 0x1234, class-specific
// 0x5678, TID 0x0102030405060708, attribute 0x0010 (REQ), reserved 0x9abc, modifier
// 0xdeadbeef.
const char* const kMadHeaderHex =
    "01 07 02 03  1234 5678  0102030405060708  0010 9abc  deadbeef";

TEST(CmMadHeader, ParsesHandWrittenBytes) {
  const auto wire = hex(kMadHeaderHex);
  ASSERT_EQ(wire.size(), 24u);
  MadHeader h;
  ASSERT_EQ(MadHeader::parse(wire, h), ParseError::kOk);
  EXPECT_EQ(h.base_version, 1);
  EXPECT_EQ(h.mgmt_class, 0x07);
  EXPECT_EQ(h.class_version, 2);
  EXPECT_EQ(h.method, 0x03);
  EXPECT_EQ(h.method_code(), 0x03);
  EXPECT_FALSE(h.is_response());
  EXPECT_EQ(h.status, 0x1234);
  EXPECT_EQ(h.class_specific, 0x5678);
  EXPECT_EQ(h.tid, 0x0102030405060708u);
  EXPECT_EQ(h.attr_id, 0x0010);
  EXPECT_EQ(h.reserved, 0x9abc);
  EXPECT_EQ(h.attr_mod, 0xdeadbeefu);
  EXPECT_EQ(emit_bytes(h, 24), wire);
  for (size_t n = 0; n < 24; ++n) {
    MadHeader t;
    EXPECT_EQ(MadHeader::parse(Bytes(wire).first(n), t), ParseError::kTruncated) << n;
  }
}

TEST(CmMadHeader, ResponseBitAndDefaults) {
  MadHeader h;
  ASSERT_EQ(MadHeader::parse(hex("01 07 02 81 0000 0000 0000000000000001 0001 0000 00000000"), h),
            ParseError::kOk);
  EXPECT_TRUE(h.is_response());
  EXPECT_EQ(h.method_code(), 0x01);  // GetResp = Get | R
  // A default header is what ib_cm sends: base 1, class CM, class version 2, Send.
  const MadHeader d;
  EXPECT_EQ(emit_bytes(d, 24), hex("01 07 02 03 0000 0000 0000000000000000 0000 0000 00000000"));
}

TEST(CmMadHeader, Constants) {
  EXPECT_EQ(kMadLen, 256u);
  EXPECT_EQ(kCmDataLen, 232u);
  EXPECT_EQ(kMadHeaderLen + kCmDataLen, kMadLen);
  EXPECT_EQ(kGsiQkey, 0x80010000u);
  EXPECT_EQ(kGsiQpn, 1u);
  EXPECT_EQ(cm_attr::kClassPortInfo, 0x0001);
  EXPECT_EQ(cm_attr::kReq, 0x0010);
  EXPECT_EQ(cm_attr::kMra, 0x0011);
  EXPECT_EQ(cm_attr::kRej, 0x0012);
  EXPECT_EQ(cm_attr::kRep, 0x0013);
  EXPECT_EQ(cm_attr::kRtu, 0x0014);
  EXPECT_EQ(cm_attr::kDreq, 0x0015);
  EXPECT_EQ(cm_attr::kDrep, 0x0016);
  EXPECT_EQ(cm_attr::kSidrReq, 0x0017);
  EXPECT_EQ(cm_attr::kSidrRep, 0x0018);
  EXPECT_EQ(cm_attr::kLap, 0x0019);
  EXPECT_EQ(cm_attr::kApr, 0x001A);
  EXPECT_EQ(CmReq::kPrivateLen, 92u);
  EXPECT_EQ(CmMra::kPrivateLen, 222u);
  EXPECT_EQ(CmRej::kPrivateLen, 148u);
  EXPECT_EQ(CmRej::kAriLen, 72u);
  EXPECT_EQ(CmRep::kPrivateLen, 196u);
  EXPECT_EQ(CmRtu::kPrivateLen, 224u);
  EXPECT_EQ(CmDreq::kPrivateLen, 220u);
  EXPECT_EQ(CmDrep::kPrivateLen, 224u);
  EXPECT_EQ(CmSidrReq::kPrivateLen, 216u);
  EXPECT_EQ(CmSidrRep::kPrivateLen, 136u);
  EXPECT_EQ(CmSidrRep::kClassPortInfoLen, 72u);
}

// ---------------------------------------------------------------------------------------
// REQ (IBA table 106)

std::vector<uint8_t> req_image() {
  return cat(hex("11223344"                          //   0 local comm ID
                 "00000000"                          //   4 reserved
                 "00000000 01061d2f"                 //   8 service ID: TCP port space, 7471
                 "01020304 05060708"                 //  16 local CA GUID
                 "00000000"                          //  24 reserved
                 "0a0b0c0d"                          //  28 local Q_Key
                 "123456 21"                         //  32 local QPN, responder resources
                 "abcdef 22"                         //  36 local EECN, initiator depth
                 "654321 9b"                         //  40 remote EECN; 10011 01 1
                 "fedcba 8d"                         //  44 starting PSN; 10001 101
                 "8001 36 d8"                        //  48 P_Key; 0011 0 110; 1101 1 000
                 "1111 2222"                         //  52 primary local / remote LID
                 "00000000 00000000 0000ffff 0a000001"  //  56 primary local GID
                 "00000000 00000000 0000ffff 0a000002"  //  72 primary remote GID
                 "abcde0 2a"                         //  88 flow label 0xabcde, rsv, rate 42
                 "5c 40 98 90"                       //  92 TC, hop limit, 1001 1 000, 10010 000
                 "3333 4444"                         //  96 alternate local / remote LID
                 "fe800000 00000000 02000000 00000001"  // 100 alternate local GID
                 "fe800000 00000000 02000000 00000002"  // 116 alternate remote GID
                 "123450 3f"                         // 132 flow label 0x12345, rsv, rate 63
                 "01 ff 30 f8"),                     // 136 TC, hop limit, 0011 0 000, 11111 000
             pattern(92, 0x40));                     // 140 private data
}

CmReq req_fields() {
  CmReq r;
  r.local_comm_id = 0x11223344;
  r.service_id = 0x000000000106'1d2f;
  r.local_ca_guid = 0x0102030405060708;
  r.local_qkey = 0x0a0b0c0d;
  r.local_qpn = 0x123456;
  r.responder_resources = 0x21;
  r.local_eecn = 0xabcdef;
  r.initiator_depth = 0x22;
  r.remote_eecn = 0x654321;
  r.remote_cm_response_timeout = 19;
  r.transport_service_type = 1;  // UC
  r.end_to_end_flow_control = true;
  r.starting_psn = 0xfedcba;
  r.local_cm_response_timeout = 17;
  r.retry_count = 5;
  r.pkey = 0x8001;
  r.path_mtu = 3;  // 1024
  r.rdc_exists = false;
  r.rnr_retry_count = 6;
  r.max_cm_retries = 13;
  r.srq = true;
  r.extended_transport_type = 0;
  r.primary.local_lid = 0x1111;
  r.primary.remote_lid = 0x2222;
  r.primary.local_gid = *parse_ipv6("::ffff:10.0.0.1");
  r.primary.remote_gid = *parse_ipv6("::ffff:10.0.0.2");
  r.primary.flow_label = 0xabcde;
  r.primary.packet_rate = 42;
  r.primary.traffic_class = 0x5c;
  r.primary.hop_limit = 0x40;
  r.primary.sl = 9;
  r.primary.subnet_local = true;
  r.primary.local_ack_timeout = 18;
  r.alternate.local_lid = 0x3333;
  r.alternate.remote_lid = 0x4444;
  r.alternate.local_gid = *parse_ipv6("fe80::200:0:0:1");
  r.alternate.remote_gid = *parse_ipv6("fe80::200:0:0:2");
  r.alternate.flow_label = 0x12345;
  r.alternate.packet_rate = 63;
  r.alternate.traffic_class = 0x01;
  r.alternate.hop_limit = 0xff;
  r.alternate.sl = 3;
  r.alternate.subnet_local = false;
  r.alternate.local_ack_timeout = 31;
  r.private_data = pattern_array<92>(0x40);
  return r;
}

TEST(CmReq, ParsesAndEmitsHandBuiltImage) {
  const auto image = req_image();
  ASSERT_EQ(image.size(), 232u);
  CmReq r;
  ASSERT_EQ(CmReq::parse(image, r), ParseError::kOk);
  // Field by field first, so a failure names the field.
  EXPECT_EQ(r.local_comm_id, 0x11223344u);
  EXPECT_EQ(r.service_id, 0x0000000001061d2fu);
  EXPECT_EQ(r.local_ca_guid, 0x0102030405060708u);
  EXPECT_EQ(r.local_qkey, 0x0a0b0c0du);
  EXPECT_EQ(r.local_qpn, 0x123456u);
  EXPECT_EQ(r.responder_resources, 0x21);
  EXPECT_EQ(r.local_eecn, 0xabcdefu);
  EXPECT_EQ(r.initiator_depth, 0x22);
  EXPECT_EQ(r.remote_eecn, 0x654321u);
  EXPECT_EQ(r.remote_cm_response_timeout, 19);
  EXPECT_EQ(r.transport_service_type, kCmTransportUc);
  EXPECT_TRUE(r.end_to_end_flow_control);
  EXPECT_EQ(r.starting_psn, 0xfedcbau);
  EXPECT_EQ(r.local_cm_response_timeout, 17);
  EXPECT_EQ(r.retry_count, 5);
  EXPECT_EQ(r.pkey, 0x8001);
  EXPECT_EQ(r.path_mtu, 3);
  EXPECT_FALSE(r.rdc_exists);
  EXPECT_EQ(r.rnr_retry_count, 6);
  EXPECT_EQ(r.max_cm_retries, 13);
  EXPECT_TRUE(r.srq);
  EXPECT_EQ(r.extended_transport_type, 0);
  EXPECT_EQ(r.primary.local_lid, 0x1111);
  EXPECT_EQ(r.primary.remote_lid, 0x2222);
  EXPECT_EQ(to_string(r.primary.local_gid), "::ffff:10.0.0.1");
  EXPECT_EQ(to_string(r.primary.remote_gid), "::ffff:10.0.0.2");
  EXPECT_EQ(r.primary.flow_label, 0xabcdeu);
  EXPECT_EQ(r.primary.packet_rate, 42);
  EXPECT_EQ(r.primary.traffic_class, 0x5c);
  EXPECT_EQ(r.primary.hop_limit, 0x40);
  EXPECT_EQ(r.primary.sl, 9);
  EXPECT_TRUE(r.primary.subnet_local);
  EXPECT_EQ(r.primary.local_ack_timeout, 18);
  EXPECT_EQ(r.alternate.local_lid, 0x3333);
  EXPECT_EQ(r.alternate.remote_lid, 0x4444);
  EXPECT_EQ(to_string(r.alternate.local_gid), "fe80::200:0:0:1");
  EXPECT_EQ(to_string(r.alternate.remote_gid), "fe80::200:0:0:2");
  EXPECT_EQ(r.alternate.flow_label, 0x12345u);
  EXPECT_EQ(r.alternate.packet_rate, 63);
  EXPECT_EQ(r.alternate.traffic_class, 0x01);
  EXPECT_EQ(r.alternate.hop_limit, 0xff);
  EXPECT_EQ(r.alternate.sl, 3);
  EXPECT_FALSE(r.alternate.subnet_local);
  EXPECT_EQ(r.alternate.local_ack_timeout, 31);
  EXPECT_EQ(r.private_data[0], 0x40);
  EXPECT_EQ(r.private_data[91], 0x40 + 91);
  expect_cm_codec(image, req_fields());
}

TEST(CmReq, BitFieldsAtMaximumStayInTheirBits) {
  // Each field alone, set to (or beyond) its maximum: only its own bits may be set.
  struct Case {
    const char* name;
    void (*set)(CmReq&);
    std::map<size_t, uint8_t> bytes;
  };
  const Case cases[] = {
      {"local_comm_id", [](CmReq& r) { r.local_comm_id = ~0u; },
       {{0, 0xff}, {1, 0xff}, {2, 0xff}, {3, 0xff}}},
      {"local_qkey", [](CmReq& r) { r.local_qkey = ~0u; },
       {{28, 0xff}, {29, 0xff}, {30, 0xff}, {31, 0xff}}},
      {"local_qpn", [](CmReq& r) { r.local_qpn = ~0u; }, {{32, 0xff}, {33, 0xff}, {34, 0xff}}},
      {"responder_resources", [](CmReq& r) { r.responder_resources = 0xff; }, {{35, 0xff}}},
      {"local_eecn", [](CmReq& r) { r.local_eecn = ~0u; }, {{36, 0xff}, {37, 0xff}, {38, 0xff}}},
      {"initiator_depth", [](CmReq& r) { r.initiator_depth = 0xff; }, {{39, 0xff}}},
      {"remote_eecn", [](CmReq& r) { r.remote_eecn = ~0u; }, {{40, 0xff}, {41, 0xff}, {42, 0xff}}},
      {"remote_cm_response_timeout", [](CmReq& r) { r.remote_cm_response_timeout = 0xff; },
       {{43, 0xf8}}},
      {"transport_service_type", [](CmReq& r) { r.transport_service_type = 0xff; }, {{43, 0x06}}},
      {"end_to_end_flow_control", [](CmReq& r) { r.end_to_end_flow_control = true; },
       {{43, 0x01}}},
      {"starting_psn", [](CmReq& r) { r.starting_psn = ~0u; }, {{44, 0xff}, {45, 0xff}, {46, 0xff}}},
      {"local_cm_response_timeout", [](CmReq& r) { r.local_cm_response_timeout = 0xff; },
       {{47, 0xf8}}},
      {"retry_count", [](CmReq& r) { r.retry_count = 0xff; }, {{47, 0x07}}},
      {"pkey", [](CmReq& r) { r.pkey = 0xffff; }, {{48, 0xff}, {49, 0xff}}},
      {"path_mtu", [](CmReq& r) { r.path_mtu = 0xff; }, {{50, 0xf0}}},
      {"rdc_exists", [](CmReq& r) { r.rdc_exists = true; }, {{50, 0x08}}},
      {"rnr_retry_count", [](CmReq& r) { r.rnr_retry_count = 0xff; }, {{50, 0x07}}},
      {"max_cm_retries", [](CmReq& r) { r.max_cm_retries = 0xff; }, {{51, 0xf0}}},
      {"srq", [](CmReq& r) { r.srq = true; }, {{51, 0x08}}},
      {"extended_transport_type", [](CmReq& r) { r.extended_transport_type = 0xff; },
       {{51, 0x07}}},
      {"primary.local_lid", [](CmReq& r) { r.primary.local_lid = 0xffff; },
       {{52, 0xff}, {53, 0xff}}},
      {"primary.remote_lid", [](CmReq& r) { r.primary.remote_lid = 0xffff; },
       {{54, 0xff}, {55, 0xff}}},
      {"primary.flow_label", [](CmReq& r) { r.primary.flow_label = ~0u; },
       {{88, 0xff}, {89, 0xff}, {90, 0xf0}}},
      {"primary.packet_rate", [](CmReq& r) { r.primary.packet_rate = 0xff; }, {{91, 0x3f}}},
      {"primary.traffic_class", [](CmReq& r) { r.primary.traffic_class = 0xff; }, {{92, 0xff}}},
      {"primary.hop_limit", [](CmReq& r) { r.primary.hop_limit = 0xff; }, {{93, 0xff}}},
      {"primary.sl", [](CmReq& r) { r.primary.sl = 0xff; }, {{94, 0xf0}}},
      {"primary.subnet_local", [](CmReq& r) { r.primary.subnet_local = true; }, {{94, 0x08}}},
      {"primary.local_ack_timeout", [](CmReq& r) { r.primary.local_ack_timeout = 0xff; },
       {{95, 0xf8}}},
      {"alternate.local_lid", [](CmReq& r) { r.alternate.local_lid = 0xffff; },
       {{96, 0xff}, {97, 0xff}}},
      {"alternate.flow_label", [](CmReq& r) { r.alternate.flow_label = ~0u; },
       {{132, 0xff}, {133, 0xff}, {134, 0xf0}}},
      {"alternate.packet_rate", [](CmReq& r) { r.alternate.packet_rate = 0xff; }, {{135, 0x3f}}},
      {"alternate.traffic_class", [](CmReq& r) { r.alternate.traffic_class = 0xff; },
       {{136, 0xff}}},
      {"alternate.hop_limit", [](CmReq& r) { r.alternate.hop_limit = 0xff; }, {{137, 0xff}}},
      {"alternate.sl", [](CmReq& r) { r.alternate.sl = 0xff; }, {{138, 0xf0}}},
      {"alternate.subnet_local", [](CmReq& r) { r.alternate.subnet_local = true; },
       {{138, 0x08}}},
      {"alternate.local_ack_timeout", [](CmReq& r) { r.alternate.local_ack_timeout = 0xff; },
       {{139, 0xf8}}},
      {"private_data", [](CmReq& r) { r.private_data.fill(0xff); }, [] {
         std::map<size_t, uint8_t> m;
         for (size_t i = 140; i < 232; ++i) m[i] = 0xff;
         return m;
       }()},
  };
  for (const Case& c : cases) {
    CmReq r;
    c.set(r);
    expect_only(r, 232, c.bytes, c.name);
  }
  // GIDs: all 16 bytes, no more.
  CmReq g;
  g.primary.local_gid.fill(0xff);
  g.alternate.remote_gid.fill(0xff);
  std::map<size_t, uint8_t> m;
  for (size_t i = 56; i < 72; ++i) m[i] = 0xff;
  for (size_t i = 116; i < 132; ++i) m[i] = 0xff;
  expect_only(g, 232, m, "gids");
}

TEST(CmReq, AllOnesParsesToEveryFieldsMaximum) {
  const std::vector<uint8_t> ones(232, 0xff);
  CmReq r;
  ASSERT_EQ(CmReq::parse(ones, r), ParseError::kOk);
  EXPECT_EQ(r.local_qpn, 0xffffffu);
  EXPECT_EQ(r.local_eecn, 0xffffffu);
  EXPECT_EQ(r.remote_eecn, 0xffffffu);
  EXPECT_EQ(r.starting_psn, 0xffffffu);
  EXPECT_EQ(r.remote_cm_response_timeout, 31);
  EXPECT_EQ(r.transport_service_type, 3);
  EXPECT_EQ(r.local_cm_response_timeout, 31);
  EXPECT_EQ(r.retry_count, 7);
  EXPECT_EQ(r.path_mtu, 15);
  EXPECT_EQ(r.rnr_retry_count, 7);
  EXPECT_EQ(r.max_cm_retries, 15);
  EXPECT_EQ(r.extended_transport_type, 7);
  EXPECT_EQ(r.primary.flow_label, 0xfffffu);
  EXPECT_EQ(r.primary.packet_rate, 63);
  EXPECT_EQ(r.primary.sl, 15);
  EXPECT_EQ(r.primary.local_ack_timeout, 31);
  EXPECT_EQ(r.alternate.flow_label, 0xfffffu);
  EXPECT_EQ(r.alternate.packet_rate, 63);
}

TEST(CmReq, RandomImagesRoundTripExceptReservedBits) {
  Reserved res = {{4, 0xff}, {5, 0xff}, {6, 0xff}, {7, 0xff},
                  {24, 0xff}, {25, 0xff}, {26, 0xff}, {27, 0xff}};
  res.merge(path_reserved(52));
  res.merge(path_reserved(96));
  expect_random_round_trips<CmReq>(res, 232, 106);
}

// ---------------------------------------------------------------------------------------
// MRA (IBA table 107)

TEST(CmMra, ParsesAndEmitsHandBuiltImage) {
  // msg MRAed = 2 (other): 10 000000; service timeout 23: 10111 000.
  const auto image = cat(hex("a1a2a3a4 b1b2b3b4 80 b8"), pattern(222, 0x10));
  CmMra want;
  want.local_comm_id = 0xa1a2a3a4;
  want.remote_comm_id = 0xb1b2b3b4;
  want.msg_mraed = CmMsgResponse::kOther;
  want.service_timeout = 23;
  want.private_data = pattern_array<222>(0x10);
  expect_cm_codec(image, want);
}

TEST(CmMra, BitFieldsAtMaximumStayInTheirBits) {
  CmMra a;
  a.msg_mraed = static_cast<CmMsgResponse>(0xff);
  expect_only(a, 232, {{8, 0xc0}}, "msg_mraed");
  CmMra b;
  b.service_timeout = 0xff;
  expect_only(b, 232, {{9, 0xf8}}, "service_timeout");
  CmMra c;
  c.msg_mraed = CmMsgResponse::kRep;
  expect_only(c, 232, {{8, 0x40}}, "REP");
}

TEST(CmMra, RandomImagesRoundTripExceptReservedBits) {
  expect_random_round_trips<CmMra>({{8, 0x3f}, {9, 0x07}}, 232, 107);
}

// ---------------------------------------------------------------------------------------
// REJ (IBA table 108)

TEST(CmRej, ParsesAndEmitsHandBuiltImage) {
  // message REJected 1 (REP): 01 000000; reject info length 0x55: 1010101 0; reason 28.
  const auto image = cat(cat(hex("c1c2c3c4 d1d2d3d4 40 aa 001c"), pattern(72, 0x80)),
                         pattern(148, 0x01));
  CmRej want;
  want.local_comm_id = 0xc1c2c3c4;
  want.remote_comm_id = 0xd1d2d3d4;
  want.msg_rejected = CmMsgResponse::kRep;
  want.reject_info_len = 0x55;
  want.reason = CmRejReason::kConsumerReject;
  want.ari = pattern_array<72>(0x80);
  want.private_data = pattern_array<148>(0x01);
  expect_cm_codec(image, want);
  CmRej r;
  ASSERT_EQ(CmRej::parse(image, r), ParseError::kOk);
  EXPECT_EQ(static_cast<uint16_t>(r.reason), 28);
}

TEST(CmRej, BitFieldsAtMaximumStayInTheirBits) {
  CmRej a;
  a.reason = static_cast<CmRejReason>(0);
  a.msg_rejected = static_cast<CmMsgResponse>(0xff);
  expect_only(a, 232, {{8, 0xc0}}, "msg_rejected");
  CmRej b;
  b.reason = static_cast<CmRejReason>(0);
  b.reject_info_len = 0xff;
  expect_only(b, 232, {{9, 0xfe}}, "reject_info_len");
  CmRej c;
  c.reason = static_cast<CmRejReason>(0xffff);
  expect_only(c, 232, {{10, 0xff}, {11, 0xff}}, "reason");
}

TEST(CmRej, RandomImagesRoundTripExceptReservedBits) {
  expect_random_round_trips<CmRej>({{8, 0x3f}, {9, 0x01}}, 232, 108);
}

// ---------------------------------------------------------------------------------------
// REP (IBA table 110)

TEST(CmRep, ParsesAndEmitsHandBuiltImage) {
  const auto image = cat(hex("55667788"           //  0 local comm ID
                             "11223344"           //  4 remote comm ID
                             "01020304"           //  8 local Q_Key
                             "0a0b0c 00"          // 12 local QPN
                             "0d0e0f 00"          // 16 local EECN
                             "777777 00"          // 20 starting PSN
                             "04 05 ab d0"        // 24 RR, ID; 10101 01 1; 110 1 0000
                             "11223344 55667788"  // 28 local CA GUID
                             ),
                         pattern(196, 0x20));     // 36 private data
  CmRep want;
  want.local_comm_id = 0x55667788;
  want.remote_comm_id = 0x11223344;
  want.local_qkey = 0x01020304;
  want.local_qpn = 0x0a0b0c;
  want.local_eecn = 0x0d0e0f;
  want.starting_psn = 0x777777;
  want.responder_resources = 4;
  want.initiator_depth = 5;
  want.target_ack_delay = 21;
  want.failover_accepted = 1;
  want.end_to_end_flow_control = true;
  want.rnr_retry_count = 6;
  want.srq = true;
  want.local_ca_guid = 0x1122334455667788;
  want.private_data = pattern_array<196>(0x20);
  expect_cm_codec(image, want);
}

TEST(CmRep, BitFieldsAtMaximumStayInTheirBits) {
  struct Case {
    const char* name;
    void (*set)(CmRep&);
    std::map<size_t, uint8_t> bytes;
  };
  const Case cases[] = {
      {"local_qpn", [](CmRep& r) { r.local_qpn = ~0u; }, {{12, 0xff}, {13, 0xff}, {14, 0xff}}},
      {"local_eecn", [](CmRep& r) { r.local_eecn = ~0u; }, {{16, 0xff}, {17, 0xff}, {18, 0xff}}},
      {"starting_psn", [](CmRep& r) { r.starting_psn = ~0u; }, {{20, 0xff}, {21, 0xff}, {22, 0xff}}},
      {"responder_resources", [](CmRep& r) { r.responder_resources = 0xff; }, {{24, 0xff}}},
      {"initiator_depth", [](CmRep& r) { r.initiator_depth = 0xff; }, {{25, 0xff}}},
      {"target_ack_delay", [](CmRep& r) { r.target_ack_delay = 0xff; }, {{26, 0xf8}}},
      {"failover_accepted", [](CmRep& r) { r.failover_accepted = 0xff; }, {{26, 0x06}}},
      {"end_to_end_flow_control", [](CmRep& r) { r.end_to_end_flow_control = true; },
       {{26, 0x01}}},
      {"rnr_retry_count", [](CmRep& r) { r.rnr_retry_count = 0xff; }, {{27, 0xe0}}},
      {"srq", [](CmRep& r) { r.srq = true; }, {{27, 0x10}}},
  };
  for (const Case& c : cases) {
    CmRep r;
    c.set(r);
    expect_only(r, 232, c.bytes, c.name);
  }
}

TEST(CmRep, RandomImagesRoundTripExceptReservedBits) {
  expect_random_round_trips<CmRep>({{15, 0xff}, {19, 0xff}, {23, 0xff}, {27, 0x0f}}, 232, 110);
}

// ---------------------------------------------------------------------------------------
// RTU (table 111), DREQ (table 112), DREP (table 113)

TEST(CmRtu, ParsesAndEmitsHandBuiltImage) {
  const auto image = cat(hex("11223344 55667788"), pattern(224, 0x33));
  CmRtu want;
  want.local_comm_id = 0x11223344;
  want.remote_comm_id = 0x55667788;
  want.private_data = pattern_array<224>(0x33);
  expect_cm_codec(image, want);
  expect_random_round_trips<CmRtu>({}, 232, 111);
}

TEST(CmDreq, ParsesAndEmitsHandBuiltImage) {
  const auto image = cat(hex("00000005 00000006 345678 00"), pattern(220, 0x44));
  CmDreq want;
  want.local_comm_id = 5;
  want.remote_comm_id = 6;
  want.remote_qpn_eecn = 0x345678;
  want.private_data = pattern_array<220>(0x44);
  expect_cm_codec(image, want);
  CmDreq m;
  m.remote_qpn_eecn = ~0u;
  expect_only(m, 232, {{8, 0xff}, {9, 0xff}, {10, 0xff}}, "remote_qpn_eecn");
  expect_random_round_trips<CmDreq>({{11, 0xff}}, 232, 112);
}

TEST(CmDrep, ParsesAndEmitsHandBuiltImage) {
  const auto image = cat(hex("00000007 00000008"), pattern(224, 0x55));
  CmDrep want;
  want.local_comm_id = 7;
  want.remote_comm_id = 8;
  want.private_data = pattern_array<224>(0x55);
  expect_cm_codec(image, want);
  expect_random_round_trips<CmDrep>({}, 232, 113);
}

// ---------------------------------------------------------------------------------------
// SIDR_REQ (table 119), SIDR_REP (table 120)

TEST(CmSidrReq, ParsesAndEmitsHandBuiltImage) {
  // Service ID: UDP port space 0x0111, port 5000 (0x1388).
  const auto image = cat(hex("00000009 ffff 0000 00000000 01111388"), pattern(216, 0x66));
  CmSidrReq want;
  want.request_id = 9;
  want.pkey = 0xffff;
  want.service_id = 0x0000000001111388;
  want.private_data = pattern_array<216>(0x66);
  expect_cm_codec(image, want);
  expect_random_round_trips<CmSidrReq>({{6, 0xff}, {7, 0xff}}, 232, 119);
}

TEST(CmSidrRep, ParsesAndEmitsHandBuiltImage) {
  const auto image = cat(cat(hex("0000000a"           //  0 request ID
                                 "03 00 0000"         //  4 status 3 (no QP), info length 0
                                 "abcdef 00"          //  8 QPN
                                 "00000000 01111388"  // 12 service ID
                                 "01234567"),         // 20 Q_Key
                             pattern(72, 0x90)),      // 24 class port info
                         pattern(136, 0x77));         // 96 private data
  CmSidrRep want;
  want.request_id = 10;
  want.status = SidrStatus::kNoQp;
  want.additional_info_len = 0;
  want.qpn = 0xabcdef;
  want.service_id = 0x0000000001111388;
  want.qkey = 0x01234567;
  want.class_port_info = pattern_array<72>(0x90);
  want.private_data = pattern_array<136>(0x77);
  expect_cm_codec(image, want);
  CmSidrRep m;
  m.qpn = ~0u;
  expect_only(m, 232, {{8, 0xff}, {9, 0xff}, {10, 0xff}}, "qpn");
  CmSidrRep s;
  s.status = static_cast<SidrStatus>(0xff);
  s.additional_info_len = 0xff;
  expect_only(s, 232, {{4, 0xff}, {5, 0xff}}, "status, info length");
  expect_random_round_trips<CmSidrRep>({{6, 0xff}, {7, 0xff}, {11, 0xff}}, 232, 120);
}

// ---------------------------------------------------------------------------------------
// The whole MAD

std::vector<uint8_t> mad_of(const char* header_hex, const std::vector<uint8_t>& data) {
  return cat(hex(header_hex), data);
}

TEST(CmMessage, ParsesAWholeReqMad) {
  const auto mad = mad_of("01 07 02 03 0000 0000 0000000100000002 0010 0000 00000000", req_image());
  ASSERT_EQ(mad.size(), 256u);
  CmMessage m;
  ASSERT_EQ(CmMessage::parse(mad, m), ParseError::kOk);
  EXPECT_EQ(m.hdr.tid, 0x0000000100000002u);
  EXPECT_EQ(m.attr_id(), 0x0010);
  EXPECT_EQ(m.name(), "REQ");
  const CmReq* req = m.get<CmReq>();
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(*req, req_fields());
  EXPECT_EQ(m.get<CmRep>(), nullptr);
  // The CM data starts at MAD byte 24: the local comm ID is MAD bytes 24..27, the service
  // ID 32..39, the private data 164..255.
  EXPECT_EQ(mad[24], 0x11);
  EXPECT_EQ(mad[39], 0x2f);
  EXPECT_EQ(mad[164], 0x40);
  EXPECT_EQ(mad[255], 0x40 + 91);
  EXPECT_EQ(emit_bytes(m, 256), mad);
  // make() gives the header ib_cm sends.
  EXPECT_EQ(emit_bytes(CmMessage::make(0x0000000100000002, req_fields()), 256), mad);
}

TEST(CmMessage, EveryMessageTypeRoundTrips) {
  struct Case {
    uint16_t attr;
    std::vector<uint8_t> data;
    size_t index;  // in CmBody
  };
  const Case cases[] = {
      {0x0010, req_image(), 0},
      {0x0011, cat(hex("a1a2a3a4 b1b2b3b4 80 b8"), pattern(222, 0x10)), 1},
      {0x0012, cat(cat(hex("c1c2c3c4 d1d2d3d4 40 aa 001c"), pattern(72, 0x80)), pattern(148, 1)),
       2},
      {0x0013, cat(hex("55667788 11223344 01020304 0a0b0c00 0d0e0f00 77777700 0405abd0 "
                       "1122334455667788"),
                   pattern(196, 0x20)),
       3},
      {0x0014, cat(hex("11223344 55667788"), pattern(224, 0x33)), 4},
      {0x0015, cat(hex("00000005 00000006 34567800"), pattern(220, 0x44)), 5},
      {0x0016, cat(hex("00000007 00000008"), pattern(224, 0x55)), 6},
      {0x0017, cat(hex("00000009 ffff0000 0000000001111388"), pattern(216, 0x66)), 7},
      {0x0018, cat(cat(hex("0000000a 03000000 abcdef00 0000000001111388 01234567"),
                       pattern(72, 0x90)),
                   pattern(136, 0x77)),
       8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.attr);
    std::vector<uint8_t> mad = hex("01 07 02 03 0000 0000 1122334455667788 0000 0000 00000000");
    mad[16] = static_cast<uint8_t>(c.attr >> 8);
    mad[17] = static_cast<uint8_t>(c.attr);
    mad.insert(mad.end(), c.data.begin(), c.data.end());
    ASSERT_EQ(mad.size(), 256u);
    CmMessage m;
    ASSERT_EQ(CmMessage::parse(mad, m), ParseError::kOk);
    EXPECT_EQ(m.body.index(), c.index);
    EXPECT_EQ(m.attr_id(), c.attr);
    EXPECT_EQ(emit_bytes(m, 256), mad);
    // Every shorter buffer is truncated.
    for (size_t n = 0; n < 256; ++n) {
      CmMessage t;
      ASSERT_EQ(CmMessage::parse(Bytes(mad).first(n), t), ParseError::kTruncated) << n;
    }
    // A longer one (a receive buffer) is fine.
    std::vector<uint8_t> longer = mad;
    longer.resize(300, 0xEE);
    CmMessage l;
    ASSERT_EQ(CmMessage::parse(longer, l), ParseError::kOk);
    EXPECT_EQ(l, m);
  }
}

TEST(CmMessage, RejectsWhatIsNotACmMessage) {
  const std::vector<uint8_t> good =
      mad_of("01 07 02 03 0000 0000 0000000000000001 0014 0000 00000000",
             cat(hex("11223344 55667788"), pattern(224, 0)));
  CmMessage m;
  ASSERT_EQ(CmMessage::parse(good, m), ParseError::kOk);

  auto with = [&](size_t off, uint8_t v) {
    std::vector<uint8_t> b = good;
    b[off] = v;
    return b;
  };
  // Management class: SA (0x03), SMP (0x01), perf (0x04) are not the CM.
  for (int cls : {0x01, 0x03, 0x04, 0x81, 0x00, 0xff}) {
    EXPECT_EQ(CmMessage::parse(with(1, static_cast<uint8_t>(cls)), m), ParseError::kBadMad) << cls;
  }
  // Base version 1 only.
  for (int v : {0x00, 0x02, 0xff}) {
    EXPECT_EQ(CmMessage::parse(with(0, static_cast<uint8_t>(v)), m), ParseError::kBadMad) << v;
  }
  // Attribute IDs that are not one of the nine messages: ClassPortInfo, LAP, APR, others.
  for (unsigned attr : {0x0000u, 0x0001u, 0x000fu, 0x0019u, 0x001au, 0x001bu, 0x1014u, 0xffffu}) {
    std::vector<uint8_t> b = good;
    b[16] = static_cast<uint8_t>(attr >> 8);
    b[17] = static_cast<uint8_t>(attr);
    EXPECT_EQ(CmMessage::parse(b, m), ParseError::kUnknownCmAttribute) << attr;
  }
  // Class version and method are carried, not checked (a CM REJects version != 2 itself).
  ASSERT_EQ(CmMessage::parse(with(2, 0x01), m), ParseError::kOk);
  EXPECT_EQ(m.hdr.class_version, 1);
  ASSERT_EQ(CmMessage::parse(with(3, 0x81), m), ParseError::kOk);
  EXPECT_TRUE(m.hdr.is_response());
  // The error names are distinct and say what they are.
  EXPECT_EQ(error_name(ParseError::kBadMad), "bad_mad");
  EXPECT_EQ(error_name(ParseError::kUnknownCmAttribute), "unknown_cm_attr");
  EXPECT_FALSE(is_not_roce(ParseError::kBadMad));
}

TEST(CmMessage, EmitTakesTheAttributeIdFromTheBody) {
  CmMessage m;
  m.hdr.attr_id = 0x0010;  // says REQ
  m.body = CmDrep{};       // is a DREP
  const auto out = emit_bytes(m, 256);
  EXPECT_EQ(out[16], 0x00);
  EXPECT_EQ(out[17], 0x16);
  EXPECT_EQ(cm_attr_id(CmBody{CmSidrRep{}}), 0x0018);
  EXPECT_EQ(cm_attr_id(CmBody{CmRtu{}}), 0x0014);
}

// ---------------------------------------------------------------------------------------
// rdma_cm service IDs

TEST(CmServiceId, EncodesPortSpaceAndPort) {
  // rdma_cma.h: RDMA_PS_IPOIB 0x0002, RDMA_PS_TCP 0x0106, RDMA_PS_UDP 0x0111, RDMA_PS_IB 0x013F.
  EXPECT_EQ(kRdmaPsIpoib, 0x0002);
  EXPECT_EQ(kRdmaPsTcp, 0x0106);
  EXPECT_EQ(kRdmaPsUdp, 0x0111);
  EXPECT_EQ(kRdmaPsIb, 0x013F);
  EXPECT_EQ(ip_service_id(kRdmaPsTcp, 7471), 0x0000000001061d2fu);  // rping's default port
  EXPECT_EQ(ip_service_id(kRdmaPsUdp, 0xffff), 0x000000000111ffffu);
  EXPECT_EQ(ip_service_id(kRdmaPsIb, 0), 0x00000000013f0000u);
  EXPECT_EQ(ip_service_id(kRdmaPsIpoib, 1), 0x0000000000020001u);
}

TEST(CmServiceId, DecodesOnlyIpServiceIds) {
  auto d = decode_ip_service_id(0x0000000001061d2f);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->ps, 0x0106);
  EXPECT_EQ(d->port, 7471);
  d = decode_ip_service_id(0x000000000111ffff);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, (IpServiceId{0x0111, 0xffff}));
  EXPECT_TRUE(decode_ip_service_id(0x00000000013f0000).has_value());
  EXPECT_TRUE(decode_ip_service_id(0x0000000000020001).has_value());
  // Top 32 bits set: an IB service ID, not rdma_cm's.
  EXPECT_FALSE(decode_ip_service_id(0x0000000101061d2f).has_value());
  EXPECT_FALSE(decode_ip_service_id(0x8000000001061d2f).has_value());
  // Unknown port spaces.
  EXPECT_FALSE(decode_ip_service_id(0x0000000001071d2f).has_value());
  EXPECT_FALSE(decode_ip_service_id(0x0000000000001d2f).has_value());
  EXPECT_FALSE(decode_ip_service_id(0x0000000001051d2f).has_value());
  EXPECT_EQ(rdma_ps_name(0x0106), "TCP");
  EXPECT_EQ(rdma_ps_name(0x0111), "UDP");
  EXPECT_EQ(rdma_ps_name(0x013F), "IB");
  EXPECT_EQ(rdma_ps_name(0x0002), "IPoIB");
  EXPECT_EQ(rdma_ps_name(0x0107), "");
}

// ---------------------------------------------------------------------------------------
// rdma_cm's private-data header (struct cma_hdr)

TEST(CmaIpHeader, Ipv4) {
  // Version 0; IP version 4 in the top nibble; source port 0x9876; 10.0.0.1 -> 10.0.0.2,
  // each as 12 zero bytes and the address.
  const auto wire = hex("00 40 9876"
                        "00000000 00000000 00000000 0a000001"
                        "00000000 00000000 00000000 0a000002");
  ASSERT_EQ(wire.size(), 36u);
  CmaIpHeader h;
  ASSERT_EQ(CmaIpHeader::parse(wire, h), ParseError::kOk);
  EXPECT_EQ(h.cma_version, 0);
  EXPECT_EQ(h.ip_version, 4);
  EXPECT_TRUE(h.is_ipv4());
  EXPECT_TRUE(h.valid());
  EXPECT_EQ(h.src_port, 0x9876);
  EXPECT_EQ(to_string(h.src_ipv4()), "10.0.0.1");
  EXPECT_EQ(to_string(h.dst_ipv4()), "10.0.0.2");
  EXPECT_EQ(to_string(h.src_gid()), "::ffff:10.0.0.1");
  EXPECT_EQ(to_string(h.dst_gid()), "::ffff:10.0.0.2");
  EXPECT_EQ(emit_bytes(h, 36), wire);
  EXPECT_EQ(emit_bytes(CmaIpHeader::ipv4(0x9876, {10, 0, 0, 1}, {10, 0, 0, 2}), 36), wire);
  // From RoCE GIDs, IPv4-mapped ones give the IPv4 form (zeros, not ::ffff:).
  EXPECT_EQ(emit_bytes(CmaIpHeader::from_gids(0x9876, *parse_ipv6("::ffff:10.0.0.1"),
                                              *parse_ipv6("::ffff:10.0.0.2")),
                       36),
            wire);
  for (size_t n = 0; n < 36; ++n) {
    CmaIpHeader t;
    EXPECT_EQ(CmaIpHeader::parse(Bytes(wire).first(n), t), ParseError::kTruncated) << n;
  }
}

TEST(CmaIpHeader, Ipv6) {
  const auto wire = hex("00 60 c350"
                        "20010db8 00000000 00000000 00000001"
                        "fe800000 00000000 5054 00ff fe77 0011");
  CmaIpHeader h;
  ASSERT_EQ(CmaIpHeader::parse(wire, h), ParseError::kOk);
  EXPECT_EQ(h.ip_version, 6);
  EXPECT_FALSE(h.is_ipv4());
  EXPECT_TRUE(h.valid());
  EXPECT_EQ(h.src_port, 50000);
  EXPECT_EQ(to_string(h.src_gid()), "2001:db8::1");
  EXPECT_EQ(to_string(h.dst_gid()), "fe80::5054:ff:fe77:11");
  EXPECT_EQ(emit_bytes(h, 36), wire);
  const Gid s = *parse_ipv6("2001:db8::1"), d = *parse_ipv6("fe80::5054:ff:fe77:11");
  EXPECT_EQ(emit_bytes(CmaIpHeader::ipv6(50000, s, d), 36), wire);
  EXPECT_EQ(emit_bytes(CmaIpHeader::from_gids(50000, s, d), 36), wire);
}

TEST(CmaIpHeader, VersionsAndReservedBits) {
  CmaIpHeader h;
  // Reserved low nibble of byte 1 is ignored; IP version 5 and cma version 1 are invalid.
  ASSERT_EQ(CmaIpHeader::parse(cat(hex("00 4f 0001"), std::vector<uint8_t>(32, 0)), h),
            ParseError::kOk);
  EXPECT_EQ(h.ip_version, 4);
  EXPECT_TRUE(h.valid());
  ASSERT_EQ(CmaIpHeader::parse(cat(hex("00 50 0001"), std::vector<uint8_t>(32, 0)), h),
            ParseError::kOk);
  EXPECT_FALSE(h.valid());
  ASSERT_EQ(CmaIpHeader::parse(cat(hex("01 40 0001"), std::vector<uint8_t>(32, 0)), h),
            ParseError::kOk);
  EXPECT_FALSE(h.valid());
  CmaIpHeader m;
  m.ip_version = 0xff;
  expect_only(m, 36, {{1, 0xf0}}, "ip_version");
  expect_random_round_trips<CmaIpHeader>({{1, 0x0f}}, 36, 11);
}

TEST(CmaIpHeader, SitsAtTheStartOfReqPrivateData) {
  CmReq r;
  CmaIpHeader::ipv4(0x9876, {10, 0, 0, 1}, {10, 0, 0, 2}).emit(MutBytes(r.private_data));
  const auto data = emit_bytes(r, 232);
  // CM data offset 140 = the REQ's private data.
  EXPECT_EQ(data[140], 0x00);
  EXPECT_EQ(data[141], 0x40);
  EXPECT_EQ(data[142], 0x98);
  EXPECT_EQ(data[143], 0x76);
  EXPECT_EQ(data[140 + 4 + 15], 0x01);
  EXPECT_EQ(data[140 + 20 + 15], 0x02);
}

// ---------------------------------------------------------------------------------------
// Names and small tables

TEST(CmNames, AttributeIds) {
  EXPECT_EQ(cm_attr_name(0x0001), "ClassPortInfo");
  EXPECT_EQ(cm_attr_name(0x0010), "REQ");
  EXPECT_EQ(cm_attr_name(0x0011), "MRA");
  EXPECT_EQ(cm_attr_name(0x0012), "REJ");
  EXPECT_EQ(cm_attr_name(0x0013), "REP");
  EXPECT_EQ(cm_attr_name(0x0014), "RTU");
  EXPECT_EQ(cm_attr_name(0x0015), "DREQ");
  EXPECT_EQ(cm_attr_name(0x0016), "DREP");
  EXPECT_EQ(cm_attr_name(0x0017), "SIDR_REQ");
  EXPECT_EQ(cm_attr_name(0x0018), "SIDR_REP");
  EXPECT_EQ(cm_attr_name(0x0019), "LAP");
  EXPECT_EQ(cm_attr_name(0x001A), "APR");
  EXPECT_EQ(cm_attr_name(0x001B), "");
  EXPECT_EQ(cm_attr_name(0x0000), "");
}

TEST(CmNames, RejectReasons) {
  // IBA table 112.
  const std::map<uint16_t, std::string> want = {
      {1, "no QP"},
      {2, "no EEC"},
      {3, "no resources"},
      {4, "timeout"},
      {5, "unsupported request"},
      {6, "invalid comm ID"},
      {7, "invalid comm instance"},
      {8, "invalid service ID"},
      {9, "invalid transport type"},
      {10, "stale connection"},
      {11, "RDC does not exist"},
      {12, "invalid GID"},
      {13, "invalid LID"},
      {14, "invalid SL"},
      {15, "invalid traffic class"},
      {16, "invalid hop limit"},
      {17, "invalid packet rate"},
      {18, "invalid alternate GID"},
      {19, "invalid alternate LID"},
      {20, "invalid alternate SL"},
      {21, "invalid alternate traffic class"},
      {22, "invalid alternate hop limit"},
      {23, "invalid alternate packet rate"},
      {24, "port and CM redirect"},
      {25, "port redirect"},
      {26, "invalid path MTU"},
      {27, "insufficient responder resources"},
      {28, "consumer reject"},
      {29, "RNR retry count reject"},
      {30, "duplicate local comm ID"},
      {31, "unsupported class version"},
      {32, "invalid flow label"},
      {33, "invalid alternate flow label"},
      {35, "vendor option not supported"},
  };
  for (const auto& [code, name] : want)
    EXPECT_EQ(to_string(static_cast<CmRejReason>(code)), name) << code;
  for (unsigned code : {0u, 34u, 36u, 0xffffu})
    EXPECT_EQ(to_string(static_cast<CmRejReason>(code)), "reserved reason") << code;
}

TEST(CmNames, SmallEnums) {
  EXPECT_EQ(to_string(CmMsgResponse::kReq), "REQ");
  EXPECT_EQ(to_string(CmMsgResponse::kRep), "REP");
  EXPECT_EQ(to_string(CmMsgResponse::kOther), "other");
  EXPECT_EQ(to_string(static_cast<CmMsgResponse>(3)), "reserved");
  EXPECT_EQ(to_string(SidrStatus::kValid), "valid");
  EXPECT_EQ(to_string(SidrStatus::kNoQp), "no QP");
  EXPECT_EQ(to_string(SidrStatus::kRedirect), "redirect");
  EXPECT_EQ(to_string(static_cast<SidrStatus>(6)), "reserved status");
}

TEST(CmNames, MtuAndTimeoutCodes) {
  EXPECT_EQ(ib_mtu_bytes(0), 0u);
  EXPECT_EQ(ib_mtu_bytes(1), 256u);
  EXPECT_EQ(ib_mtu_bytes(2), 512u);
  EXPECT_EQ(ib_mtu_bytes(3), 1024u);
  EXPECT_EQ(ib_mtu_bytes(4), 2048u);
  EXPECT_EQ(ib_mtu_bytes(5), 4096u);
  EXPECT_EQ(ib_mtu_bytes(6), 0u);
  EXPECT_EQ(ib_mtu_bytes(15), 0u);
  // 4.096 us * 2^n: n = 0 is 4096 ns; rdma_cm's default 20 is 4.294967296 s.
  EXPECT_EQ(cm_timeout_ns(0), 4096u);
  EXPECT_EQ(cm_timeout_ns(1), 8192u);
  EXPECT_EQ(cm_timeout_ns(20), 4'294'967'296u);
  EXPECT_EQ(cm_timeout_ns(31), 8'796'093'022'208u);
}

}  // namespace
}  // namespace uroce::wire

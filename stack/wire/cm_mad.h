// InfiniBand Communication Manager MADs (IBA vol 1 chapter 12; MAD header 13.4.3), as the
// Linux ib_cm / rdma_cm put them on the wire over RoCEv2: a UD SEND_ONLY to QP1 with Q_Key
// 0x80010000 whose 256-byte payload is one MAD.
//
//   MAD = | common MAD header (24) | CM data (232) |
//
// Every message Repr below parses and emits the 232 bytes of CM data (the MAD after its
// header); CmMessage parses and emits the whole 256-byte MAD. Offsets in the diagrams are
// those of IBA tables 106..120, counted from the start of the CM data (add 24 for the MAD).
// Multi-bit fields sharing a byte are listed most significant first. Reserved bits are
// ignored on parse and written as zero. Nothing here validates values (a REQ with transport
// type 3 parses fine): that is the connection manager's business.
#pragma once

#include <array>
#include <cstring>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "wire/addr.h"
#include "wire/bytes.h"
#include "wire/error.h"

namespace uroce::wire {

inline constexpr size_t kMadLen = 256;
inline constexpr size_t kMadHeaderLen = 24;
inline constexpr size_t kCmDataLen = 232;  // kMadLen - kMadHeaderLen
inline constexpr uint32_t kGsiQkey = 0x80010000;  // QP1's well-known Q_Key
inline constexpr uint32_t kGsiQpn = 1;            // the general services interface QP

inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;

/// MAD methods (the low 7 bits of the method byte; bit 7 is R, "this is a response").
inline constexpr uint8_t kMadMethodGet = 0x01;
inline constexpr uint8_t kMadMethodSet = 0x02;
inline constexpr uint8_t kMadMethodSend = 0x03;  // every CM message
inline constexpr uint8_t kMadMethodResponseBit = 0x80;
inline constexpr uint8_t kMadMethodGetResp = 0x81;

/// CM attribute IDs (IBA table 104).
namespace cm_attr {
inline constexpr uint16_t kClassPortInfo = 0x0001;
inline constexpr uint16_t kReq = 0x0010;
inline constexpr uint16_t kMra = 0x0011;
inline constexpr uint16_t kRej = 0x0012;
inline constexpr uint16_t kRep = 0x0013;
inline constexpr uint16_t kRtu = 0x0014;
inline constexpr uint16_t kDreq = 0x0015;
inline constexpr uint16_t kDrep = 0x0016;
inline constexpr uint16_t kSidrReq = 0x0017;
inline constexpr uint16_t kSidrRep = 0x0018;
inline constexpr uint16_t kLap = 0x0019;
inline constexpr uint16_t kApr = 0x001A;
}  // namespace cm_attr

/// "REQ", "REP", "ClassPortInfo", ...; "" for an ID that is not a CM attribute.
std::string_view cm_attr_name(uint16_t attr_id);

/// REJ reasons (IBA table 112; names as the Linux ib_cm prints them).
enum class CmRejReason : uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupported = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,  // what a peer answers when nobody listens on the service ID
  kInvalidTransportType = 9,
  kStaleConn = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerReject = 28,  // the application said no (rdma_reject)
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,
};
/// "no QP", "consumer reject", ...; "reserved reason" for values the table does not define.
std::string_view to_string(CmRejReason r);

/// Which message a REJ rejects or an MRA delays (2 bits).
enum class CmMsgResponse : uint8_t { kReq = 0, kRep = 1, kOther = 2 };
std::string_view to_string(CmMsgResponse m);  // "REQ", "REP", "other", "reserved"

/// SIDR_REP status (IBA table 121).
enum class SidrStatus : uint8_t {
  kValid = 0,
  kServiceIdNotSupported = 1,
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedClassVersion = 5,
};
std::string_view to_string(SidrStatus s);

/// The 4-bit path MTU code of a REQ (1 = 256 .. 5 = 4096) in bytes; 0 for other codes.
constexpr uint32_t ib_mtu_bytes(uint8_t code) {
  return code >= 1 && code <= 5 ? 128u << code : 0u;
}
/// A 5-bit CM timeout code (CM response timeout, service timeout, ACK timeout, target ACK
/// delay): 4.096 us * 2^code, in nanoseconds.
constexpr uint64_t cm_timeout_ns(uint8_t code) { return uint64_t{4096} << (code & 0x1F); }

namespace cm_detail {
inline uint8_t bits(uint8_t byte, unsigned shift, unsigned mask) {
  return static_cast<uint8_t>((byte >> shift) & mask);
}
inline uint8_t put(unsigned value, unsigned mask, unsigned shift) {
  return static_cast<uint8_t>((value & mask) << shift);
}
template <size_t N>
inline void load(Bytes b, size_t off, std::array<uint8_t, N>& out) {
  std::memcpy(out.data(), b.data() + off, N);
}
template <size_t N>
inline void store(MutBytes o, size_t off, const std::array<uint8_t, N>& in) {
  std::memcpy(o.data() + off, in.data(), N);
}
inline ParseError check(Bytes b, size_t len) {
  return b.size() < len ? ParseError::kTruncated : ParseError::kOk;
}
}  // namespace cm_detail

// ---------------------------------------------------------------------------------------
// Common MAD header (IBA 13.4.3), 24 bytes.
//
//   0 | base version (8) | mgmt class (8) | class version (8) | R (1) | method (7) |
//   4 | status (16)                       | class specific (16)                    |
//   8 | transaction ID (64)                                                        |
//  16 | attribute ID (16)                 | reserved (16)                          |
//  20 | attribute modifier (32)                                                    |

struct MadHeader {
  static constexpr size_t kLen = kMadHeaderLen;

  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMadMethodSend;  // R bit included
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;
  uint16_t attr_id = 0;
  uint16_t reserved = 0;
  uint32_t attr_mod = 0;

  static constexpr size_t header_len() { return kLen; }
  bool is_response() const { return (method & kMadMethodResponseBit) != 0; }
  uint8_t method_code() const { return method & 0x7F; }

  /// Length only: any management class parses (CmMessage checks that it is the CM's).
  static ParseError parse(Bytes b, MadHeader& out) {
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.base_version = b[0];
    out.mgmt_class = b[1];
    out.class_version = b[2];
    out.method = b[3];
    out.status = load_be16(&b[4]);
    out.class_specific = load_be16(&b[6]);
    out.tid = load_be64(&b[8]);
    out.attr_id = load_be16(&b[16]);
    out.reserved = load_be16(&b[18]);
    out.attr_mod = load_be32(&b[20]);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    out[0] = base_version;
    out[1] = mgmt_class;
    out[2] = class_version;
    out[3] = method;
    store_be16(&out[4], status);
    store_be16(&out[6], class_specific);
    store_be64(&out[8], tid);
    store_be16(&out[16], attr_id);
    store_be16(&out[18], reserved);
    store_be32(&out[20], attr_mod);
  }
  bool operator==(const MadHeader&) const = default;
};

// ---------------------------------------------------------------------------------------
// Path information (44 bytes), the primary and the alternate path of a REQ.
//
//   0 | local port LID (16)          | remote port LID (16)                      |
//   4 | local port GID (128)                                                     |
//  20 | remote port GID (128)                                                    |
//  36 | flow label (20)                       | reserved (6) | packet rate (6)   |
//  40 | traffic class (8) | hop limit (8) | SL (4) subnet local (1) rsv (3) |
//     | local ACK timeout (5) reserved (3) |

struct CmPath {
  static constexpr size_t kLen = 44;

  uint16_t local_lid = 0;
  uint16_t remote_lid = 0;
  Gid local_gid{};
  Gid remote_gid{};
  uint32_t flow_label = 0;  // 20 bits
  uint8_t packet_rate = 0;  // 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;  // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits: 4.096 us * 2^n

  static ParseError parse(Bytes b, CmPath& out) {
    using cm_detail::bits;
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.local_lid = load_be16(&b[0]);
    out.remote_lid = load_be16(&b[2]);
    cm_detail::load(b, 4, out.local_gid);
    cm_detail::load(b, 20, out.remote_gid);
    const uint32_t w = load_be32(&b[36]);
    out.flow_label = w >> 12;
    out.packet_rate = static_cast<uint8_t>(w & 0x3F);
    out.traffic_class = b[40];
    out.hop_limit = b[41];
    out.sl = bits(b[42], 4, 0xF);
    out.subnet_local = bits(b[42], 3, 1) != 0;
    out.local_ack_timeout = bits(b[43], 3, 0x1F);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    using cm_detail::put;
    store_be16(&out[0], local_lid);
    store_be16(&out[2], remote_lid);
    cm_detail::store(out, 4, local_gid);
    cm_detail::store(out, 20, remote_gid);
    store_be32(&out[36], (flow_label & 0xFFFFF) << 12 | (packet_rate & 0x3Fu));
    out[40] = traffic_class;
    out[41] = hop_limit;
    out[42] = static_cast<uint8_t>(put(sl, 0xF, 4) | put(subnet_local ? 1 : 0, 1, 3));
    out[43] = put(local_ack_timeout, 0x1F, 3);
  }
  bool operator==(const CmPath&) const = default;
};

// ---------------------------------------------------------------------------------------
// REQ, Request for Communication (IBA 12.6.5, table 106).
//
//   0 | local communication ID (32)                                             |
//   4 | reserved (32)                                                           |
//   8 | service ID (64)                                                         |
//  16 | local CA GUID (64)                                                      |
//  24 | reserved (32)                                                           |
//  28 | local Q_Key (32)                                                        |
//  32 | local QPN (24)                                  | responder resources (8) |
//  36 | local EECN (24)                                 | initiator depth (8)     |
//  40 | remote EECN (24)                | remote CM response timeout (5)        |
//     |                                 | transport service type (2) | E2E fc (1) |
//  44 | starting PSN (24)               | local CM response timeout (5)         |
//     |                                 | retry count (3)                       |
//  48 | P_Key (16)      | path MTU (4) RDC exists (1) RNR retry count (3)       |
//     |                 | max CM retries (4) SRQ (1) extended transport type (3)|
//  52 | primary path (44)                                                       |
//  96 | alternate path (44)                                                     |
// 140 | private data (92): rdma_cm puts its 36-byte CmaIpHeader first           |

/// Transport service type of a REQ (2 bits).
inline constexpr uint8_t kCmTransportRc = 0;
inline constexpr uint8_t kCmTransportUc = 1;
inline constexpr uint8_t kCmTransportRd = 2;

struct CmReq {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = cm_attr::kReq;
  static constexpr size_t kPrivateLen = 92;

  uint32_t local_comm_id = 0;
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;  // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;                // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits
  uint8_t transport_service_type = 0;      // 2 bits: kCmTransportRc / Uc / Rd
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;              // 24 bits
  uint8_t local_cm_response_timeout = 0;  // 5 bits
  uint8_t retry_count = 0;                // 3 bits
  uint16_t pkey = 0;
  uint8_t path_mtu = 0;  // 4 bits: 1 = 256 .. 5 = 4096 (ib_mtu_bytes)
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  uint8_t extended_transport_type = 0;  // 3 bits
  CmPath primary;
  CmPath alternate;  // all zero when there is none
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmReq& out) {
    using cm_detail::bits;
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.local_comm_id = load_be32(&b[0]);
    out.service_id = load_be64(&b[8]);
    out.local_ca_guid = load_be64(&b[16]);
    out.local_qkey = load_be32(&b[28]);
    out.local_qpn = load_be24(&b[32]);
    out.responder_resources = b[35];
    out.local_eecn = load_be24(&b[36]);
    out.initiator_depth = b[39];
    out.remote_eecn = load_be24(&b[40]);
    out.remote_cm_response_timeout = bits(b[43], 3, 0x1F);
    out.transport_service_type = bits(b[43], 1, 3);
    out.end_to_end_flow_control = bits(b[43], 0, 1) != 0;
    out.starting_psn = load_be24(&b[44]);
    out.local_cm_response_timeout = bits(b[47], 3, 0x1F);
    out.retry_count = bits(b[47], 0, 7);
    out.pkey = load_be16(&b[48]);
    out.path_mtu = bits(b[50], 4, 0xF);
    out.rdc_exists = bits(b[50], 3, 1) != 0;
    out.rnr_retry_count = bits(b[50], 0, 7);
    out.max_cm_retries = bits(b[51], 4, 0xF);
    out.srq = bits(b[51], 3, 1) != 0;
    out.extended_transport_type = bits(b[51], 0, 7);
    CmPath::parse(b.subspan(52), out.primary);
    CmPath::parse(b.subspan(96), out.alternate);
    cm_detail::load(b, 140, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    using cm_detail::put;
    store_be32(&out[0], local_comm_id);
    store_be32(&out[4], 0);
    store_be64(&out[8], service_id);
    store_be64(&out[16], local_ca_guid);
    store_be32(&out[24], 0);
    store_be32(&out[28], local_qkey);
    store_be24(&out[32], local_qpn & 0xFFFFFF);
    out[35] = responder_resources;
    store_be24(&out[36], local_eecn & 0xFFFFFF);
    out[39] = initiator_depth;
    store_be24(&out[40], remote_eecn & 0xFFFFFF);
    out[43] = static_cast<uint8_t>(put(remote_cm_response_timeout, 0x1F, 3) |
                                   put(transport_service_type, 3, 1) |
                                   put(end_to_end_flow_control ? 1 : 0, 1, 0));
    store_be24(&out[44], starting_psn & 0xFFFFFF);
    out[47] = static_cast<uint8_t>(put(local_cm_response_timeout, 0x1F, 3) | put(retry_count, 7, 0));
    store_be16(&out[48], pkey);
    out[50] = static_cast<uint8_t>(put(path_mtu, 0xF, 4) | put(rdc_exists ? 1 : 0, 1, 3) |
                                   put(rnr_retry_count, 7, 0));
    out[51] = static_cast<uint8_t>(put(max_cm_retries, 0xF, 4) | put(srq ? 1 : 0, 1, 3) |
                                   put(extended_transport_type, 7, 0));
    primary.emit(out.subspan(52));
    alternate.emit(out.subspan(96));
    cm_detail::store(out, 140, private_data);
  }
  bool operator==(const CmReq&) const = default;
};

// ---------------------------------------------------------------------------------------
// MRA, Message Receipt Acknowledgement (IBA 12.6.6, table 107): "I got it, give me longer".
//
//   0 | local communication ID (32)                                             |
//   4 | remote communication ID (32)                                            |
//   8 | message MRAed (2) reserved (6) | service timeout (5) reserved (3) |      |
//  10 | private data (222)                                                      |

struct CmMra {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = cm_attr::kMra;
  static constexpr size_t kPrivateLen = 222;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  CmMsgResponse msg_mraed = CmMsgResponse::kReq;  // 2 bits
  uint8_t service_timeout = 0;                     // 5 bits: 4.096 us * 2^n
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmMra& out) {
    using cm_detail::bits;
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.local_comm_id = load_be32(&b[0]);
    out.remote_comm_id = load_be32(&b[4]);
    out.msg_mraed = static_cast<CmMsgResponse>(bits(b[8], 6, 3));
    out.service_timeout = bits(b[9], 3, 0x1F);
    cm_detail::load(b, 10, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    using cm_detail::put;
    store_be32(&out[0], local_comm_id);
    store_be32(&out[4], remote_comm_id);
    out[8] = put(static_cast<uint8_t>(msg_mraed), 3, 6);
    out[9] = put(service_timeout, 0x1F, 3);
    cm_detail::store(out, 10, private_data);
  }
  bool operator==(const CmMra&) const = default;
};

// ---------------------------------------------------------------------------------------
// REJ, Reject (IBA 12.6.7, table 108).
//
//   0 | local communication ID (32)                                             |
//   4 | remote communication ID (32)                                            |
//   8 | message REJected (2) rsv (6) | reject info length (7) rsv (1) | reason (16) |
//  12 | additional reject information, ARI (72)                                 |
//  84 | private data (148)                                                      |

struct CmRej {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = cm_attr::kRej;
  static constexpr size_t kAriLen = 72;
  static constexpr size_t kPrivateLen = 148;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  CmMsgResponse msg_rejected = CmMsgResponse::kReq;  // 2 bits
  uint8_t reject_info_len = 0;                        // 7 bits: valid bytes of ari
  CmRejReason reason = CmRejReason::kConsumerReject;
  std::array<uint8_t, kAriLen> ari{};
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmRej& out) {
    using cm_detail::bits;
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.local_comm_id = load_be32(&b[0]);
    out.remote_comm_id = load_be32(&b[4]);
    out.msg_rejected = static_cast<CmMsgResponse>(bits(b[8], 6, 3));
    out.reject_info_len = bits(b[9], 1, 0x7F);
    out.reason = static_cast<CmRejReason>(load_be16(&b[10]));
    cm_detail::load(b, 12, out.ari);
    cm_detail::load(b, 84, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    using cm_detail::put;
    store_be32(&out[0], local_comm_id);
    store_be32(&out[4], remote_comm_id);
    out[8] = put(static_cast<uint8_t>(msg_rejected), 3, 6);
    out[9] = put(reject_info_len, 0x7F, 1);
    store_be16(&out[10], static_cast<uint16_t>(reason));
    cm_detail::store(out, 12, ari);
    cm_detail::store(out, 84, private_data);
  }
  bool operator==(const CmRej&) const = default;
};

// ---------------------------------------------------------------------------------------
// REP, Reply to Request for Communication (IBA 12.6.8, table 110).
//
//   0 | local communication ID (32)                                             |
//   4 | remote communication ID (32)                                            |
//   8 | local Q_Key (32)                                                        |
//  12 | local QPN (24)                                      | reserved (8)      |
//  16 | local EECN (24)                                     | reserved (8)      |
//  20 | starting PSN (24)                                   | reserved (8)      |
//  24 | responder resources (8) | initiator depth (8) |
//     | target ACK delay (5) failover accepted (2) E2E flow control (1) |
//     | RNR retry count (3) SRQ (1) reserved (4) |
//  28 | local CA GUID (64)                                                      |
//  36 | private data (196)                                                      |

struct CmRep {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = cm_attr::kRep;
  static constexpr size_t kPrivateLen = 196;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;     // 24 bits
  uint32_t local_eecn = 0;    // 24 bits
  uint32_t starting_psn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;   // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmRep& out) {
    using cm_detail::bits;
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.local_comm_id = load_be32(&b[0]);
    out.remote_comm_id = load_be32(&b[4]);
    out.local_qkey = load_be32(&b[8]);
    out.local_qpn = load_be24(&b[12]);
    out.local_eecn = load_be24(&b[16]);
    out.starting_psn = load_be24(&b[20]);
    out.responder_resources = b[24];
    out.initiator_depth = b[25];
    out.target_ack_delay = bits(b[26], 3, 0x1F);
    out.failover_accepted = bits(b[26], 1, 3);
    out.end_to_end_flow_control = bits(b[26], 0, 1) != 0;
    out.rnr_retry_count = bits(b[27], 5, 7);
    out.srq = bits(b[27], 4, 1) != 0;
    out.local_ca_guid = load_be64(&b[28]);
    cm_detail::load(b, 36, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    using cm_detail::put;
    store_be32(&out[0], local_comm_id);
    store_be32(&out[4], remote_comm_id);
    store_be32(&out[8], local_qkey);
    store_be32(&out[12], (local_qpn & 0xFFFFFF) << 8);
    store_be32(&out[16], (local_eecn & 0xFFFFFF) << 8);
    store_be32(&out[20], (starting_psn & 0xFFFFFF) << 8);
    out[24] = responder_resources;
    out[25] = initiator_depth;
    out[26] = static_cast<uint8_t>(put(target_ack_delay, 0x1F, 3) | put(failover_accepted, 3, 1) |
                                   put(end_to_end_flow_control ? 1 : 0, 1, 0));
    out[27] = static_cast<uint8_t>(put(rnr_retry_count, 7, 5) | put(srq ? 1 : 0, 1, 4));
    store_be64(&out[28], local_ca_guid);
    cm_detail::store(out, 36, private_data);
  }
  bool operator==(const CmRep&) const = default;
};

// ---------------------------------------------------------------------------------------
// RTU, Ready To Use (IBA 12.6.9, table 111), and DREP, Reply to Request for Communication
// Release (IBA 12.6.11, table 113): the two comm IDs and private data.
//
//   0 | local communication ID (32)                                             |
//   4 | remote communication ID (32)                                            |
//   8 | private data (224)                                                      |

template <uint16_t AttrId>
struct CmIdsAndPrivate {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = AttrId;
  static constexpr size_t kPrivateLen = 224;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmIdsAndPrivate& out) {
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.local_comm_id = load_be32(&b[0]);
    out.remote_comm_id = load_be32(&b[4]);
    cm_detail::load(b, 8, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be32(&out[0], local_comm_id);
    store_be32(&out[4], remote_comm_id);
    cm_detail::store(out, 8, private_data);
  }
  bool operator==(const CmIdsAndPrivate&) const = default;
};
using CmRtu = CmIdsAndPrivate<cm_attr::kRtu>;
using CmDrep = CmIdsAndPrivate<cm_attr::kDrep>;

// ---------------------------------------------------------------------------------------
// DREQ, Request for Communication Release (IBA 12.6.10, table 112).
//
//   0 | local communication ID (32)                                             |
//   4 | remote communication ID (32)                                            |
//   8 | remote QPN/EECN (24)                                | reserved (8)      |
//  12 | private data (220)                                                      |

struct CmDreq {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = cm_attr::kDreq;
  static constexpr size_t kPrivateLen = 220;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn_eecn = 0;  // 24 bits: the receiver's QP being disconnected
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmDreq& out) {
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.local_comm_id = load_be32(&b[0]);
    out.remote_comm_id = load_be32(&b[4]);
    out.remote_qpn_eecn = load_be24(&b[8]);
    cm_detail::load(b, 12, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be32(&out[0], local_comm_id);
    store_be32(&out[4], remote_comm_id);
    store_be24(&out[8], remote_qpn_eecn & 0xFFFFFF);
    out[11] = 0;
    cm_detail::store(out, 12, private_data);
  }
  bool operator==(const CmDreq&) const = default;
};

// ---------------------------------------------------------------------------------------
// SIDR_REQ, Service ID Resolution Request (IBA 12.11.1, table 119): which UD QP serves this
// service ID? rdma_cm's UDP port space resolves its peers this way.
//
//   0 | request ID (32)                                                         |
//   4 | P_Key (16)                      | reserved (16)                         |
//   8 | service ID (64)                                                         |
//  16 | private data (216): rdma_cm puts its 36-byte CmaIpHeader first          |

struct CmSidrReq {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = cm_attr::kSidrReq;
  static constexpr size_t kPrivateLen = 216;

  uint32_t request_id = 0;
  uint16_t pkey = 0;
  uint64_t service_id = 0;
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmSidrReq& out) {
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.request_id = load_be32(&b[0]);
    out.pkey = load_be16(&b[4]);
    out.service_id = load_be64(&b[8]);
    cm_detail::load(b, 16, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be32(&out[0], request_id);
    store_be16(&out[4], pkey);
    store_be16(&out[6], 0);
    store_be64(&out[8], service_id);
    cm_detail::store(out, 16, private_data);
  }
  bool operator==(const CmSidrReq&) const = default;
};

// ---------------------------------------------------------------------------------------
// SIDR_REP, Service ID Resolution Response (IBA 12.11.2, table 120).
//
//   0 | request ID (32)                                                         |
//   4 | status (8) | additional info length (8) | reserved (16)                 |
//   8 | QPN (24)                                            | reserved (8)      |
//  12 | service ID (64)                                                         |
//  20 | Q_Key (32)                                                              |
//  24 | class port info (72): where to go instead, for status "redirect"        |
//  96 | private data (136)                                                      |

struct CmSidrRep {
  static constexpr size_t kLen = kCmDataLen;
  static constexpr uint16_t kAttrId = cm_attr::kSidrRep;
  static constexpr size_t kClassPortInfoLen = 72;
  static constexpr size_t kPrivateLen = 136;

  uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kValid;
  uint8_t additional_info_len = 0;
  uint32_t qpn = 0;  // 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, kClassPortInfoLen> class_port_info{};
  std::array<uint8_t, kPrivateLen> private_data{};

  static ParseError parse(Bytes b, CmSidrRep& out) {
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.request_id = load_be32(&b[0]);
    out.status = static_cast<SidrStatus>(b[4]);
    out.additional_info_len = b[5];
    out.qpn = load_be24(&b[8]);
    out.service_id = load_be64(&b[12]);
    out.qkey = load_be32(&b[20]);
    cm_detail::load(b, 24, out.class_port_info);
    cm_detail::load(b, 96, out.private_data);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    store_be32(&out[0], request_id);
    out[4] = static_cast<uint8_t>(status);
    out[5] = additional_info_len;
    store_be16(&out[6], 0);
    store_be24(&out[8], qpn & 0xFFFFFF);
    out[11] = 0;
    store_be64(&out[12], service_id);
    store_be32(&out[20], qkey);
    cm_detail::store(out, 24, class_port_info);
    cm_detail::store(out, 96, private_data);
  }
  bool operator==(const CmSidrRep&) const = default;
};

// ---------------------------------------------------------------------------------------
// A whole CM MAD: header + one of the messages above.
//
// parse() wants at least 256 bytes (kTruncated otherwise; bytes beyond 256 are ignored),
// base version 1 and management class 0x07 (kBadMad otherwise), and an attribute ID of one
// of the messages decoded here (kUnknownCmAttribute otherwise: ClassPortInfo, LAP and APR
// included). The class version and the method are carried, not checked: a CM answers a
// class version it does not support with REJ reason 31, so it has to see the message.
// emit() writes 256 bytes, with the header's attribute ID taken from the body.

using CmBody =
    std::variant<CmReq, CmMra, CmRej, CmRep, CmRtu, CmDreq, CmDrep, CmSidrReq, CmSidrRep>;

inline uint16_t cm_attr_id(const CmBody& body) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kAttrId; }, body);
}

struct CmMessage {
  MadHeader hdr;
  CmBody body;

  /// A CM Send MAD with this transaction ID: header defaults, attribute ID from `body`.
  static CmMessage make(uint64_t tid, CmBody body) {
    CmMessage m{{}, std::move(body)};
    m.hdr.tid = tid;
    m.hdr.attr_id = cm_attr_id(m.body);
    return m;
  }

  uint16_t attr_id() const { return cm_attr_id(body); }
  std::string_view name() const { return cm_attr_name(attr_id()); }  // "REQ", ...
  template <typename T>
  const T* get() const {
    return std::get_if<T>(&body);
  }

  static ParseError parse(Bytes mad, CmMessage& out) {
    if (mad.size() < kMadLen) return ParseError::kTruncated;
    MadHeader h;
    MadHeader::parse(mad, h);
    if (h.base_version != kMadBaseVersion || h.mgmt_class != kMgmtClassCm)
      return ParseError::kBadMad;
    const Bytes data = mad.subspan(kMadHeaderLen, kCmDataLen);
    ParseError e = ParseError::kOk;
    switch (h.attr_id) {
      case cm_attr::kReq: e = parse_as<CmReq>(data, out.body); break;
      case cm_attr::kMra: e = parse_as<CmMra>(data, out.body); break;
      case cm_attr::kRej: e = parse_as<CmRej>(data, out.body); break;
      case cm_attr::kRep: e = parse_as<CmRep>(data, out.body); break;
      case cm_attr::kRtu: e = parse_as<CmRtu>(data, out.body); break;
      case cm_attr::kDreq: e = parse_as<CmDreq>(data, out.body); break;
      case cm_attr::kDrep: e = parse_as<CmDrep>(data, out.body); break;
      case cm_attr::kSidrReq: e = parse_as<CmSidrReq>(data, out.body); break;
      case cm_attr::kSidrRep: e = parse_as<CmSidrRep>(data, out.body); break;
      default: return ParseError::kUnknownCmAttribute;
    }
    if (e == ParseError::kOk) out.hdr = h;
    return e;
  }
  void emit(MutBytes out) const {
    MadHeader h = hdr;
    h.attr_id = attr_id();
    h.emit(out);
    const MutBytes data = out.subspan(kMadHeaderLen, kCmDataLen);
    std::visit([&](const auto& m) { m.emit(data); }, body);
  }
  bool operator==(const CmMessage&) const = default;

 private:
  template <typename T>
  static ParseError parse_as(Bytes data, CmBody& body) {
    T& m = body.emplace<T>();
    return T::parse(data, m);
  }
};

// ---------------------------------------------------------------------------------------
// rdma_cm's IP-based service IDs (include/rdma/rdma_cma.h, IBA annex A11):
//
//   service ID = 0x00000000 | port space (16) | port (16)
//
// The port is the listener's (destination) port; the client's port is in the CmaIpHeader.

inline constexpr uint16_t kRdmaPsIpoib = 0x0002;
inline constexpr uint16_t kRdmaPsTcp = 0x0106;  // RC connections (RDMA_PS_TCP)
inline constexpr uint16_t kRdmaPsUdp = 0x0111;  // UD, resolved with SIDR (RDMA_PS_UDP)
inline constexpr uint16_t kRdmaPsIb = 0x013F;   // any QP type (RDMA_PS_IB)

constexpr uint64_t ip_service_id(uint16_t ps, uint16_t port) {
  return uint64_t{ps} << 16 | port;
}

struct IpServiceId {
  uint16_t ps = 0;
  uint16_t port = 0;
  bool operator==(const IpServiceId&) const = default;
};
/// The port space and port of an rdma_cm service ID; nullopt when the top 32 bits are not
/// zero or the port space is not one of the four above.
constexpr std::optional<IpServiceId> decode_ip_service_id(uint64_t sid) {
  if ((sid >> 32) != 0) return std::nullopt;
  const auto ps = static_cast<uint16_t>(sid >> 16);
  if (ps != kRdmaPsIpoib && ps != kRdmaPsTcp && ps != kRdmaPsUdp && ps != kRdmaPsIb)
    return std::nullopt;
  return IpServiceId{ps, static_cast<uint16_t>(sid)};
}
/// "TCP", "UDP", "IB", "IPoIB"; "" for another value.
std::string_view rdma_ps_name(uint16_t ps);

// ---------------------------------------------------------------------------------------
// rdma_cm's private-data header ("struct cma_hdr" in drivers/infiniband/core/cma.c, IBA
// annex A11), 36 bytes at the start of the private data of a REQ and a SIDR_REQ.
//
//   0 | cma version (8) = 0 | IP version (4) rsv (4) | source port (16)         |
//   4 | source address (128)                                                    |
//  20 | destination address (128)                                               |
//
// An IPv6 address is written as is; an IPv4 one as 12 zero bytes and the 4 address bytes
// (not ::ffff:a.b.c.d). src / dst keep the 16 bytes as they are on the wire.

struct CmaIpHeader {
  static constexpr size_t kLen = 36;
  static constexpr uint8_t kCmaVersion = 0x00;

  uint8_t cma_version = kCmaVersion;
  uint8_t ip_version = 4;  // 4 bits: 4 or 6
  uint16_t src_port = 0;
  Ipv6Addr src{};
  Ipv6Addr dst{};

  static CmaIpHeader ipv4(uint16_t src_port, const Ipv4Addr& src, const Ipv4Addr& dst) {
    CmaIpHeader h;
    h.ip_version = 4;
    h.src_port = src_port;
    for (size_t i = 0; i < 4; ++i) {
      h.src[12 + i] = src[i];
      h.dst[12 + i] = dst[i];
    }
    return h;
  }
  static CmaIpHeader ipv6(uint16_t src_port, const Ipv6Addr& src, const Ipv6Addr& dst) {
    return {kCmaVersion, 6, src_port, src, dst};
  }
  /// From the two RoCE GIDs: IPv4 form when both are IPv4-mapped (::ffff:a.b.c.d).
  static CmaIpHeader from_gids(uint16_t src_port, const Gid& src, const Gid& dst) {
    if (is_ipv4_mapped(src) && is_ipv4_mapped(dst))
      return ipv4(src_port, tail4(src), tail4(dst));
    return ipv6(src_port, src, dst);
  }

  /// Version 0 and IP version 4 or 6: what cma.c accepts.
  bool valid() const { return cma_version == kCmaVersion && (ip_version == 4 || ip_version == 6); }
  bool is_ipv4() const { return ip_version == 4; }
  Ipv4Addr src_ipv4() const { return tail4(src); }
  Ipv4Addr dst_ipv4() const { return tail4(dst); }
  /// The addresses as RoCE GIDs: IPv4 as ::ffff:a.b.c.d, IPv6 as is.
  Gid src_gid() const { return is_ipv4() ? ipv4_mapped_gid(src_ipv4()) : src; }
  Gid dst_gid() const { return is_ipv4() ? ipv4_mapped_gid(dst_ipv4()) : dst; }

  static ParseError parse(Bytes b, CmaIpHeader& out) {
    if (auto e = cm_detail::check(b, kLen); e != ParseError::kOk) return e;
    out.cma_version = b[0];
    out.ip_version = cm_detail::bits(b[1], 4, 0xF);
    out.src_port = load_be16(&b[2]);
    cm_detail::load(b, 4, out.src);
    cm_detail::load(b, 20, out.dst);
    return ParseError::kOk;
  }
  void emit(MutBytes out) const {
    out[0] = cma_version;
    out[1] = cm_detail::put(ip_version, 0xF, 4);
    store_be16(&out[2], src_port);
    cm_detail::store(out, 4, src);
    cm_detail::store(out, 20, dst);
  }
  bool operator==(const CmaIpHeader&) const = default;

 private:
  static Ipv4Addr tail4(const Ipv6Addr& a) { return {a[12], a[13], a[14], a[15]}; }
};

}  // namespace uroce::wire

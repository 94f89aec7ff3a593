// Names and small tables shared by the wire headers.
#include <array>

#include "wire/aeth.h"
#include "wire/error.h"
#include "wire/ipv4.h"
#include "wire/opcode.h"

namespace uroce::wire {

namespace {
struct ErrorName {
  std::string_view name, text;
};
constexpr std::array<ErrorName, static_cast<size_t>(ParseError::kCount)> kErrorNames = {{
#define UROCE_X(id, name, text) {name, text},
    UROCE_PARSE_ERRORS(UROCE_X)
#undef UROCE_X
}};
}  // namespace

std::string_view error_name(ParseError e) {
  auto i = static_cast<size_t>(e);
  return i < kErrorNames.size() ? kErrorNames[i].name : "unknown";
}
std::string_view error_text(ParseError e) {
  auto i = static_cast<size_t>(e);
  return i < kErrorNames.size() ? kErrorNames[i].text : "unknown error";
}

std::string_view to_string(AckKind k) {
  switch (k) {
    case AckKind::kAck: return "ACK";
    case AckKind::kRnrNak: return "RNR NAK";
    case AckKind::kReserved: return "reserved";
    case AckKind::kNak: return "NAK";
  }
  return "?";
}

std::string_view to_string(NakCode c) {
  switch (c) {
    case NakCode::kPsnSeqError: return "PSN sequence error";
    case NakCode::kInvalidRequest: return "invalid request";
    case NakCode::kRemoteAccessError: return "remote access error";
    case NakCode::kRemoteOpError: return "remote operational error";
    case NakCode::kInvalidRdRequest: return "invalid RD request";
  }
  return "reserved NAK code";
}

uint64_t rnr_timer_ns(uint8_t code) {
  // IBA table 45, in units of 10 us; code 0 is the longest wait (655.36 ms).
  static constexpr std::array<uint32_t, 32> k10us = {
      65536, 1,   2,   3,   4,   6,    8,    12,   16,   24,   32,   48,   64,   96,   128,  192,
      256,   384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
      49152};
  return uint64_t{k10us[code & 31]} * 10'000;
}

std::string_view to_string(Transport t) {
  switch (t) {
    case Transport::kRc: return "RC";
    case Transport::kUc: return "UC";
    case Transport::kUd: return "UD";
    case Transport::kCnp: return "CNP";
    case Transport::kXrc: return "XRC";
  }
  return "?";
}

std::string_view to_string(Operation o) {
  switch (o) {
    case Operation::kSend: return "SEND";
    case Operation::kWrite: return "RDMA WRITE";
    case Operation::kReadRequest: return "RDMA READ request";
    case Operation::kReadResponse: return "RDMA READ response";
    case Operation::kAck: return "ACK";
    case Operation::kAtomicAck: return "ATOMIC ACK";
    case Operation::kCompareSwap: return "COMPARE & SWAP";
    case Operation::kFetchAdd: return "FETCH & ADD";
    case Operation::kFlush: return "FLUSH";
    case Operation::kAtomicWrite: return "ATOMIC WRITE";
    case Operation::kCnp: return "congestion notification";
  }
  return "?";
}

std::string_view to_string(Position p) {
  switch (p) {
    case Position::kOnly: return "only";
    case Position::kFirst: return "first";
    case Position::kMiddle: return "middle";
    case Position::kLast: return "last";
  }
  return "?";
}

uint16_t internet_checksum(Bytes b) {
  uint32_t sum = 0;
  size_t i = 0;
  for (; i + 1 < b.size(); i += 2) sum += load_be16(&b[i]);
  if (i < b.size()) sum += uint32_t{b[i]} << 8;
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace uroce::wire

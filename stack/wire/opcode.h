// The BTH opcode property table: for each of the 256 opcode values, whether it is a valid
// RC / UC / UD / XRC / CNP opcode, which extension headers follow the BTH (and at which offset),
// the total header length, its place in a message (first / middle / last / only), and
// whether a payload follows. Parsing a packet is a lookup here, never a switch.
//
// Opcode byte = transport (3 bits: 000 RC, 001 UC, 010 RD, 011 UD, 100 CNP, 101 XRC) |
// operation (5 bits).
// RD (reliable datagram) is not implemented by RoCE devices and is left invalid.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace uroce::wire {

/// Extension headers, in the order they appear after the BTH when several are present.
enum class Ext : uint8_t {
  kXrceth,        // XRC ETH (4): every XRC request, first after the BTH
  kFeth,          // FLUSH ETH (4)
  kDeth,          // Datagram ETH (8): UD
  kReth,          // RDMA ETH (16)
  kAtomicEth,     // Atomic ETH (28)
  kAeth,          // ACK ETH (4)
  kAtomicAckEth,  // Atomic ACK ETH (8)
  kImmDt,         // Immediate data (4)
  kIeth,          // Invalidate ETH (4)
  kCnpReserved,   // the 16 reserved bytes of a RoCEv2 CNP
  kCount
};
inline constexpr size_t kExtCount = static_cast<size_t>(Ext::kCount);
inline constexpr std::array<uint8_t, kExtCount> kExtLen = {4, 4, 8, 16, 28, 4, 8, 4, 4, 16};
inline constexpr std::array<std::string_view, kExtCount> kExtName = {
    "XRCETH", "FETH", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNP-reserved"};

constexpr uint16_t ext_bit(Ext e) { return static_cast<uint16_t>(1u << static_cast<unsigned>(e)); }

enum class Transport : uint8_t { kRc, kUc, kUd, kCnp, kXrc };
enum class Operation : uint8_t {
  kSend,
  kWrite,
  kReadRequest,
  kReadResponse,
  kAck,
  kAtomicAck,
  kCompareSwap,
  kFetchAdd,
  kFlush,
  kAtomicWrite,
  kCnp,
};
/// Where a packet sits in its message. Single-packet messages are kOnly.
enum class Position : uint8_t { kOnly, kFirst, kMiddle, kLast };

std::string_view to_string(Transport t);
std::string_view to_string(Operation o);
std::string_view to_string(Position p);

struct OpcodeInfo {
  std::string_view name;  // e.g. "RC_SEND_FIRST"; empty when the opcode is invalid
  bool valid = false;
  Transport transport = Transport::kRc;
  Operation op = Operation::kSend;
  Position pos = Position::kOnly;
  uint16_t ext_mask = 0;                   // ext_bit() of each extension header present
  std::array<uint8_t, kExtCount> offset{};  // offset from the start of the BTH (0 = absent)
  uint8_t length = 0;                      // BTH + all extension headers
  bool has_payload = false;
  uint8_t fixed_payload = 0;  // nonzero: the payload must be exactly this long (ATOMIC WRITE: 8)

  constexpr bool has(Ext e) const { return (ext_mask & ext_bit(e)) != 0; }
  constexpr size_t offset_of(Ext e) const { return offset[static_cast<size_t>(e)]; }
  constexpr bool has_imm() const { return has(Ext::kImmDt); }
  /// Requests travel requester -> responder; responses/acks the other way.
  constexpr bool is_request() const {
    return op != Operation::kReadResponse && op != Operation::kAck &&
           op != Operation::kAtomicAck && op != Operation::kCnp;
  }
  constexpr bool is_response() const {
    return op == Operation::kReadResponse || op == Operation::kAck || op == Operation::kAtomicAck;
  }
  constexpr bool starts_message() const { return pos == Position::kOnly || pos == Position::kFirst; }
  constexpr bool ends_message() const { return pos == Position::kOnly || pos == Position::kLast; }
};

namespace opcode {
// RC
inline constexpr uint8_t kRcSendFirst = 0x00;
inline constexpr uint8_t kRcSendMiddle = 0x01;
inline constexpr uint8_t kRcSendLast = 0x02;
inline constexpr uint8_t kRcSendLastImm = 0x03;
inline constexpr uint8_t kRcSendOnly = 0x04;
inline constexpr uint8_t kRcSendOnlyImm = 0x05;
inline constexpr uint8_t kRcWriteFirst = 0x06;
inline constexpr uint8_t kRcWriteMiddle = 0x07;
inline constexpr uint8_t kRcWriteLast = 0x08;
inline constexpr uint8_t kRcWriteLastImm = 0x09;
inline constexpr uint8_t kRcWriteOnly = 0x0A;
inline constexpr uint8_t kRcWriteOnlyImm = 0x0B;
inline constexpr uint8_t kRcReadRequest = 0x0C;
inline constexpr uint8_t kRcReadResponseFirst = 0x0D;
inline constexpr uint8_t kRcReadResponseMiddle = 0x0E;
inline constexpr uint8_t kRcReadResponseLast = 0x0F;
inline constexpr uint8_t kRcReadResponseOnly = 0x10;
inline constexpr uint8_t kRcAck = 0x11;
inline constexpr uint8_t kRcAtomicAck = 0x12;
inline constexpr uint8_t kRcCompareSwap = 0x13;
inline constexpr uint8_t kRcFetchAdd = 0x14;
inline constexpr uint8_t kRcSendLastInv = 0x16;
inline constexpr uint8_t kRcSendOnlyInv = 0x17;
inline constexpr uint8_t kRcFlush = 0x1C;
inline constexpr uint8_t kRcAtomicWrite = 0x1D;
// UC
inline constexpr uint8_t kUcSendFirst = 0x20;
inline constexpr uint8_t kUcSendMiddle = 0x21;
inline constexpr uint8_t kUcSendLast = 0x22;
inline constexpr uint8_t kUcSendLastImm = 0x23;
inline constexpr uint8_t kUcSendOnly = 0x24;
inline constexpr uint8_t kUcSendOnlyImm = 0x25;
inline constexpr uint8_t kUcWriteFirst = 0x26;
inline constexpr uint8_t kUcWriteMiddle = 0x27;
inline constexpr uint8_t kUcWriteLast = 0x28;
inline constexpr uint8_t kUcWriteLastImm = 0x29;
inline constexpr uint8_t kUcWriteOnly = 0x2A;
inline constexpr uint8_t kUcWriteOnlyImm = 0x2B;
// UD
inline constexpr uint8_t kUdSendOnly = 0x64;
inline constexpr uint8_t kUdSendOnlyImm = 0x65;
// RoCEv2 congestion notification packet
inline constexpr uint8_t kCnp = 0x81;
// XRC: RC's operations (not FLUSH or ATOMIC WRITE) with the transport bits 101; requests
// carry an XRCETH, responses are laid out as RC's.
inline constexpr uint8_t kXrc = 0xA0;  // XRC opcode = kXrc | the RC opcode
inline constexpr uint8_t kXrcSendFirst = 0xA0;
inline constexpr uint8_t kXrcSendOnly = 0xA4;
inline constexpr uint8_t kXrcSendOnlyImm = 0xA5;
inline constexpr uint8_t kXrcWriteOnlyImm = 0xAB;
inline constexpr uint8_t kXrcReadRequest = 0xAC;
inline constexpr uint8_t kXrcReadResponseOnly = 0xB0;
inline constexpr uint8_t kXrcAck = 0xB1;
inline constexpr uint8_t kXrcAtomicAck = 0xB2;
inline constexpr uint8_t kXrcCompareSwap = 0xB3;
inline constexpr uint8_t kXrcFetchAdd = 0xB4;
inline constexpr uint8_t kXrcSendOnlyInv = 0xB7;
}  // namespace opcode

namespace detail {
constexpr OpcodeInfo make_op(std::string_view name, Transport t, Operation op, Position pos,
                             uint16_t mask, bool payload, uint8_t fixed_payload = 0) {
  OpcodeInfo i{};
  i.name = name;
  i.valid = true;
  i.transport = t;
  i.op = op;
  i.pos = pos;
  i.ext_mask = mask;
  i.has_payload = payload;
  i.fixed_payload = fixed_payload;
  size_t off = 12;  // BTH
  for (size_t e = 0; e < kExtCount; ++e) {
    if (mask & (1u << e)) {
      i.offset[e] = static_cast<uint8_t>(off);
      off += kExtLen[e];
    }
  }
  i.length = static_cast<uint8_t>(off);
  return i;
}

constexpr std::array<OpcodeInfo, 256> build_opcode_table() {
  using enum Operation;
  using P = Position;
  constexpr uint16_t X = ext_bit(Ext::kXrceth), R = ext_bit(Ext::kReth), A = ext_bit(Ext::kAeth), I = ext_bit(Ext::kImmDt),
                     IE = ext_bit(Ext::kIeth), AT = ext_bit(Ext::kAtomicEth),
                     AA = ext_bit(Ext::kAtomicAckEth), D = ext_bit(Ext::kDeth),
                     F = ext_bit(Ext::kFeth), C = ext_bit(Ext::kCnpReserved);
  std::array<OpcodeInfo, 256> t{};
  // Send and write opcodes have the same layout on RC (0x00) and UC (0x20).
  struct Common {
    uint8_t op;
    std::string_view rc, uc;
    Operation kind;
    Position pos;
    uint16_t mask;
  };
  constexpr Common common[] = {
      {0x00, "RC_SEND_FIRST", "UC_SEND_FIRST", kSend, P::kFirst, 0},
      {0x01, "RC_SEND_MIDDLE", "UC_SEND_MIDDLE", kSend, P::kMiddle, 0},
      {0x02, "RC_SEND_LAST", "UC_SEND_LAST", kSend, P::kLast, 0},
      {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", "UC_SEND_LAST_WITH_IMMEDIATE", kSend, P::kLast, I},
      {0x04, "RC_SEND_ONLY", "UC_SEND_ONLY", kSend, P::kOnly, 0},
      {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", "UC_SEND_ONLY_WITH_IMMEDIATE", kSend, P::kOnly, I},
      {0x06, "RC_RDMA_WRITE_FIRST", "UC_RDMA_WRITE_FIRST", kWrite, P::kFirst, R},
      {0x07, "RC_RDMA_WRITE_MIDDLE", "UC_RDMA_WRITE_MIDDLE", kWrite, P::kMiddle, 0},
      {0x08, "RC_RDMA_WRITE_LAST", "UC_RDMA_WRITE_LAST", kWrite, P::kLast, 0},
      {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kWrite,
       P::kLast, I},
      {0x0A, "RC_RDMA_WRITE_ONLY", "UC_RDMA_WRITE_ONLY", kWrite, P::kOnly, R},
      {0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kWrite,
       P::kOnly, static_cast<uint16_t>(R | I)},
  };
  for (const auto& c : common) {
    t[c.op] = make_op(c.rc, Transport::kRc, c.kind, c.pos, c.mask, true);
    t[0x20 | c.op] = make_op(c.uc, Transport::kUc, c.kind, c.pos, c.mask, true);
  }
  const auto rc = Transport::kRc;
  t[0x0C] = make_op("RC_RDMA_READ_REQUEST", rc, kReadRequest, P::kOnly, R, false);
  t[0x0D] = make_op("RC_RDMA_READ_RESPONSE_FIRST", rc, kReadResponse, P::kFirst, A, true);
  t[0x0E] = make_op("RC_RDMA_READ_RESPONSE_MIDDLE", rc, kReadResponse, P::kMiddle, 0, true);
  t[0x0F] = make_op("RC_RDMA_READ_RESPONSE_LAST", rc, kReadResponse, P::kLast, A, true);
  t[0x10] = make_op("RC_RDMA_READ_RESPONSE_ONLY", rc, kReadResponse, P::kOnly, A, true);
  t[0x11] = make_op("RC_ACKNOWLEDGE", rc, kAck, P::kOnly, A, false);
  t[0x12] = make_op("RC_ATOMIC_ACKNOWLEDGE", rc, kAtomicAck, P::kOnly,
                    static_cast<uint16_t>(A | AA), false);
  t[0x13] = make_op("RC_COMPARE_SWAP", rc, kCompareSwap, P::kOnly, AT, false);
  t[0x14] = make_op("RC_FETCH_ADD", rc, kFetchAdd, P::kOnly, AT, false);
  t[0x16] = make_op("RC_SEND_LAST_WITH_INVALIDATE", rc, kSend, P::kLast, IE, true);
  t[0x17] = make_op("RC_SEND_ONLY_WITH_INVALIDATE", rc, kSend, P::kOnly, IE, true);
  t[0x1C] = make_op("RC_FLUSH", rc, kFlush, P::kOnly, static_cast<uint16_t>(F | R), false);
  t[0x1D] = make_op("RC_ATOMIC_WRITE", rc, kAtomicWrite, P::kOnly, R, true, 8);
  // XRC: every RC opcode but FLUSH and ATOMIC WRITE, at 0xA0 | op; requests get the XRCETH.
  constexpr std::string_view xrc_names[] = {
      "XRC_SEND_FIRST", "XRC_SEND_MIDDLE", "XRC_SEND_LAST", "XRC_SEND_LAST_WITH_IMMEDIATE",
      "XRC_SEND_ONLY", "XRC_SEND_ONLY_WITH_IMMEDIATE", "XRC_RDMA_WRITE_FIRST",
      "XRC_RDMA_WRITE_MIDDLE", "XRC_RDMA_WRITE_LAST", "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
      "XRC_RDMA_WRITE_ONLY", "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "XRC_RDMA_READ_REQUEST",
      "XRC_RDMA_READ_RESPONSE_FIRST", "XRC_RDMA_READ_RESPONSE_MIDDLE",
      "XRC_RDMA_READ_RESPONSE_LAST", "XRC_RDMA_READ_RESPONSE_ONLY", "XRC_ACKNOWLEDGE",
      "XRC_ATOMIC_ACKNOWLEDGE", "XRC_COMPARE_SWAP", "XRC_FETCH_ADD", "", "XRC_SEND_LAST_WITH_INVALIDATE",
      "XRC_SEND_ONLY_WITH_INVALIDATE"};
  for (uint8_t op = 0; op < 0x18; ++op) {
    const OpcodeInfo& r = t[op];
    if (!r.valid) continue;
    const uint16_t mask = static_cast<uint16_t>(r.is_request() ? (r.ext_mask | X) : r.ext_mask);
    t[0xA0 | op] = make_op(xrc_names[op], Transport::kXrc, r.op, r.pos, mask, r.has_payload);
  }
  t[0x64] = make_op("UD_SEND_ONLY", Transport::kUd, kSend, P::kOnly, D, true);
  t[0x65] = make_op("UD_SEND_ONLY_WITH_IMMEDIATE", Transport::kUd, kSend, P::kOnly,
                    static_cast<uint16_t>(D | I), true);
  t[0x81] = make_op("CNP", Transport::kCnp, kCnp, P::kOnly, C, false);
  return t;
}
}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::build_opcode_table();

inline const OpcodeInfo& opcode_info(uint8_t opcode) { return kOpcodeTable[opcode]; }

// The layouts the rest of the stack relies on.
static_assert(kOpcodeTable[opcode::kRcWriteOnlyImm].offset_of(Ext::kReth) == 12);
static_assert(kOpcodeTable[opcode::kRcWriteOnlyImm].offset_of(Ext::kImmDt) == 28);
static_assert(kOpcodeTable[opcode::kRcWriteOnlyImm].length == 32);
static_assert(kOpcodeTable[opcode::kRcAtomicAck].offset_of(Ext::kAtomicAckEth) == 16);
static_assert(kOpcodeTable[opcode::kRcAtomicAck].length == 24);
static_assert(kOpcodeTable[opcode::kRcCompareSwap].length == 40);
static_assert(kOpcodeTable[opcode::kUdSendOnlyImm].offset_of(Ext::kImmDt) == 20);
static_assert(kOpcodeTable[opcode::kRcFlush].offset_of(Ext::kReth) == 16);
static_assert(kOpcodeTable[opcode::kRcReadResponseMiddle].length == 12);
static_assert(kOpcodeTable[opcode::kCnp].length == 28);
static_assert(kOpcodeTable[opcode::kUcSendOnly].transport == Transport::kUc);
static_assert(!kOpcodeTable[0x15].valid && !kOpcodeTable[0x40].valid && !kOpcodeTable[0xFF].valid);
static_assert(kOpcodeTable[opcode::kXrcWriteOnlyImm].offset_of(Ext::kXrceth) == 12);
static_assert(kOpcodeTable[opcode::kXrcWriteOnlyImm].offset_of(Ext::kReth) == 16);
static_assert(kOpcodeTable[opcode::kXrcWriteOnlyImm].offset_of(Ext::kImmDt) == 32);
static_assert(kOpcodeTable[opcode::kXrcWriteOnlyImm].length == 36);
static_assert(kOpcodeTable[opcode::kXrcCompareSwap].offset_of(Ext::kAtomicEth) == 16);
static_assert(kOpcodeTable[opcode::kXrcCompareSwap].length == 44);
static_assert(kOpcodeTable[opcode::kXrcAck].length == 16 && !kOpcodeTable[opcode::kXrcAck].has(Ext::kXrceth));
static_assert(kOpcodeTable[opcode::kXrcReadResponseOnly].offset_of(Ext::kAeth) == 12);
static_assert(kOpcodeTable[opcode::kXrcSendOnlyInv].offset_of(Ext::kIeth) == 16);
static_assert(!kOpcodeTable[0xB5].valid && !kOpcodeTable[0xBC].valid && !kOpcodeTable[0xBD].valid);

}  // namespace uroce::wire

// The BTH opcode table: an independent, hand-written copy of the IBA opcode list (which
// extension headers each opcode carries, at which offset, total header length, position and
// payload) checked entry by entry, plus consistency rules checked for all 256 values.
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "wire/opcode.h"

namespace uroce::wire {
namespace {

struct Expected {
  uint8_t opcode;
  std::string_view name;
  Transport transport;
  Operation op;
  Position pos;
  std::vector<std::pair<Ext, uint8_t>> ext;  // extension header -> offset from BTH start
  uint8_t length;
  bool payload;
  uint8_t fixed_payload = 0;
};

// IBA vol 1 section 9.2 (table "OpCode field"), the FLUSH / ATOMIC WRITE annex, and the
// RoCEv2 CNP. Offsets and lengths are worked out by hand: BTH 12, RETH 16, AETH 4,
// AtomicETH 28, AtomicAckETH 8, ImmDt 4, IETH 4, DETH 8, FETH 4, XRCETH 4, CNP reserved 16.
std::vector<Expected> expected_table() {
  using enum Operation;
  using P = Position;
  using T = Transport;
  const std::pair<Ext, uint8_t> reth12{Ext::kReth, 12}, aeth12{Ext::kAeth, 12},
      imm12{Ext::kImmDt, 12}, imm28{Ext::kImmDt, 28}, x12{Ext::kXrceth, 12},
      reth16{Ext::kReth, 16}, imm16{Ext::kImmDt, 16};
  std::vector<Expected> v = {
      {0x00, "RC_SEND_FIRST", T::kRc, kSend, P::kFirst, {}, 12, true},
      {0x01, "RC_SEND_MIDDLE", T::kRc, kSend, P::kMiddle, {}, 12, true},
      {0x02, "RC_SEND_LAST", T::kRc, kSend, P::kLast, {}, 12, true},
      {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", T::kRc, kSend, P::kLast, {imm12}, 16, true},
      {0x04, "RC_SEND_ONLY", T::kRc, kSend, P::kOnly, {}, 12, true},
      {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", T::kRc, kSend, P::kOnly, {imm12}, 16, true},
      {0x06, "RC_RDMA_WRITE_FIRST", T::kRc, kWrite, P::kFirst, {reth12}, 28, true},
      {0x07, "RC_RDMA_WRITE_MIDDLE", T::kRc, kWrite, P::kMiddle, {}, 12, true},
      {0x08, "RC_RDMA_WRITE_LAST", T::kRc, kWrite, P::kLast, {}, 12, true},
      {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", T::kRc, kWrite, P::kLast, {imm12}, 16, true},
      {0x0A, "RC_RDMA_WRITE_ONLY", T::kRc, kWrite, P::kOnly, {reth12}, 28, true},
      {0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", T::kRc, kWrite, P::kOnly, {reth12, imm28}, 32,
       true},
      {0x0C, "RC_RDMA_READ_REQUEST", T::kRc, kReadRequest, P::kOnly, {reth12}, 28, false},
      {0x0D, "RC_RDMA_READ_RESPONSE_FIRST", T::kRc, kReadResponse, P::kFirst, {aeth12}, 16, true},
      {0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", T::kRc, kReadResponse, P::kMiddle, {}, 12, true},
      {0x0F, "RC_RDMA_READ_RESPONSE_LAST", T::kRc, kReadResponse, P::kLast, {aeth12}, 16, true},
      {0x10, "RC_RDMA_READ_RESPONSE_ONLY", T::kRc, kReadResponse, P::kOnly, {aeth12}, 16, true},
      {0x11, "RC_ACKNOWLEDGE", T::kRc, kAck, P::kOnly, {aeth12}, 16, false},
      {0x12, "RC_ATOMIC_ACKNOWLEDGE", T::kRc, kAtomicAck, P::kOnly,
       {aeth12, {Ext::kAtomicAckEth, 16}}, 24, false},
      {0x13, "RC_COMPARE_SWAP", T::kRc, kCompareSwap, P::kOnly, {{Ext::kAtomicEth, 12}}, 40,
       false},
      {0x14, "RC_FETCH_ADD", T::kRc, kFetchAdd, P::kOnly, {{Ext::kAtomicEth, 12}}, 40, false},
      {0x16, "RC_SEND_LAST_WITH_INVALIDATE", T::kRc, kSend, P::kLast, {{Ext::kIeth, 12}}, 16,
       true},
      {0x17, "RC_SEND_ONLY_WITH_INVALIDATE", T::kRc, kSend, P::kOnly, {{Ext::kIeth, 12}}, 16,
       true},
      {0x1C, "RC_FLUSH", T::kRc, kFlush, P::kOnly, {{Ext::kFeth, 12}, {Ext::kReth, 16}}, 32,
       false},
      {0x1D, "RC_ATOMIC_WRITE", T::kRc, kAtomicWrite, P::kOnly, {reth12}, 28, true, 8},
      {0x20, "UC_SEND_FIRST", T::kUc, kSend, P::kFirst, {}, 12, true},
      {0x21, "UC_SEND_MIDDLE", T::kUc, kSend, P::kMiddle, {}, 12, true},
      {0x22, "UC_SEND_LAST", T::kUc, kSend, P::kLast, {}, 12, true},
      {0x23, "UC_SEND_LAST_WITH_IMMEDIATE", T::kUc, kSend, P::kLast, {imm12}, 16, true},
      {0x24, "UC_SEND_ONLY", T::kUc, kSend, P::kOnly, {}, 12, true},
      {0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", T::kUc, kSend, P::kOnly, {imm12}, 16, true},
      {0x26, "UC_RDMA_WRITE_FIRST", T::kUc, kWrite, P::kFirst, {reth12}, 28, true},
      {0x27, "UC_RDMA_WRITE_MIDDLE", T::kUc, kWrite, P::kMiddle, {}, 12, true},
      {0x28, "UC_RDMA_WRITE_LAST", T::kUc, kWrite, P::kLast, {}, 12, true},
      {0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", T::kUc, kWrite, P::kLast, {imm12}, 16, true},
      {0x2A, "UC_RDMA_WRITE_ONLY", T::kUc, kWrite, P::kOnly, {reth12}, 28, true},
      {0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", T::kUc, kWrite, P::kOnly, {reth12, imm28}, 32,
       true},
      {0x64, "UD_SEND_ONLY", T::kUd, kSend, P::kOnly, {{Ext::kDeth, 12}}, 20, true},
      {0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", T::kUd, kSend, P::kOnly,
       {{Ext::kDeth, 12}, {Ext::kImmDt, 20}}, 24, true},
      {0x81, "CNP", T::kCnp, kCnp, P::kOnly, {{Ext::kCnpReserved, 12}}, 28, false},
      // XRC (IBA 9.2): every request starts with the XRCETH (4 bytes at 12), responses are
      // laid out as RC's. No FLUSH or ATOMIC WRITE.
      {0xA0, "XRC_SEND_FIRST", T::kXrc, kSend, P::kFirst, {x12}, 16, true},
      {0xA1, "XRC_SEND_MIDDLE", T::kXrc, kSend, P::kMiddle, {x12}, 16, true},
      {0xA2, "XRC_SEND_LAST", T::kXrc, kSend, P::kLast, {x12}, 16, true},
      {0xA3, "XRC_SEND_LAST_WITH_IMMEDIATE", T::kXrc, kSend, P::kLast, {x12, imm16}, 20, true},
      {0xA4, "XRC_SEND_ONLY", T::kXrc, kSend, P::kOnly, {x12}, 16, true},
      {0xA5, "XRC_SEND_ONLY_WITH_IMMEDIATE", T::kXrc, kSend, P::kOnly, {x12, imm16}, 20, true},
      {0xA6, "XRC_RDMA_WRITE_FIRST", T::kXrc, kWrite, P::kFirst, {x12, reth16}, 32, true},
      {0xA7, "XRC_RDMA_WRITE_MIDDLE", T::kXrc, kWrite, P::kMiddle, {x12}, 16, true},
      {0xA8, "XRC_RDMA_WRITE_LAST", T::kXrc, kWrite, P::kLast, {x12}, 16, true},
      {0xA9, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", T::kXrc, kWrite, P::kLast, {x12, imm16}, 20,
       true},
      {0xAA, "XRC_RDMA_WRITE_ONLY", T::kXrc, kWrite, P::kOnly, {x12, reth16}, 32, true},
      {0xAB, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", T::kXrc, kWrite, P::kOnly,
       {x12, reth16, {Ext::kImmDt, 32}}, 36, true},
      {0xAC, "XRC_RDMA_READ_REQUEST", T::kXrc, kReadRequest, P::kOnly, {x12, reth16}, 32, false},
      {0xAD, "XRC_RDMA_READ_RESPONSE_FIRST", T::kXrc, kReadResponse, P::kFirst, {aeth12}, 16,
       true},
      {0xAE, "XRC_RDMA_READ_RESPONSE_MIDDLE", T::kXrc, kReadResponse, P::kMiddle, {}, 12, true},
      {0xAF, "XRC_RDMA_READ_RESPONSE_LAST", T::kXrc, kReadResponse, P::kLast, {aeth12}, 16, true},
      {0xB0, "XRC_RDMA_READ_RESPONSE_ONLY", T::kXrc, kReadResponse, P::kOnly, {aeth12}, 16, true},
      {0xB1, "XRC_ACKNOWLEDGE", T::kXrc, kAck, P::kOnly, {aeth12}, 16, false},
      {0xB2, "XRC_ATOMIC_ACKNOWLEDGE", T::kXrc, kAtomicAck, P::kOnly,
       {aeth12, {Ext::kAtomicAckEth, 16}}, 24, false},
      {0xB3, "XRC_COMPARE_SWAP", T::kXrc, kCompareSwap, P::kOnly, {x12, {Ext::kAtomicEth, 16}},
       44, false},
      {0xB4, "XRC_FETCH_ADD", T::kXrc, kFetchAdd, P::kOnly, {x12, {Ext::kAtomicEth, 16}}, 44,
       false},
      {0xB6, "XRC_SEND_LAST_WITH_INVALIDATE", T::kXrc, kSend, P::kLast, {x12, {Ext::kIeth, 16}},
       20, true},
      {0xB7, "XRC_SEND_ONLY_WITH_INVALIDATE", T::kXrc, kSend, P::kOnly, {x12, {Ext::kIeth, 16}},
       20, true},
  };
  return v;
}

TEST(Opcode, EveryValidEntryMatchesTheHandWrittenTable) {
  const auto table = expected_table();
  ASSERT_EQ(table.size(), 63u);
  for (const Expected& e : table) {
    SCOPED_TRACE(e.name);
    const OpcodeInfo& i = opcode_info(e.opcode);
    ASSERT_TRUE(i.valid);
    EXPECT_EQ(i.name, e.name);
    EXPECT_EQ(i.transport, e.transport);
    EXPECT_EQ(i.op, e.op);
    EXPECT_EQ(i.pos, e.pos);
    EXPECT_EQ(i.length, e.length);
    EXPECT_EQ(i.has_payload, e.payload);
    EXPECT_EQ(i.fixed_payload, e.fixed_payload);
    std::map<Ext, uint8_t> want(e.ext.begin(), e.ext.end());
    for (size_t k = 0; k < kExtCount; ++k) {
      const auto ext = static_cast<Ext>(k);
      SCOPED_TRACE(kExtName[k]);
      const auto it = want.find(ext);
      EXPECT_EQ(i.has(ext), it != want.end());
      EXPECT_EQ(i.offset_of(ext), it != want.end() ? it->second : 0u);
    }
    EXPECT_EQ(i.has_imm(), want.count(Ext::kImmDt) == 1);
  }
}

TEST(Opcode, ExactlyTheListedOpcodesAreValid) {
  std::set<uint8_t> listed;
  for (const Expected& e : expected_table()) listed.insert(e.opcode);
  for (unsigned op = 0; op < 256; ++op) {
    SCOPED_TRACE(op);
    const OpcodeInfo& i = opcode_info(static_cast<uint8_t>(op));
    EXPECT_EQ(i.valid, listed.count(static_cast<uint8_t>(op)) == 1);
    if (!i.valid) {
      EXPECT_TRUE(i.name.empty());
      EXPECT_EQ(i.ext_mask, 0);
      EXPECT_EQ(i.length, 0);
      EXPECT_FALSE(i.has_payload);
    }
  }
}

TEST(Opcode, ConsistencyForAll256Values) {
  size_t valid = 0;
  for (unsigned op = 0; op < 256; ++op) {
    SCOPED_TRACE(op);
    const OpcodeInfo& i = kOpcodeTable[op];
    EXPECT_EQ(&opcode_info(static_cast<uint8_t>(op)), &i);
    if (!i.valid) continue;
    ++valid;
    EXPECT_FALSE(i.name.empty());
    EXPECT_EQ(i.ext_mask >> kExtCount, 0) << "bits beyond the last Ext";
    // Length = BTH + the extension headers present; headers are contiguous, in Ext order.
    size_t length = 12;
    size_t next = 12;
    for (size_t k = 0; k < kExtCount; ++k) {
      const auto ext = static_cast<Ext>(k);
      if (!i.has(ext)) {
        EXPECT_EQ(i.offset_of(ext), 0u) << kExtName[k];
        continue;
      }
      length += kExtLen[k];
      EXPECT_EQ(i.offset_of(ext), next) << kExtName[k];
      next = i.offset_of(ext) + kExtLen[k];
    }
    EXPECT_EQ(i.length, length);
    // The transport is the top three bits of the opcode.
    const unsigned t = op >> 5;
    switch (i.transport) {
      case Transport::kRc: EXPECT_EQ(t, 0u); EXPECT_TRUE(i.name.starts_with("RC_")); break;
      case Transport::kUc: EXPECT_EQ(t, 1u); EXPECT_TRUE(i.name.starts_with("UC_")); break;
      case Transport::kUd: EXPECT_EQ(t, 3u); EXPECT_TRUE(i.name.starts_with("UD_")); break;
      case Transport::kCnp: EXPECT_EQ(t, 4u); EXPECT_EQ(i.name, "CNP"); break;
      case Transport::kXrc: EXPECT_EQ(t, 5u); EXPECT_TRUE(i.name.starts_with("XRC_")); break;
    }
    // The name says where the packet sits and what it carries.
    const std::string_view n = i.name;
    const bool named_first = n.find("_FIRST") != n.npos, named_middle = n.find("_MIDDLE") != n.npos,
               named_last = n.find("_LAST") != n.npos;
    EXPECT_EQ(i.pos == Position::kFirst, named_first);
    EXPECT_EQ(i.pos == Position::kMiddle, named_middle);
    EXPECT_EQ(i.pos == Position::kLast, named_last);
    EXPECT_EQ(i.has_imm(), n.find("WITH_IMMEDIATE") != n.npos);
    EXPECT_EQ(i.has(Ext::kIeth), n.find("WITH_INVALIDATE") != n.npos);
    EXPECT_EQ(i.has(Ext::kDeth), i.transport == Transport::kUd);
    // Only RC and XRC have acknowledgements; every XRC request, and nothing else, has an XRCETH.
    if (i.has(Ext::kAeth)) {
      EXPECT_TRUE(i.transport == Transport::kRc || i.transport == Transport::kXrc);
    }
    EXPECT_EQ(i.has(Ext::kXrceth), i.transport == Transport::kXrc && i.is_request());
    // First and middle packets carry whole MTUs, so they always have a payload.
    if (!i.ends_message()) {
      EXPECT_TRUE(i.has_payload);
    }
    if (i.fixed_payload != 0) {
      EXPECT_TRUE(i.has_payload);
    }
  }
  EXPECT_EQ(valid, 63u);
}

TEST(Opcode, SampleLayouts) {
  const OpcodeInfo& wimm = opcode_info(opcode::kRcWriteOnlyImm);
  EXPECT_EQ(opcode::kRcWriteOnlyImm, 0x0B);
  EXPECT_EQ(wimm.offset_of(Ext::kReth), 12u);
  EXPECT_EQ(wimm.offset_of(Ext::kImmDt), 28u);
  EXPECT_EQ(wimm.length, 32);

  const OpcodeInfo& aack = opcode_info(opcode::kRcAtomicAck);
  EXPECT_EQ(opcode::kRcAtomicAck, 0x12);
  EXPECT_EQ(aack.offset_of(Ext::kAeth), 12u);
  EXPECT_EQ(aack.offset_of(Ext::kAtomicAckEth), 16u);
  EXPECT_EQ(aack.length, 24);

  const OpcodeInfo& ud = opcode_info(opcode::kUdSendOnlyImm);
  EXPECT_EQ(opcode::kUdSendOnlyImm, 0x65);
  EXPECT_EQ(ud.offset_of(Ext::kDeth), 12u);
  EXPECT_EQ(ud.offset_of(Ext::kImmDt), 20u);
  EXPECT_EQ(ud.length, 24);

  EXPECT_EQ(opcode::kCnp, 0x81);
  EXPECT_EQ(opcode_info(opcode::kCnp).length, 28);

  const OpcodeInfo& mid = opcode_info(opcode::kRcReadResponseMiddle);
  EXPECT_FALSE(mid.has(Ext::kAeth));
  EXPECT_EQ(mid.length, 12);
  EXPECT_TRUE(opcode_info(opcode::kRcReadResponseFirst).has(Ext::kAeth));
  EXPECT_TRUE(opcode_info(opcode::kRcReadResponseLast).has(Ext::kAeth));

  const OpcodeInfo& flush = opcode_info(opcode::kRcFlush);
  EXPECT_EQ(flush.offset_of(Ext::kFeth), 12u);
  EXPECT_EQ(flush.offset_of(Ext::kReth), 16u);
  EXPECT_EQ(opcode_info(opcode::kRcAtomicWrite).fixed_payload, 8);
}

TEST(Opcode, NamedConstantsMatchTheirEntries) {
  const std::pair<uint8_t, std::string_view> named[] = {
      {opcode::kRcSendFirst, "RC_SEND_FIRST"},
      {opcode::kRcSendMiddle, "RC_SEND_MIDDLE"},
      {opcode::kRcSendLast, "RC_SEND_LAST"},
      {opcode::kRcSendLastImm, "RC_SEND_LAST_WITH_IMMEDIATE"},
      {opcode::kRcSendOnly, "RC_SEND_ONLY"},
      {opcode::kRcSendOnlyImm, "RC_SEND_ONLY_WITH_IMMEDIATE"},
      {opcode::kRcWriteFirst, "RC_RDMA_WRITE_FIRST"},
      {opcode::kRcWriteMiddle, "RC_RDMA_WRITE_MIDDLE"},
      {opcode::kRcWriteLast, "RC_RDMA_WRITE_LAST"},
      {opcode::kRcWriteLastImm, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE"},
      {opcode::kRcWriteOnly, "RC_RDMA_WRITE_ONLY"},
      {opcode::kRcWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"},
      {opcode::kRcReadRequest, "RC_RDMA_READ_REQUEST"},
      {opcode::kRcReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST"},
      {opcode::kRcReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE"},
      {opcode::kRcReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST"},
      {opcode::kRcReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY"},
      {opcode::kRcAck, "RC_ACKNOWLEDGE"},
      {opcode::kRcAtomicAck, "RC_ATOMIC_ACKNOWLEDGE"},
      {opcode::kRcCompareSwap, "RC_COMPARE_SWAP"},
      {opcode::kRcFetchAdd, "RC_FETCH_ADD"},
      {opcode::kRcSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE"},
      {opcode::kRcSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE"},
      {opcode::kRcFlush, "RC_FLUSH"},
      {opcode::kRcAtomicWrite, "RC_ATOMIC_WRITE"},
      {opcode::kUcSendFirst, "UC_SEND_FIRST"},
      {opcode::kUcSendMiddle, "UC_SEND_MIDDLE"},
      {opcode::kUcSendLast, "UC_SEND_LAST"},
      {opcode::kUcSendLastImm, "UC_SEND_LAST_WITH_IMMEDIATE"},
      {opcode::kUcSendOnly, "UC_SEND_ONLY"},
      {opcode::kUcSendOnlyImm, "UC_SEND_ONLY_WITH_IMMEDIATE"},
      {opcode::kUcWriteFirst, "UC_RDMA_WRITE_FIRST"},
      {opcode::kUcWriteMiddle, "UC_RDMA_WRITE_MIDDLE"},
      {opcode::kUcWriteLast, "UC_RDMA_WRITE_LAST"},
      {opcode::kUcWriteLastImm, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE"},
      {opcode::kUcWriteOnly, "UC_RDMA_WRITE_ONLY"},
      {opcode::kUcWriteOnlyImm, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"},
      {opcode::kUdSendOnly, "UD_SEND_ONLY"},
      {opcode::kUdSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE"},
      {opcode::kCnp, "CNP"},
  };
  for (const auto& [op, name] : named) EXPECT_EQ(opcode_info(op).name, name) << int{op};
}

TEST(Opcode, ReliableDatagramAndReservedValuesAreInvalid) {
  for (unsigned op = 0x40; op <= 0x5F; ++op)
    EXPECT_FALSE(opcode_info(static_cast<uint8_t>(op)).valid) << "RD opcode " << op;
  for (unsigned op : {0x15u, 0x18u, 0x19u, 0x1Au, 0x1Bu, 0x1Eu, 0x1Fu})
    EXPECT_FALSE(opcode_info(static_cast<uint8_t>(op)).valid) << op;
  // UC has no read, atomic, ack or invalidate.
  for (unsigned op = 0x2C; op <= 0x3F; ++op)
    EXPECT_FALSE(opcode_info(static_cast<uint8_t>(op)).valid) << op;
  // UD has only the two SEND ONLY opcodes.
  for (unsigned op = 0x60; op <= 0x7F; ++op)
    if (op != 0x64 && op != 0x65) {
      EXPECT_FALSE(opcode_info(static_cast<uint8_t>(op)).valid) << op;
    }
  EXPECT_FALSE(opcode_info(0x80).valid);
  EXPECT_FALSE(opcode_info(0xFF).valid);
}

TEST(Opcode, PositionsAndMessageBoundaries) {
  struct Case {
    uint8_t op;
    Position pos;
    bool starts, ends;
  };
  const Case cases[] = {
      {opcode::kRcSendFirst, Position::kFirst, true, false},
      {opcode::kRcSendMiddle, Position::kMiddle, false, false},
      {opcode::kRcSendLast, Position::kLast, false, true},
      {opcode::kRcSendOnly, Position::kOnly, true, true},
      {opcode::kUcWriteFirst, Position::kFirst, true, false},
      {opcode::kUcWriteMiddle, Position::kMiddle, false, false},
      {opcode::kUcWriteLastImm, Position::kLast, false, true},
      {opcode::kRcReadResponseFirst, Position::kFirst, true, false},
      {opcode::kRcReadResponseMiddle, Position::kMiddle, false, false},
      {opcode::kRcReadResponseLast, Position::kLast, false, true},
      {opcode::kRcReadResponseOnly, Position::kOnly, true, true},
      {opcode::kRcAck, Position::kOnly, true, true},
      {opcode::kUdSendOnly, Position::kOnly, true, true},
  };
  for (const Case& c : cases) {
    const OpcodeInfo& i = opcode_info(c.op);
    SCOPED_TRACE(i.name);
    EXPECT_EQ(i.pos, c.pos);
    EXPECT_EQ(i.starts_message(), c.starts);
    EXPECT_EQ(i.ends_message(), c.ends);
  }
}

TEST(Opcode, RequestsAndResponses) {
  for (uint8_t op : {opcode::kRcSendOnly, opcode::kRcWriteFirst, opcode::kRcReadRequest,
                     opcode::kRcCompareSwap, opcode::kRcFetchAdd, opcode::kRcFlush,
                     opcode::kRcAtomicWrite, opcode::kUcSendOnly, opcode::kUdSendOnlyImm}) {
    EXPECT_TRUE(opcode_info(op).is_request()) << opcode_info(op).name;
    EXPECT_FALSE(opcode_info(op).is_response()) << opcode_info(op).name;
  }
  for (uint8_t op : {opcode::kRcReadResponseFirst, opcode::kRcReadResponseMiddle,
                     opcode::kRcReadResponseOnly, opcode::kRcAck, opcode::kRcAtomicAck}) {
    EXPECT_FALSE(opcode_info(op).is_request()) << opcode_info(op).name;
    EXPECT_TRUE(opcode_info(op).is_response()) << opcode_info(op).name;
  }
  // A CNP is neither: it is congestion feedback outside any QP's request/response flow.
  EXPECT_FALSE(opcode_info(opcode::kCnp).is_request());
  EXPECT_FALSE(opcode_info(opcode::kCnp).is_response());
}

TEST(Opcode, ExtensionHeaderSizesAndNames) {
  const std::pair<Ext, std::pair<uint8_t, std::string_view>> exts[] = {
      {Ext::kXrceth, {4, "XRCETH"}},     {Ext::kFeth, {4, "FETH"}},
      {Ext::kDeth, {8, "DETH"}},
      {Ext::kReth, {16, "RETH"}},        {Ext::kAtomicEth, {28, "AtomicETH"}},
      {Ext::kAeth, {4, "AETH"}},         {Ext::kAtomicAckEth, {8, "AtomicAckETH"}},
      {Ext::kImmDt, {4, "ImmDt"}},       {Ext::kIeth, {4, "IETH"}},
      {Ext::kCnpReserved, {16, "CNP-reserved"}},
  };
  ASSERT_EQ(std::size(exts), kExtCount);
  for (const auto& [e, want] : exts) {
    const auto k = static_cast<size_t>(e);
    EXPECT_EQ(kExtLen[k], want.first) << want.second;
    EXPECT_EQ(kExtName[k], want.second);
    EXPECT_EQ(ext_bit(e), 1u << k);
  }
}

TEST(Opcode, EnumNames) {
  EXPECT_EQ(to_string(Transport::kRc), "RC");
  EXPECT_EQ(to_string(Transport::kUc), "UC");
  EXPECT_EQ(to_string(Transport::kUd), "UD");
  EXPECT_EQ(to_string(Transport::kCnp), "CNP");
  EXPECT_EQ(to_string(Transport::kXrc), "XRC");
  EXPECT_EQ(to_string(Position::kOnly), "only");
  EXPECT_EQ(to_string(Position::kFirst), "first");
  EXPECT_EQ(to_string(Position::kMiddle), "middle");
  EXPECT_EQ(to_string(Position::kLast), "last");
  EXPECT_EQ(to_string(Operation::kSend), "SEND");
  EXPECT_EQ(to_string(Operation::kWrite), "RDMA WRITE");
  EXPECT_EQ(to_string(Operation::kReadRequest), "RDMA READ request");
  EXPECT_EQ(to_string(Operation::kReadResponse), "RDMA READ response");
  EXPECT_EQ(to_string(Operation::kAck), "ACK");
  EXPECT_EQ(to_string(Operation::kAtomicAck), "ATOMIC ACK");
  EXPECT_EQ(to_string(Operation::kCompareSwap), "COMPARE & SWAP");
  EXPECT_EQ(to_string(Operation::kFetchAdd), "FETCH & ADD");
  EXPECT_EQ(to_string(Operation::kFlush), "FLUSH");
  EXPECT_EQ(to_string(Operation::kAtomicWrite), "ATOMIC WRITE");
  EXPECT_EQ(to_string(Operation::kCnp), "congestion notification");
}

}  // namespace
}  // namespace uroce::wire

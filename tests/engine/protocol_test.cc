// Single-packet protocol tests: put a responder QP in a known state, feed it one packet as
// the peer would send it, and assert the exact packets it emits and the memory it touches.
// Each case says what arrives (past / in-order / future PSN, bad key, ...) and what we expect.
#include <sys/mman.h>
#include <unistd.h>

#include "responder_fixture.h"

namespace uroce::test {
namespace {

TEST_F(Responder, InOrderWriteIsAckedWithItsPsnAndMsn) {
  // In order: WRITE ONLY at ePSN with AckReq. Expect: ACK, PSN = ePSN, MSN = 1; data placed.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(100, 0x5A), reth(0, 100));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_EQ(out[0].hdr.bth.dest_qp, kPeerQpn);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  EXPECT_EQ(out[0].hdr.ext.aeth.msn, 1u);
  EXPECT_EQ(mem[32], 0x5A);
  EXPECT_EQ(mem[32 + 99], 0x5A);
  EXPECT_EQ(mem[32 + 100], 0xAB);
}

TEST_F(Responder, FirstPacketInRtrRaisesCommEstOnce) {
  // IBA 11.6.3: a connected QP in RTR that receives its first packet reports the connection
  // established (IBV_EVENT_COMM_EST), once; the QP in RTS set up by the fixture never does.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  step();
  AsyncEvent ev;
  EXPECT_FALSE(engine->pop_async_event(&ev));
  QpOptions o;
  o.rq_psn = kEpsn;
  side_qp(o, /*stop_at_rtr=*/true);
  ASSERT_EQ(qp->state, IBV_QPS_RTR);
  for (uint32_t i = 0; i < 2; ++i)
    send(opcode::kRcWriteOnly, kEpsn + i, std::vector<uint8_t>(8, 1), reth(0, 8));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);  // one coalesced ACK: RTR answers requests
  ASSERT_TRUE(engine->pop_async_event(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_COMM_EST);
  EXPECT_EQ(ev.qp, qp);
  EXPECT_FALSE(engine->pop_async_event(&ev));
}

TEST_F(Responder, DuplicateWriteIsReAckedNotReExecuted) {
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  step();
  mem[32] = 0x77;  // if the duplicate executed, this would be overwritten
  // Past: the same PSN again. Expect: ACK for ePSN-1 (= this PSN), memory untouched.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  EXPECT_EQ(mem[32], 0x77);
  EXPECT_EQ(engine->counters()[Counter::dup_requests], 1u);
}

// ATOMIC WRITE and FLUSH (IBA 1.5 oA19) are answered as a READ of nothing: a READ RESPONSE
// ONLY without data, with the ACK syndrome and the MSN, from a READ/atomic resource; a
// duplicate is answered the same way and not executed again.
TEST_F(Responder, AtomicWriteIsAnsweredByAnEmptyReadResponseAndNotRedoneForADuplicate) {
  std::vector<uint8_t> v = {1, 2, 3, 4, 5, 6, 7, 8};
  send(opcode::kRcAtomicWrite, kEpsn, v, reth(64, 8));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  EXPECT_EQ(out[0].hdr.ext.aeth.msn, 1u);
  EXPECT_TRUE(out[0].payload.empty());
  EXPECT_EQ(0, std::memcmp(mem.data() + 32 + 64, v.data(), 8));
  mem[32 + 64] = 0x77;  // a duplicate executed again would put 1 back
  send(opcode::kRcAtomicWrite, kEpsn, v, reth(64, 8));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_EQ(mem[32 + 64], 0x77);
  // Unaligned: invalid request.
  send(opcode::kRcAtomicWrite, kEpsn + 1, v, reth(65, 8));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
}

/// Memory a FLUSH for persistence may target: a shared mapping of a (memory) file.
struct FileMemory {
  explicit FileMemory(size_t n) : len(n) {
    const int fd = memfd_create("protocol_test", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(n)) == 0)
      p = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (fd >= 0) close(fd);
  }
  ~FileMemory() {
    if (p != MAP_FAILED) munmap(p, len);
  }
  uint8_t* p = static_cast<uint8_t*>(MAP_FAILED);
  size_t len;
};

constexpr int kFlushRights = UROCE_ACCESS_FLUSH_GLOBAL | UROCE_ACCESS_FLUSH_PERSISTENT;

TEST_F(Responder, FlushOfARangeOrAWholeRegionIsAnsweredByAnEmptyReadResponse) {
  FileMemory file(8192);
  ASSERT_NE(file.p, MAP_FAILED);
  mem::Mr* fmr = engine->reg_mr(pd, file.p, 8192,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | kFlushRights);
  ASSERT_NE(fmr, nullptr);
  QpOptions o;
  o.rq_psn = kEpsn;
  o.access |= kFlushRights;
  side_qp(o);
  ExtHeaders x = reth(0, 256);
  x.reth.va = reinterpret_cast<uint64_t>(file.p);
  x.reth.rkey = fmr->key;
  x.feth.raw = UROCE_FLUSH_GLOBAL;  // the range
  send(opcode::kRcFlush, kEpsn, {}, x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  EXPECT_EQ(out[0].hdr.ext.aeth.msn, 1u);
  // Persistence, the whole MR (the RETH's range is not looked at): msync of its pages.
  x.reth.dma_len = 0;
  x.feth.raw = UROCE_FLUSH_PERSISTENT | (UROCE_FLUSH_MR << 4);
  send(opcode::kRcFlush, kEpsn + 1, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].hdr.ext.aeth.msn, 2u);
  EXPECT_EQ(engine->counters()[Counter::flushes], 2u);
  // A duplicate: answered again, not counted as a flush again.
  send(opcode::kRcFlush, kEpsn + 1, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 1);
  EXPECT_EQ(engine->counters()[Counter::flushes], 2u);
  EXPECT_EQ(engine->dereg_mr(fmr), 0);
}

TEST_F(Responder, PersistenceIsOnlyForRegionsOverSharedFileMappings) {
  // As rxe's persistence is for pmem pages only: anonymous memory (the fixture's) cannot
  // have IBV_ACCESS_FLUSH_PERSISTENT; a private mapping of a file cannot either.
  EXPECT_EQ(engine->reg_mr(pd, mem.data(), 4096, IBV_ACCESS_LOCAL_WRITE | kFlushRights), nullptr);
  EXPECT_EQ(errno, EINVAL);
  FileMemory file(8192);
  ASSERT_NE(file.p, MAP_FAILED);
  mem::Mr* ok = engine->reg_mr(pd, file.p, 8192, IBV_ACCESS_LOCAL_WRITE | kFlushRights);
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(engine->dereg_mr(ok), 0);
  // One byte past the mapping: not covered.
  EXPECT_EQ(engine->reg_mr(pd, file.p + 4096, 8192, IBV_ACCESS_LOCAL_WRITE | kFlushRights),
            nullptr);
}

TEST_F(Responder, FlushNeedsTheQpsAndTheRegionsRightForItsPlacement) {
  // The fixture's QP has no FLUSH right: an invalid request (rxe: an unsupported opcode).
  ExtHeaders x = reth(0, 256);
  x.feth.raw = UROCE_FLUSH_GLOBAL;
  send(opcode::kRcFlush, kEpsn, {}, x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
  // A QP with both rights; the fixture's MR has neither: a remote access error.
  QpOptions o;
  o.rq_psn = kEpsn;
  o.access |= kFlushRights;
  side_qp(o);
  send(opcode::kRcFlush, kEpsn, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  // An MR with global visibility only: a FLUSH for it passes, one for persistence does not.
  mem::Mr* gmr = engine->reg_mr(pd, mem.data() + 32, 4096,
                                IBV_ACCESS_LOCAL_WRITE | UROCE_ACCESS_FLUSH_GLOBAL);
  ASSERT_NE(gmr, nullptr);
  side_qp(o);
  x = reth(0, 256, gmr->key);
  x.feth.raw = UROCE_FLUSH_GLOBAL;
  send(opcode::kRcFlush, kEpsn, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  x.feth.raw = UROCE_FLUSH_GLOBAL | UROCE_FLUSH_PERSISTENT;
  send(opcode::kRcFlush, kEpsn + 1, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_TRUE(guards_intact());
}

TEST_F(Responder, FlushThroughAMemoryWindowNeedsTheWindowsRight) {
  // A type 1 window with global visibility over an MR that may only be bound: a FLUSH for
  // visibility through the window's key passes, one for persistence does not.
  mem::Mr* bmr = engine->reg_mr(pd, mem.data() + 32, 4096,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(bmr, nullptr);
  QpOptions o;
  o.rq_psn = kEpsn;
  o.access |= kFlushRights;
  side_qp(o);
  mem::Mw* w = engine->alloc_mw(pd, IBV_MW_TYPE_1);
  ASSERT_NE(w, nullptr);
  const uint64_t base = reinterpret_cast<uint64_t>(mem.data() + 32);
  mem::BindRequest b{w->key, ibv_inc_rkey(w->key), bmr->key, base, 1024,
                     IBV_ACCESS_REMOTE_WRITE | UROCE_ACCESS_FLUSH_GLOBAL, true};
  ASSERT_EQ(engine->post_bind_mw(qp, 7, IBV_SEND_SIGNALED, b), 0);
  step();
  ibv_wc wc{};
  ASSERT_EQ(engine->poll_cq(cq, 1, &wc), 1);
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ExtHeaders x = reth(0, 256, b.new_key);
  x.feth.raw = UROCE_FLUSH_GLOBAL;
  send(opcode::kRcFlush, kEpsn, {}, x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  x.feth.raw = UROCE_FLUSH_PERSISTENT;
  send(opcode::kRcFlush, kEpsn + 1, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
}

TEST_F(Responder, FlushBeyondTheRegionOrWithoutAPlacementIsRefused) {
  QpOptions o;
  o.rq_psn = kEpsn;
  o.access |= kFlushRights;
  side_qp(o);
  mem::Mr* gmr = engine->reg_mr(pd, mem.data() + 32, 4096,
                                IBV_ACCESS_LOCAL_WRITE | UROCE_ACCESS_FLUSH_GLOBAL);
  ASSERT_NE(gmr, nullptr);
  ExtHeaders x = reth(4000, 200, gmr->key);  // past the MR's 4096 bytes
  x.feth.raw = UROCE_FLUSH_GLOBAL;
  send(opcode::kRcFlush, kEpsn, {}, x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  side_qp(o);  // (the first QP is in error now)
  x = reth(0, 16, gmr->key);
  x.feth.raw = 0;  // no placement type at all
  send(opcode::kRcFlush, kEpsn, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
}

// The ACK rides with the reply (Engine::hold_acks_next_poll, docs/threading.md): asked to,
// a poll whose only frames are ACKs keeps them for the application's reply.
class AckHold : public Responder {
 protected:
  /// A SEND of 8 bytes from the fixture's QP (the application's reply).
  void reply() {
    ibv_sge s{reinterpret_cast<uint64_t>(mem.data() + 32), 8, mr->key};
    ibv_send_wr w{};
    w.wr_id = 9;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    w.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(engine->post_send(qp, &w, nullptr), 0);
  }
  std::vector<ParsedPacket> held_step(uint64_t advance_ns = 1000) {
    engine->hold_acks_next_poll(5000);
    now += advance_ns - 1000;  // step() adds 1000
    return step();
  }
};

TEST_F(AckHold, TheAckWaitsForTheReplyAndLeavesBehindItInItsBurst) {
  // A WRITE with AckReq arrives in a poll that may hold ACKs. Expect: nothing sent, the
  // engine due again within the hold; then the reply goes out in one burst, the ACK behind it
  // (the longer packet first: a UDP socket sends the two as one GSO datagram).
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(16, 0x5A), reth(0, 16));
  EXPECT_TRUE(held_step().empty());
  EXPECT_EQ(mem[32], 0x5A);  // executed, only the ACK waits
  EXPECT_EQ(engine->counters()[Counter::acks_held], 1u);
  EXPECT_LE(engine->next_deadline(), now + 5000);
  EXPECT_TRUE(held_step().empty());  // 2 us into the hold: still waiting
  reply();
  const uint64_t bursts = port.bursts;
  auto out = held_step();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(port.bursts, bursts + 1);  // one write
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcSendOnly);
  EXPECT_EQ(out[0].hdr.bth.psn, 5000u);
  EXPECT_EQ(out[1].hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(out[1].hdr.bth.psn, kEpsn);
  EXPECT_EQ(out[1].hdr.ext.aeth.msn, 1u);
  EXPECT_EQ(engine->counters()[Counter::acks_held_alone], 0u);
}

TEST_F(AckHold, AnAckWithoutAReplyLeavesAloneWhenTheHoldEnds) {
  // No reply comes: the ACK stays while the hold lasts (the engine's deadline says when it
  // ends) and leaves with the first poll after it, counted as held in vain.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(16, 0x5A), reth(0, 16));
  EXPECT_TRUE(held_step().empty());
  const uint64_t until = engine->next_deadline();
  EXPECT_EQ(until, now + 5000);
  EXPECT_TRUE(held_step(until - now - 1).empty());
  auto out = held_step(1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(engine->counters()[Counter::acks_held_alone], 1u);
  EXPECT_GT(engine->next_deadline(), until);  // nothing held any more
}

TEST_F(AckHold, SendHeldAcksSendsThemAtOnce) {
  // What a control verb and closing the device call: the kept ACK leaves now, in the hold.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(16, 0x5A), reth(0, 16));
  EXPECT_TRUE(held_step().empty());
  engine->send_held_acks();
  const auto sent_now = port.take_sent();
  ASSERT_EQ(sent_now.size(), 1u);
  ParsedPacket ack;
  ASSERT_EQ(parse_frame(sent_now[0], ack), ParseError::kOk);
  EXPECT_EQ(ack.hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(ack.hdr.bth.psn, kEpsn);
  engine->send_held_acks();  // nothing kept: nothing sent
  EXPECT_TRUE(port.take_sent().empty());
}

TEST_F(AckHold, OnlyAHoldingPollHoldsAndOnlyAcks) {
  // A poll not asked to hold sends the ACK at once; a READ response is never held (the
  // requester waits for it); neither is a held ACK once a later poll does not hold.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(16, 0x5A), reth(0, 16));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAck);
  send(opcode::kRcReadRequest, kEpsn + 1, {}, reth(0, 8));
  out = held_step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  send(opcode::kRcWriteOnly, kEpsn + 2, std::vector<uint8_t>(16, 0x5B), reth(0, 16));
  EXPECT_TRUE(held_step().empty());
  out = step();  // no hold asked: the waiting ACK goes
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 2);
  EXPECT_EQ(engine->counters()[Counter::acks_held], 1u);
  EXPECT_EQ(engine->counters()[Counter::acks_held_alone], 1u);
}

TEST_F(Responder, DuplicatesWithoutAckReqAreAckedOncePerBurst) {
  // WRITE FIRST and MIDDLE at ePSN, ePSN+1, no AckReq: executed, nothing sent (ACKs
  // coalesce). The requester's go-back-N round then re-sends both, still without AckReq
  // (its AckReq packet was lost). Expect: one ACK for ePSN+1 for the pair, so that the
  // requester learns of the progress instead of timing out again (rxe does the same).
  send(opcode::kRcWriteFirst, kEpsn, std::vector<uint8_t>(1024, 1), reth(0, 3000), false);
  send(opcode::kRcWriteMiddle, kEpsn + 1, std::vector<uint8_t>(1024, 1), {}, false);
  EXPECT_TRUE(step().empty());
  send(opcode::kRcWriteFirst, kEpsn, std::vector<uint8_t>(1024, 1), reth(0, 3000), false);
  send(opcode::kRcWriteMiddle, kEpsn + 1, std::vector<uint8_t>(1024, 1), {}, false);
  const auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 1);
  EXPECT_EQ(engine->counters()[Counter::dup_requests], 2u);
}

TEST_F(Responder, PsnAheadGetsOneSequenceNakPerGap) {
  // Future: ePSN+2. Expect: NAK PSN sequence error carrying ePSN; nothing written.
  send(opcode::kRcWriteOnly, kEpsn + 2, std::vector<uint8_t>(8, 1), reth(0, 8));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_nak());
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kPsnSeqError);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_EQ(mem[32], 0xAB);
  // Future again, same gap. Expect: silence (one NAK per gap).
  send(opcode::kRcWriteOnly, kEpsn + 3, std::vector<uint8_t>(8, 1), reth(0, 8));
  EXPECT_TRUE(step().empty());
  // In order, then a new gap. Expect: ACK, then a fresh NAK.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  send(opcode::kRcWriteOnly, kEpsn + 5, std::vector<uint8_t>(8, 1), reth(0, 8));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kPsnSeqError);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 1);
}

TEST_F(Responder, BadRkeyWriteIsNakedAndMemoryUntouched) {
  // In order, but an R_Key nobody registered. Expect: NAK remote access error at that PSN,
  // not one byte written, QP in error.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(64, 1), reth(0, 64, mr->key ^ 0x5));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  for (uint8_t b : mem) ASSERT_EQ(b, 0xAB);
  EXPECT_EQ(qp->state, IBV_QPS_ERR);
}

TEST_F(Responder, OutOfBoundsWriteIsNakedAndMemoryUntouched) {
  // The range runs 1 byte past the MR's end.
  send(opcode::kRcWriteFirst, kEpsn, std::vector<uint8_t>(1024, 1), reth(3073, 1024));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  for (uint8_t b : mem) ASSERT_EQ(b, 0xAB);
}

TEST_F(Responder, WriteWithoutRemoteWriteAccessIsNaked) {
  auto* ro = engine->reg_mr(pd, mem.data() + 32, 4096, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(ro, nullptr);
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(16, 1), reth(0, 16, ro->key));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_TRUE(guards_intact());
  EXPECT_EQ(mem[32], 0xAB);
}

TEST_F(Responder, WriteToAnotherPdsMrIsNaked) {
  mem::Pd* other = engine->alloc_pd();
  auto* omr = engine->reg_mr(other, mem.data() + 32, 4096,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(16, 1), reth(0, 16, omr->key));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(mem[32], 0xAB);
}

TEST_F(Responder, SendWithoutReceiveWqeGetsRnrNakWithMinRnrTimer) {
  send(opcode::kRcSendOnly, kEpsn, std::vector<uint8_t>(16, 1));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_rnr_nak());
  EXPECT_EQ(out[0].hdr.ext.aeth.rnr_timer_code(), 12);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  // The retransmission after a receive is posted succeeds at the same PSN.
  post_recv(9);
  send(opcode::kRcSendOnly, kEpsn, std::vector<uint8_t>(16, 1));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  ibv_wc wc;
  ASSERT_EQ(engine->poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.byte_len, 16u);
}

TEST_F(Responder, MiddleWithoutFirstIsAnInvalidRequest) {
  send(opcode::kRcWriteMiddle, kEpsn, std::vector<uint8_t>(1024, 1));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
  EXPECT_EQ(mem[32], 0xAB);
}

TEST_F(Responder, ShortMiddlePacketIsAnInvalidRequest) {
  send(opcode::kRcWriteFirst, kEpsn, std::vector<uint8_t>(1024, 1), reth(0, 3000), false);
  EXPECT_TRUE(step().empty());
  send(opcode::kRcWriteMiddle, kEpsn + 1, std::vector<uint8_t>(1000, 1));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
}

TEST_F(Responder, DuplicateWriteAfterAReadIsAckedBelowTheRead) {
  // WRITE at ePSN, then a READ at ePSN+1 (answered). The WRITE comes again (its ACK was
  // lost): the ACK must not carry the READ's PSN or a later one, or the requester may take
  // it for the READ's completion without its data (the kernel's rxe does, when the PSNs are
  // equal). Expect: ACK for the WRITE's PSN.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  step();
  send(opcode::kRcReadRequest, kEpsn + 1, {}, reth(0, 8));
  ASSERT_EQ(step().size(), 1u);  // READ RESPONSE ONLY
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  // A SEND after the READ, then the WRITE again: still below the READ.
  send(opcode::kRcWriteOnly, kEpsn + 2, std::vector<uint8_t>(8, 2), reth(8, 8));
  step();
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  // Its own duplicate, after the READ: everything up to the newest PSN.
  send(opcode::kRcWriteOnly, kEpsn + 2, std::vector<uint8_t>(8, 2), reth(8, 8));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 2);
}

TEST_F(Responder, ReadIsAnsweredInMtuSegmentsAndDuplicateReplaysSubset) {
  for (size_t i = 0; i < 4096; ++i) mem[32 + i] = static_cast<uint8_t>(i * 3);
  // In order: READ 2500 bytes. Expect: FIRST, MIDDLE, LAST with PSNs ePSN..ePSN+2.
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 2500));
  auto out = step();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseFirst);
  EXPECT_EQ(out[1].hdr.bth.opcode, opcode::kRcReadResponseMiddle);
  EXPECT_EQ(out[2].hdr.bth.opcode, opcode::kRcReadResponseLast);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[static_cast<size_t>(i)].hdr.bth.psn, kEpsn + static_cast<uint32_t>(i));
  EXPECT_EQ(out[2].payload.size(), 2500u - 2048u);
  EXPECT_EQ(out[1].payload[0], static_cast<uint8_t>(1024 * 3));
  // Past: the requester lost the last segment and asks again from PSN ePSN+2 for the
  // remaining 452 bytes. Expect: READ RESPONSE ONLY with PSN ePSN+2 and those bytes.
  send(opcode::kRcReadRequest, kEpsn + 2, {}, reth(2048, 452));
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 2);
  ASSERT_EQ(out[0].payload.size(), 452u);
  EXPECT_EQ(out[0].payload[0], static_cast<uint8_t>(2048 * 3));
  EXPECT_EQ(engine->counters()[Counter::dup_reads_replayed], 1u);
}

TEST_F(Responder, AStaleDuplicateReadDoesNotHoldItsSlotAgainstTheNextRead) {
  // One responder resource (rping's responder_resources 1). READ at ePSN, answered. A
  // reordering link then delivers an old copy of that READ just before the next READ, in
  // the same burst: the copy starts a replay in the only slot, and the new READ must still
  // be executed (its requester may have one READ outstanding, and this is it), not NAKed as
  // invalid. Expect: the new READ's response, no NAK, the replay counted as dropped.
  QpOptions o;
  o.rq_psn = kEpsn;
  o.sq_psn = 5000;
  o.rd_atomic = 1;
  side_qp(o);
  for (size_t i = 0; i < 64; ++i) mem[32 + i] = static_cast<uint8_t>(i);
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 16));
  ASSERT_EQ(step().size(), 1u);
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 16));        // the stale copy
  send(opcode::kRcReadRequest, kEpsn + 1, {}, reth(16, 16));   // the next READ
  const auto out = step();
  ASSERT_FALSE(out.empty());
  for (const auto& pkt : out) {
    EXPECT_TRUE(pkt.hdr.ext.aeth.is_ack()) << "a NAK for PSN " << pkt.hdr.bth.psn;
  }
  const auto& last = out.back();
  EXPECT_EQ(last.hdr.bth.opcode, opcode::kRcReadResponseOnly);
  EXPECT_EQ(last.hdr.bth.psn, kEpsn + 1);
  ASSERT_EQ(last.payload.size(), 16u);
  EXPECT_EQ(last.payload[0], 16);
  EXPECT_EQ(qp->state, IBV_QPS_RTS);
  EXPECT_EQ(engine->counters()[Counter::replays_dropped], 1u);
  // More READs than resources while a first answer is still going out stays invalid: two
  // new READs in one burst with one slot (the second arrives before the first is sent).
  send(opcode::kRcReadRequest, kEpsn + 2, {}, reth(0, 16));
  send(opcode::kRcReadRequest, kEpsn + 3, {}, reth(0, 16));
  const auto out2 = step();
  ASSERT_FALSE(out2.empty());
  EXPECT_FALSE(out2.back().hdr.ext.aeth.is_ack());
}

TEST_F(Responder, DuplicateAtomicIsReplayedNotExecutedTwice) {
  uint64_t v = 100;
  std::memcpy(mem.data() + 32, &v, 8);
  ExtHeaders x;
  x.atomic = {reinterpret_cast<uint64_t>(mem.data() + 32), mr->key, 5, 0};
  send(opcode::kRcFetchAdd, kEpsn, {}, x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAtomicAck);
  EXPECT_EQ(out[0].hdr.ext.atomic_ack.orig, 100u);
  // Past: the same FETCH_ADD again (its ACK was lost). Expect: the same ATOMIC ACK (orig 100),
  // and the target still 105.
  send(opcode::kRcFetchAdd, kEpsn, {}, x);
  out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAtomicAck);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_EQ(out[0].hdr.ext.atomic_ack.orig, 100u);
  std::memcpy(&v, mem.data() + 32, 8);
  EXPECT_EQ(v, 105u);
}

TEST_F(Responder, MisalignedAtomicIsAnInvalidRequest) {
  ExtHeaders x;
  x.atomic = {reinterpret_cast<uint64_t>(mem.data() + 36), mr->key, 5, 0};
  send(opcode::kRcFetchAdd, kEpsn, {}, x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
  EXPECT_TRUE(guards_intact());
  EXPECT_EQ(mem[36], 0xAB);
}

TEST_F(Responder, LimitedMemberPkeyIsAcceptedByAFullMember) {
  // 0x7FFF is the default partition with limited membership; we are a full member (0xFFFF).
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8), true, 0x7FFF);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr.ext.aeth.is_ack());
  EXPECT_EQ(engine->counters()[Counter::rx_drop_bad_pkey], 0u);
}

TEST_F(Responder, WrongPkeyBadIcrcAndUnknownQpAreDroppedAndCounted) {
  // Another partition (low 15 bits differ): dropped.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8), true, 0x8001);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(engine->counters()[Counter::rx_drop_bad_pkey], 1u);

  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8));
  // Flip one payload bit of the queued frame by rebuilding it by hand.
  RoceHeaders h;
  h.eth.src = kPeerMac;
  h.eth.dst = port.mac();
  h.ip4.src = kIpA;
  h.ip4.dst = kIpB;
  h.bth.opcode = opcode::kRcWriteOnly;
  h.bth.psn = kEpsn;
  h.bth.dest_qp = qp->qpn + 7;  // no such QP
  h.ext = reth(0, 8);
  std::vector<uint8_t> payload(8, 1), frame(frame_len(h, 8));
  build_frame(h, payload, frame);
  port.inject(frame);
  frame[frame.size() - 10] ^= 0x01;
  port.inject(frame);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);  // only the first (valid) frame is acknowledged
  EXPECT_EQ(engine->counters()[Counter::rx_drop_unknown_qpn], 1u);
  EXPECT_EQ(engine->counters()[ParseError::kBadIcrc], 1u);
  EXPECT_EQ(engine->counters()[Counter::rx_drop_malformed], 1u);
}

TEST_F(Responder, CoalescedAckCarriesTheMsnOfItsOwnPsn) {
  // Three WRITEs in one poll, AckReq on the first only (a requester may ask for ACKs now
  // and then, not at every message's end as rxe does). Expect: one ACK for the first's PSN,
  // with MSN 1 (the messages done up to that PSN), not 3: the MSN is taken when the ACK is
  // due, not when it leaves.
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(8, 1), reth(0, 8), true);
  send(opcode::kRcWriteOnly, kEpsn + 1, std::vector<uint8_t>(8, 2), reth(8, 8), false);
  send(opcode::kRcWriteOnly, kEpsn + 2, std::vector<uint8_t>(8, 3), reth(16, 8), false);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_EQ(out[0].hdr.ext.aeth.msn, 1u);
  EXPECT_EQ(mem[32 + 16], 3);  // all three executed
}

// The same fixture, with the engine's QP as the requester and the test as its responder.
class Requester : public Responder {
 protected:
  int requests_of(const std::vector<ParsedPacket>& out, uint8_t op) {
    int n = 0;
    for (const auto& pkt : out) n += pkt.hdr.bth.opcode == op;
    return n;
  }
  // Past the QP's retransmission timeout (timeout 14: 4.096 us << 14, about 67 ms).
  std::vector<ParsedPacket> after_timeout() {
    now += 4096ull << 15;
    return step();
  }
  void post(ibv_wr_opcode op, std::vector<uint8_t>& buf) {
    local = engine->reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(local, nullptr);
    ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), static_cast<uint32_t>(buf.size()),
              local->key};
    ibv_send_wr w{};
    w.wr_id = 7;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = op;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = 0x10000;
    w.wr.rdma.rkey = 0x1234;
    ASSERT_EQ(engine->post_send(qp, &w, nullptr), 0);
  }
  mem::Mr* local = nullptr;
};

TEST_F(Requester, AReadResponseMissingItsFirstPacketAfterATimeoutIsAskedAgainWithoutASecondRetry) {
  // READ of 3000 bytes (PSNs 5000..5002). Its request goes unanswered: the timer asks again
  // and spends a retry (7 -> 6). The response to that comes without its FIRST (a gap at
  // 5000, MIDDLE 5001 first). Expect: the READ asked again at once, and no second retry
  // spent in that timeout period; the whole response then completes it and the budget is
  // full again. (Spending one per gap and one per timeout ran rping's retry_cnt 7 out on a
  // link damaging a fifth of the frames: docs/transport.md, "Reordering".)
  std::vector<uint8_t> buf(3000, 0);
  post(IBV_WR_RDMA_READ, buf);
  ASSERT_EQ(requests_of(step(), opcode::kRcReadRequest), 1);
  ASSERT_EQ(requests_of(after_timeout(), opcode::kRcReadRequest), 1);
  EXPECT_EQ(qp->comp.retry_left, 6);
  send(opcode::kRcReadResponseMiddle, 5001, std::vector<uint8_t>(1024, 2));
  EXPECT_EQ(requests_of(step(), opcode::kRcReadRequest), 1);
  EXPECT_EQ(qp->comp.retry_left, 6);
  ExtHeaders ack;
  ack.aeth.msn = 1;
  send(opcode::kRcReadResponseFirst, 5000, std::vector<uint8_t>(1024, 1), ack);
  send(opcode::kRcReadResponseMiddle, 5001, std::vector<uint8_t>(1024, 2));
  send(opcode::kRcReadResponseLast, 5002, std::vector<uint8_t>(952, 3), ack);
  step();
  ibv_wc wc{};
  ASSERT_EQ(engine->poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(buf[0], 1);
  EXPECT_EQ(buf[1024], 2);
  EXPECT_EQ(buf[2999], 3);
  EXPECT_EQ(qp->comp.retry_left, 7);
}

TEST_F(Requester, SequenceNaksWithoutProgressGoBackOncePerTimeoutPeriodAndOnlyTimeoutsSpend) {
  // WRITE of 3000 bytes (PSNs 5000..5002), unanswered: the timer re-sends it (7 -> 6). Then
  // NAK PSN sequence error at 5000, twice: no progress since that retry. Expect: the first
  // NAK re-sends at once, free; the second re-sends nothing (the timer will); the next
  // timeout re-sends and spends (6 -> 5).
  std::vector<uint8_t> buf(3000, 9);
  post(IBV_WR_RDMA_WRITE, buf);
  ASSERT_EQ(step().size(), 3u);
  ASSERT_FALSE(after_timeout().empty());
  EXPECT_EQ(qp->comp.retry_left, 6);
  ExtHeaders nak;
  nak.aeth.syndrome = AethRepr::make_nak(NakCode::kPsnSeqError);
  send(opcode::kRcAck, 5000, {}, nak);
  auto out = step();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front().hdr.bth.psn, 5000u);
  EXPECT_EQ(qp->comp.retry_left, 6);
  send(opcode::kRcAck, 5000, {}, nak);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(qp->comp.retry_left, 6);
  out = after_timeout();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front().hdr.bth.psn, 5000u);
  EXPECT_EQ(qp->comp.retry_left, 5);
  EXPECT_EQ(qp->state, IBV_QPS_RTS);
}

TEST_F(Requester, AnInlineSendSkipsAnEmptySgeWithANullAddress) {
  // UCX posts inline sends whose first SGE is empty with address 0 (MPICH's ping-pong under
  // UBSan: memcpy from a null pointer). Expect: the SEND carries the other SGE's 8 bytes.
  std::vector<uint8_t> buf(8, 0x5A);
  ibv_sge s[2] = {{0, 0, 0}, {reinterpret_cast<uint64_t>(buf.data()), 8, 0}};
  ibv_send_wr w{};
  w.sg_list = s;
  w.num_sge = 2;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_INLINE;
  ASSERT_EQ(engine->post_send(qp, &w, nullptr), 0);
  const auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcSendOnly);
  ASSERT_EQ(out[0].payload.size(), 8u);
  EXPECT_EQ(out[0].payload[7], 0x5A);
}


// ---- Each role's state machine (STYLE.md 15): named states, every change traced ---------------

/// The role_state events a tracer heard, as "role: from -> to".
struct RoleRecorder final : VerbsTracer {
  void event(const VerbsEvent& e) override {
    if (e.kind != VerbsEvent::Kind::kRoleState) return;
    const auto r = static_cast<Role>(e.opcode);
    moves.push_back(std::string(role_name(r)) + ": " +
                    role_state_name(r, static_cast<int>(e.length)) + " -> " +
                    role_state_name(r, e.status));
  }
  std::vector<std::string> moves;
};

TEST_F(Responder, AMultiPacketSendOpensAndClosesTheResponderOnlyAroundItsMiddle) {
  // SEND FIRST, MIDDLE, LAST, then a SEND ONLY. Expect: idle -> in-send at FIRST, back to idle
  // at LAST; the ONLY one moves nothing (it is over in one packet).
  RoleRecorder r;
  engine->set_verbs_tracer(&r);
  post_recv(1);
  post_recv(2);
  send(opcode::kRcSendFirst, kEpsn, std::vector<uint8_t>(1024, 1));
  step();
  EXPECT_EQ(qp->resp.state, ::uroce::Responder::State::kInSend);
  send(opcode::kRcSendMiddle, kEpsn + 1, std::vector<uint8_t>(1024, 1));
  send(opcode::kRcSendLast, kEpsn + 2, std::vector<uint8_t>(10, 1));
  step();
  EXPECT_EQ(qp->resp.state, ::uroce::Responder::State::kIdle);
  send(opcode::kRcSendOnly, kEpsn + 3, std::vector<uint8_t>(10, 1));
  step();
  EXPECT_EQ(r.moves, (std::vector<std::string>{"responder: idle -> in-send",
                                               "responder: in-send -> idle"}));
  EXPECT_EQ(engine->counters()[Counter::role_transitions], 2u);
  engine->set_verbs_tracer(nullptr);
}

TEST_F(Requester, AnRnrNakHoldsTheRequesterUntilItsTimerThenItResendsFromThatPsn) {
  // SEND of 3000 bytes (PSNs 5000..5002); the peer answers RNR NAK at 5000 (timer code 1:
  // 10 us). Expect: rewound and held (retry-pending, then rnr-wait), nothing sent and no ACK
  // timer while held; when the RNR timer fires the rewind is taken (retry-pending) and the
  // first re-sent packet, PSN 5000, makes it ready again.
  RoleRecorder r;
  engine->set_verbs_tracer(&r);
  std::vector<uint8_t> buf(3000, 4);
  post(IBV_WR_SEND, buf);
  ASSERT_EQ(step().size(), 3u);
  EXPECT_EQ(qp->req.state, ::uroce::Requester::State::kReady);
  ExtHeaders rnr;
  rnr.aeth.syndrome = AethRepr::make_rnr_nak(1);
  send(opcode::kRcAck, 5000, {}, rnr);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(qp->req.state, ::uroce::Requester::State::kRnrWait);
  EXPECT_FALSE(qp->comp.retransmit_timer.armed);
  now += 100'000;  // past the 10 us RNR timer
  const auto out = step();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front().hdr.bth.psn, 5000u);
  EXPECT_EQ(qp->req.state, ::uroce::Requester::State::kReady);
  EXPECT_TRUE(qp->comp.retransmit_timer.armed);
  EXPECT_EQ(r.moves, (std::vector<std::string>{
                         "requester: ready -> retry-pending", "requester: retry-pending -> rnr-wait",
                         "requester: rnr-wait -> retry-pending", "requester: retry-pending -> ready"}));
  engine->set_verbs_tracer(nullptr);
}

TEST_F(Requester, AGapInAReadsResponsesIsIgnoredUntilTheResponseAskedAgainComes) {
  // READ of 3000 bytes (PSNs 5000..5002); MIDDLE 5001 comes first (FIRST lost). Expect: the
  // completer goes to gap and asks again from 5000; a straggler LAST 5002 of the old stream
  // changes nothing; the new FIRST 5000 brings it back to acking.
  RoleRecorder r;
  engine->set_verbs_tracer(&r);
  std::vector<uint8_t> buf(3000, 0);
  post(IBV_WR_RDMA_READ, buf);
  ASSERT_EQ(requests_of(step(), opcode::kRcReadRequest), 1);
  send(opcode::kRcReadResponseMiddle, 5001, std::vector<uint8_t>(1024, 2));
  EXPECT_EQ(requests_of(step(), opcode::kRcReadRequest), 1);
  EXPECT_EQ(qp->comp.state, ::uroce::Completer::State::kGap);
  ExtHeaders ack;
  ack.aeth.msn = 1;
  send(opcode::kRcReadResponseLast, 5002, std::vector<uint8_t>(952, 3), ack);
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(qp->comp.state, ::uroce::Completer::State::kGap);
  send(opcode::kRcReadResponseFirst, 5000, std::vector<uint8_t>(1024, 1), ack);
  step();
  EXPECT_EQ(qp->comp.state, ::uroce::Completer::State::kAcking);
  const std::vector<std::string> want = {"completer: acking -> gap",
                                         "requester: ready -> retry-pending",
                                         "requester: retry-pending -> ready",
                                         "completer: gap -> acking"};
  EXPECT_EQ(r.moves, want);
  engine->set_verbs_tracer(nullptr);
}

}  // namespace
}  // namespace uroce::test

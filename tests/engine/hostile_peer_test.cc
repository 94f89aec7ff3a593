// The hostile-peer suite (issue 11): a peer on the link that guesses keys, races
// ibv_dereg_mr, invalidates what it must not, talks to destroyed QPs and sends requests of the
// wrong size. The memory under attack sits between PROT_NONE guard pages, so one byte read or
// written outside a live MR kills the test; once deregistered, its pages become PROT_NONE as
// well (as if the application had unmapped them), so a late access kills it too. Each test
// also asserts that every bad frame was counted, and under what reason.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <vector>

#include "responder_fixture.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

/// [guard page][bytes, rounded up to pages][guard page]; the guards are PROT_NONE. The
/// region starts zeroed.
class GuardedRegion {
 public:
  explicit GuardedRegion(size_t bytes) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    len_ = (bytes + page_ - 1) / page_ * page_;
    base_ = static_cast<uint8_t*>(
        mmap(nullptr, len_ + 2 * page_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(mprotect(data(), len_, PROT_READ | PROT_WRITE), 0);
  }
  ~GuardedRegion() { munmap(base_, len_ + 2 * page_); }
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;
  uint8_t* data() const { return base_ + page_; }
  size_t size() const { return len_; }
  uint64_t va() const { return reinterpret_cast<uint64_t>(data()); }
  /// No access at all from now on (an unmapped buffer would fault the same way).
  void revoke() { ASSERT_EQ(mprotect(data(), len_, PROT_NONE), 0); }
  void restore() { ASSERT_EQ(mprotect(data(), len_, PROT_READ | PROT_WRITE), 0); }
  size_t count(uint8_t v) const {
    size_t n = 0;
    for (size_t i = 0; i < len_; ++i) n += data()[i] == v;
    return n;
  }

 private:
  uint8_t* base_ = nullptr;
  size_t page_ = 0, len_ = 0;
};

/// A (the attacker) WRITEs the 64 bytes of `s` with each of `keys`, 128 at a time (its send
/// queue holds 256), to `va` + 64 * (i % 64), and lets everything arrive.
void write_with_keys(Pair& p, Qp* qa, const ibv_sge& s, uint64_t va,
                     const std::vector<uint32_t>& keys) {
  for (size_t i = 0; i < keys.size(); i += 128) {
    std::vector<ibv_send_wr> wrs(std::min<size_t>(128, keys.size() - i));
    for (size_t j = 0; j < wrs.size(); ++j) {
      wrs[j] = {};
      wrs[j].sg_list = const_cast<ibv_sge*>(&s);
      wrs[j].num_sge = 1;
      wrs[j].opcode = IBV_WR_RDMA_WRITE;
      wrs[j].wr.rdma = {va + 64 * (j % 64), keys[i + j]};
      wrs[j].next = j + 1 < wrs.size() ? &wrs[j + 1] : nullptr;
    }
    ASSERT_EQ(p.a.engine->post_send(qa, wrs.data(), nullptr), 0);
    ASSERT_TRUE(p.run_until([&] { return p.link.in_flight() == 0 && !p.a.engine->has_tx_work(); }));
  }
  p.run_until([] { return false; }, 1'000'000);
}

ExtHeaders reth_at(uint64_t va, uint32_t rkey, uint32_t len) {
  ExtHeaders x;
  x.reth = {va, rkey, len};
  return x;
}

class HostilePeer : public Responder {
 protected:
  // Small per-poll budget, so that a READ's responses span several polls.
  void configure(EngineConfig& cfg) override { cfg.qp_budget = 4; }
  uint64_t count(Counter c) const { return engine->counters()[c]; }
  /// The responder answered with one remote access NAK at `psn` and its QP is in error.
  void expect_access_nak(const std::vector<ParsedPacket>& out, uint32_t psn) {
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
    EXPECT_EQ(out[0].hdr.bth.psn, psn);
    EXPECT_EQ(qp->state, IBV_QPS_ERR);
  }
  /// A fresh QP in RTS for the next attack (the last one ended in the error state).
  void fresh_qp() {
    QpOptions o;
    o.rq_psn = kEpsn;
    o.sq_psn = 5000;
    o.rd_atomic = 4;
    side_qp(o);
  }
};

// ---- Keys --------------------------------------------------------------------------------------

TEST(HostileKeys, GuessedRkeysNeverWriteAndEachGuessIsCounted) {
  // Issue 11, finding 4: on UC a wrong key only drops the packet and the QP stays up, so a
  // peer can try key after key. It tries the 4095 keys the old scheme (slot << 12 | 12 random
  // bits) left open around the real key, every one-bit change, the 512 nearest values and
  // 20,000 seeded random ones: none may write a byte, and each is counted.
  Pair p(3);
  QpOptions o;
  o.type = IBV_QPT_UC;
  auto [qa, qb] = p.rc_pair(o, o);
  GuardedRegion victim(4096);
  mem::Mr* vmr = p.b.engine->reg_mr(p.b.pd, victim.data(), victim.size(), kAll);
  ASSERT_NE(vmr, nullptr);
  std::vector<uint8_t> src(64, 0xEE);
  mem::Mr* smr = p.a.reg(src, kAll);
  const uint32_t real = vmr->key;
  std::set<uint32_t> guesses;
  for (uint32_t r = 1; r < 4096; ++r) guesses.insert((real & ~0xFFFu) | r);
  for (int b = 0; b < 32; ++b) guesses.insert(real ^ (1u << b));
  for (uint32_t d = 1; d <= 256; ++d) guesses.insert({real + d, real - d});
  uint64_t lcg = 0x9e3779b97f4a7c15ull;
  while (guesses.size() < 4095 + 20'000) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    guesses.insert(static_cast<uint32_t>(lcg >> 32));
  }
  guesses.erase(real);
  std::vector<uint32_t> list(guesses.begin(), guesses.end());
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 64, smr->key};
  const uint64_t drops0 = p.b.engine->counters()[Counter::rx_drop_uc_msg];
  write_with_keys(p, qa, s, victim.va(), list);
  EXPECT_EQ(victim.count(0), victim.size()) << "a guessed key wrote into the MR";
  EXPECT_EQ(p.b.engine->counters()[Counter::rx_drop_uc_msg] - drops0, list.size());
  EXPECT_EQ(qb->state, IBV_QPS_RTS);
  // The real key still works: the attack broke nothing.
  write_with_keys(p, qa, s, victim.va(), {real});
  EXPECT_EQ(victim.count(0xEE), 64u);
}

TEST(HostileKeys, WindowKeysOfOldBindingsAndOtherQpsNeverWrite) {
  // Memory windows give the peer keys that change: it keeps what it was given. On UC (wrong
  // keys are dropped and counted, the QP stays up) it tries every low byte of a type 1
  // window's key but the current one (its two earlier bindings' keys among them), a type 2
  // window's exact key from a QP the window is not bound to, and the key of the MR under both
  // (bindable, no remote rights): nothing may land.
  Pair p(5);
  QpOptions o;
  o.type = IBV_QPT_UC;
  auto [qa, qb] = p.rc_pair(o, o);
  auto [qc, qd] = p.rc_pair(o, o);
  GuardedRegion victim(4096);
  mem::Mr* vmr = p.b.engine->reg_mr(p.b.pd, victim.data(), victim.size(),
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(vmr, nullptr);
  constexpr int kW = IBV_ACCESS_REMOTE_WRITE;
  mem::Mw* w1 = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  uint32_t key = w1->key;
  for (int i = 0; i < 2; ++i) {  // bound twice: the window's key has had three values
    const mem::BindRequest b{key, ibv_inc_rkey(key), vmr->key, victim.va(), 4096, kW, true};
    ASSERT_EQ(p.b.engine->post_bind_mw(qb, 0, 0, b), 0);
    key = b.new_key;
  }
  mem::Mw* w2 = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  ibv_mw v2{};
  v2.rkey = w2->key;
  v2.type = IBV_MW_TYPE_2;
  ibv_mr m{};
  m.lkey = vmr->key;
  ibv_send_wr bind{};
  bind.opcode = IBV_WR_BIND_MW;
  bind.bind_mw = {&v2, ibv_inc_rkey(w2->key), {&m, victim.va(), 4096, kW}};
  ASSERT_EQ(p.b.engine->post_send(qd, &bind, nullptr), 0);
  p.run_until([] { return false; }, 1'000'000);
  ASSERT_EQ(w1->key, key);
  ASSERT_EQ(w2->qpn, qd->qpn);
  ASSERT_EQ(vmr->windows, 2u);

  std::vector<uint32_t> list;
  for (uint32_t lo = 0; lo < 256; ++lo)
    if (lo != (key & 0xFF)) list.push_back((key & ~0xFFu) | lo);
  list.push_back(w2->key);
  list.push_back(vmr->key);
  std::vector<uint8_t> src(64, 0xEE);
  mem::Mr* smr = p.a.reg(src, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 64, smr->key};
  const uint64_t drops0 = p.b.engine->counters()[Counter::rx_drop_uc_msg];
  write_with_keys(p, qa, s, victim.va(), list);
  EXPECT_EQ(victim.count(0), victim.size()) << "an old or foreign window key wrote";
  EXPECT_EQ(p.b.engine->counters()[Counter::rx_drop_uc_msg] - drops0, list.size());
  // The current key, from the right QP, still works.
  write_with_keys(p, qa, s, victim.va(), {key});
  EXPECT_EQ(victim.count(0xEE), 64u);
  (void)qc;
}

// ---- MR lifetime -------------------------------------------------------------------------------

TEST_F(HostilePeer, WriteRacingDeregStopsAtTheNextPacket) {
  // Issue 11, finding 1: the WRITE's target was checked at its first packet only. Two of its
  // eight packets land, the application deregisters the MR (and its pages go away), the rest
  // arrive: NAK remote access error at the first late packet, QP in error, nothing written.
  GuardedRegion region(8192);
  mem::Mr* m = engine->reg_mr(pd, region.data(), 8192, kAll);
  ASSERT_NE(m, nullptr);
  const std::vector<uint8_t> chunk(1024, 0x11);
  send(opcode::kRcWriteFirst, kEpsn, chunk, reth_at(region.va(), m->key, 8192), false);
  send(opcode::kRcWriteMiddle, kEpsn + 1, chunk, {}, false);
  EXPECT_TRUE(step().empty());
  ASSERT_EQ(engine->dereg_mr(m), 0);
  region.revoke();
  for (uint32_t i = 2; i < 7; ++i) send(opcode::kRcWriteMiddle, kEpsn + i, chunk, {}, false);
  send(opcode::kRcWriteLast, kEpsn + 7, chunk);
  expect_access_nak(step(), kEpsn + 2);
  EXPECT_EQ(count(Counter::access_revoked), 1u);
  region.restore();
  EXPECT_EQ(region.count(0x11), 2048u);  // exactly the two packets before the dereg
}

TEST_F(HostilePeer, WriteRacingAWindowsUnbindStopsAtTheNextPacket) {
  // The same race through a type 1 window: two packets land, the application rebinds the
  // window to nothing (its send queue carries the bind), the rest are refused.
  GuardedRegion region(8192);
  mem::Mr* m =
      engine->reg_mr(pd, region.data(), 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(m, nullptr);
  mem::Mw* w = engine->alloc_mw(pd, IBV_MW_TYPE_1);
  const uint32_t key = ibv_inc_rkey(w->key);
  ASSERT_EQ(engine->post_bind_mw(qp, 1, 0, {w->key, key, m->key, region.va(), 8192,
                                            IBV_ACCESS_REMOTE_WRITE, true}),
            0);
  EXPECT_TRUE(step().empty());
  ASSERT_EQ(w->mr, m);
  const std::vector<uint8_t> chunk(1024, 0x11);
  send(opcode::kRcWriteFirst, kEpsn, chunk, reth_at(region.va(), key, 8192), false);
  send(opcode::kRcWriteMiddle, kEpsn + 1, chunk, {}, false);
  EXPECT_TRUE(step().empty());
  ASSERT_EQ(engine->post_bind_mw(qp, 2, 0, {key, ibv_inc_rkey(key), m->key, region.va(), 0, 0,
                                            true}),
            0);
  EXPECT_TRUE(step().empty());  // the unbind is carried out: from now on, nothing lands
  for (uint32_t i = 2; i < 7; ++i) send(opcode::kRcWriteMiddle, kEpsn + i, chunk, {}, false);
  send(opcode::kRcWriteLast, kEpsn + 7, chunk);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 2);
  EXPECT_EQ(count(Counter::access_revoked), 1u);
  EXPECT_EQ(w->mr, nullptr);
  EXPECT_EQ(region.count(0x11), 2048u);
}

TEST_F(HostilePeer, ReadRacingDeregSendsNothingMoreOfTheMr) {
  // A 16-packet READ, answered four packets per poll. After the first four the MR is
  // deregistered: the next response is a NAK remote access error, not data.
  GuardedRegion region(16 * 1024);
  std::memset(region.data(), 0x5C, region.size());
  mem::Mr* m = engine->reg_mr(pd, region.data(), region.size(), kAll);
  ASSERT_NE(m, nullptr);
  send(opcode::kRcReadRequest, kEpsn, {}, reth_at(region.va(), m->key, 16 * 1024));
  auto first = step();
  ASSERT_EQ(first.size(), 4u);
  for (const auto& r : first) EXPECT_EQ(r.payload.size(), 1024u);
  ASSERT_EQ(engine->dereg_mr(m), 0);
  region.revoke();
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.bth.opcode, opcode::kRcAck);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 4);
  EXPECT_EQ(qp->state, IBV_QPS_ERR);
  EXPECT_EQ(count(Counter::access_revoked), 1u);
  EXPECT_TRUE(step().empty());
}

TEST_F(HostilePeer, DuplicateReadAfterDeregIsNotReplayed) {
  // A READ answered in full, then the MR deregistered; the peer asks again (a duplicate
  // PSN). The saved request must not be replayed from memory that is gone: a remote access
  // NAK at that PSN (as rxe answers), so the requester fails instead of retrying forever.
  GuardedRegion region(2048);
  mem::Mr* m = engine->reg_mr(pd, region.data(), 2048, kAll);
  ASSERT_NE(m, nullptr);
  send(opcode::kRcReadRequest, kEpsn, {}, reth_at(region.va(), m->key, 2048));
  ASSERT_EQ(step().size(), 2u);
  ASSERT_EQ(engine->dereg_mr(m), 0);
  region.revoke();
  send(opcode::kRcReadRequest, kEpsn, {}, reth_at(region.va(), m->key, 2048));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn);
  EXPECT_EQ(count(Counter::dup_requests), 1u);
  EXPECT_EQ(count(Counter::dup_reads_replayed), 0u);
}

TEST_F(HostilePeer, NoAckPastAReadThatIsRefusedMidStream) {
  // READ (16 responses, 4 per poll), then a SEND the responder executes at once; its ACK
  // waits behind the READ's responses. The MR goes away mid-stream: the NAK must go out
  // alone. An ACK for the later SEND first would acknowledge the READ implicitly, and the
  // requester would take the NAK for an old duplicate and wait forever.
  GuardedRegion region(16 * 1024);
  mem::Mr* m = engine->reg_mr(pd, region.data(), region.size(), kAll);
  ASSERT_NE(m, nullptr);
  post_recv(1, 64);
  send(opcode::kRcReadRequest, kEpsn, {}, reth_at(region.va(), m->key, 16 * 1024));
  send(opcode::kRcSendOnly, kEpsn + 16, std::vector<uint8_t>(8, 1));
  ASSERT_EQ(step().size(), 4u);
  ASSERT_EQ(engine->dereg_mr(m), 0);
  region.revoke();
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(out[0].hdr.bth.psn, kEpsn + 4);
  EXPECT_TRUE(step().empty());
}

TEST_F(HostilePeer, DuplicateReadIsRefusedOnceTheQpLosesRemoteRead) {
  // Issue 11, finding 5: the duplicate was replayed without the QP's access flags.
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 64));
  ASSERT_EQ(step().size(), 1u);
  ibv_qp_attr a{};
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(engine->modify_qp(qp, &a, IBV_QP_ACCESS_FLAGS), 0);
  send(opcode::kRcReadRequest, kEpsn, {}, reth(0, 64));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(count(Counter::dup_reads_replayed), 0u);
}

// ---- Invalidation, atomics ---------------------------------------------------------------------

TEST_F(HostilePeer, SendWithInvalidateCannotKillAPlainMr) {
  // Issue 11, finding 2, on the wire: the IETH names our MR. Invalid request, the receive
  // completes in error, and the MR is exactly as it was.
  post_recv(1, 64);
  ExtHeaders x;
  x.ieth.rkey = mr->key;
  send(opcode::kRcSendOnlyInv, kEpsn, std::vector<uint8_t>(16, 7), x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
  EXPECT_EQ(count(Counter::inv_rkey_refused), 1u);
  EXPECT_EQ(engine->mr_table().find(mr->key), mr);
  EXPECT_EQ(engine->mr_table().in_use(), 1u);
  ibv_wc wc{};
  ASSERT_EQ(engine->poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(engine->dereg_mr(mr), 0);
  mr = nullptr;
}

TEST_F(HostilePeer, TheImplicitOnDemandKeyMeetsAClosedPageAsAnAccessError) {
  // An implicit on-demand MR hands the peer an R_Key for the whole address space, as an
  // RNIC's does. Where a page is not there (here PROT_NONE, the region's guard page after
  // the last packet's first bytes), an RNIC's page fault fails and it NAKs; uroce must do
  // the same, not fault itself. As an RNIC faults only the pages it writes (a packet
  // announcing 4 GiB must not make us commit 4 GiB), the first two packets land and the
  // third, the first into the guard page, is NAKed.
  GuardedRegion region(4096);
  mem::Mr* m = engine->reg_mr(pd, nullptr, SIZE_MAX, kAll | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(m, nullptr);
  const std::vector<uint8_t> chunk(1024, 0x33);
  const uint64_t va = region.va() + region.size() - 2048;  // half of it past the end
  send(opcode::kRcWriteFirst, kEpsn, chunk, reth_at(va, m->key, 4096), false);
  send(opcode::kRcWriteMiddle, kEpsn + 1, chunk, {}, false);
  send(opcode::kRcWriteMiddle, kEpsn + 2, chunk, {}, false);
  send(opcode::kRcWriteLast, kEpsn + 3, chunk);
  expect_access_nak(step(), kEpsn + 2);
  EXPECT_EQ(region.count(0x33), 2048u);
  // A READ of a closed page through the same key: a NAK, and no byte of it sent.
  fresh_qp();
  region.revoke();
  send(opcode::kRcReadRequest, kEpsn, {}, reth_at(region.va(), m->key, 64));
  const auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kRemoteAccessError);
  region.restore();
  EXPECT_EQ(engine->dereg_mr(m), 0);
}

TEST_F(HostilePeer, AtomicOnAnUnalignedHostAddressIsRefused) {
  // ibv_reg_mr_iova2 maps an aligned iova onto a buffer that is not 8-byte aligned: the
  // peer's address is fine, ours is not, and an atomic there would not be atomic.
  GuardedRegion region(4096);
  mem::Mr* m = engine->reg_mr_iova(pd, region.data() + 4, 64, 0x10000, kAll);
  ASSERT_NE(m, nullptr);
  ExtHeaders x;
  x.atomic = {0x10000, m->key, 5, 0};
  send(opcode::kRcFetchAdd, kEpsn, {}, x);
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
  EXPECT_EQ(region.count(0), region.size());
}

// ---- QP numbers, PSNs, sizes -------------------------------------------------------------------

TEST_F(HostilePeer, FramesForADestroyedQpReachNoOtherQp) {
  // Issue 11, finding 3: a destroyed QP's number went straight to the next QP, which then
  // accepted the old QP's traffic. Now the next QP has another number and the stale frame
  // is dropped as addressed to no QP.
  const uint32_t old_qpn = qp->qpn;
  ASSERT_EQ(engine->destroy_qp(qp), 0);
  fresh_qp();
  ASSERT_NE(qp->qpn, old_qpn);
  dest_qpn = old_qpn;
  send(opcode::kRcWriteOnly, kEpsn, std::vector<uint8_t>(64, 1), reth(0, 64));
  EXPECT_TRUE(step().empty());
  EXPECT_EQ(count(Counter::rx_drop_unknown_qpn), 1u);
  EXPECT_TRUE(guards_intact());
  for (size_t i = 32; i < mem.size() - 32; ++i) ASSERT_EQ(mem[i], 0xAB) << i;
}

TEST_F(HostilePeer, RequestsOutsideThePsnWindowTouchNothing) {
  // Ahead of ePSN by 1, by 1000 and by almost half the PSN space; behind it by one and by
  // half: sequence NAK (once), duplicates re-ACKed, and no byte written.
  for (uint32_t psn : {kEpsn + 1, kEpsn + 1000, kEpsn + 0x7FFFFF, kEpsn - 1, kEpsn - 0x800000})
    send(opcode::kRcWriteOnly, psn & 0xFFFFFF, std::vector<uint8_t>(64, 1), reth(0, 64));
  auto out = step();
  EXPECT_EQ(count(Counter::out_of_seq_requests), 3u);
  EXPECT_EQ(count(Counter::seq_naks_sent), 1u);
  EXPECT_EQ(count(Counter::dup_requests), 2u);
  for (size_t i = 0; i < mem.size(); ++i) ASSERT_EQ(mem[i], 0xAB) << i;
  EXPECT_EQ(qp->state, IBV_QPS_RTS);
}

TEST_F(HostilePeer, RequestsOfTheWrongSizeAreInvalidAndWriteNothing) {
  // Each case on a fresh QP (the one before ended in error); the MR is guarded.
  GuardedRegion region(8192);
  mem::Mr* m = engine->reg_mr(pd, region.data(), 8192, kAll);
  ASSERT_NE(m, nullptr);
  struct Case {
    const char* what;
    uint8_t opcode;
    uint32_t payload, reth_len;
    NakCode nak;
  };
  const Case cases[] = {
      {"WRITE ONLY longer than its DMA length", opcode::kRcWriteOnly, 100, 50,
       NakCode::kInvalidRequest},
      {"WRITE ONLY longer than the MTU", opcode::kRcWriteOnly, 1100, 1100,
       NakCode::kInvalidRequest},
      {"WRITE FIRST shorter than the MTU", opcode::kRcWriteFirst, 500, 4096,
       NakCode::kInvalidRequest},
      {"WRITE MIDDLE with no FIRST", opcode::kRcWriteMiddle, 1024, 0, NakCode::kInvalidRequest},
      {"WRITE past the MR's end", opcode::kRcWriteFirst, 1024, 8193, NakCode::kRemoteAccessError},
      {"READ of 2 GiB", opcode::kRcReadRequest, 0, 0x80000000u, NakCode::kRemoteAccessError},
      {"SEND ONLY longer than the MTU", opcode::kRcSendOnly, 1500, 0, NakCode::kInvalidRequest},
  };
  uint64_t naks = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fresh_qp();
    const bool has_reth = c.opcode == opcode::kRcWriteOnly || c.opcode == opcode::kRcWriteFirst ||
                          c.opcode == opcode::kRcReadRequest;
    send(c.opcode, kEpsn, std::vector<uint8_t>(c.payload, 0x77),
         has_reth ? reth_at(region.va(), m->key, c.reth_len) : ExtHeaders{});
    auto out = step();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), c.nak);
    EXPECT_EQ(qp->state, IBV_QPS_ERR);
    ++naks;
  }
  EXPECT_EQ(count(Counter::inv_req_naks_sent) + count(Counter::access_naks_sent), naks);
  EXPECT_EQ(region.count(0), region.size());
}

TEST_F(HostilePeer, SendLongerThanTheReceiveBufferStopsAtItsEnd) {
  // The receive buffer is the last 64 bytes before a guard page: the 1024-byte SEND must
  // end in a length error with not one byte past the buffer.
  GuardedRegion region(4096);
  mem::Mr* m = engine->reg_mr(pd, region.data(), 4096, kAll);
  ASSERT_NE(m, nullptr);
  ibv_sge s{region.va() + 4096 - 64, 64, m->key};
  ibv_recv_wr w{};
  w.wr_id = 9;
  w.sg_list = &s;
  w.num_sge = 1;
  ASSERT_EQ(engine->post_recv(qp, &w, nullptr), 0);
  send(opcode::kRcSendOnly, kEpsn, std::vector<uint8_t>(1024, 0x42));
  auto out = step();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr.ext.aeth.nak_code(), NakCode::kInvalidRequest);
  ibv_wc wc{};
  ASSERT_EQ(engine->poll_cq(cq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
}

}  // namespace
}  // namespace uroce::test

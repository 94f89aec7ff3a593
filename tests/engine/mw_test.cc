// Memory windows end to end between two engines: binding (type 1 through the ibv_bind_mw
// path, type 2 through IBV_WR_BIND_MW), remote access through a window's R_Key and only
// within its range, rights and QP, invalidation (LOCAL_INV, a peer's SEND with invalidate)
// and what each refuses (IBA 10.6.7). B owns the memory; A is the peer using the windows.
#include <gtest/gtest.h>

#include "harness.h"

namespace uroce::test {
namespace {

constexpr int kBindable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;  // no remote rights
constexpr int kRemote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

struct MwFixture : ::testing::Test {
  Pair p;
  Qp* qa = nullptr;
  Qp* qb = nullptr;
  std::vector<uint8_t> mem = std::vector<uint8_t>(8192, 0);  // B's memory
  std::vector<uint8_t> src = std::vector<uint8_t>(4096, 0);  // A's data
  mem::Mr* mr = nullptr;   // B, bindable, no remote rights of its own
  mem::Mr* smr = nullptr;  // A
  ibv_mr ibv_mr_b{};       // the verbs view of `mr` a bind work request names

  void SetUp() override {
    std::tie(qa, qb) = p.rc_pair();
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
    mr = p.b.engine->reg_mr(p.b.pd, mem.data(), mem.size(), kBindable);
    smr = p.a.reg(src, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ASSERT_NE(smr, nullptr);
    ibv_mr_b.lkey = ibv_mr_b.rkey = mr->key;
  }

  /// An ibv_mw naming `w`, as a bind work request carries it.
  static ibv_mw view(const mem::Mw* w) {
    ibv_mw v{};
    v.rkey = w->key;
    v.type = w->type;
    return v;
  }

  /// Posts a type 2 bind of [addr, addr+len) of `mr` on `q` (B); returns the new key.
  uint32_t post_bind2(Qp* q, mem::Mw* w, uint64_t addr, uint64_t len, int access,
                      mem::Mr* on = nullptr) {
    ibv_mw v = view(w);
    ibv_mr m{};
    m.lkey = (on != nullptr ? on : mr)->key;
    ibv_send_wr wr{};
    wr.wr_id = 900;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = &v;
    wr.bind_mw.rkey = ibv_inc_rkey(w->key);
    wr.bind_mw.bind_info = {&m, addr, len, static_cast<unsigned>(access)};
    EXPECT_EQ(p.b.engine->post_send(q, &wr, nullptr), 0);
    return wr.bind_mw.rkey;
  }

  /// A type 2 window bound on qb to [off, off+len) of mem with `access`; its key in *key.
  mem::Mw* bound2(size_t off, uint64_t len, int access, uint32_t* key) {
    mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_2);
    EXPECT_NE(w, nullptr);
    *key = post_bind2(qb, w, addr(off), len, access);
    const ibv_wc wc = b_completion();
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    return w;
  }

  /// A posts a SEND with invalidate of `key` to a receive posted on qb (wr_id 44).
  void send_inv(uint32_t key) {
    rbuf.assign(64, 0);
    rmr = rmr != nullptr ? rmr : p.b.reg(rbuf, IBV_ACCESS_LOCAL_WRITE);
    ibv_sge rs{reinterpret_cast<uint64_t>(rbuf.data()), 64, rmr->key};
    ibv_recv_wr rwr{};
    rwr.wr_id = 44;
    rwr.sg_list = &rs;
    rwr.num_sge = 1;
    ASSERT_EQ(p.b.engine->post_recv(qb, &rwr, nullptr), 0);
    ibv_sge ss{reinterpret_cast<uint64_t>(src.data()), 16, smr->key};
    ibv_send_wr swr{};
    swr.sg_list = &ss;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_SEND_WITH_INV;
    swr.invalidate_rkey = key;
    ASSERT_EQ(p.a.engine->post_send(qa, &swr, nullptr), 0);
  }
  std::vector<uint8_t> rbuf = std::vector<uint8_t>(64);
  mem::Mr* rmr = nullptr;

  /// One completion on B's CQ after running both engines.
  ibv_wc b_completion() {
    std::vector<ibv_wc> wb;
    EXPECT_TRUE(p.run_until([&] {
      for (auto& w : drain(p.b)) wb.push_back(w);
      return !wb.empty();
    }));
    return wb.empty() ? ibv_wc{} : wb[0];
  }

  /// A WRITEs `len` bytes of src to (rkey, va); returns its completion status.
  ibv_wc_status write(uint32_t rkey, uint64_t va, uint32_t len, Qp* q = nullptr) {
    ibv_sge s{reinterpret_cast<uint64_t>(src.data()), len, smr->key};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma = {va, rkey};
    EXPECT_EQ(p.a.engine->post_send(q != nullptr ? q : qa, &wr, nullptr), 0);
    std::vector<ibv_wc> wa;
    EXPECT_TRUE(p.run_until([&] {
      for (auto& w : drain(p.a)) wa.push_back(w);
      return !wa.empty();
    }));
    return wa.empty() ? IBV_WC_GENERAL_ERR : wa[0].status;
  }

  uint64_t addr(size_t off) const { return reinterpret_cast<uint64_t>(mem.data()) + off; }
  bool untouched(size_t from, size_t to) const {
    for (size_t i = from; i < to; ++i)
      if (mem[i] != 0) return false;
    return true;
  }
};

TEST_F(MwFixture, Type2WindowCarriesAWriteIntoItsRangeOnly) {
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  ASSERT_NE(w, nullptr);
  const uint32_t before = w->key;
  const uint32_t key = post_bind2(qb, w, addr(1024), 2048, kRemote);
  const ibv_wc wc = b_completion();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 900u);
  EXPECT_EQ(w->key, key);
  EXPECT_NE(key, before);
  EXPECT_EQ(key >> 8, before >> 8);  // a bind changes only the low 8 bits

  EXPECT_EQ(write(key, addr(1024), 2048), IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 2048, mem.begin() + 1024));
  EXPECT_TRUE(untouched(0, 1024));
  EXPECT_TRUE(untouched(3072, mem.size()));
}

TEST_F(MwFixture, WriteBeyondTheWindowIsARemoteAccessErrorEvenInsideTheMr) {
  uint32_t key;
  bound2(1024, 2048, kRemote, &key);
  EXPECT_EQ(write(key, addr(2048), 2048), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(untouched(0, mem.size()));
}

TEST_F(MwFixture, TheMrKeyGivesNoRemoteAccessTheMrDoesNotHave) {
  EXPECT_EQ(write(mr->key, addr(0), 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(untouched(0, mem.size()));
}

TEST_F(MwFixture, AReadOnlyWindowRefusesAWrite) {
  uint32_t key;
  bound2(0, 4096, IBV_ACCESS_REMOTE_READ, &key);
  EXPECT_EQ(write(key, addr(0), 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(untouched(0, mem.size()));
}

TEST_F(MwFixture, AType2WindowServesOnlyTheQpItIsBoundTo) {
  auto [qc, qd] = p.rc_pair();  // same PDs, other QPs
  uint32_t key;
  mem::Mw* w = bound2(0, 4096, kRemote, &key);
  EXPECT_EQ(w->qpn, qb->qpn);
  EXPECT_EQ(write(key, addr(0), 64, qc), IBV_WC_REM_ACCESS_ERR);  // reaches qd, not qb
  EXPECT_TRUE(untouched(0, mem.size()));
  (void)qd;
}

TEST_F(MwFixture, ZeroBasedWindowIsAddressedFromZero) {
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  const uint32_t key =
      post_bind2(qb, w, addr(4096), 1024, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED);
  ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  EXPECT_EQ(write(key, 512, 512), IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 512, mem.begin() + 4096 + 512));
  EXPECT_TRUE(untouched(0, 4096 + 512));
}

TEST_F(MwFixture, PeersSendWithInvalidateFreesTheWindowAndReportsTheKey) {
  uint32_t key;
  bound2(0, 4096, kRemote, &key);
  ASSERT_EQ(mr->windows, 1u);
  send_inv(key);
  const ibv_wc wc = b_completion();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 44u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(wc.invalidated_rkey, key);
  EXPECT_EQ(mr->windows, 0u);
  EXPECT_EQ(p.b.engine->counters()[Counter::windows_invalidated], 1u);

  EXPECT_EQ(write(key, addr(0), 64), IBV_WC_REM_ACCESS_ERR);  // the key is dead
  EXPECT_TRUE(untouched(0, mem.size()));
}

TEST_F(MwFixture, SendWithInvalidateOfAType1WindowIsRefusedAndTheWindowStays) {
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  mem::BindRequest b{w->key, ibv_inc_rkey(w->key), mr->key, addr(0), 4096, kRemote, true};
  ASSERT_EQ(p.b.engine->post_bind_mw(qb, 7, IBV_SEND_SIGNALED, b), 0);
  ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  send_inv(b.new_key);
  EXPECT_EQ(b_completion().status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(p.b.engine->counters()[Counter::inv_rkey_refused], 1u);
  EXPECT_EQ(w->mr, mr);  // still bound
  EXPECT_EQ(mr->windows, 1u);
}

TEST_F(MwFixture, LocalInvalidateFreesAType2WindowAndRefusesAnMr) {
  uint32_t key;
  mem::Mw* w = bound2(0, 4096, kRemote, &key);
  ibv_send_wr inv{};
  inv.wr_id = 31;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = key;
  ASSERT_EQ(p.b.engine->post_send(qb, &inv, nullptr), 0);
  ibv_wc wc = b_completion();
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(w->mr, nullptr);
  EXPECT_EQ(write(key, addr(0), 64), IBV_WC_REM_ACCESS_ERR);

  // An MR cannot be invalidated: the work request fails and the MR is as it was.
  auto [qc, qd] = p.rc_pair();
  inv.invalidate_rkey = mr->key;
  ASSERT_EQ(p.b.engine->post_send(qd, &inv, nullptr), 0);
  wc = b_completion();
  EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(p.b.engine->mr_table().find(mr->key), mr);
  (void)qc;
}

TEST_F(MwFixture, Type1RebindRetiresTheOldKey) {
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  const uint32_t k0 = w->key;
  mem::BindRequest b{k0, ibv_inc_rkey(k0), mr->key, addr(0), 4096, kRemote, true};
  ASSERT_EQ(p.b.engine->post_bind_mw(qb, 1, IBV_SEND_SIGNALED, b), 0);
  ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  const uint32_t k1 = b.new_key;
  EXPECT_EQ(write(k1, addr(0), 64), IBV_WC_SUCCESS);

  // A second bind (from the first binding's key) moves the window; the old key is refused.
  mem::BindRequest b2{k1, ibv_inc_rkey(k1), mr->key, addr(4096), 4096, kRemote, true};
  ASSERT_EQ(p.b.engine->post_bind_mw(qb, 2, IBV_SEND_SIGNALED, b2), 0);
  ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  EXPECT_EQ(mr->windows, 1u);
  EXPECT_EQ(write(k1, addr(0), 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(untouched(64, mem.size()));
}

TEST_F(MwFixture, Type1EmptyBindUnbinds) {
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  mem::BindRequest b{w->key, ibv_inc_rkey(w->key), mr->key, addr(0), 4096, kRemote, true};
  ASSERT_EQ(p.b.engine->post_bind_mw(qb, 1, IBV_SEND_SIGNALED, b), 0);
  ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  mem::BindRequest none{b.new_key, ibv_inc_rkey(b.new_key), mr->key, addr(0), 0, 0, true};
  ASSERT_EQ(p.b.engine->post_bind_mw(qb, 2, IBV_SEND_SIGNALED, none), 0);
  ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  EXPECT_EQ(w->mr, nullptr);
  EXPECT_EQ(mr->windows, 0u);
  EXPECT_EQ(write(none.new_key, addr(0), 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(untouched(0, mem.size()));
}

// Each refused bind completes with IBV_WC_MW_BIND_ERR (and takes the QP to error).
struct BadBind {
  const char* name;
  int mr_access;
  uint64_t off, len;
  int access;
  bool bind_twice;
};

class MwBadBind : public MwFixture, public ::testing::WithParamInterface<BadBind> {};

TEST_P(MwBadBind, CompletesWithBindError) {
  const BadBind& c = GetParam();
  std::vector<uint8_t> other(4096);
  mem::Mr* m = p.b.reg(other, c.mr_access);
  ASSERT_NE(m, nullptr);
  const uint64_t base = reinterpret_cast<uint64_t>(other.data());
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  if (c.bind_twice) {
    post_bind2(qb, w, base, 64, kRemote, m);
    ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  }
  post_bind2(qb, w, base + c.off, c.len, c.access, m);
  const ibv_wc wc = b_completion();
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(m->windows, c.bind_twice ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, MwBadBind,
    ::testing::Values(
        BadBind{"MrWithoutMwBind", IBV_ACCESS_LOCAL_WRITE, 0, 64, kRemote, false},
        BadBind{"WritableWindowOnReadOnlyMr", IBV_ACCESS_MW_BIND, 0, 64,
                IBV_ACCESS_REMOTE_WRITE, false},
        BadBind{"PastTheMrsEnd", kBindable, 4000, 200, kRemote, false},
        BadBind{"ZeroLengthType2", kBindable, 0, 0, kRemote, false},
        BadBind{"Type2AlreadyBound", kBindable, 0, 64, kRemote, true}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST_F(MwFixture, Type1WindowCannotBeBoundByAWorkRequest) {
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_1);
  ibv_mw v = view(w);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = &v;
  wr.bind_mw.rkey = ibv_inc_rkey(w->key);
  wr.bind_mw.bind_info = {&ibv_mr_b, addr(0), 64, IBV_ACCESS_REMOTE_READ};
  EXPECT_EQ(p.b.engine->post_send(qb, &wr, nullptr), EINVAL);
}

TEST_F(MwFixture, MrWithABoundWindowCannotBeDeregisteredUntilTheWindowGoes) {
  uint32_t key;
  mem::Mw* w = bound2(0, 4096, kRemote, &key);
  EXPECT_EQ(p.b.engine->dereg_mr(mr), EBUSY);
  EXPECT_EQ(p.b.engine->rereg_mr(mr, p.b.pd, mem.data(), 4096, addr(0), kBindable), EBUSY);
  EXPECT_EQ(p.b.engine->dealloc_pd(p.b.pd), EBUSY);
  ASSERT_EQ(p.b.engine->dealloc_mw(w), 0);
  EXPECT_EQ(write(key, addr(0), 64), IBV_WC_REM_ACCESS_ERR);  // deallocated: key dead
  EXPECT_EQ(p.b.engine->dereg_mr(mr), 0);
  EXPECT_TRUE(untouched(0, mem.size()));
}

TEST_F(MwFixture, DestroyingTheQpReleasesItsType2Windows) {
  auto [qc, qd] = p.rc_pair();
  mem::Mw* w = p.b.engine->alloc_mw(p.b.pd, IBV_MW_TYPE_2);
  post_bind2(qd, w, addr(0), 4096, kRemote);
  ASSERT_EQ(b_completion().status, IBV_WC_SUCCESS);
  ASSERT_EQ(mr->windows, 1u);
  ASSERT_EQ(p.b.engine->destroy_qp(qd), 0);
  EXPECT_EQ(w->mr, nullptr);
  EXPECT_EQ(mr->windows, 0u);
  EXPECT_EQ(p.b.engine->dereg_mr(mr), 0);
  (void)qc;
}

TEST(MwTable, WindowKeysAreUniqueDrawsAndKeepTheirUpperBitsAcrossBinds) {
  mem::MrTable t(64, 99);
  mem::Pd pd;
  std::vector<uint8_t> buf(4096);
  mem::Mr* mr = t.reg(&pd, buf.data(), buf.size(), reinterpret_cast<uint64_t>(buf.data()),
                      kBindable);
  ASSERT_NE(mr, nullptr);
  std::vector<uint32_t> seen{mr->key >> 8};
  std::vector<mem::Mw*> ws;
  for (int i = 0; i < 32; ++i) {
    mem::Mw* w = t.alloc_mw(&pd, i % 2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
    ASSERT_NE(w, nullptr);
    for (uint32_t s : seen) EXPECT_NE(w->key >> 8, s);
    seen.push_back(w->key >> 8);
    EXPECT_EQ(t.find_mw(w->key), w);
    EXPECT_EQ(t.find(w->key), nullptr);  // a window's key is no L_Key
    ws.push_back(w);
  }
  EXPECT_EQ(t.windows_in_use(), 32u);
  mem::Mw* w2 = ws[1];
  const uint32_t old = w2->key;
  mem::BindRequest b{old, ibv_inc_rkey(old), mr->key, reinterpret_cast<uint64_t>(buf.data()),
                     64, IBV_ACCESS_REMOTE_READ, false};
  ASSERT_TRUE(t.bind(b, &pd, 5));
  EXPECT_EQ(t.find_mw(old), nullptr);
  EXPECT_EQ(t.find_mw(b.new_key), w2);
  uint8_t* host = nullptr;
  const uint64_t va = reinterpret_cast<uint64_t>(buf.data());
  EXPECT_EQ(t.check_remote(b.new_key, &pd, 5, va, 64, IBV_ACCESS_REMOTE_READ, &host),
            mem::AccessError::kOk);
  EXPECT_EQ(host, buf.data());
  EXPECT_EQ(t.check_remote(b.new_key, &pd, 6, va, 64, IBV_ACCESS_REMOTE_READ, &host),
            mem::AccessError::kWrongQp);
  EXPECT_EQ(t.check_remote(old, &pd, 5, va, 64, IBV_ACCESS_REMOTE_READ, &host),
            mem::AccessError::kBadKey);
  // A bind whose new key names another window is refused.
  mem::BindRequest wrong{old, ws[3]->key, mr->key, va, 64, IBV_ACCESS_REMOTE_READ, false};
  EXPECT_FALSE(t.bind(wrong, &pd, 5));
  // Deallocated: the key is retired, never drawn again while the table remembers it.
  const uint32_t gone = ws[0]->key;
  ASSERT_EQ(t.dealloc_mw(ws[0]), 0);
  EXPECT_EQ(t.find_mw(gone), nullptr);
  for (int i = 0; i < 16; ++i) {
    mem::Mw* w = t.alloc_mw(&pd, IBV_MW_TYPE_1);
    ASSERT_NE(w, nullptr);
    EXPECT_NE(w->key >> 8, gone >> 8);
  }
  EXPECT_EQ(t.alloc_mw(&pd, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace uroce::test

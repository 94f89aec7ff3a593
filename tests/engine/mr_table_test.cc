// MrTable: key allocation, the L_Key/R_Key check and registration errors (ibv_reg_mr(3)).
// Every RDMA access goes through check(); these tests pin down each refusal reason and the
// exact bounds, including ranges that would overflow a naive va + len.
#include "memory/mr.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "engine/engine.h"
#include "memlink/memlink.h"

namespace uroce::mem {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr int kLocal = IBV_ACCESS_LOCAL_WRITE;
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

struct Table : ::testing::Test {
  MrTable t{64, 0xC0FFEE};
  Pd pd, other;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
};

TEST_F(Table, KeysAreNeverZeroUniqueAndFindTheirMr) {
  std::set<uint32_t> keys;
  std::vector<Mr*> mrs;
  for (int i = 0; i < 64; ++i) {
    Mr* mr = t.reg(&pd, buf.data(), buf.size(), 0x1000, kLocal);
    ASSERT_NE(mr, nullptr) << i;
    EXPECT_NE(mr->key, 0u);
    EXPECT_TRUE(keys.insert(mr->key).second) << "duplicate key " << mr->key;
    EXPECT_EQ(t.find(mr->key), mr);
    mrs.push_back(mr);
  }
  EXPECT_EQ(t.in_use(), 64u);
  EXPECT_EQ(pd.users, 64u);
  EXPECT_EQ(t.find(0), nullptr);
  uint8_t* host = nullptr;
  EXPECT_EQ(t.check(0, &pd, 0x1000, 1, 0, &host), AccessError::kBadKey);
}

TEST_F(Table, ReRegisteringASlotNeverReusesTheKeyItJustHad) {
  // The free list hands the same slot straight back: each new registration of it must get a
  // key that differs from the previous one, and the stale key must be refused at once.
  Mr* mr = t.reg(&pd, buf.data(), buf.size(), 0x1000, kAll);
  ASSERT_NE(mr, nullptr);
  uint32_t prev = mr->key;
  for (int i = 0; i < 20'000; ++i) {
    ASSERT_EQ(t.dereg(mr), 0);
    mr = t.reg(&pd, buf.data(), buf.size(), 0x1000, kAll);
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(mr->key >> MrTable::kRandomBits, prev >> MrTable::kRandomBits)
        << "expected the same slot";
    ASSERT_NE(mr->key, prev) << "iteration " << i << ": stale key re-issued";
    uint8_t* host = nullptr;
    ASSERT_EQ(t.check(prev, &pd, 0x1000, 8, 0, &host), AccessError::kBadKey);
    ASSERT_EQ(t.find(prev), nullptr);
    ASSERT_NE(mr->key & ((1u << MrTable::kRandomBits) - 1), 0u);
    prev = mr->key;
  }
}

TEST_F(Table, CheckRefusesBadKeyOtherPdAndMissingRights) {
  Mr* ro = t.reg(&pd, buf.data(), buf.size(), 0x1000, 0);  // local read only
  Mr* rw = t.reg(&pd, buf.data(), buf.size(), 0x1000, kLocal | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(ro, nullptr);
  ASSERT_NE(rw, nullptr);
  uint8_t* host = nullptr;
  // A key whose index is in range but whose random part is wrong, and one past the table.
  EXPECT_EQ(t.check(ro->key ^ 1, &pd, 0x1000, 1, 0, &host), AccessError::kBadKey);
  EXPECT_EQ(t.check((65u << MrTable::kRandomBits) | 1u, &pd, 0x1000, 1, 0, &host),
            AccessError::kBadKey);
  EXPECT_EQ(t.check(0xFFFFFFFF, &pd, 0x1000, 1, 0, &host), AccessError::kBadKey);
  EXPECT_EQ(t.check(ro->key, &other, 0x1000, 1, 0, &host), AccessError::kPdMismatch);
  EXPECT_EQ(t.check(ro->key, nullptr, 0x1000, 1, 0, &host), AccessError::kPdMismatch);
  // Local read is always allowed; everything else needs its bit.
  EXPECT_EQ(t.check(ro->key, &pd, 0x1000, 1, 0, &host), AccessError::kOk);
  EXPECT_EQ(t.check(ro->key, &pd, 0x1000, 1, kNeedLocalWrite, &host), AccessError::kNoPermission);
  EXPECT_EQ(t.check(ro->key, &pd, 0x1000, 1, kNeedRemoteRead, &host), AccessError::kNoPermission);
  EXPECT_EQ(t.check(rw->key, &pd, 0x1000, 1, kNeedRemoteRead, &host), AccessError::kOk);
  EXPECT_EQ(t.check(rw->key, &pd, 0x1000, 1, kNeedRemoteWrite, &host), AccessError::kNoPermission);
  EXPECT_EQ(t.check(rw->key, &pd, 0x1000, 8, kNeedRemoteAtomic, &host),
            AccessError::kNoPermission);
  // Two rights asked, one granted: refused.
  EXPECT_EQ(t.check(rw->key, &pd, 0x1000, 1, kNeedRemoteRead | kNeedRemoteWrite, &host),
            AccessError::kNoPermission);
}

TEST_F(Table, CheckBoundsAreExact) {
  // iova differs from the host address: the host pointer is host + (va - iova).
  const uint64_t iova = 0x7000'0000'0000ull;
  Mr* mr = t.reg(&pd, buf.data(), 4096, iova, kAll);
  ASSERT_NE(mr, nullptr);
  uint8_t* host = nullptr;
  auto chk = [&](uint64_t va, uint64_t len) { return t.check(mr->key, &pd, va, len, 0, &host); };
  EXPECT_EQ(chk(iova, 4096), AccessError::kOk);  // the whole region
  EXPECT_EQ(host, buf.data());
  EXPECT_EQ(chk(iova + 100, 28), AccessError::kOk);
  EXPECT_EQ(host, buf.data() + 100);
  EXPECT_EQ(chk(iova + 4095, 1), AccessError::kOk);  // the last byte
  EXPECT_EQ(host, buf.data() + 4095);
  EXPECT_EQ(chk(iova + 4096, 0), AccessError::kOk);  // zero bytes at the very end
  EXPECT_EQ(host, buf.data() + 4096);
  EXPECT_EQ(chk(iova - 1, 1), AccessError::kOutOfBounds);    // starts below
  EXPECT_EQ(chk(iova - 1, 4097), AccessError::kOutOfBounds);  // below, even if it ends inside
  EXPECT_EQ(chk(0, 1), AccessError::kOutOfBounds);
  EXPECT_EQ(chk(iova, 4097), AccessError::kOutOfBounds);     // one byte too long
  EXPECT_EQ(chk(iova + 4095, 2), AccessError::kOutOfBounds);
  EXPECT_EQ(chk(iova + 4096, 1), AccessError::kOutOfBounds);  // starts at the end
  EXPECT_EQ(chk(iova + 4097, 0), AccessError::kOutOfBounds);  // zero bytes past the end
  // Lengths that wrap va + len around 2^64 to a small number.
  EXPECT_EQ(chk(iova + 1, kMax), AccessError::kOutOfBounds);
  EXPECT_EQ(chk(iova + 1, kMax - iova), AccessError::kOutOfBounds);  // va + len == 2^64
  EXPECT_EQ(chk(iova + 16, kMax - iova - 10), AccessError::kOutOfBounds);  // wraps to 5
  EXPECT_EQ(chk(kMax, 2), AccessError::kOutOfBounds);
}

TEST_F(Table, RegionAtTheTopOfTheAddressSpace) {
  const uint64_t iova = kMax - 4095;  // the last 4096 addresses: [2^64 - 4096, 2^64)
  Mr* mr = t.reg(&pd, buf.data(), 4096, iova, kAll);
  ASSERT_NE(mr, nullptr);
  uint8_t* host = nullptr;
  EXPECT_EQ(t.check(mr->key, &pd, iova, 4096, 0, &host), AccessError::kOk);
  EXPECT_EQ(t.check(mr->key, &pd, kMax, 1, 0, &host), AccessError::kOk);
  EXPECT_EQ(host, buf.data() + 4095);
  EXPECT_EQ(t.check(mr->key, &pd, kMax, 2, 0, &host), AccessError::kOutOfBounds);
  EXPECT_EQ(t.check(mr->key, &pd, iova, 4097, 0, &host), AccessError::kOutOfBounds);
  EXPECT_EQ(t.check(mr->key, &pd, iova + 1, kMax, 0, &host), AccessError::kOutOfBounds);
}

TEST_F(Table, ZeroLengthRegion) {
  Mr* mr = t.reg(&pd, nullptr, 0, 0x5000, kLocal);
  ASSERT_NE(mr, nullptr);
  uint8_t* host = nullptr;
  EXPECT_EQ(t.check(mr->key, &pd, 0x5000, 0, 0, &host), AccessError::kOk);
  EXPECT_EQ(t.check(mr->key, &pd, 0x5000, 1, 0, &host), AccessError::kOutOfBounds);
  EXPECT_EQ(t.check(mr->key, &pd, 0x5001, 0, 0, &host), AccessError::kOutOfBounds);
}

TEST_F(Table, RemoteWriteOrAtomicWithoutLocalWriteIsEinval) {
  // ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
  // IBV_ACCESS_LOCAL_WRITE must be set too."
  for (int access : {int{IBV_ACCESS_REMOTE_WRITE}, int{IBV_ACCESS_REMOTE_ATOMIC},
                     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
                     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_WRITE}) {
    errno = 0;
    EXPECT_EQ(t.reg(&pd, buf.data(), buf.size(), 0, access), nullptr) << access;
    EXPECT_EQ(errno, EINVAL) << access;
  }
  EXPECT_EQ(t.in_use(), 0u);  // nothing was consumed by the failures
  EXPECT_EQ(pd.users, 0u);
  // Remote read alone needs nothing else; with LOCAL_WRITE the others are fine.
  EXPECT_NE(t.reg(&pd, buf.data(), buf.size(), 0, IBV_ACCESS_REMOTE_READ), nullptr);
  EXPECT_NE(t.reg(&pd, buf.data(), buf.size(), 0, kAll), nullptr);
  errno = 0;
  EXPECT_EQ(t.reg(nullptr, buf.data(), buf.size(), 0, kLocal), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(t.reg(&pd, nullptr, 16, 0, kLocal), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST(MrTable, FullTableIsEnomemUntilOneIsFreed) {
  MrTable t(4, 7);
  Pd pd;
  std::vector<uint8_t> buf(64);
  std::vector<Mr*> mrs;
  for (int i = 0; i < 4; ++i) mrs.push_back(t.reg(&pd, buf.data(), buf.size(), 0, kLocal));
  for (Mr* m : mrs) ASSERT_NE(m, nullptr);
  EXPECT_EQ(t.max_mrs(), 4u);
  errno = 0;
  EXPECT_EQ(t.reg(&pd, buf.data(), buf.size(), 0, kLocal), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(t.in_use(), 4u);
  EXPECT_EQ(pd.users, 4u);
  const uint32_t freed = mrs[2]->key;
  ASSERT_EQ(t.dereg(mrs[2]), 0);
  Mr* again = t.reg(&pd, buf.data(), buf.size(), 0, kLocal);
  ASSERT_NE(again, nullptr);
  EXPECT_NE(again->key, freed);
  EXPECT_EQ(t.in_use(), 4u);
}

TEST_F(Table, DeregInvalidatesTheKeyAtOnce) {
  Mr* a = t.reg(&pd, buf.data(), buf.size(), 0x1000, kAll);
  Mr* b = t.reg(&pd, buf.data(), buf.size(), 0x1000, kAll);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const uint32_t ka = a->key, kb = b->key;
  EXPECT_EQ(pd.users, 2u);
  ASSERT_EQ(t.dereg(a), 0);
  uint8_t* host = nullptr;
  EXPECT_EQ(t.check(ka, &pd, 0x1000, 1, 0, &host), AccessError::kBadKey);
  EXPECT_EQ(t.find(ka), nullptr);
  EXPECT_EQ(t.check(kb, &pd, 0x1000, 1, 0, &host), AccessError::kOk);  // the other stays
  EXPECT_EQ(pd.users, 1u);
  EXPECT_EQ(t.in_use(), 1u);
  EXPECT_EQ(t.dereg(a), EINVAL);  // twice
  EXPECT_EQ(t.dereg(nullptr), EINVAL);
  EXPECT_EQ(pd.users, 1u);
}

TEST_F(Table, InvalidateByKey) {
  Mr* a = t.reg(&pd, buf.data(), buf.size(), 0x1000, kAll);
  ASSERT_NE(a, nullptr);
  const uint32_t k = a->key;
  EXPECT_EQ(t.invalidate(k ^ 0x1), EINVAL);  // not a key we issued
  EXPECT_EQ(t.invalidate(0), EINVAL);
  EXPECT_EQ(t.in_use(), 1u);
  EXPECT_EQ(t.invalidate(k), 0);
  uint8_t* host = nullptr;
  EXPECT_EQ(t.check(k, &pd, 0x1000, 1, 0, &host), AccessError::kBadKey);
  EXPECT_EQ(t.invalidate(k), EINVAL);
  EXPECT_EQ(pd.users, 0u);
  EXPECT_EQ(t.in_use(), 0u);
}

// The engine's reg_mr on top: the access bits it refuses and the iova it uses.
TEST(EngineRegMr, AccessFlagsAndIova) {
  drivers::MemLink link;
  EngineConfig cfg;
  cfg.ipv4 = wire::Ipv4Addr{10, 0, 0, 1};
  Engine e(link.a(), cfg);
  Pd* pd = e.alloc_pd();
  ASSERT_NE(pd, nullptr);
  std::vector<uint8_t> buf(256);
  errno = 0;
  EXPECT_EQ(e.reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(e.reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_MW_BIND), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(e.reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_ON_DEMAND), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(e.reg_mr(nullptr, buf.data(), buf.size(), kLocal), nullptr);
  EXPECT_EQ(errno, EINVAL);
  Mr* mr = e.reg_mr(pd, buf.data(), buf.size(), kAll | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(mr, nullptr);
  // ibv_reg_mr: the MR's address as seen by keys is the buffer's own address.
  EXPECT_EQ(mr->iova, reinterpret_cast<uint64_t>(buf.data()));
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(pd->users, 1u);
  EXPECT_EQ(e.dereg_mr(mr), 0);
  EXPECT_EQ(pd->users, 0u);
}

}  // namespace
}  // namespace uroce::mem

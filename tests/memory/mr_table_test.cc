// MrTable: key allocation, the L_Key/R_Key check and registration errors (ibv_reg_mr(3)).
// Every RDMA access goes through check(); these tests pin down each refusal reason and the
// exact bounds, including ranges that would overflow a naive va + len.
#include "memory/mr.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

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

TEST_F(Table, NoKeyIsIssuedTwiceWhileAPeerCouldHoldIt) {
  // Register and deregister one MR 20,000 times (fewer than kRetiredKeys): every key is new,
  // and each stale key is refused at once.
  std::set<uint32_t> seen;
  for (int i = 0; i < 20'000; ++i) {
    Mr* mr = t.reg(&pd, buf.data(), buf.size(), 0x1000, kAll);
    ASSERT_NE(mr, nullptr);
    const uint32_t k = mr->key;
    ASSERT_NE(k, 0u);
    ASSERT_TRUE(seen.insert(k).second) << "iteration " << i << ": key " << k << " re-issued";
    ASSERT_EQ(t.dereg(mr), 0);
    uint8_t* host = nullptr;
    ASSERT_EQ(t.check(k, &pd, 0x1000, 8, 0, &host), AccessError::kBadKey);
    ASSERT_EQ(t.find(k), nullptr);
  }
}

TEST_F(Table, KeysCarryNoStructureAPeerCouldUse) {
  // Consecutive registrations: every one of the 32 bits is set in about half of the keys
  // (a counter or slot number in some bits would show as bits that never or always change),
  // and neighbouring keys do not differ by a constant.
  std::vector<uint32_t> keys;
  std::vector<Mr*> mrs;
  for (int i = 0; i < 64; ++i) {
    Mr* mr = t.reg(&pd, buf.data(), buf.size(), 0x1000, kLocal);
    ASSERT_NE(mr, nullptr);
    keys.push_back(mr->key);
    mrs.push_back(mr);
  }
  for (Mr* m : mrs) ASSERT_EQ(t.dereg(m), 0);
  for (int i = 0; i < 4096 - 64; ++i) {
    Mr* mr = t.reg(&pd, buf.data(), buf.size(), 0x1000, kLocal);
    keys.push_back(mr->key);
    ASSERT_EQ(t.dereg(mr), 0);
  }
  for (int bit = 0; bit < 32; ++bit) {
    size_t ones = 0;
    for (uint32_t k : keys) ones += (k >> bit) & 1;
    EXPECT_GT(ones, keys.size() * 45 / 100) << "bit " << bit;
    EXPECT_LT(ones, keys.size() * 55 / 100) << "bit " << bit;
  }
  std::set<uint32_t> deltas;
  for (size_t i = 1; i < 64; ++i) deltas.insert(keys[i] - keys[i - 1]);
  EXPECT_GT(deltas.size(), 60u);
}

TEST_F(Table, EveryLiveKeyIsFoundWhateverTheOrderOfDeregistration) {
  // The index deletes by moving entries back; after each deregistration every remaining key
  // must still find its own MR, and every removed one nothing.
  MrTable big(2000, 99);
  std::vector<Mr*> live;
  for (int i = 0; i < 2000; ++i) {
    live.push_back(big.reg(&pd, buf.data(), buf.size(), 0x1000, kLocal));
    ASSERT_NE(live.back(), nullptr);
  }
  uint64_t lcg = 12345;  // a fixed shuffle
  std::vector<uint32_t> gone;
  while (!live.empty()) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    const size_t i = (lcg >> 33) % live.size();
    gone.push_back(live[i]->key);
    ASSERT_EQ(big.dereg(live[i]), 0);
    live.erase(live.begin() + static_cast<long>(i));
    if (live.size() % 97 == 0) {
      for (Mr* m : live) ASSERT_EQ(big.find(m->key), m);
      for (uint32_t k : gone) ASSERT_EQ(big.find(k), nullptr);
    }
  }
  EXPECT_EQ(big.in_use(), 0u);
}

TEST(MrTableKeys, FromTheOsRandomSourceWhenNotSeeded) {
  // Two tables without a seed draw different keys (seeded ones would repeat each other).
  MrTable x(4, 0), y(4, 0), s1(4, 5), s2(4, 5);
  Pd pd;
  std::vector<uint8_t> buf(64);
  EXPECT_NE(x.reg(&pd, buf.data(), 64, 0, kLocal)->key, y.reg(&pd, buf.data(), 64, 0, kLocal)->key);
  EXPECT_EQ(s1.reg(&pd, buf.data(), 64, 0, kLocal)->key, s2.reg(&pd, buf.data(), 64, 0, kLocal)->key);
}

TEST_F(Table, UnmappedOrWrappingRangesAreRefusedAsTheKernelWould) {
  // ibv_reg_mr(3) through the kernel: a range with an unmapped page is EFAULT (pinning
  // fails); one that wraps the address space EINVAL. A registered hole would let a peer's
  // WRITE kill the process.
  const long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<uint8_t*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(munmap(p + page, page), 0);  // a hole in the middle
  errno = 0;
  EXPECT_EQ(t.reg(&pd, p, 3 * page, 0, kAll), nullptr);
  EXPECT_EQ(errno, EFAULT);
  errno = 0;
  EXPECT_EQ(t.reg(&pd, p + page - 1, 2, 0, kAll), nullptr);  // one byte into the hole
  EXPECT_EQ(errno, EFAULT);
  EXPECT_NE(t.reg(&pd, p, page, 0, kAll), nullptr);  // the pages around it are fine
  EXPECT_NE(t.reg(&pd, p + 2 * page + 7, page - 7, 0, kAll), nullptr);
  errno = 0;
  EXPECT_EQ(t.reg(&pd, reinterpret_cast<void*>(kMax - 15), 32, 0, kLocal), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // ibv_rereg_mr onto the hole: refused, the MR unchanged.
  Mr* mr = t.reg(&pd, p, page, 0, kAll);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(t.modify(mr, &pd, p + page, page, 0, kAll), EFAULT);
  EXPECT_EQ(mr->host, p);
  EXPECT_EQ(t.in_use(), 3u);
  munmap(p, page);
  munmap(p + 2 * page, page);
}

TEST_F(Table, PagesWithoutTheMrsAccessAreRefused) {
  // The kernel pins a writable MR for writing: a read-only page in it is EFAULT, and so is a
  // PROT_NONE page in any MR. Read-only memory may still be registered for reading.
  const long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<uint8_t*>(
      mmap(nullptr, 2 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(mprotect(p + page, page, PROT_NONE), 0);
  for (int access : {kLocal, kAll, kLocal | IBV_ACCESS_REMOTE_READ}) {
    errno = 0;
    EXPECT_EQ(t.reg(&pd, p, page, 0, access), nullptr) << access;
    EXPECT_EQ(errno, EFAULT) << access;
  }
  EXPECT_NE(t.reg(&pd, p, page, 0, IBV_ACCESS_REMOTE_READ), nullptr);  // read-only, for reading
  EXPECT_NE(t.reg(&pd, p, page, 0, 0), nullptr);
  errno = 0;
  EXPECT_EQ(t.reg(&pd, p + page - 8, 16, 0, IBV_ACCESS_REMOTE_READ), nullptr);  // into PROT_NONE
  EXPECT_EQ(errno, EFAULT);
  munmap(p, 2 * page);
}

TEST_F(Table, CheckRefusesBadKeyOtherPdAndMissingRights) {
  Mr* ro = t.reg(&pd, buf.data(), buf.size(), 0x1000, 0);  // local read only
  Mr* rw = t.reg(&pd, buf.data(), buf.size(), 0x1000, kLocal | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(ro, nullptr);
  ASSERT_NE(rw, nullptr);
  uint8_t* host = nullptr;
  // Keys next to a real one, and the largest.
  EXPECT_EQ(t.check(ro->key ^ 1, &pd, 0x1000, 1, 0, &host), AccessError::kBadKey);
  EXPECT_EQ(t.check(ro->key + 1, &pd, 0x1000, 1, 0, &host), AccessError::kBadKey);
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

/// An engine on one end of an in-memory link, with a PD: its registration verbs.
struct EngineMr : ::testing::Test {
  static EngineConfig config() {
    EngineConfig cfg;
    cfg.ipv4 = wire::Ipv4Addr{10, 0, 0, 1};
    return cfg;
  }
  drivers::MemLink link;
  Engine e{link.a(), config()};
  Pd* pd = e.alloc_pd();
};

// The engine's reg_mr on top: the access bits it refuses and the iova it uses.
TEST_F(EngineMr, AccessFlagsAndIova) {
  ASSERT_NE(pd, nullptr);
  std::vector<uint8_t> buf(256);
  errno = 0;
  EXPECT_EQ(e.reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(e.reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_ZERO_BASED), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(e.reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_ZERO_BASED | kLocal), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);  // only device memory's MRs are zero-based
  errno = 0;
  EXPECT_EQ(e.reg_mr(pd, buf.data(), buf.size(), 1 << 30), nullptr);
  EXPECT_EQ(errno, EINVAL);  // no such access bit
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

// On-demand paging: registration pins and checks nothing, every access faults its pages in
// and is refused where a page cannot have the access it needs.
struct Odp : Table {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uint8_t* region = nullptr;  // two pages, PROT_NONE until a test opens them
  void SetUp() override {
    void* p = mmap(nullptr, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    region = static_cast<uint8_t*>(p);
  }
  void TearDown() override { munmap(region, 2 * page); }
  uint64_t va(size_t off) const { return reinterpret_cast<uint64_t>(region) + off; }
};

TEST_F(Odp, RegistrationOfPagesNotYetAccessibleSucceedsAndEachAccessChecksThem) {
  errno = 0;
  EXPECT_EQ(t.reg(&pd, region, 2 * page, va(0), kAll), nullptr);  // pinned: refused now
  EXPECT_EQ(errno, EFAULT);
  Mr* mr = t.reg(&pd, region, 2 * page, va(0), kAll | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(mr, nullptr);
  uint8_t* host = nullptr;
  EXPECT_EQ(t.check(mr->key, &pd, va(0), 8, 0, &host), AccessError::kOutOfBounds);
  EXPECT_EQ(host, nullptr);
  ASSERT_EQ(mprotect(region, page, PROT_READ), 0);
  EXPECT_EQ(t.check(mr->key, &pd, va(0), 8, 0, &host), AccessError::kOk);
  EXPECT_EQ(host, region);
  host = nullptr;
  // A read-only page cannot take a WRITE, nor a READ that runs into the closed page.
  EXPECT_EQ(t.check(mr->key, &pd, va(0), 8, kNeedRemoteWrite, &host),
            AccessError::kOutOfBounds);
  EXPECT_EQ(t.check(mr->key, &pd, va(page - 4), 8, kNeedRemoteRead, &host),
            AccessError::kOutOfBounds);
  EXPECT_EQ(host, nullptr);
  ASSERT_EQ(mprotect(region, 2 * page, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(t.check_remote(mr->key, &pd, 1, va(page - 4), 8, kNeedRemoteWrite, &host),
            AccessError::kOk);
  EXPECT_EQ(host, region + page - 4);
  // The MR's bounds hold as for any other.
  EXPECT_EQ(t.check(mr->key, &pd, va(2 * page - 4), 8, 0, &host), AccessError::kOutOfBounds);
}

TEST_F(Odp, TheImplicitMrIsTheWholeAddressSpaceAndStillFaultChecked) {
  errno = 0;
  EXPECT_EQ(t.reg(&pd, nullptr, SIZE_MAX, 0, kAll), nullptr);  // only on demand
  EXPECT_EQ(errno, EINVAL);
  Mr* mr = t.reg(&pd, nullptr, SIZE_MAX, 0, kAll | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(mr, nullptr);
  uint8_t* host = nullptr;
  const uint64_t here = reinterpret_cast<uint64_t>(buf.data());
  EXPECT_EQ(t.check(mr->key, &pd, here + 100, 64, kNeedRemoteWrite, &host), AccessError::kOk);
  EXPECT_EQ(host, buf.data() + 100);
  // A peer holding the implicit R_Key meets an unmapped page as a refusal, not a crash.
  EXPECT_EQ(t.check_remote(mr->key, &pd, 1, va(0), 8, kNeedRemoteRead, &host),
            AccessError::kOutOfBounds);
  EXPECT_EQ(t.check(mr->key, &pd, kMax - 3, 8, 0, &host), AccessError::kOutOfBounds);
  EXPECT_EQ(t.check(mr->key, &other, here, 8, 0, &host), AccessError::kPdMismatch);
}

TEST_F(EngineMr, PrefetchNeedsAnOnDemandMrOfThePdWithTheRightAccess) {
  Pd* pd2 = e.alloc_pd();
  ASSERT_NE(pd2, nullptr);
  std::vector<uint8_t> buf(8192);
  Mr* pinned = e.reg_mr(pd, buf.data(), buf.size(), kLocal);
  Mr* odp = e.reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_ON_DEMAND);  // read-only
  Mr* odp_w = e.reg_mr(pd, buf.data(), buf.size(), kLocal | IBV_ACCESS_ON_DEMAND);
  ASSERT_TRUE(pinned && odp && odp_w);
  const uint64_t at = reinterpret_cast<uint64_t>(buf.data());
  auto sge = [&](const Mr* mr, uint64_t off, uint32_t len) {
    return ibv_sge{at + off, len, mr->key};
  };
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, sge(odp, 0, 8192)), 0);
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, sge(odp_w, 100, 50)), 0);
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, sge(odp, 4096, 4096)), 0);
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, sge(pinned, 0, 8)), EINVAL);
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, sge(odp, 0, 8)), EPERM);
  EXPECT_EQ(e.advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, sge(odp, 0, 8)), EPERM);
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, sge(odp, 8190, 8)), EFAULT);
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, sge(odp, 8190, 8)), EFAULT);
  ibv_sge stale = sge(odp, 0, 8);
  ASSERT_EQ(e.dereg_mr(odp), 0);
  EXPECT_EQ(e.advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, stale), EFAULT);
}

// Device memory's MRs (ibv_reg_dm_mr): zero-based, and only so.
TEST_F(EngineMr, DeviceMemoryMrsAreZeroBasedOnly) {
  std::vector<uint8_t> dm(1024);
  errno = 0;
  EXPECT_EQ(e.reg_dm_mr(pd, dm.data(), 512, kLocal), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(e.reg_dm_mr(pd, dm.data(), 512, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND),
            nullptr);
  EXPECT_EQ(errno, EINVAL);
  Mr* mr = e.reg_dm_mr(pd, dm.data() + 256, 512, IBV_ACCESS_ZERO_BASED | kAll);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->iova, 0u);
  EXPECT_EQ(mr->host, dm.data() + 256);
}

}  // namespace
}  // namespace uroce::mem

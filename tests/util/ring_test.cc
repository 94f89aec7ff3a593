// Ring: the fixed-capacity FIFO under every queue in the engine (send and receive queues,
// CQs, SRQs, the active-QP list, async events). Capacity is exact even though the storage is
// rounded up to a power of two, and absolute indices stay valid across wrap-around.
#include "util/ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <random>

namespace uroce {
namespace {

TEST(Ring, CapacityIsExactNotRoundedUp) {
  Ring<int> r(3);  // storage for 4
  EXPECT_EQ(r.capacity(), 3u);
  EXPECT_TRUE(r.empty());
  EXPECT_TRUE(r.push(1));
  EXPECT_TRUE(r.push(2));
  EXPECT_TRUE(r.push(3));
  EXPECT_TRUE(r.full());
  EXPECT_FALSE(r.push(4));  // nothing stored
  EXPECT_EQ(r.size(), 3u);
  EXPECT_EQ(r.front(), 1);
  EXPECT_EQ(r.back(), 3);
}

TEST(Ring, ZeroCapacityIsAlwaysFull) {
  Ring<int> r(0);
  EXPECT_EQ(r.capacity(), 0u);
  EXPECT_TRUE(r.empty());
  EXPECT_TRUE(r.full());
  EXPECT_FALSE(r.push(1));
  EXPECT_EQ(r.size(), 0u);
}

TEST(Ring, FifoAcrossManyWrapArounds) {
  Ring<uint64_t> r(5);
  std::deque<uint64_t> model;
  std::mt19937 rng(99);
  uint64_t next = 0;
  for (int step = 0; step < 100'000; ++step) {
    if (rng() % 2 == 0) {
      const bool ok = r.push(next);
      ASSERT_EQ(ok, model.size() < 5);
      if (ok) model.push_back(next);
      ++next;
    } else if (!model.empty()) {
      ASSERT_EQ(r.front(), model.front());
      r.pop();
      model.pop_front();
    }
    ASSERT_EQ(r.size(), model.size());
    for (size_t i = 0; i < model.size(); ++i) ASSERT_EQ(r.at(i), model[i]);
  }
}

TEST(Ring, AbsoluteIndicesSurvivePopsAndWrap) {
  Ring<int> r(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.push(i * 10));
  const uint64_t third = r.head_index() + 2;
  EXPECT_EQ(r.at_abs(third), 20);
  r.pop();
  r.pop();
  ASSERT_TRUE(r.push(40));
  ASSERT_TRUE(r.push(50));  // wrapped into the slots of the popped ones
  EXPECT_EQ(r.at_abs(third), 20);
  EXPECT_EQ(r.head_index(), 2u);
  EXPECT_EQ(r.tail_index(), 6u);
  EXPECT_EQ(r.at_abs(5), 50);
  EXPECT_EQ(r.back(), 50);
}

TEST(Ring, InPlacePushAndClear) {
  struct Big {
    int id = 0;
    char payload[300] = {};
  };
  Ring<Big> r(2);
  Big& a = r.next_slot();
  a.id = 7;
  r.commit();
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.front().id, 7);
  r.clear();
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.head_index(), 0u);
  EXPECT_EQ(r.tail_index(), 0u);
  EXPECT_TRUE(r.push(Big{}));
  EXPECT_TRUE(r.push(Big{}));
  EXPECT_FALSE(r.push(Big{}));
}

TEST(Ring, ResizeKeepsTheElementsInOrder) {
  Ring<int> r(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(r.push(i));
  r.pop();  // the kept elements start past the first slot
  ASSERT_TRUE(r.push(4));
  r.resize(6);
  EXPECT_EQ(r.capacity(), 6u);
  ASSERT_EQ(r.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.at(i), static_cast<int>(i) + 1);
  EXPECT_TRUE(r.push(5));
  EXPECT_TRUE(r.push(6));
  EXPECT_FALSE(r.push(7));  // full at the new capacity
  r.resize(6);              // to the same size: nothing lost
  EXPECT_EQ(r.size(), 6u);
  EXPECT_EQ(r.back(), 6);
}

}  // namespace
}  // namespace uroce

#include "wire/psn.h"

#include <gtest/gtest.h>

namespace uroce::wire {
namespace {

TEST(Psn, WrapsAt24Bits) {
  EXPECT_EQ((Psn(0xFFFFFF) + 1).value(), 0u);
  EXPECT_EQ((Psn(0) - 1).value(), 0xFFFFFFu);
  EXPECT_EQ(Psn(0x1000005).value(), 5u);
}

TEST(Psn, CompareAcrossWrap) {
  EXPECT_LT(Psn(0xFFFFFF), Psn(0));
  EXPECT_GT(Psn(2), Psn(0xFFFFFE));
  EXPECT_EQ(Psn(2) - Psn(0xFFFFFE), 4);
  EXPECT_EQ(Psn(0xFFFFFE) - Psn(2), -4);
}

TEST(Psn, HalfWindowBoundary) {
  // Exactly 2^23 apart: the signed distance is -2^23 (treated as "behind").
  EXPECT_EQ(Psn(0x800000) - Psn(0), -0x800000);
  EXPECT_EQ(Psn(0x7FFFFF) - Psn(0), 0x7FFFFF);
  EXPECT_GT(Psn(0x7FFFFF), Psn(0));
}

TEST(Psn, ConstructionMasksTo24Bits) {
  EXPECT_EQ(Psn(0xFFFFFFFF).value(), 0xFFFFFFu);
  EXPECT_EQ(Psn(0xAB000001).value(), 1u);
  EXPECT_EQ(Psn().value(), 0u);
  EXPECT_EQ(Psn(0x1000000), Psn(0));
}

TEST(Psn, ArithmeticWithNegativeSteps) {
  EXPECT_EQ((Psn(1) + -2).value(), 0xFFFFFFu);
  EXPECT_EQ((Psn(0xFFFFFF) - -1).value(), 0u);
  EXPECT_EQ((Psn(10) - 3).value(), 7u);
  Psn p(0xFFFFFE);
  ++p;
  EXPECT_EQ(p.value(), 0xFFFFFFu);
  ++p;
  EXPECT_EQ(p.value(), 0u);
  p += 0x7FFFFF;
  EXPECT_EQ(p.value(), 0x7FFFFFu);
  p += -0x800000;
  EXPECT_EQ(p.value(), 0xFFFFFFu);
}

TEST(Psn, DistanceIsInverseOfAddition) {
  // For every step in the window, (a + n) - a == n, across the wrap.
  for (uint32_t base : {0u, 1u, 0x7FFFFFu, 0x800000u, 0xFFFFF0u, 0xFFFFFFu}) {
    for (int32_t n : {0, 1, -1, 100, -100, 0x7FFFFF, -0x800000}) {
      const Psn a(base);
      EXPECT_EQ((a + n) - a, n) << base << " + " << n;
      EXPECT_EQ(a - (a + n), n == -0x800000 ? -0x800000 : -n) << base << " + " << n;
    }
  }
}

TEST(Psn, OrderingAcrossTheWrap) {
  const Psn a(0xFFFFF0);
  const Psn b(0x00000F);
  EXPECT_TRUE(a < b);
  EXPECT_TRUE(b > a);
  EXPECT_TRUE(a <= a);
  EXPECT_TRUE(a >= a);
  EXPECT_FALSE(a < a);
  EXPECT_EQ(a <=> a, std::strong_ordering::equal);
  EXPECT_EQ(a <=> b, std::strong_ordering::less);
  EXPECT_EQ(b <=> a, std::strong_ordering::greater);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace uroce::wire

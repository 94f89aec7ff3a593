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

}  // namespace
}  // namespace uroce::wire

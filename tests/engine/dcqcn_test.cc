// DCQCN's rate machine (engine/dcqcn.h) against steps worked out by hand from the paper's
// equations (Zhu et al., SIGCOMM 2015, section 4) with NVIDIA's parameter names.
#include "engine/dcqcn.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

DcqcnConfig ten_gig() {
  DcqcnConfig c;
  c.line_rate_mbps = 10000;
  return c;  // g = 5/1024, F = 1, AI 5 Mb/s, HAI 50 Mb/s, alpha starts at 1
}

TEST(Dcqcn, StartsAtLineRateUnlimited) {
  const DcqcnConfig c = ten_gig();
  Dcqcn d(c);
  EXPECT_FALSE(d.limited());
  EXPECT_EQ(d.rate_mbps(), 10000);
  EXPECT_FALSE(d.on_bytes(1 << 20));  // no byte counting at line rate
  EXPECT_EQ(d.rate_mbps(), 10000);
}

TEST(Dcqcn, HandWorkedSequence) {
  const DcqcnConfig c = ten_gig();
  Dcqcn d(c);
  // 1. First CNP: Rt = Rc = 10000, alpha = 1 (initial_alpha_value 1023/1023): Rc halves;
  //    alpha = (1 - g) * 1 + g = 1.
  ASSERT_TRUE(d.on_cnp(1'000'000));
  EXPECT_TRUE(d.limited());
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 5000);
  EXPECT_DOUBLE_EQ(d.target_mbps(), 10000);
  EXPECT_DOUBLE_EQ(d.alpha(), 1.0);
  // A CNP 2 us later is inside rate_reduce_monitor_period (4 us): no cut.
  EXPECT_FALSE(d.on_cnp(1'002'000));
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 5000);
  // 2. Alpha timer: that uncut CNP counts, alpha = (1 - g) + g = 1; the next one without a
  //    CNP decays it: alpha = 1019/1024.
  d.on_alpha_timer();
  EXPECT_DOUBLE_EQ(d.alpha(), 1.0);
  d.on_alpha_timer();
  EXPECT_DOUBLE_EQ(d.alpha(), 0.9951171875);
  // 3. Increase timer, T = 1 <= F: fast recovery, Rc = (10000 + 5000) / 2.
  EXPECT_EQ(d.stage(), Dcqcn::Stage::kFastRecovery);
  d.on_rate_timer();
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 7500);
  EXPECT_DOUBLE_EQ(d.target_mbps(), 10000);
  // 4. CNP after a timer increase: Rt = Rc = 7500; Rc = 7500 * (1 - alpha / 2);
  //    alpha = (1 - g) alpha + g.
  ASSERT_TRUE(d.on_cnp(1'100'000));
  EXPECT_DOUBLE_EQ(d.target_mbps(), 7500);
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 3768.310546875);
  EXPECT_NEAR(d.alpha(), 0.9951410293579102, 1e-12);
  EXPECT_EQ(d.time_stage(), 0u);
  EXPECT_EQ(d.byte_stage(), 0u);
  // 5. Timer, T = 1: fast recovery.
  d.on_rate_timer();
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 5634.1552734375);
  // 6. rpg_byte_reset bytes sent (in two pieces), BC = 1: fast recovery.
  EXPECT_FALSE(d.on_bytes(30000));
  EXPECT_TRUE(d.on_bytes(2767));
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 6567.07763671875);
  // 7. Timer, T = 2 > F, BC = 1: additive increase, Rt += 5.
  EXPECT_EQ(d.stage(), Dcqcn::Stage::kFastRecovery);  // before: max(1, 1) <= 1
  d.on_rate_timer();
  EXPECT_DOUBLE_EQ(d.target_mbps(), 7505);
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 7036.038818359375);
  // 8. Bytes, BC = 2, T = 2: both past F, hyper increase Rt += (2 - 1) * 50.
  EXPECT_EQ(d.stage(), Dcqcn::Stage::kAdditive);
  EXPECT_TRUE(d.on_bytes(32767));
  EXPECT_DOUBLE_EQ(d.target_mbps(), 7555);
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 7295.5194091796875);
  EXPECT_EQ(d.stage(), Dcqcn::Stage::kHyper);
  EXPECT_EQ(d.cuts(), 2u);
}

TEST(Dcqcn, ClimbsBackToLineRateAndLetsGo) {
  const DcqcnConfig c = ten_gig();
  Dcqcn d(c);
  ASSERT_TRUE(d.on_cnp(0));
  int events = 0;
  while (d.limited() && events < 1000) {
    d.on_rate_timer();
    ++events;
  }
  // Rt stays at line rate (the first cut), so fast recovery halves the distance each time:
  // 5000 -> 2500 -> ... below the 5 Mb/s AI step after 10 events.
  EXPECT_FALSE(d.limited());
  EXPECT_EQ(events, 10);
  EXPECT_EQ(d.rate_mbps(), 10000);
  // Unlimited again: the next CNP starts over from alpha = 1.
  ASSERT_TRUE(d.on_cnp(1'000'000'000));
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 5000);
}

TEST(Dcqcn, CutIsBoundedByMinDecreaseFactorAndMinRate) {
  DcqcnConfig c = ten_gig();
  c.rpg_min_dec_fac = 80;  // a cut keeps at least 80 %
  Dcqcn d(c);
  ASSERT_TRUE(d.on_cnp(0));
  EXPECT_DOUBLE_EQ(d.rate_mbps(), 8000);

  DcqcnConfig m = ten_gig();
  m.rpg_min_rate_mbps = 2000;
  Dcqcn e(m);
  uint64_t t = 0;
  for (int i = 0; i < 20; ++i, t += 10'000) e.on_cnp(t);
  EXPECT_DOUBLE_EQ(e.rate_mbps(), 2000);
}

TEST(Dcqcn, TargetFollowsEveryCutUnlessUnclamped) {
  // clamp_tgt_rate (the default, the paper's rule): every cut sets Rt = Rc.
  const DcqcnConfig c = ten_gig();
  Dcqcn d(c);
  ASSERT_TRUE(d.on_cnp(0));
  ASSERT_TRUE(d.on_cnp(10'000));
  EXPECT_DOUBLE_EQ(d.target_mbps(), 5000);
  // Unclamped, a cut with no timer increase since the last one keeps the target.
  DcqcnConfig u = ten_gig();
  u.clamp_tgt_rate = false;
  Dcqcn e(u);
  ASSERT_TRUE(e.on_cnp(0));
  ASSERT_TRUE(e.on_cnp(10'000));
  EXPECT_DOUBLE_EQ(e.target_mbps(), 10000);
  e.on_rate_timer();  // 2500 -> 6250
  ASSERT_TRUE(e.on_cnp(20'000));
  EXPECT_DOUBLE_EQ(e.target_mbps(), 6250);
}

TEST(Dcqcn, WireTimeAtTheCurrentRate) {
  const DcqcnConfig c = ten_gig();
  Dcqcn d(c);
  EXPECT_EQ(d.wire_time_ns(1250), 1000u);  // 10 Gb/s: 1250 bytes in 1 us
  ASSERT_TRUE(d.on_cnp(0));
  EXPECT_EQ(d.wire_time_ns(1250), 2000u);
}

}  // namespace
}  // namespace uroce

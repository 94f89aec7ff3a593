// TimerWheel: the contract in timer_wheel.h, checked against a model. A timer fires exactly
// once, at the first advance() whose `now` reaches its expiry (never earlier), however far
// out it was armed and however large the step; callbacks may re-arm themselves and cancel or
// re-arm other timers that are due in the same advance.
#include "engine/timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace uroce {
namespace {

constexpr uint64_t kTick = 1024;
constexpr size_t kSlots = 64;
constexpr uint64_t kLap = kTick * kSlots;  // 65536 ns

/// A timer owner that records when (at which advance `now`) each of its firings happened.
struct Owner {
  Timer t;
  int id = 0;
  std::vector<uint64_t> fired_at;
};

/// Advances `w` to `now` and records every firing in the owner and in `order`.
size_t advance_record(TimerWheel& w, uint64_t now, std::vector<Owner*>* order = nullptr) {
  return w.advance(now, [&](Timer& t) {
    auto* o = static_cast<Owner*>(t.owner);
    o->fired_at.push_back(now);
    if (order != nullptr) order->push_back(o);
  });
}

Owner* owner_init(Owner& o, int id) {
  o.id = id;
  o.t.owner = &o;
  return &o;
}

TEST(TimerWheel, FiresAtExpiryAndNeverBefore) {
  TimerWheel w(0, kTick, kSlots);
  Owner o;
  owner_init(o, 1);
  w.arm(o.t, 5000);
  EXPECT_TRUE(o.t.armed);
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_EQ(advance_record(w, 4999), 0u);  // 1 ns early: nothing
  EXPECT_TRUE(o.fired_at.empty());
  EXPECT_EQ(advance_record(w, 5000), 1u);  // exactly at expiry
  ASSERT_EQ(o.fired_at.size(), 1u);
  EXPECT_EQ(o.fired_at[0], 5000u);
  EXPECT_FALSE(o.t.armed);
  EXPECT_EQ(w.armed_count(), 0u);
  EXPECT_EQ(advance_record(w, 1'000'000), 0u);  // fired once, never again
  EXPECT_EQ(o.fired_at.size(), 1u);
}

TEST(TimerWheel, NotEarlyInsideItsTick) {
  // Expiry 1500 lies in tick 1 (1024..2047): advancing into that tick but before 1500 must
  // not fire it.
  TimerWheel w(0, kTick, kSlots);
  Owner o;
  owner_init(o, 1);
  w.arm(o.t, 1500);
  EXPECT_EQ(advance_record(w, 1024), 0u);
  EXPECT_EQ(advance_record(w, 1499), 0u);
  EXPECT_EQ(advance_record(w, 1500), 1u);
  EXPECT_EQ(o.fired_at, std::vector<uint64_t>{1500});
}

TEST(TimerWheel, NonZeroStartTime) {
  TimerWheel w(7'000'000'000ull, kTick, kSlots);
  Owner o;
  owner_init(o, 1);
  w.arm(o.t, 7'000'000'500ull);
  EXPECT_EQ(advance_record(w, 7'000'000'499ull), 0u);
  EXPECT_EQ(advance_record(w, 7'000'000'500ull), 1u);
}

TEST(TimerWheel, ArmedInTheCurrentTickFiresAtTheFirstAdvanceThatReachesIt) {
  // The wheel is at tick 1 (now 1024). A timer armed for 1100 (same tick) is due at the
  // first advance with now >= 1100, even though that advance stays in tick 1.
  TimerWheel w(0, kTick, kSlots);
  EXPECT_EQ(w.advance(1024, [](Timer&) {}), 0u);
  Owner o;
  owner_init(o, 1);
  w.arm(o.t, 1100);
  EXPECT_EQ(advance_record(w, 1099), 0u);
  EXPECT_EQ(advance_record(w, 1100), 1u);
  EXPECT_EQ(o.fired_at, std::vector<uint64_t>{1100});
}

TEST(TimerWheel, ArmedInThePastFiresAtTheNextAdvance) {
  TimerWheel w(0, kTick, kSlots);
  EXPECT_EQ(w.advance(10 * kTick + 5, [](Timer&) {}), 0u);
  Owner o;
  owner_init(o, 1);
  w.arm(o.t, 3);  // long past
  EXPECT_EQ(w.next_expiry(), 3u);
  EXPECT_EQ(advance_record(w, 10 * kTick + 5), 1u);  // same now as before: due, fires
  EXPECT_EQ(o.fired_at.size(), 1u);
}

TEST(TimerWheel, CancelPreventsFiring) {
  TimerWheel w(0, kTick, kSlots);
  Owner a, b;
  owner_init(a, 1);
  owner_init(b, 2);
  w.arm(a.t, 2000);
  w.arm(b.t, 2000);
  EXPECT_EQ(w.armed_count(), 2u);
  w.cancel(a.t);
  EXPECT_FALSE(a.t.armed);
  EXPECT_EQ(w.armed_count(), 1u);
  w.cancel(a.t);  // cancelling a disarmed timer changes nothing
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_EQ(advance_record(w, 5000), 1u);
  EXPECT_TRUE(a.fired_at.empty());
  EXPECT_EQ(b.fired_at.size(), 1u);
  Owner never;
  owner_init(never, 3);
  w.cancel(never.t);  // never armed
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, ReArmMovesTheExpiryBothWays) {
  TimerWheel w(0, kTick, kSlots);
  Owner later, earlier;
  owner_init(later, 1);
  owner_init(earlier, 2);
  w.arm(later.t, 1000);
  w.arm(later.t, 30'000);  // pushed out (another slot)
  w.arm(earlier.t, 90'000);
  w.arm(earlier.t, 2000);  // pulled in
  EXPECT_EQ(w.armed_count(), 2u);  // re-arming does not count twice
  EXPECT_EQ(advance_record(w, 1500), 0u);
  EXPECT_EQ(advance_record(w, 2000), 1u);
  EXPECT_EQ(earlier.fired_at, std::vector<uint64_t>{2000});
  EXPECT_EQ(advance_record(w, 29'999), 0u);
  EXPECT_EQ(advance_record(w, 30'000), 1u);
  EXPECT_EQ(later.fired_at, std::vector<uint64_t>{30'000});
  EXPECT_EQ(advance_record(w, 200'000), 0u);  // the old expiries are gone
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, TimersDueInOneAdvanceFireInExpiryOrder) {
  TimerWheel w(0, kTick, kSlots);
  // Different slots, the same slot in different laps, and several inside one tick, armed in
  // scrambled order.
  const std::vector<uint64_t> expiries = {9000,  1030,  1025,  40'000, 1100,  3 * kLap + 7,
                                          2500,  kLap + 1100,  60'000, 1026};
  std::vector<Owner> owners(expiries.size());
  for (size_t i = 0; i < expiries.size(); ++i) {
    owner_init(owners[i], static_cast<int>(i));
    w.arm(owners[i].t, expiries[i]);
  }
  std::vector<Owner*> order;
  EXPECT_EQ(advance_record(w, 4 * kLap, &order), expiries.size());
  ASSERT_EQ(order.size(), expiries.size());
  for (size_t i = 1; i < order.size(); ++i)
    EXPECT_LT(expiries[static_cast<size_t>(order[i - 1]->id)],
              expiries[static_cast<size_t>(order[i]->id)])
        << "firing " << i;
}

TEST(TimerWheel, TimerManyLapsOutFiresExactlyOnceAtItsExpiry) {
  TimerWheel w(0, kTick, kSlots);
  Owner o;
  owner_init(o, 1);
  const uint64_t expiry = 10 * kLap + 123;
  w.arm(o.t, expiry);
  // Step through every lap in uneven steps: the timer's slot comes round ten times first.
  uint64_t now = 0;
  while (now + 700 < expiry) {
    now += 700;
    ASSERT_EQ(advance_record(w, now), 0u) << "fired early at " << now;
  }
  EXPECT_EQ(w.next_expiry(), expiry);
  EXPECT_EQ(advance_record(w, expiry - 1), 0u);
  EXPECT_EQ(advance_record(w, expiry), 1u);
  EXPECT_EQ(o.fired_at, std::vector<uint64_t>{expiry});
}

TEST(TimerWheel, HugeJumpFiresEverythingDueAndKeepsTheRest) {
  TimerWheel w(0, kTick, kSlots);
  std::vector<Owner> owners(6);
  const std::vector<uint64_t> expiries = {5, 3000, kLap - 1, kLap + 1, 1000 * kLap + 17,
                                          (uint64_t{1} << 40) + 1};
  for (size_t i = 0; i < owners.size(); ++i) {
    owner_init(owners[i], static_cast<int>(i));
    w.arm(owners[i].t, expiries[i]);
  }
  const uint64_t jump = uint64_t{1} << 40;  // ~18 minutes in one step
  EXPECT_EQ(advance_record(w, jump), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(owners[i].fired_at, std::vector<uint64_t>{jump});
  EXPECT_TRUE(owners[5].fired_at.empty());
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_EQ(w.next_expiry(), jump + 1);
  EXPECT_EQ(advance_record(w, jump + 1), 1u);
  EXPECT_EQ(owners[5].fired_at, std::vector<uint64_t>{jump + 1});

  // After the jump, timers armed relative to the new time behave normally.
  Owner o;
  owner_init(o, 9);
  w.arm(o.t, jump + 5000);
  EXPECT_EQ(advance_record(w, jump + 4999), 0u);
  EXPECT_EQ(advance_record(w, jump + 5000), 1u);
  // And a jump to the top of the clock range does not overflow anything.
  w.arm(o.t, (uint64_t{1} << 63) + 99);
  EXPECT_EQ(advance_record(w, uint64_t{1} << 63), 0u);
  EXPECT_EQ(advance_record(w, (uint64_t{1} << 63) + 99), 1u);
  EXPECT_EQ(o.fired_at.size(), 2u);
}

TEST(TimerWheel, CallbackReArmsItself) {
  TimerWheel w(0, kTick, kSlots);
  Owner o;
  owner_init(o, 1);
  int fires = 0;
  uint64_t now = 0;
  auto fire = [&](Timer& t) {
    ++fires;
    w.arm(t, now + 3000);  // a retransmission timer restarting itself
  };
  w.arm(o.t, 3000);
  for (now = 1000; now <= 30'000; now += 1000) {
    const size_t n = w.advance(now, fire);
    EXPECT_EQ(n, now % 3000 == 0 ? 1u : 0u) << "at " << now;
  }
  EXPECT_EQ(fires, 10);
  EXPECT_TRUE(o.t.armed);
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_EQ(w.next_expiry(), 33'000u);
}

TEST(TimerWheel, CallbackReArmingItselfAtNowFiresAgainOnlyAtTheNextAdvance) {
  TimerWheel w(0, kTick, kSlots);
  Owner o;
  owner_init(o, 1);
  int fires = 0;
  auto fire = [&](Timer& t) {
    ++fires;
    w.arm(t, 5000);  // already due: must not loop inside this advance
  };
  w.arm(o.t, 5000);
  EXPECT_EQ(w.advance(5000, fire), 1u);
  EXPECT_EQ(fires, 1);
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_EQ(w.advance(5000, fire), 1u);
  EXPECT_EQ(fires, 2);
  w.cancel(o.t);
  EXPECT_EQ(w.advance(6000, fire), 0u);
}

// Two timers due in the same advance: whichever fires first acts on the other.
struct DuePair {
  TimerWheel w{0, kTick, kSlots};
  Owner a, b;
  DuePair() {
    owner_init(a, 1);
    owner_init(b, 2);
    w.arm(a.t, 1000);
    w.arm(b.t, 1000);  // same expiry, same slot
  }
  Owner& other(Timer& t) { return &t == &a.t ? b : a; }
};

TEST(TimerWheel, CallbackCancelsAnotherDueTimer) {
  DuePair p;
  int fires = 0;
  const size_t n = p.w.advance(5000, [&](Timer& t) {
    ++fires;
    p.w.cancel(p.other(t).t);
  });
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(fires, 1);
  EXPECT_EQ(p.w.armed_count(), 0u);
  EXPECT_FALSE(p.a.t.armed);
  EXPECT_FALSE(p.b.t.armed);
  EXPECT_EQ(p.w.advance(1'000'000, [&](Timer&) { ++fires; }), 0u);
  EXPECT_EQ(fires, 1);
}

TEST(TimerWheel, CallbackReArmsAnotherDueTimerForLater) {
  DuePair p;
  Owner* moved = nullptr;
  std::vector<Owner*> fired;
  auto fire = [&](Timer& t) {
    fired.push_back(static_cast<Owner*>(t.owner));
    if (moved == nullptr) {
      moved = &p.other(t);
      p.w.arm(moved->t, 9000);
    }
  };
  EXPECT_EQ(p.w.advance(5000, fire), 1u);
  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(p.w.armed_count(), 1u);
  EXPECT_EQ(p.w.next_expiry(), 9000u);
  EXPECT_EQ(p.w.advance(8999, fire), 0u);
  EXPECT_EQ(p.w.advance(9000, fire), 1u);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_NE(fired[0], fired[1]);
  EXPECT_EQ(fired[1], moved);  // each fired exactly once
  EXPECT_EQ(p.w.armed_count(), 0u);
}

TEST(TimerWheel, CallbackReArmsAnotherDueTimerForAnAlreadyDueTime) {
  DuePair p;
  Owner* moved = nullptr;
  std::vector<Owner*> fired;
  auto fire = [&](Timer& t) {
    fired.push_back(static_cast<Owner*>(t.owner));
    if (moved == nullptr) {
      moved = &p.other(t);
      p.w.arm(moved->t, 4000);  // still <= now: not lost, fires at the next advance
    }
  };
  EXPECT_EQ(p.w.advance(5000, fire), 1u);
  EXPECT_EQ(p.w.armed_count(), 1u);
  EXPECT_EQ(p.w.advance(5000, fire), 1u);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[1], moved);
  EXPECT_EQ(p.w.advance(100'000, fire), 0u);
}

TEST(TimerWheel, NextExpiryTracksTheEarliestArmedTimer) {
  TimerWheel w(0, kTick, kSlots);
  EXPECT_EQ(w.next_expiry(), TimerWheel::kNever);
  Owner a, b, c;
  owner_init(a, 1);
  owner_init(b, 2);
  owner_init(c, 3);
  w.arm(a.t, 50 * kLap);  // many laps out
  EXPECT_EQ(w.next_expiry(), 50 * kLap);
  w.arm(b.t, 7777);
  w.arm(c.t, 12'345);
  EXPECT_EQ(w.next_expiry(), 7777u);
  w.cancel(b.t);
  EXPECT_EQ(w.next_expiry(), 12'345u);
  EXPECT_EQ(advance_record(w, 12'345), 1u);
  EXPECT_EQ(w.next_expiry(), 50 * kLap);
  w.arm(a.t, 20'000);
  EXPECT_EQ(w.next_expiry(), 20'000u);
  w.cancel(a.t);
  EXPECT_EQ(w.next_expiry(), TimerWheel::kNever);
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, DefaultGeometryWorks) {
  TimerWheel w;  // 1024 ns ticks, 4096 slots
  Owner o;
  owner_init(o, 1);
  w.arm(o.t, 4'194'304 * 3 + 11);  // three laps and a bit
  EXPECT_EQ(advance_record(w, 4'194'304 * 3 + 10), 0u);
  EXPECT_EQ(advance_record(w, 4'194'304 * 3 + 11), 1u);
}

// 5000 QP-like owners with two timers each (retransmit, RNR), seeded random expiries over
// many laps, random advance steps, callbacks that restart some timers, and random cancels and
// re-arms between advances. A model says which timers must fire at each advance.
/// Thousands of timers armed, re-armed and cancelled at random between advances of random
/// size (1 ns to `max_step`), checked against the model at every advance.
void random_timers(size_t slots, uint64_t max_step, uint64_t seed) {
  constexpr size_t kOwners = 5000;
  TimerWheel w(1'000'000, 1024, slots);
  struct QpLike {
    Timer t[2];
    uint64_t expect[2] = {0, 0};
    bool armed[2] = {false, false};
    int fires = 0;
  };
  std::vector<QpLike> qps(kOwners);
  std::mt19937_64 rng(seed);
  auto rnd = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  uint64_t now = 1'000'000;
  size_t model_armed = 0;
  auto arm = [&](QpLike& q, int k, uint64_t at) {
    if (!q.armed[k]) ++model_armed;
    q.armed[k] = true;
    q.expect[k] = at;
    w.arm(q.t[k], at);
  };
  for (size_t i = 0; i < kOwners; ++i) {
    for (int k = 0; k < 2; ++k) {
      qps[i].t[k].owner = &qps[i];
      qps[i].t[k].kind = static_cast<uint8_t>(k);
      arm(qps[i], k, now + rnd(1, 40'000'000));  // up to 40 ms: ~10 laps
    }
  }
  ASSERT_EQ(w.armed_count(), model_armed);

  size_t total_fired = 0;
  for (int step = 0; step < 3000 && model_armed > 0; ++step) {
    // Between advances: cancel or re-arm a few timers at random.
    for (int j = 0; j < 5; ++j) {
      QpLike& q = qps[rnd(0, kOwners - 1)];
      const int k = static_cast<int>(rnd(0, 1));
      if (rnd(0, 1) == 0) {
        if (q.armed[k]) --model_armed;
        q.armed[k] = false;
        w.cancel(q.t[k]);
      } else {
        arm(q, k, now + rnd(1, 10'000'000));
      }
    }
    // Mostly short steps, now and then one of any size up to max_step (laps, for a small wheel).
    const uint64_t next = now + (rnd(0, 9) == 0 ? rnd(1, max_step) : rnd(1, 60'000));
    // Expected: exactly the armed timers with expiry <= next, in expiry order.
    std::vector<std::pair<uint64_t, const Timer*>> due;
    for (auto& q : qps)
      for (int k = 0; k < 2; ++k)
        if (q.armed[k] && q.expect[k] <= next) due.emplace_back(q.expect[k], &q.t[k]);
    std::vector<const Timer*> got;
    std::vector<uint64_t> got_expiry;
    const size_t n = w.advance(next, [&](Timer& t) {
      auto* q = static_cast<QpLike*>(t.owner);
      const int k = t.kind;
      got.push_back(&t);
      got_expiry.push_back(t.expires_ns);
      ++q->fires;
      ASSERT_TRUE(q->armed[k]) << "fired a timer that is not armed (or twice)";
      ASSERT_LE(q->expect[k], next) << "fired early";
      ASSERT_GT(q->expect[k], now) << "fired late (an earlier advance had reached it)";
      q->armed[k] = false;
      --model_armed;
      // A third of the retransmit timers restart themselves, as a QP with more in flight.
      if (k == 0 && rnd(0, 2) == 0) arm(*q, 0, next + rnd(1, 20'000'000));
    });
    // Everything the model says was due fired; nothing else did.
    ASSERT_EQ(n, due.size()) << "step " << step;
    ASSERT_EQ(got.size(), due.size());
    std::sort(due.begin(), due.end());
    std::vector<const Timer*> want;
    for (auto& d : due) want.push_back(d.second);
    std::vector<const Timer*> got_sorted = got, want_sorted = want;
    std::sort(got_sorted.begin(), got_sorted.end());
    std::sort(want_sorted.begin(), want_sorted.end());
    ASSERT_EQ(got_sorted, want_sorted) << "step " << step;
    ASSERT_TRUE(std::is_sorted(got_expiry.begin(), got_expiry.end())) << "step " << step;
    ASSERT_EQ(w.armed_count(), model_armed);
    total_fired += n;
    now = next;
  }
  // Whatever is left fires in one final jump.
  const uint64_t end = now + (uint64_t{1} << 32);
  size_t left = 0;
  for (auto& q : qps) left += static_cast<size_t>(q.armed[0]) + static_cast<size_t>(q.armed[1]);
  EXPECT_EQ(w.advance(end, [](Timer&) {}), left);
  EXPECT_EQ(w.armed_count(), 0u);
  EXPECT_GT(total_fired, kOwners);  // the run really exercised the wheel
}

TEST(TimerWheel, ThousandsOfTimersFireExactlyOnceAtTheRightTime) {
  random_timers(4096, 60'000, 12345);  // the engine's wheel (a lap: ~4.2 ms), short steps
}

TEST(TimerWheel, ThousandsOfTimersOnASmallWheelWithStepsOfSeveralLaps) {
  // 128 slots (a lap: 131 us): steps of up to 40 ms cross hundreds of laps, and advance()
  // skips runs of empty slots a bitmap word at a time.
  random_timers(128, 40'000'000, 777);
}

}  // namespace
}  // namespace uroce

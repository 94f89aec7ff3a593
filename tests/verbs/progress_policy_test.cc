// The progress policy's rules (stack/verbs/progress_policy.h, docs/threading.md), each on its
// boundaries, with made-up times: doorbell batching and the rescue that bounds it, the hand-over
// to the progress thread, waiting for the answer, the ACK kept for the reply, and what the
// progress thread does after a pass, and when a spinning one (progress = poll) backs off. No clock, no threads: what these rules decide does not
// depend on how fast the machine runs (the end-to-end tests check the data and that nothing
// hangs; what the rules save is measured in docs/bench).
#include "verbs/progress_policy.h"

#include <gtest/gtest.h>

namespace uroce::verbs {
namespace {

constexpr uint64_t T0 = 1'000'000'000;  // 1 s: any time well after zero (zero means "never")

// ---- Doorbell batching ------------------------------------------------------------------

TEST(Batching, TheFirstPostAfterAPauseLeavesAtOnce) {
  ProgressPolicy p;
  EXPECT_FALSE(p.batch_post(T0));
  EXPECT_FALSE(p.posts_waiting());
}

TEST(Batching, APostWithinTheGapWaitsForTheNextPass) {
  ProgressPolicy p;
  p.post_returned(T0);
  EXPECT_TRUE(p.batch_post(T0 + kBatchGapNs - 1));
  EXPECT_TRUE(p.posts_waiting());
  EXPECT_EQ(p.batched(), 1u);
}

TEST(Batching, APostAtTheGapLeavesAtOnce) {
  ProgressPolicy p;
  p.post_returned(T0);
  EXPECT_FALSE(p.batch_post(T0 + kBatchGapNs));
  EXPECT_FALSE(p.posts_waiting());
}

TEST(Batching, OffSendsEveryPost) {
  ProgressPolicy p(/*batch=*/false);
  p.post_returned(T0);
  EXPECT_FALSE(p.batch_post(T0 + 1));
}

TEST(Batching, TheKBatchMaxthWaitingPostSendsThemAll) {
  ProgressPolicy p;
  uint64_t t = T0;
  p.post_returned(t);
  for (uint32_t i = 1; i < kBatchMax; ++i) {
    t += 100;
    ASSERT_TRUE(p.batch_post(t)) << "post " << i;
    p.post_returned(t);
  }
  t += 100;
  EXPECT_FALSE(p.batch_post(t)) << "the " << kBatchMax << "th post runs the pass";
  EXPECT_TRUE(p.pass_takes_batch(t, false));
  EXPECT_FALSE(p.posts_waiting());
  p.post_returned(t);
  EXPECT_TRUE(p.batch_post(t + 100)) << "a new batch begins after the pass";
}

TEST(Batching, APassTakesTheBatchOnce) {
  ProgressPolicy p;
  p.post_returned(T0);
  ASSERT_TRUE(p.batch_post(T0 + 10));
  EXPECT_TRUE(p.pass_takes_batch(T0 + 20, false));
  EXPECT_FALSE(p.pass_takes_batch(T0 + 30, false));
}

// ---- The rescue: the progress thread had to send posts the application left waiting ------

// The progress thread napping (the application active), its nap ending at `until`: naps of
// 20, 40, 80, ... us (kAppAwayNs doubling), the last one starting at until - its length.
struct Napping {
  ProgressPolicy p;
  ProgressThreadPolicy th{p, T0, true};
  uint64_t start_nap(uint64_t t, int naps) {  // returns when the last nap ends
    ThreadStep s;
    for (int i = 0; i < naps; ++i) {
      p.poll_begins(t, false);  // the application is active
      s = th.after_pass(t, 0);
      EXPECT_EQ(s.kind, ThreadStep::kNap);
      if (i + 1 < naps) th.nap_over();
    }
    return t + s.ns;
  }
  // A post left waiting at `posted` and sent by the progress thread at `sent`.
  void batch_sent_by_thread(uint64_t posted, uint64_t sent) {
    p.post_returned(posted - 10);
    ASSERT_TRUE(p.batch_post(posted));
    p.post_returned(posted);
    p.pass_takes_batch(sent, /*progress_thread=*/true);
  }
  // A post batched at `t` (the previous one returned just before).
  void batched_post(uint64_t t) {
    p.post_returned(t - 10);
    ASSERT_TRUE(p.batch_post(t));
  }
};

TEST(Rescue, BeforeOneTheNapBoundsTheWait) {
  Napping n;
  const uint64_t until = n.start_nap(T0, 4);  // 160 us
  n.batched_post(until - 150'000);
  EXPECT_FALSE(n.p.kick_for_batch(until - 150'000));
  EXPECT_TRUE(n.p.napping());
}

TEST(Rescue, PostsThatWaitedOverKAppAwayNsForTheProgressThreadAreOne) {
  Napping n;
  n.batch_sent_by_thread(T0, T0 + kAppAwayNs + 1);
  EXPECT_EQ(n.p.last_rescue(), T0 + kAppAwayNs + 1);
}

TEST(Rescue, PostsThatWaitedKAppAwayNsAreNot) {
  Napping n;
  n.batch_sent_by_thread(T0, T0 + kAppAwayNs);
  EXPECT_EQ(n.p.last_rescue(), 0u);
}

TEST(Rescue, PostsTheApplicationPolledAfterAreNot) {
  Napping n;
  n.p.post_returned(T0 - 10);
  ASSERT_TRUE(n.p.batch_post(T0));
  n.p.poll_begins(T0 + 5, false);  // its poll would have sent them, had it won the engine
  n.p.pass_takes_batch(T0 + kAppAwayNs + 100, true);
  EXPECT_EQ(n.p.last_rescue(), 0u);
}

TEST(Rescue, PostsAnApplicationThreadSentAreNot) {
  Napping n;
  n.p.post_returned(T0 - 10);
  ASSERT_TRUE(n.p.batch_post(T0));
  n.p.pass_takes_batch(T0 + kAppAwayNs + 100, /*progress_thread=*/false);
  EXPECT_EQ(n.p.last_rescue(), 0u);
}

TEST(Rescue, AfterOneALongNapIsCutShortOnce) {
  Napping n;
  n.batch_sent_by_thread(T0, T0 + kAppAwayNs + 1);
  const uint64_t t = T0 + 100'000;
  const uint64_t until = n.start_nap(t, 4);  // 160 us from t
  n.batched_post(t + 10);
  EXPECT_TRUE(n.p.kick_for_batch(t + 10));
  EXPECT_FALSE(n.p.napping()) << "the kick claimed the nap";
  n.batched_post(t + 30);
  EXPECT_FALSE(n.p.kick_for_batch(t + 30)) << "one kick per nap";
  EXPECT_GT(until, t + 30 + kBatchFlushNs) << "though the nap is still long";
}

TEST(Rescue, ANapEndingWithinKBatchFlushNsIsLeftAlone) {
  Napping n;
  n.batch_sent_by_thread(T0, T0 + kAppAwayNs + 1);
  const uint64_t until = n.start_nap(T0 + 100'000, 3);  // 80 us
  n.batched_post(until - kBatchFlushNs);
  EXPECT_FALSE(n.p.kick_for_batch(until - kBatchFlushNs));
  EXPECT_TRUE(n.p.napping());
  n.batched_post(until - kBatchFlushNs - 1);
  EXPECT_TRUE(n.p.kick_for_batch(until - kBatchFlushNs - 1)) << "1 ns longer: kicked";
}

TEST(Rescue, ANapWhoseEndIsInThePastCountsAsLong) {
  Napping n;
  n.batch_sent_by_thread(T0, T0 + kAppAwayNs + 1);
  const uint64_t until = n.start_nap(T0 + 100'000, 1);
  n.batched_post(until + 1);  // napping, its end not yet published anew
  EXPECT_TRUE(n.p.kick_for_batch(until + 1));
}

TEST(Rescue, IsRememberedForKRescueMemoryNs) {
  Napping n;
  const uint64_t rescue = T0 + kAppAwayNs + 1;
  n.batch_sent_by_thread(T0, rescue);
  {
    const uint64_t t = rescue + kRescueMemoryNs - 1;
    n.start_nap(t - 200'000, 4);  // ends at t - 40 us: in the past at t
    n.batched_post(t);
    EXPECT_TRUE(n.p.kick_for_batch(t));
  }
  Napping m;
  m.batch_sent_by_thread(T0, rescue);
  const uint64_t t = rescue + kRescueMemoryNs;
  m.start_nap(t - 200'000, 4);
  m.batched_post(t);
  EXPECT_FALSE(m.p.kick_for_batch(t));
}

TEST(Rescue, NoKickWhenTheThreadIsNotNapping) {
  Napping n;
  n.batch_sent_by_thread(T0, T0 + kAppAwayNs + 1);
  n.batched_post(T0 + 100'000);
  EXPECT_FALSE(n.p.kick_for_batch(T0 + 100'000));
}

// ---- The hand-over: an application that stays away after its completions ---------------

// Rounds of completions returned, then the application back `gap` later (a poll).
void rounds_away(ProgressPolicy& p, uint64_t& t, uint64_t gap, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    p.completions_returned(t, false);
    t += gap;
    p.poll_back(t, 0);
  }
}

TEST(Handoff, TheGapIsAMovingAverageOfTheApplicationsReturns) {
  ProgressPolicy p;
  uint64_t t = T0;
  rounds_away(p, t, 80'000, 1);
  EXPECT_EQ(p.app_gap_ns(), 10'000u);  // 0 - 0/8 + 80000/8
  rounds_away(p, t, 80'000, 1);
  EXPECT_EQ(p.app_gap_ns(), 10'000u - 1'250u + 10'000u);
  p.poll_back(t + 1'000'000, 0);  // a poll with no completions before it: no sample
  EXPECT_EQ(p.app_gap_ns(), 18'750u);
}

TEST(Handoff, AnApplicationAwayOverKAppAwayNsHandsOverAtOnce) {
  Napping n;
  uint64_t t = T0;
  rounds_away(n.p, t, 8 * kAppAwayNs + 8, 1);  // average kAppAwayNs + 1
  ASSERT_EQ(n.p.app_gap_ns(), kAppAwayNs + 1);
  n.start_nap(t, 1);
  EXPECT_TRUE(n.p.completions_returned(t + 10, false));
  EXPECT_FALSE(n.p.napping()) << "the nap is claimed: one kick";
  // The progress thread then takes the application for away: it parks, though the
  // application polled moments ago.
  EXPECT_EQ(n.th.after_pass(t + 20, 0).kind, ThreadStep::kPark);
}

TEST(Handoff, AnApplicationAwayKAppAwayNsKeepsDriving) {
  Napping n;
  uint64_t t = T0;
  rounds_away(n.p, t, 8 * kAppAwayNs, 1);
  ASSERT_EQ(n.p.app_gap_ns(), kAppAwayNs);
  n.start_nap(t, 1);
  EXPECT_FALSE(n.p.completions_returned(t + 10, false));
  EXPECT_TRUE(n.p.napping());
}

TEST(Handoff, NotWhenThePollReceivedTheAnswer) {
  Napping n;
  uint64_t t = T0;
  rounds_away(n.p, t, 800'000, 1);
  n.start_nap(t, 1);
  EXPECT_FALSE(n.p.completions_returned(t + 10, /*awaited=*/true));
}

TEST(Handoff, NotWhenTheThreadIsNotNapping) {
  ProgressPolicy p;
  uint64_t t = T0;
  rounds_away(p, t, 800'000, 1);
  EXPECT_FALSE(p.completions_returned(t + 10, false));
}

TEST(Handoff, AnApplicationThatSleepsInTheKernelIsNotActive) {
  Napping n;
  n.start_nap(T0, 1);
  EXPECT_TRUE(n.p.app_sleeps()) << "napping: kick it";
  EXPECT_FALSE(n.p.app_sleeps()) << "once";
  n.th.nap_over();
  EXPECT_EQ(n.th.after_pass(T0 + 100, 1).kind, ThreadStep::kPass);
}

// ---- Waiting for the answer -------------------------------------------------------------

// ib_write_lat's loop: it posts a WRITE; its poll returns the completion when the ACK has
// come; it spins on memory until the peer's WRITE lands `answer` later, and posts again `back`
// after that. rx_seq counts the packets the engine received: the ACK, then the answer.
struct Pinger {
  ProgressPolicy p;
  uint64_t t = T0;
  uint64_t rx_seq = 100;
  uint64_t last_rx = 0;
  Pinger() { p.post_begins(t, rx_seq, last_rx); }
  // One round from the completions of the last post to the next post. Returns the plan of the
  // poll that returned the completions; a kWait is the test's to carry out.
  AnswerPlan round(uint64_t answer, uint64_t back, bool channel = false) {
    t += 3'000;
    ++rx_seq;  // the ACK
    last_rx = t;
    const AnswerPlan plan = p.answer_plan(channel, rx_seq);
    if (plan.kind == AnswerPlan::kWait) return plan;
    p.completions_returned(t, false);
    last_rx = t + answer;  // the peer's WRITE
    ++rx_seq;
    t = last_rx + back;
    p.post_begins(t, rx_seq, last_rx);
    return plan;
  }
};

TEST(Answer, FourReturnsJustAfterThePacketTeachTheWait) {
  Pinger a;
  for (uint32_t i = 0; i < kAnswerScore; ++i)
    EXPECT_EQ(a.round(5'000, 1'000).kind, AnswerPlan::kNone) << "round " << i;
  EXPECT_EQ(a.p.answer_score(), kAnswerScore);
  EXPECT_EQ(a.p.answer_gap_ns(), 5'000u);
  const AnswerPlan plan = a.round(5'000, 1'000);
  EXPECT_EQ(plan.kind, AnswerPlan::kWait);
  EXPECT_EQ(plan.budget_ns, 2 * 5'000 + kAnswerSlackNs);
}

TEST(Answer, AReturnKAnswerSlackNsAfterThePacketIsNotOne) {
  Pinger a;
  for (uint32_t i = 0; i + 1 < kAnswerScore; ++i) a.round(5'000, kAnswerSlackNs - 1);
  EXPECT_EQ(a.p.answer_score(), kAnswerScore - 1);
  a.round(5'000, kAnswerSlackNs);
  EXPECT_EQ(a.p.answer_score(), kAnswerScore - 1 - kAnswerMiss);
}

TEST(Answer, AnApplicationBackWithinKAnswerMinAwayNsDidNotWait) {
  Pinger a;
  for (uint32_t i = 0; i + 1 < kAnswerScore; ++i) a.round(1'000, 1'000);  // away 2 us: counts
  EXPECT_EQ(a.p.answer_score(), kAnswerScore - 1);
  a.round(500, 1'000);  // away 1.5 us
  EXPECT_EQ(a.p.answer_score(), kAnswerScore - 1 - kAnswerMiss);
}

TEST(Answer, APacketBeforeTheCompletionsIsNoAnswer) {
  ProgressPolicy p;
  p.completions_returned(T0, false);
  p.post_begins(T0 + 10'000, 1, T0);  // the last packet came with the completions
  EXPECT_EQ(p.answer_score(), 0u);
  p.completions_returned(T0 + 20'000, false);
  p.post_begins(T0 + 30'000, 2, T0 + 20'001);
  EXPECT_EQ(p.answer_score(), 1u);
}

TEST(Answer, NeverOnACqWithACompletionChannel) {
  Pinger a;
  for (uint32_t i = 0; i < kAnswerScore; ++i) a.round(5'000, 1'000);
  EXPECT_EQ(a.round(5'000, 1'000, /*channel=*/true).kind, AnswerPlan::kNone);
}

TEST(Answer, ThePeersUsualWaitBoundsIt) {
  // The budget follows what this peer and this machine take (a slow machine's peer answers
  // in tens of microseconds), up to kMaxAnswerWaitNs.
  constexpr uint64_t kLongest = (kMaxAnswerWaitNs - kAnswerSlackNs) / 2;
  Pinger a;
  for (uint32_t i = 0; i < kAnswerScore; ++i) a.round(kLongest, 1'000);
  const AnswerPlan plan = a.round(kLongest, 1'000);
  EXPECT_EQ(plan.kind, AnswerPlan::kWait);
  EXPECT_EQ(plan.budget_ns, kMaxAnswerWaitNs);
  Pinger slow;
  for (uint32_t i = 0; i < kAnswerScore; ++i) slow.round(kLongest + 1, 1'000);
  ASSERT_EQ(slow.p.answer_score(), kAnswerScore);
  const AnswerPlan capped = slow.p.answer_plan(false, slow.rx_seq + 1);
  EXPECT_EQ(capped.kind, AnswerPlan::kWait) << "a slow peer is still waited for";
  EXPECT_EQ(capped.budget_ns, kMaxAnswerWaitNs) << "but no longer than this";
  Pinger fast;
  for (uint32_t i = 0; i < kAnswerScore; ++i) fast.round(40'000, 1'000);  // a slow machine's
  EXPECT_EQ(fast.round(40'000, 1'000).budget_ns, 2 * 40'000 + kAnswerSlackNs);
}

TEST(Answer, AnAnswerHereAlreadyIsNotWaitedFor) {
  Pinger a;
  for (uint32_t i = 0; i < kAnswerScore; ++i) a.round(5'000, 1'000);
  a.rx_seq += 2;  // the ACK and the answer in one pass
  EXPECT_EQ(a.p.answer_plan(false, a.rx_seq).kind, AnswerPlan::kCameAlready);
  a.p.completions_returned(a.t + 3'000, false);
  a.p.post_begins(a.t + 500'000, a.rx_seq, a.last_rx);  // its return says nothing
  EXPECT_EQ(a.p.answer_score(), kAnswerScore);
}

TEST(Answer, AWaitThatRunsOutIsAMiss) {
  Pinger a;
  for (uint32_t i = 0; i < kAnswerScore; ++i) a.round(5'000, 1'000);
  ASSERT_EQ(a.round(5'000, 1'000).kind, AnswerPlan::kWait);
  a.p.answer_waited(false, 30'000);
  EXPECT_EQ(a.p.answer_score(), kAnswerScore - kAnswerMiss);
}

TEST(Answer, NoPacketSinceTheCompletionsSaysNothing) {
  // The answer came with the completions (the peer's reply carried its ACK: one pass took
  // both), and the application took its time to see it (it was preempted, say).
  Pinger a;
  for (uint32_t i = 0; i + 1 < kAnswerScore; ++i) a.round(5'000, 1'000);
  a.t += 3'000;
  a.rx_seq += 2;
  a.last_rx = a.t;
  ASSERT_EQ(a.p.answer_plan(false, a.rx_seq).kind, AnswerPlan::kNone);
  a.p.completions_returned(a.t, false);
  a.p.post_begins(a.t + 15'000, a.rx_seq, a.last_rx);
  EXPECT_EQ(a.p.answer_score(), kAnswerScore - 1);
}

TEST(Answer, OneMissDoesNotUndoManyRounds) {
  // Up to kAnswerScoreMax rounds of evidence: then one late round (a preempted peer) leaves
  // the wait in place, and only a run of misses ends it.
  Pinger a;
  for (uint32_t i = 0; i < kAnswerScore; ++i) a.round(5'000, 1'000);
  for (uint32_t i = kAnswerScore; i < kAnswerScoreMax + 3; ++i) {
    ASSERT_EQ(a.round(5'000, 1'000).kind, AnswerPlan::kWait);
    a.p.answer_waited(true, 5'000);
    a.t += 5'000;
    a.last_rx = a.t;
    ++a.rx_seq;
    a.p.completions_returned(a.t, true);
    a.t += 1'000;
    a.p.post_begins(a.t, a.rx_seq, a.last_rx);
  }
  EXPECT_EQ(a.p.answer_score(), kAnswerScoreMax) << "and no higher";
  uint32_t misses = 0;
  while (a.round(5'000, 1'000).kind == AnswerPlan::kWait) {
    a.p.answer_waited(false, 30'000);
    ++misses;
    a.p.completions_returned(a.t, false);
    a.t += 100'000;
    a.p.post_begins(a.t, a.rx_seq, a.last_rx);
  }
  EXPECT_EQ(misses, (kAnswerScoreMax - kAnswerScore) / kAnswerMiss + 1);
}

// After a wait that received the answer, the application's next move says whether it waited
// for it: a post at once (ib_write_lat) adds to the score; a poll, or a post after the slack,
// does not; nor does an answer that came within kAnswerMinAwayNs (a posting loop's next ACK).
struct Waited : Pinger {
  uint64_t wait_and_return(uint64_t waited) {
    for (uint32_t i = 0; i < kAnswerScore; ++i) round(5'000, 1'000);
    EXPECT_EQ(round(5'000, 1'000).kind, AnswerPlan::kWait);
    p.answer_waited(true, waited);
    t += waited;
    last_rx = t;
    ++rx_seq;
    p.completions_returned(t, true);
    return t;
  }
};

TEST(Answer, APostAtOnceAfterTheWaitAddsToIt) {
  Waited w;
  const uint64_t t = w.wait_and_return(4'000);
  w.p.post_begins(t + kAnswerSlackNs - 1, w.rx_seq, w.last_rx);
  EXPECT_EQ(w.p.answer_score(), kAnswerScore + 1) << "one more round of evidence";
}

TEST(Answer, APostKAnswerSlackNsAfterTheWaitIsAMiss) {
  Waited w;
  const uint64_t t = w.wait_and_return(4'000);
  w.p.post_begins(t + kAnswerSlackNs, w.rx_seq, w.last_rx);
  EXPECT_EQ(w.p.answer_score(), kAnswerScore - kAnswerMiss);
}

TEST(Answer, APollAfterTheWaitIsAMiss) {
  Waited w;
  const uint64_t t = w.wait_and_return(4'000);
  w.p.poll_back(t + 100, w.last_rx);
  EXPECT_EQ(w.p.answer_score(), kAnswerScore - kAnswerMiss);
}

TEST(Answer, AnAnswerWithinKAnswerMinAwayNsWasNotWaitedFor) {
  Waited w;
  const uint64_t t = w.wait_and_return(kAnswerMinAwayNs - 1);
  w.p.post_begins(t + 100, w.rx_seq, w.last_rx);
  EXPECT_EQ(w.p.answer_score(), kAnswerScore - kAnswerMiss);
  Waited v;
  const uint64_t u = v.wait_and_return(kAnswerMinAwayNs);
  v.p.post_begins(u + 100, v.rx_seq, v.last_rx);
  EXPECT_EQ(v.p.answer_score(), kAnswerScore + 1);
}

// ---- The ACK rides with the reply -------------------------------------------------------

// A request-response round: the poll returns the peer's message at `t`, the reply is posted
// `after` later.
void reply_round(ProgressPolicy& p, uint64_t& t, uint64_t after) {
  p.completions_returned(t, false);
  p.post_begins(t + after, 0, 0);
  t += after + 10'000;
}

TEST(AckHold, ThreeRepliesWithinKAckHoldNsKeepTheAcks) {
  ProgressPolicy p;
  uint64_t t = T0;
  for (uint32_t i = 0; i + 1 < kReplyScore; ++i) reply_round(p, t, kAckHoldNs);
  EXPECT_EQ(p.poll_begins(t, false), 0u) << "two are not enough";
  reply_round(p, t, kAckHoldNs);
  EXPECT_EQ(p.reply_score(), kReplyScore);
  EXPECT_EQ(p.poll_begins(t, false), 2 * kAckHoldNs) << "twice its usual reply time";
}

TEST(AckHold, TheWindowFollowsTheApplicationsReplies) {
  // A slow machine (or a sanitizer build): replies 8 us after the poll. The first window
  // (kAckHoldNs) misses the first; from then on the window is twice the usual reply.
  ProgressPolicy p;
  uint64_t t = T0;
  reply_round(p, t, 8'000);
  EXPECT_EQ(p.reply_score(), 0u);
  EXPECT_EQ(p.reply_window(), 16'000u);
  for (uint32_t i = 0; i < kReplyScore; ++i) reply_round(p, t, 8'000);
  EXPECT_EQ(p.reply_score(), kReplyScore);
  EXPECT_EQ(p.poll_begins(t, false), 16'000u);
  // It speeds up: the window shrinks with the average, never below kAckHoldNs.
  for (int i = 0; i < 40; ++i) reply_round(p, t, 1'000);
  EXPECT_EQ(p.reply_window(), kAckHoldNs);
  EXPECT_EQ(p.reply_score(), kReplyScore);
}

TEST(AckHold, TheWindowIsAtMostKMaxAckHoldNs) {
  ProgressPolicy p;
  uint64_t t = T0;
  for (int i = 0; i < 40; ++i) reply_round(p, t, 40'000);
  EXPECT_EQ(p.reply_window(), kMaxAckHoldNs);
  EXPECT_EQ(p.poll_begins(t, false), kMaxAckHoldNs);
  // Posts later than that are no replies, and do not move the window.
  reply_round(p, t, kMaxAckHoldNs + 1);
  EXPECT_EQ(p.reply_score(), 0u);
  for (int i = 0; i < 40; ++i) reply_round(p, t, 1'000'000);
  EXPECT_EQ(p.reply_window(), kMaxAckHoldNs);
  EXPECT_EQ(p.reply_score(), 0u);
}

TEST(AckHold, NeverOnACqArmedForAnEvent) {
  ProgressPolicy p;
  uint64_t t = T0;
  for (uint32_t i = 0; i < kReplyScore; ++i) reply_round(p, t, 1'000);
  EXPECT_EQ(p.poll_begins(t, /*cq_armed=*/true), 0u);
  EXPECT_EQ(p.poll_begins(t, false), kAckHoldNs);
}

TEST(AckHold, AReplyAfterTheWindowForgetsIt) {
  ProgressPolicy p;
  uint64_t t = T0;
  for (uint32_t i = 0; i < kReplyScore; ++i) reply_round(p, t, 1'000);
  reply_round(p, t, kAckHoldNs + 1);
  EXPECT_EQ(p.reply_score(), 0u);
  EXPECT_EQ(p.poll_begins(t, false), 0u);
}

TEST(AckHold, AnAckThatWaitedInVainForgetsIt) {
  ProgressPolicy p;
  uint64_t t = T0;
  for (uint32_t i = 0; i < kReplyScore; ++i) reply_round(p, t, 1'000);
  p.ack_waited_in_vain();
  EXPECT_EQ(p.poll_begins(t, false), 0u);
}

TEST(AckHold, APostWithNoCompletionsBeforeItSaysNothing) {
  ProgressPolicy p;
  uint64_t t = T0;
  for (uint32_t i = 0; i < kReplyScore; ++i) reply_round(p, t, 1'000);
  p.post_begins(t + 1'000'000, 0, 0);  // a second post: no poll returned completions between
  EXPECT_EQ(p.reply_score(), kReplyScore);
}

// ---- The progress thread after a pass ---------------------------------------------------

TEST(Thread, NapsWhileTheApplicationIsActiveDoublingToKMaxAppNapNs) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, true);
  uint64_t t = T0;
  const uint64_t want[] = {20'000, 40'000, 80'000, 160'000, 320'000, 640'000, 1'000'000, 1'000'000};
  for (const uint64_t ns : want) {
    p.poll_begins(t, false);
    const ThreadStep s = th.after_pass(t + 10, 0);
    ASSERT_EQ(s.kind, ThreadStep::kNap);
    EXPECT_EQ(s.ns, ns);
    EXPECT_TRUE(p.napping());
    th.nap_over();
    EXPECT_FALSE(p.napping());
    t += ns;
  }
}

TEST(Thread, TheApplicationIsActiveForKAppActiveNsAfterItsLastCall) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, true);
  p.poll_begins(T0, false);
  EXPECT_EQ(th.after_pass(T0 + kAppActiveNs - 1, 0).kind, ThreadStep::kNap);
  th.nap_over();
  const ThreadStep s = th.after_pass(T0 + kAppActiveNs, 0);
  EXPECT_EQ(s.kind, ThreadStep::kPark);
  EXPECT_EQ(s.ns, kMaxParkNs);
}

TEST(Thread, APostCountsAsActivity) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, true);
  p.post_begins(T0 + 5'000'000, 0, 0);
  EXPECT_EQ(th.after_pass(T0 + 5'000'100, 0).kind, ThreadStep::kNap);
}

TEST(Thread, WaitingPostsCutTheNapToKBatchFlushNs) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, true);
  uint64_t t = T0;
  for (int i = 0; i < 3; ++i) {  // naps of 20, 40, 80 us
    p.poll_begins(t, false);
    th.after_pass(t, 0);
    th.nap_over();
  }
  p.poll_begins(t, false);
  p.post_returned(t);
  ASSERT_TRUE(p.batch_post(t + 10));
  const ThreadStep s = th.after_pass(t + 20, 0);
  EXPECT_EQ(s.kind, ThreadStep::kNap);
  EXPECT_EQ(s.ns, kBatchFlushNs) << "the next nap would have been 160 us";
}

TEST(Thread, WaitingPostsLeaveAShorterNapAlone) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, true);
  p.poll_begins(T0, false);
  p.post_returned(T0);
  ASSERT_TRUE(p.batch_post(T0 + 10));
  const ThreadStep s = th.after_pass(T0 + 20, 0);
  EXPECT_EQ(s.kind, ThreadStep::kNap);
  EXPECT_EQ(s.ns, kAppAwayNs);
}

TEST(Thread, WorkWithTheApplicationAwayRunsTheNextPassAtOnce) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, true);
  EXPECT_EQ(th.after_pass(T0 + 5'000'000, 3).kind, ThreadStep::kPass);
}

TEST(Thread, AfterItsWorkItYieldsForKSpinNsThenParks) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, true);
  const uint64_t t = T0 + 5'000'000;
  ASSERT_EQ(th.after_pass(t, 1).kind, ThreadStep::kPass);
  EXPECT_EQ(th.after_pass(t + kSpinNs - 1, 0).kind, ThreadStep::kYield);
  const ThreadStep s = th.after_pass(t + kSpinNs, 0);
  EXPECT_EQ(s.kind, ThreadStep::kPark);
  EXPECT_EQ(s.ns, kMaxParkNs);
}

TEST(Thread, AnApplicationThatHandedOverIsAwayUntilItComesBack) {
  Napping n;
  uint64_t t = T0;
  rounds_away(n.p, t, 800'000, 1);
  n.start_nap(t, 1);
  ASSERT_TRUE(n.p.completions_returned(t + 10, false));
  n.th.nap_over();
  // Parks at once (it would spin within kSpinNs otherwise): the application spins elsewhere.
  ASSERT_EQ(n.th.after_pass(t + 20, 1).kind, ThreadStep::kPass);  // its own work: on
  EXPECT_EQ(n.th.after_pass(t + 30, 0).kind, ThreadStep::kPark);
  n.p.poll_begins(t + 40, false);  // back
  EXPECT_EQ(n.th.after_pass(t + 50, 0).kind, ThreadStep::kNap);
}

TEST(Thread, WithoutADescriptorItNapsInSlicesLongerOnceLongIdle) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, /*has_wait_fd=*/false);
  uint64_t t = T0 + kSpinNs;
  for (uint32_t i = 1; i <= kIdleSlices; ++i) {
    const ThreadStep s = th.after_pass(t++, 0);
    ASSERT_EQ(s.kind, ThreadStep::kPark);
    ASSERT_EQ(s.ns, kSliceNs) << "idle pass " << i;
  }
  EXPECT_EQ(th.after_pass(t++, 0).ns, kIdleSliceNs);
  ASSERT_EQ(th.after_pass(t++, 1).kind, ThreadStep::kPass);  // work: idle again from zero
  EXPECT_EQ(th.after_pass(t + kSpinNs, 0).ns, kSliceNs);
}

TEST(Thread, WithoutADescriptorAHandOverDoesNotPark) {
  ProgressPolicy p;
  ProgressThreadPolicy th(p, T0, /*has_wait_fd=*/false);
  uint64_t t = T0;
  rounds_away(p, t, 800'000, 1);
  p.poll_begins(t, false);
  ASSERT_EQ(th.after_pass(t, 0).kind, ThreadStep::kNap);
  ASSERT_TRUE(p.completions_returned(t + 10, false));
  th.nap_over();
  const ThreadStep s = th.after_pass(t + 20, 0);
  EXPECT_EQ(s.kind, ThreadStep::kPark);
  EXPECT_EQ(s.ns, kSliceNs) << "a slice: nothing would wake a long park";
}

// ---- progress = poll on crowded CPUs ----------------------------------------------------

// One window of spinning in which the thread was on a CPU `permille`/1000 of the time:
// the reading at its end.
void spin_window(PollModePolicy& pm, uint64_t& t, uint64_t& cpu, uint64_t permille) {
  ASSERT_FALSE(pm.due(t + kPollWindowNs - 1)) << "not before the window ends";
  t += kPollWindowNs;
  cpu += kPollWindowNs / 1000 * permille;
  ASSERT_TRUE(pm.due(t));
  pm.reading(t, cpu);
}

TEST(PollMode, SpinsWhileItGetsItsCpu) {
  uint64_t t = T0, cpu = 5'000'000;
  PollModePolicy pm(t, cpu);
  for (int i = 0; i < 100; ++i) spin_window(pm, t, cpu, 800);  // 20 % off: a busy, not full, CPU
  EXPECT_TRUE(pm.spinning());
  EXPECT_EQ(pm.backoffs(), 0u);
}

TEST(PollMode, OffTheCpuOverAQuarterOfAWindowBacksOff) {
  uint64_t t = T0, cpu = 0;
  PollModePolicy pm(t, cpu);
  spin_window(pm, t, cpu, 750);  // exactly a quarter: still its own
  EXPECT_TRUE(pm.spinning());
  spin_window(pm, t, cpu, 749);
  EXPECT_FALSE(pm.spinning());
  EXPECT_EQ(pm.backoffs(), 1u);
  EXPECT_NEAR(pm.last_off_cpu(), 0.251, 1e-9);
}

TEST(PollMode, BackedOffItLooksAgainAfterKPollProbeNs) {
  uint64_t t = T0, cpu = 0;
  PollModePolicy pm(t, cpu);
  spin_window(pm, t, cpu, 500);  // four spinning threads on two CPUs
  ASSERT_FALSE(pm.spinning());
  // Backed off, its CPU time says nothing (it sleeps by choice): no reading until the probe.
  EXPECT_FALSE(pm.due(t + kPollProbeNs - 1));
  t += kPollProbeNs;
  ASSERT_TRUE(pm.due(t));
  pm.reading(t, cpu);
  EXPECT_TRUE(pm.spinning()) << "one window of spinning, to measure";
  spin_window(pm, t, cpu, 940);  // 6 % off: still crowded
  EXPECT_FALSE(pm.spinning());
  EXPECT_EQ(pm.backoffs(), 1u) << "a failed probe is not a new back-off";
  t += kPollProbeNs;
  pm.reading(t, cpu);
  spin_window(pm, t, cpu, 950);  // 5 % off: the CPUs are free again
  EXPECT_TRUE(pm.spinning());
  spin_window(pm, t, cpu, 760);  // and spinning, a quarter is the bound again
  EXPECT_TRUE(pm.spinning());
}

TEST(PollMode, ALateReadingMeasuresTheWholeTime) {
  uint64_t t = T0, cpu = 0;
  PollModePolicy pm(t, cpu);
  // A pass that took long: the reading comes three windows late, and 30 of the 40 ms were
  // spent off the CPU, measured over all 40.
  t += 4 * kPollWindowNs;
  cpu += kPollWindowNs;
  pm.reading(t, cpu);
  EXPECT_NEAR(pm.last_off_cpu(), 0.75, 1e-9);
  EXPECT_FALSE(pm.spinning());
}

}  // namespace
}  // namespace uroce::verbs

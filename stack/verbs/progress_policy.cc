// The progress policy's decisions (progress_policy.h; docs/threading.md).
#include "verbs/progress_policy.h"

#include <algorithm>

namespace uroce::verbs {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;

/// A moving average over about the last eight samples.
uint64_t average(uint64_t avg, uint64_t sample) { return avg - avg / 8 + sample / 8; }

/// Evidence against waiting for the answer (kAnswerMiss).
void answer_missed(std::atomic<uint32_t>& score) {
  const uint32_t s = score.load(kRelaxed);
  score.store(s > kAnswerMiss ? s - kAnswerMiss : 0, kRelaxed);
}
}  // namespace

// ---- The application's threads ----------------------------------------------------------

void ProgressPolicy::app_back(uint64_t now, bool posted, uint64_t last_rx_ns) {
  const uint64_t last = last_completion_.load(kRelaxed);
  if (last == 0) return;
  last_completion_.store(0, kRelaxed);
  const uint64_t gap = now - last;
  app_gap_ns_.store(average(app_gap_ns_.load(kRelaxed), gap), kRelaxed);
  // It waited for the answer if it stayed away until a packet came and was back just after
  // it, or if its poll really waited for the answer and it then posted at once (a posting
  // loop whose poll found the next packet within moments does not count).
  const uint64_t answered = answered_after_.exchange(0, kRelaxed);
  if (answered == kNeutral) return;
  uint64_t wait = 0;
  if (answered != 0) {
    if (posted && gap < kAnswerSlackNs && answered >= kAnswerMinAwayNs) wait = answered;
  } else if (last_rx_ns <= last) {
    // Nothing came since the completions: the answer came with them (a reply and the ACK
    // it carried, in one pass) or there was none to wait for. Either way, no evidence.
    return;
  } else if (gap >= kAnswerMinAwayNs && now - last_rx_ns < kAnswerSlackNs) {
    wait = last_rx_ns - last;
  }
  if (wait == 0) {
    answer_missed(answer_score_);
    return;
  }
  const uint64_t a = answer_gap_ns_.load(kRelaxed);
  answer_gap_ns_.store(a == 0 ? wait : average(a, wait), kRelaxed);
  const uint32_t score = answer_score_.load(kRelaxed);
  if (score < kAnswerScoreMax) answer_score_.store(score + 1, kRelaxed);
}

void ProgressPolicy::post_begins(uint64_t now, uint64_t rx_seq, uint64_t last_rx_ns) {
  last_app_poll_.store(now, kRelaxed);
  // A reply: a post soon after a poll that returned completions (reply_window), judged by
  // the window the replies before it made; then it joins their average.
  if (const uint64_t polled = completions_polled_at_.exchange(0, kRelaxed); polled != 0) {
    const uint64_t gap = now - polled;
    const uint32_t score = reply_score_.load(kRelaxed);
    if (gap > reply_window()) {
      reply_score_.store(0, kRelaxed);
    } else if (score < kReplyScore) {
      reply_score_.store(score + 1, kRelaxed);
    }
    if (gap <= kMaxAckHoldNs) {
      const uint64_t a = reply_gap_ns_.load(kRelaxed);
      reply_gap_ns_.store(a == 0 ? std::max<uint64_t>(gap, 1) : average(a, gap), kRelaxed);
    }
  }
  rx_seq_at_post_.store(rx_seq, kRelaxed);
  app_back(now, true, last_rx_ns);
}

bool ProgressPolicy::batch_post(uint64_t now) {
  // A posting loop (the previous post returned moments ago): leave this one to the next pass,
  // which sends everything posted since in one go. The first post after a pause (a latency
  // test's every post) is sent at once, and so is the kBatchMax-th waiting one.
  if (!batch_ || now - last_post_end_.load(kRelaxed) >= kBatchGapNs) return false;
  const uint32_t waiting = batched_.fetch_add(1);
  if (waiting + 1 >= kBatchMax) return false;
  if (waiting == 0) first_batched_.store(now, kRelaxed);
  return true;
}

bool ProgressPolicy::kick_for_batch(uint64_t now) {
  // Who sends a batched post: the application's next poll or post, as a posting loop's comes
  // soon. Nobody must wait long for one that does not come back (it spins on memory for the
  // burst's answer, say): once the progress thread had to send posts the application left
  // waiting (last_rescue, in pass_takes_batch), a napping one whose nap ends later than
  // kBatchFlushNs is kicked out of it (it naps that long at most while posts wait). A nap
  // whose end is not published yet (`nap_until` in the past) counts as a long one. Before
  // such a rescue, the longest wait is a nap (kMaxAppNapNs).
  if (now - last_rescue_.load(kRelaxed) >= kRescueMemoryNs || !napping_.load()) return false;
  const uint64_t until = nap_until_.load();
  return (until < now || until > now + kBatchFlushNs) && napping_.exchange(false);
}

uint64_t ProgressPolicy::poll_begins(uint64_t now, bool cq_armed) {
  last_app_poll_.store(now, kRelaxed);
  last_cq_poll_.store(now, kRelaxed);
  // Never on a CQ armed for a completion event: its program polls it once more before it
  // sleeps in the kernel.
  return !cq_armed && reply_score_.load(kRelaxed) >= kReplyScore ? reply_window() : 0;
}

uint64_t ProgressPolicy::reply_window() const {
  return std::clamp<uint64_t>(2 * reply_gap_ns_.load(kRelaxed), kAckHoldNs, kMaxAckHoldNs);
}

AnswerPlan ProgressPolicy::answer_plan(bool has_channel, uint64_t rx_seq) {
  // Never on a CQ with a completion channel: its application sleeps in the kernel meanwhile
  // and wants its CPU back.
  if (answer_score_.load(kRelaxed) < kAnswerScore || has_channel) return {};
  const uint64_t budget =
      std::min(2 * answer_gap_ns_.load(kRelaxed) + kAnswerSlackNs, kMaxAnswerWaitNs);
  // Since the application's last post, its completions' packet (an ACK) came; the one after
  // it is the answer, which may be here already (both in one pass).
  if (rx_seq - rx_seq_at_post_.load(kRelaxed) >= 2) {
    answered_after_.store(kNeutral, kRelaxed);
    return {AnswerPlan::kCameAlready, 0};
  }
  return {AnswerPlan::kWait, budget};
}

void ProgressPolicy::answer_waited(bool came, uint64_t waited_ns) {
  if (!came) {  // the application is handed over as before
    answer_missed(answer_score_);
    return;
  }
  answered_after_.store(std::max<uint64_t>(waited_ns, 1), kRelaxed);
}

bool ProgressPolicy::completions_returned(uint64_t now, bool awaited) {
  last_completion_.store(now, kRelaxed);
  completions_polled_at_.store(now, kRelaxed);
  // An application that tends to stay away after its completions (it spins on memory, or
  // sleeps) hands the receiving to the progress thread at once: kicked out of its nap, it
  // parks until traffic rather than wait for the nap to end.
  if (awaited || app_gap_ns_.load(kRelaxed) <= kAppAwayNs || !napping_.load(kRelaxed) ||
      !napping_.exchange(false))
    return false;
  handoff_.store(true);
  return true;
}

bool ProgressPolicy::app_sleeps() {
  last_app_poll_.store(0, kRelaxed);
  return napping_.exchange(false);
}

// ---- Whoever runs a pass ----------------------------------------------------------------

bool ProgressPolicy::pass_takes_batch(uint64_t now, bool progress_thread) {
  if (batched_.exchange(0, kRelaxed) == 0) return false;
  // The progress thread sending posts that waited longer than kAppAwayNs while the
  // application did not poll rescues an application that does not come back after posting:
  // from now on its batches get the progress thread's kBatchFlushNs bound (post_made).
  if (progress_thread) {
    const uint64_t first = first_batched_.load(kRelaxed);
    if (now - first > kAppAwayNs && last_cq_poll_.load(kRelaxed) < first)
      last_rescue_.store(now, kRelaxed);
  }
  return true;
}

// ---- The progress thread ----------------------------------------------------------------

bool PollModePolicy::reading(uint64_t now, uint64_t cpu_ns) {
  if (state_ == kBackedOff) {  // time to look again: one window of spinning
    state_ = kProbing;
    start_window(now, cpu_ns);
    return false;
  }
  const uint64_t wall = now - window_at_;
  const uint64_t cpu = cpu_ns - window_cpu_;
  last_off_ = wall == 0 || cpu >= wall ? 0.0 : static_cast<double>(wall - cpu) / static_cast<double>(wall);
  const bool crowded = state_ == kSpinning ? last_off_ > kPollOversubscribed : last_off_ > kPollFree;
  if (crowded) {
    const bool backs_off = state_ == kSpinning;
    if (backs_off) ++backoffs_;
    state_ = kBackedOff;
    next_ = now + kPollProbeNs;
    return backs_off;
  }
  state_ = kSpinning;
  start_window(now, cpu_ns);
  return false;
}

ThreadStep ProgressThreadPolicy::after_pass(uint64_t now, size_t work) {
  // The application handed over (it got its completions and waits elsewhere): it is away
  // until it posts or polls again. The exchange first: a hand-over that lands between the
  // two then still names the poll that made it.
  const bool handed = p_.handoff_.exchange(false);
  const uint64_t last_app = p_.last_app_poll_.load();
  if (handed) handed_at_ = last_app;
  const bool away = last_app == handed_at_;
  const bool app_active = now - last_app < kAppActiveNs && !away;
  if (work != 0) last_work_ = now;
  if (work != 0 && !app_active) {
    idle_ = 0;
    return {ThreadStep::kPass, 0};
  }
  if (app_active) {
    // Out of its way, and back soon after it stops (then to wait for traffic): a poll that
    // returns completions hands over at once when this application tends to stay away
    // after them (completions_returned). Posts the application batched wait for a pass: nap
    // kBatchFlushNs at most while there are some. `napping` is published before `batched`
    // is read, and a poster bumps `batched` before it reads `napping`: one sees the other.
    p_.nap_until_.store(now + app_nap_);
    p_.napping_.store(true);
    uint64_t nap = app_nap_;
    if (p_.batched_.load() != 0 && nap > kBatchFlushNs) {
      nap = kBatchFlushNs;
      p_.nap_until_.store(now + nap);
    }
    app_nap_ = std::min<uint64_t>(app_nap_ * 2, kMaxAppNapNs);
    return {ThreadStep::kNap, nap};
  }
  app_nap_ = kAppAwayNs;
  ++idle_;
  // Wherever the application waits now (spinning on memory, most likely), a spinning
  // progress thread would take its CPU: sleep until traffic instead.
  if (away && has_fd_) return {ThreadStep::kPark, kMaxParkNs};
  if (now - last_work_ < kSpinNs) return {ThreadStep::kYield, 0};  // more traffic soon after some
  if (has_fd_) return {ThreadStep::kPark, kMaxParkNs};
  return {ThreadStep::kPark, idle_ > kIdleSlices ? kIdleSliceNs : kSliceNs};  // naps, longer once long idle
}

}  // namespace uroce::verbs

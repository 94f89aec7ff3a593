// The progress policy (progress.h; docs/threading.md): the application's side, the progress
// thread, and the hand-offs between them.
#include "verbs/progress.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "verbs/provider.h"

namespace uroce::verbs {

namespace {
// The progress thread (docs/threading.md). It runs engine passes while there is work. With
// none, it sleeps in the kernel (park) until a frame arrives, the engine's next deadline
// (retransmit, RNR, ARP, the link watch), or a kick on wake_fd from a thread that left the
// engine work. While an application thread is polling its CQ right now, that thread drives
// the engine, and the progress thread naps instead of competing with it for the CPU.
thread_local bool t_progress_thread = false;

/// Sleeps until traffic (on `port_fd`, if there is one), the engine's deadline, a kick, or
/// `max_ns`.
/// Returns at once if a pass run after publishing `parked` finds work (a poster may have
/// seen `parked` false and not kicked).
void park(Runtime* rt, int port_fd, uint64_t max_ns) {
  // Until it knows when it will wake, a thread that leaves work must assume "never".
  rt->progress.parked_until.store(UINT64_MAX);
  rt->progress.parked.store(true);
  // One more pass after publishing `parked`: work left by a thread that saw it false is done
  // here. If another thread holds the engine, that thread sees `parked` when it lets go.
  size_t work = 0;
  uint64_t deadline = 0;
  if (rt->emu.try_lock()) {
    rt->progress.pending.store(false);
    work = rt->pass_locked();
    deadline = rt->deadline_locked();
    rt->emu.unlock();
  }
  const uint64_t now = now_ns();
  const uint64_t until = std::min(deadline, now + max_ns);
  rt->progress.parked_until.store(until);
  if (work == 0 && !rt->progress.pending.load() && until > now) {
    StatsShm* st = rt->stats;
    if (st != nullptr) {
      __atomic_store_n(&st->progress_parked, 1, __ATOMIC_RELAXED);
      __atomic_store_n(&st->progress_parks, st->progress_parks + 1, __ATOMIC_RELAXED);
    }
    pollfd fds[2] = {{rt->progress.wake_fd, POLLIN, 0}, {port_fd, POLLIN, 0}};
    const uint64_t ns = until - now;
    const timespec ts{static_cast<time_t>(ns / 1'000'000'000),
                      static_cast<long>(ns % 1'000'000'000)};
    ppoll(fds, port_fd >= 0 ? 2 : 1, &ts, nullptr);
    if (fds[0].revents & POLLIN) {
      uint64_t n;
      [[maybe_unused]] const ssize_t r = read(rt->progress.wake_fd, &n, sizeof n);
    }
    if (port_fd >= 0 && (fds[1].revents & POLLERR)) {
      // A socket error (a packet socket gets ENETDOWN when its interface goes down) stays
      // pending, and the socket polls ready with POLLERR, until somebody reads it: the ring
      // is read without a system call, so nobody would, and every park would return at
      // once from here on. Reading it is all there is to do: the kernel re-attaches the
      // socket when the interface comes back up (the link watch reports both).
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(port_fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (st != nullptr) {
      uint64_t* why = (port_fd >= 0 && (fds[1].revents & POLLIN)) ? &st->progress_woke_traffic
                      : (fds[0].revents & POLLIN)                 ? &st->progress_woke_kick
                                                                  : &st->progress_woke_deadline;
      __atomic_store_n(why, *why + 1, __ATOMIC_RELAXED);
      __atomic_store_n(&st->progress_parked, 0, __ATOMIC_RELAXED);
    }
  }
  rt->progress.parked.store(false);
}

}  // namespace

void progress_loop(Runtime* rt, bool poll_mode, int cpu) {
  t_progress_thread = true;
  if (cpu >= 0) {  // this thread only: the program's own threads keep their placement
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  // Without the eventfd nobody could wake a long park: nap in slices then.
  const int port_fd = rt->progress.wake_fd >= 0 ? rt->engine_port->wait_fd() : -1;
  uint32_t idle = 0;
  uint64_t last_work = now_ns();
  uint64_t app_nap = kAppAwayNs;  // doubles while the application stays active
  // last_app_poll when the application last handed over (it is away until that changes)
  uint64_t handed_at = UINT64_MAX;
  while (!rt->stop.load(std::memory_order_relaxed)) {
    size_t work = 0;
    rt->drive(false, &work);
    if (poll_mode) continue;
    const uint64_t now = now_ns();
    // The application handed over (it got its completions and waits elsewhere): it is away
    // until it posts or polls again.
    // The exchange first: a hand-over that lands between the two then still names the
    // poll that made it.
    const bool handed = rt->progress.handoff.exchange(false);
    const uint64_t last_app = rt->progress.last_app_poll.load();
    if (handed) handed_at = last_app;
    const bool away = last_app == handed_at;
    const bool app_active = now - last_app < kAppActiveNs && !away;
    if (work != 0) last_work = now;
    if (work != 0 && !app_active) {
      idle = 0;
      continue;
    }
    if (app_active) {
      // Out of its way, and back soon after it stops (then to wait for traffic): a poll that
      // returns completions hands over at once when this application tends to stay away
      // after them (see op_poll_cq).
      // Posts the application batched (send_posted) wait for a pass: nap kBatchFlushNs at
      // most while there are some. `napping` is published before `batched` is read, and a
      // poster bumps `batched` before it reads `napping`: one sees the other.
      rt->progress.nap_until.store(now + app_nap);
      rt->progress.napping.store(true);
      uint64_t nap = app_nap;
      if (rt->progress.batched.load() != 0 && nap > kBatchFlushNs) {
        nap = kBatchFlushNs;
        rt->progress.nap_until.store(now + nap);
      }
      pollfd p{rt->progress.wake_fd, POLLIN, 0};
      const timespec ts{0, static_cast<long>(nap)};
      if (ppoll(&p, 1, &ts, nullptr) > 0) {
        uint64_t n;
        [[maybe_unused]] const ssize_t r = read(rt->progress.wake_fd, &n, sizeof n);
      }
      rt->progress.napping.store(false);
      app_nap = std::min<uint64_t>(app_nap * 2, kMaxAppNapNs);
      continue;
    }
    app_nap = kAppAwayNs;
    ++idle;
    if (away && port_fd >= 0) {
      // Wherever the application waits now (spinning on memory, most likely), a spinning
      // progress thread would take its CPU: sleep until traffic instead.
      park(rt, port_fd, kMaxParkNs);
    } else if (now - last_work < kSpinNs) {
      std::this_thread::yield();  // more traffic is likely soon after some
    } else if (port_fd >= 0) {
      park(rt, port_fd, kMaxParkNs);
    } else {  // no descriptor to wait on: naps, longer once long idle
      park(rt, -1, idle > 20000 ? 1'000'000 : 20'000);
    }
  }
}


// ---- On the application's threads --------------------------------------------------------

/// The application is back (a poll or a post): how long since its last completions? And
/// was it waiting for the packet that came meanwhile (kAnswerSlackNs)?
void app_back(Runtime* rt, uint64_t now, bool posted) {
  ProgressState& p = rt->progress;
  const uint64_t last = p.last_completion.load(std::memory_order_relaxed);
  if (last == 0) return;
  p.last_completion.store(0, std::memory_order_relaxed);
  const uint64_t gap = now - last, avg = p.app_gap_ns.load(std::memory_order_relaxed);
  p.app_gap_ns.store(avg - avg / 8 + gap / 8, std::memory_order_relaxed);
  // It waited for the answer if it stayed away until a packet came and was back just after
  // it, or if its poll really waited for the answer (await_answer) and it then posted at once
  // (a posting loop whose poll found the next packet within moments does not count).
  const uint64_t answered = p.answered_after.exchange(0, std::memory_order_relaxed);
  if (answered == kAnswerNeutral) return;
  const uint64_t rx = rt->engine->last_rx_ns();
  uint64_t wait = 0;
  if (answered != 0) {
    if (posted && gap < kAnswerSlackNs && answered >= kAnswerMinAwayNs) wait = answered;
  } else if (gap >= kAnswerMinAwayNs && rx > last && now - rx < kAnswerSlackNs) {
    wait = rx - last;
  }
  if (wait == 0) {
    p.answer_score.store(0, std::memory_order_relaxed);
    return;
  }
  const uint64_t a = p.answer_gap_ns.load(std::memory_order_relaxed);
  p.answer_gap_ns.store(a == 0 ? wait : a - a / 8 + wait / 8, std::memory_order_relaxed);
  const uint32_t score = p.answer_score.load(std::memory_order_relaxed);
  if (score < kAnswerScore) p.answer_score.store(score + 1, std::memory_order_relaxed);
}

namespace {
/// Waiting for the answer (kAnswerSlackNs): a poll that returns completions to an application
/// that then only waits for its peer's next packet (spinning on the memory the packet
/// writes) receives that packet itself before it returns. Never on a CQ with a completion
/// channel (its application sleeps in the kernel meanwhile and wants its CPU back). True
/// when the answer came; a wait that ran out forgets the pattern (the application is handed
/// over as before).
bool await_answer(Runtime* rt, uint64_t since, ibv_cq* cq) {
  ProgressState& p = rt->progress;
  if (p.answer_score.load(std::memory_order_relaxed) < kAnswerScore || cq->channel != nullptr)
    return false;
  const uint64_t usual = p.answer_gap_ns.load(std::memory_order_relaxed);
  if (2 * usual + kAnswerSlackNs > kMaxAnswerWaitNs) {  // a peer too slow to wait for
    p.answer_score.store(0, std::memory_order_relaxed);
    return false;
  }
  // Since the application's last post, its completions' packet (an ACK) came; the one after
  // it is the answer, which may be here already (both in one pass).
  const uint64_t posted_at = p.rx_seq_at_post.load(std::memory_order_relaxed);
  if (rt->engine->rx_seq() - posted_at >= 2) {
    p.answered_after.store(kAnswerNeutral, std::memory_order_relaxed);
    return true;
  }
  const uint64_t before = rt->engine->rx_seq();
  uint64_t now = since;
  while (now - since < 2 * usual + kAnswerSlackNs && rt->engine->rx_seq() == before) {
    rt->drive(false);
    now = now_ns();
  }
  if (rt->engine->rx_seq() == before) {
    p.answer_score.store(0, std::memory_order_relaxed);
    return false;
  }
  p.answered_after.store(std::max<uint64_t>(now - since, 1), std::memory_order_relaxed);
  if (StatsShm* st = rt->stats) __atomic_fetch_add(&st->progress_answers, 1, __ATOMIC_RELAXED);
  return true;
}
}  // namespace

void app_posted(Runtime* rt) {
  const uint64_t now = now_ns();
  rt->progress.last_app_poll.store(now, std::memory_order_relaxed);
  // A reply: a post soon after a poll that returned completions (kAckHoldNs).
  ProgressState& p = rt->progress;
  if (const uint64_t polled = p.completions_polled_at.exchange(0, std::memory_order_relaxed);
      polled != 0) {
    const uint32_t score = p.reply_score.load(std::memory_order_relaxed);
    if (now - polled > kAckHoldNs) {
      p.reply_score.store(0, std::memory_order_relaxed);
    } else if (score < kReplyScore) {
      p.reply_score.store(score + 1, std::memory_order_relaxed);
    }
  }
  rt->progress.rx_seq_at_post.store(rt->engine->rx_seq(), std::memory_order_relaxed);
  app_back(rt, now, true);
}

void send_posted(Runtime* rt) {
  const uint64_t now = now_ns();
  // A posting loop (the previous post returned moments ago): leave this one to the next pass,
  // which sends everything posted since in one go. The first post after a pause (a latency
  // test's every post) is sent at once.
  uint32_t waiting = 0;
  if (rt->progress.batch && now - rt->progress.last_post_end.load(std::memory_order_relaxed) < kBatchGapNs &&
      (waiting = rt->progress.batched.fetch_add(1)) + 1 < kBatchMax) {
    if (waiting == 0) rt->progress.first_batched.store(now, std::memory_order_relaxed);
    rt->progress.pending.store(true);
    // Who sends it: the application's next poll or post, as a posting loop's comes soon.
    // Nobody must wait long for one that does not come back (it spins on memory for the
    // burst's answer, say): a parked progress thread is woken (once per park), and once the
    // progress thread had to send posts the application left waiting (last_rescue, in
    // drive()), a napping one whose nap ends later than kBatchFlushNs is kicked out of it
    // (it naps that long at most while posts wait). A nap whose end is not published yet
    // (`nap_until` in the past) counts as a long one. Before such a rescue, the longest wait
    // is a nap (kMaxAppNapNs).
    if (rt->progress.parked.load()) {
      rt->wake_if_needed(now);
    } else if (now - rt->progress.last_rescue.load(std::memory_order_relaxed) < kRescueMemoryNs &&
               rt->progress.napping.load()) {
      const uint64_t until = rt->progress.nap_until.load();
      if ((until < now || until > now + kBatchFlushNs) && rt->progress.napping.exchange(false)) rt->kick();
    }
    rt->progress.last_post_end.store(now, std::memory_order_relaxed);
    return;
  }
  rt->drive(true);  // send now, or leave it to the thread running the engine
  rt->progress.last_post_end.store(now_ns(), std::memory_order_relaxed);
}

/// Learns how soon this application uses the device again (polls or posts) after getting
/// completions; when it got some and tends to stay away afterwards (it spins on memory, or
/// sleeps), wakes the progress thread from its nap so that it waits for traffic in the
/// meantime (docs/threading.md).
int after_poll(Runtime* rt, int got, uint64_t now, ibv_cq* cq) {
  app_back(rt, now, false);
  if (got > 0) {
    // An application that waits for the answer right here gets it from this poll: it is
    // back at once, and the progress thread is neither needed nor woken.
    const bool awaited = await_answer(rt, now, cq);
    now = now_ns();
    rt->progress.last_completion.store(now, std::memory_order_relaxed);
    rt->progress.completions_polled_at.store(now, std::memory_order_relaxed);
    if (!awaited && rt->progress.app_gap_ns.load(std::memory_order_relaxed) > kAppAwayNs &&
        rt->progress.napping.load(std::memory_order_relaxed) && rt->progress.napping.exchange(false)) {
      rt->progress.handoff.store(true);
      rt->kick();
    }
  }
  return got;
}

// ---- Between them ---------------------------------------------------------------------

bool Runtime::drive(bool posted, size_t* work) {
  // seq_cst on `pending` on both sides: a poster's store and the holder's load after unlock
  // must not pass each other (a try_lock that fails gives no ordering of its own).
  if (posted) progress.pending.store(true);
  bool ran = false;
  do {
    // Whoever holds the engine sees `pending` after it lets go (the loop below), so work
    // posted while it ran is never stranded.
    if (!emu.try_lock()) return ran;
    progress.pending.store(false);
    // This pass sends what was batched. The progress thread sending posts that waited
    // longer than kAppAwayNs while the application did not poll rescues an application that
    // does not come back after posting: from now on its batches get the progress thread's
    // kBatchFlushNs bound (send_posted).
    if (progress.batched.exchange(0, std::memory_order_relaxed) != 0 && t_progress_thread) {
      const uint64_t now = now_ns(), first = progress.first_batched.load(std::memory_order_relaxed);
      if (now - first > kAppAwayNs && progress.last_cq_poll.load(std::memory_order_relaxed) < first)
        progress.last_rescue.store(now, std::memory_order_relaxed);
    }
    const size_t w = pass_locked();
    if (work != nullptr) *work += w;
    // The progress thread parked: does it wake in time for what the engine has now?
    const bool check = !t_progress_thread && progress.parked.load();
    const uint64_t d = check ? deadline_locked() : 0;
    emu.unlock();
    if (check) wake_if_needed(d);
    ran = true;
  } while (progress.pending.load());
  return ran;
}

void Runtime::kick() {
  if (inherited()) return;  // the parent's progress thread, which is not ours to wake
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t r = write(progress.wake_fd, &one, sizeof one);
}

uint64_t Runtime::deadline_locked() const {
  // next_deadline() walks the timer wheel: asked only when the progress thread parks or is
  // parked, never on every pass.
  uint64_t d = engine->next_deadline();
  if (cm) d = std::min(d, cm->next_deadline());
  if (link_fd >= 0) d = std::min(d, link_next);
  if (stats != nullptr) d = std::min(d, stats_next);
  return d;
}

void Runtime::wake_if_needed(uint64_t deadline_ns) {
  // seq_cst: pairs with park()'s store of `parked` and the pass it runs after that store.
  if (t_progress_thread || !progress.parked.load()) return;
  if (deadline_ns >= progress.parked_until.load()) return;  // it wakes in time by itself
  if (progress.parked.exchange(false)) kick();  // one kick per park is enough
}

}  // namespace uroce::verbs

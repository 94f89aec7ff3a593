// The progress policy (progress.h; docs/threading.md): the application's side, the progress
// thread, and the hand-offs between them.
#include "verbs/progress.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
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

/// This thread's CPU time (ns).
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

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
  ProgressThreadPolicy policy(rt->progress.policy, now_ns(), port_fd >= 0);
  // progress = poll: spins while it gets its CPU (PollModePolicy), else as progress = auto.
  PollModePolicy poll(now_ns(), thread_cpu_ns());
  while (!rt->stop.load(std::memory_order_relaxed)) {
    size_t work = 0;
    rt->drive(false, &work);
    const uint64_t now = now_ns();
    if (poll_mode) {
      if (poll.due(now) && poll.reading(now, thread_cpu_ns()) && rt->stats != nullptr)
        __atomic_fetch_add(&rt->stats->progress_backoffs, 1, __ATOMIC_RELAXED);
      if (poll.spinning()) continue;
    }
    const ThreadStep step = policy.after_pass(now, work);
    switch (step.kind) {
      case ThreadStep::kPass: break;
      case ThreadStep::kNap: {  // out of the application's way; a kick ends it early
        pollfd p{rt->progress.wake_fd, POLLIN, 0};
        const timespec ts{static_cast<time_t>(step.ns / 1'000'000'000),
                          static_cast<long>(step.ns % 1'000'000'000)};
        if (ppoll(&p, 1, &ts, nullptr) > 0) {
          uint64_t n;
          [[maybe_unused]] const ssize_t r = read(rt->progress.wake_fd, &n, sizeof n);
        }
        policy.nap_over();
        break;
      }
      case ThreadStep::kYield: std::this_thread::yield(); break;
      case ThreadStep::kPark: park(rt, port_fd, step.ns); break;
    }
  }
}


// ---- On the application's threads --------------------------------------------------------

namespace {
/// Waiting for the answer (kAnswerSlackNs): a poll that returns completions to an application
/// that then only waits for its peer's next packet (spinning on the memory the packet
/// writes) receives that packet itself before it returns. True when the answer came.
bool await_answer(Runtime* rt, uint64_t since, ibv_cq* cq, uint64_t ack_hold_ns) {
  ProgressPolicy& p = rt->progress.policy;
  const AnswerPlan plan = p.answer_plan(cq->channel != nullptr, rt->engine->rx_seq());
  if (plan.kind != AnswerPlan::kWait) return plan.kind == AnswerPlan::kCameAlready;
  const uint64_t before = rt->engine->rx_seq();
  uint64_t now = since;
  // The pass that receives the answer acknowledges it: that ACK, too, waits for the reply the
  // application posts as soon as it sees the answer (ib_write_lat: its WRITE), and leaves
  // with it in one write.
  while (now - since < plan.budget_ns && rt->engine->rx_seq() == before) {
    drive_holding_acks(rt, ack_hold_ns);
    now = now_ns();
  }
  const bool came = rt->engine->rx_seq() != before;
  p.answer_waited(came, now - since);
  if (came && rt->stats != nullptr) __atomic_fetch_add(&rt->stats->progress_answers, 1, __ATOMIC_RELAXED);
  return came;
}
}  // namespace

void app_posted(Runtime* rt) {
  rt->progress.policy.post_begins(now_ns(), rt->engine->rx_seq(), rt->engine->last_rx_ns());
}

void send_posted(Runtime* rt) {
  const uint64_t now = now_ns();
  if (!rt->progress.policy.batch_post(now)) {
    rt->drive(true);  // send now, or leave it to the thread running the engine
    rt->progress.policy.post_returned(now_ns());
    return;
  }
  // Batched: published before `parked` is read (park() publishes `parked`, then runs a pass:
  // one of the two sees the other). A parked progress thread is woken if it would sleep
  // through the post; a napping one kicked when the policy says so.
  rt->progress.pending.store(true);
  if (rt->progress.parked.load()) {
    rt->wake_if_needed(now);
  } else if (rt->progress.policy.kick_for_batch(now)) {
    rt->kick();
  }
  rt->progress.policy.post_returned(now);
}

/// Learns how soon this application uses the device again (polls or posts) after getting
/// completions; when it got some and tends to stay away afterwards (it spins on memory, or
/// sleeps), wakes the progress thread from its nap so that it waits for traffic in the
/// meantime (docs/threading.md).
int after_poll(Runtime* rt, int got, uint64_t now, ibv_cq* cq, uint64_t ack_hold_ns) {
  ProgressPolicy& p = rt->progress.policy;
  p.poll_back(now, rt->engine->last_rx_ns());
  if (got > 0) {
    // An application that waits for the answer right here gets it from this poll: it is
    // back at once, and the progress thread is neither needed nor woken.
    const bool awaited = await_answer(rt, now, cq, ack_hold_ns);
    if (p.completions_returned(now_ns(), awaited)) rt->kick();
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
    // This pass sends what was batched (the progress thread's may be a rescue: post_made).
    progress.policy.pass_takes_batch(t_progress_thread ? now_ns() : 0, t_progress_thread);
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

// The progress policy's decisions, as a state machine of its own (docs/threading.md): when a
// post leaves or waits for the next pass (doorbell batching), when a poll waits for the
// answer, when ACKs are kept for the reply, when the progress thread naps, yields or parks.
//
// Nothing here reads a clock, takes a lock, makes a system call or touches the engine: every
// decision is a function of the times and the engine's receive counters handed in (`now`,
// `rx_seq`, `last_rx_ns`) and of the state below, and what it asks for is returned for the
// caller to do (progress.cc: wake or kick the progress thread, run passes, nap, park). So each
// rule is tested on its boundaries with made-up times (tests/verbs/progress_policy_test.cc),
// and the provider's threads only carry the decisions out.
//
// ProgressPolicy is shared by the application's threads and the progress thread: its fields
// are atomics, read and written without the engine lock (a decision made on stale values is
// a worse guess, never a lost post: the hand-offs that make sure of that are Runtime::drive
// and park in progress.cc). ProgressThreadPolicy is the progress thread's own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace uroce::verbs {

/// An application that used the device (posted, polled) this recently is taken to be still
/// at it: it drives the engine itself, and the progress thread stays out of its way.
inline constexpr uint64_t kAppActiveNs = 1'000'000;
/// An application that, after getting completions, comes back to the device later than this
/// (on average) is taken to wait elsewhere meanwhile (spinning on memory, sleeping): its
/// completions hand the receiving over to the progress thread at once.
inline constexpr uint64_t kAppAwayNs = 20'000;
/// Doorbell batching: a post less than this after the previous post returned is batched...
inline constexpr uint64_t kBatchGapNs = 1'000;
/// ... unless this many are waiting already (a GSO super-frame's worth of packets) ...
inline constexpr uint32_t kBatchMax = 64;
/// ... and the progress thread sends what waits within this, if the application neither
/// polls nor posts again (it spins on memory, say) ...
inline constexpr uint64_t kBatchFlushNs = 50'000;
/// ... once it had to do so within this long (before that, the application's own next
/// poll or post is relied on, and the progress thread's nap bounds the wait).
inline constexpr uint64_t kRescueMemoryNs = 10'000'000;
/// How long the progress thread keeps running passes (yielding between them) after its last
/// work before it parks: traffic comes in bursts, and the next frame of one is then served
/// without a wake-up.
inline constexpr uint64_t kSpinNs = 200'000;
/// The longest nap while an application thread keeps polling.
inline constexpr uint64_t kMaxAppNapNs = 1'000'000;
/// The longest park: a bound on what a missed kick could cost.
inline constexpr uint64_t kMaxParkNs = 100'000'000;
/// A port with no descriptor to wait on: the progress thread naps in slices of this, and of
/// kIdleSliceNs once it found nothing to do kIdleSlices times in a row.
inline constexpr uint64_t kSliceNs = 20'000;
inline constexpr uint64_t kIdleSliceNs = 1'000'000;
inline constexpr uint32_t kIdleSlices = 20'000;
/// Waiting for the answer: an application that, after getting its completions, stays away
/// at least kAnswerMinAwayNs and comes back within kAnswerSlackNs of the next packet's
/// arrival waits for that packet (it spins on the memory the peer writes, as ib_write_lat
/// does; the slack covers a progress thread that had to be woken for the packet) ...
inline constexpr uint64_t kAnswerMinAwayNs = 2'000;
inline constexpr uint64_t kAnswerSlackNs = 20'000;
/// ... when the evidence says so: each such return scores one, up to kAnswerScoreMax; each
/// miss (a return later than that after a packet, a wait that ran out) takes kAnswerMiss
/// off. One miss does not undo what many rounds showed: on a machine whose cores are all
/// busy (two spinning applications on two cores), a preempted peer makes a late round now
/// and then, and each forgotten wait would cost a wake-up of the progress thread, which
/// there waits for a core itself (docs/threading.md, "Waiting for the answer"). A return
/// with no packet since the completions (the answer came with them) says nothing ...
inline constexpr uint32_t kAnswerScore = 4;
inline constexpr uint32_t kAnswerScoreMax = 8;
inline constexpr uint32_t kAnswerMiss = 2;
/// ... and then its poll that returns completions receives until the next packet comes
/// (for twice the usual wait plus kAnswerSlackNs, at most kMaxAnswerWaitNs) before
/// returning them: the thread would only spin meanwhile, and the progress thread need not
/// be woken for the packet. The usual wait is what this machine and this peer take (a
/// moving average): no window here is tuned to one machine but the slack.
inline constexpr uint64_t kMaxAnswerWaitNs = 1'000'000;
/// The ACK rides with the reply: an application that posts within its reply window of a poll
/// that returned completions, kReplyScore times in a row, answers what it receives at once (a
/// ping-pong, a request-response middleware). Its polls (of CQs not armed for a completion
/// event) then keep ACKs that would leave alone for up to the window, so that each leaves
/// in one write with the reply that follows (Engine::hold_acks_next_poll): one system call,
/// and one trip through the kernel, fewer per message. An ACK that waited in vain resets the
/// count. The window is what this application takes on this machine: twice its usual reply
/// time (a moving average of the gaps from the poll to the post, of those up to
/// kMaxAckHoldNs), at least kAckHoldNs (also the first window), at most kMaxAckHoldNs: a
/// machine three times slower, or a sanitizer build, replies in 8 µs where this one takes 1.
inline constexpr uint64_t kAckHoldNs = 5'000;
inline constexpr uint64_t kMaxAckHoldNs = 50'000;
inline constexpr uint32_t kReplyScore = 3;

/// What a poll that returned completions does before it returns them (waiting for the answer).
struct AnswerPlan {
  enum Kind : uint8_t {
    kNone,         // return at once
    kCameAlready,  // the answer is here already (its pass ran): return at once
    kWait,         // run passes until the engine receives a packet, for budget_ns at most
  } kind = kNone;
  uint64_t budget_ns = 0;
};

class ProgressPolicy {
 public:
  explicit ProgressPolicy(bool batch = true) : batch_(batch) {}
  void set_batch(bool on) { batch_ = on; }  // DeviceConfig::batch, before any post

  // ---- The application's threads ----------------------------------------------------------

  /// A post to a send queue begins at `now` (the engine had received `rx_seq` packets, the
  /// last at `last_rx_ns`): the application is active, and this may be its reply.
  void post_begins(uint64_t now, uint64_t rx_seq, uint64_t last_rx_ns);
  /// Its WRs are in the ring: true if it is batched (left to the next pass), false if it is
  /// to be sent now.
  bool batch_post(uint64_t now);
  /// A batched post at `now`, when the progress thread is not parked (a parked one is woken
  /// if it would sleep through it): true if the progress thread is to be kicked out of its
  /// nap (the nap is claimed: kick exactly once). Asked after the post is published (the
  /// caller's `pending`), so that the progress thread sees the post or the poster sees it.
  bool kick_for_batch(uint64_t now);
  /// The post returns at `now` (batching measures the gap from here to the next post).
  void post_returned(uint64_t now) { last_post_end_.store(now, std::memory_order_relaxed); }

  /// A poll of a CQ begins at `now` (`cq_armed`: for a completion event). Returns how long
  /// the passes this poll drives may keep ACKs back for a reply (0: not at all).
  uint64_t poll_begins(uint64_t now, bool cq_armed);
  /// Posts wait for a pass: a poll sends them first.
  bool posts_waiting() const { return batched_.load(std::memory_order_relaxed) != 0; }
  /// A poll at `now` is over (it returned `got` completions; the last packet came at
  /// `last_rx_ns`): how soon the application came back after its last completions.
  void poll_back(uint64_t now, uint64_t last_rx_ns) { app_back(now, false, last_rx_ns); }
  /// A poll returned completions: does it wait for the answer first? (`has_channel`: the CQ
  /// has a completion channel; `rx_seq`: packets the engine received so far.)
  AnswerPlan answer_plan(bool has_channel, uint64_t rx_seq);
  /// The wait of a kWait plan is over: the answer came (after `waited_ns`) or not.
  void answer_waited(bool came, uint64_t waited_ns);
  /// The completions are returned at `now` (`awaited`: the poll waited for the answer and it
  /// came). True: hand the receiving to the progress thread (it was napping; the nap is
  /// claimed, kick it once).
  bool completions_returned(uint64_t now, bool awaited);
  /// The application sleeps in ibv_get_cq_event: the receiving is the progress thread's now.
  /// True: kick it (it was napping; the nap is claimed), as when `parked`.
  bool app_sleeps();

  // ---- Whoever runs a pass ----------------------------------------------------------------

  /// A pass begins at `now` and will send what was batched; `progress_thread`: it is the
  /// progress thread's. True if posts were waiting.
  bool pass_takes_batch(uint64_t now, bool progress_thread);
  /// The engine sent ACKs kept for a reply alone: this application does not answer at once.
  void ack_waited_in_vain() { reply_score_.store(0, std::memory_order_relaxed); }

  // ---- Readings (for the unit tests) ------------------------------------------------------
  uint32_t answer_score() const { return answer_score_.load(std::memory_order_relaxed); }
  uint32_t reply_score() const { return reply_score_.load(std::memory_order_relaxed); }
  /// How soon after a poll that returned completions a post counts as a reply, and how long
  /// ACKs then wait for it.
  uint64_t reply_window() const;
  uint64_t app_gap_ns() const { return app_gap_ns_.load(std::memory_order_relaxed); }
  uint64_t answer_gap_ns() const { return answer_gap_ns_.load(std::memory_order_relaxed); }
  uint32_t batched() const { return batched_.load(std::memory_order_relaxed); }
  bool napping() const { return napping_.load(); }
  uint64_t last_rescue() const { return last_rescue_.load(std::memory_order_relaxed); }

 private:
  friend class ProgressThreadPolicy;
  /// The application is back (a poll or a post): how long since its last completions? And
  /// was it waiting for the packet that came meanwhile?
  void app_back(uint64_t now, bool posted, uint64_t last_rx_ns);

  bool batch_;
  std::atomic<uint64_t> last_app_poll_{0};  // when an application thread last posted or polled
  // Doorbell batching: a post that comes less than kBatchGapNs after the previous one
  // returned is left for whoever drives the engine next (the application's next poll,
  // non-batched post or control verb, else the progress thread), so that a posting loop's
  // packets leave together, as sendmmsg batches and GSO super-frames.
  std::atomic<uint64_t> last_post_end_{0};  // when the last post to this device returned
  std::atomic<uint32_t> batched_{0};        // posts left to the next pass (reset by each pass)
  std::atomic<uint64_t> first_batched_{0};  // when the oldest post still batched was made
  std::atomic<uint64_t> last_cq_poll_{0};   // when an application thread last polled a CQ
  std::atomic<uint64_t> last_rescue_{0};    // when the progress thread last sent batched posts
                                            // that had waited over kAppAwayNs
  // How soon the application polls or posts again after a poll that returned completions (a
  // moving average, ns), and when that last happened (0: measured already).
  std::atomic<uint64_t> app_gap_ns_{0};
  std::atomic<uint64_t> last_completion_{0};
  // Waiting for the answer: how often in a row the application came back just after a packet
  // arrived, and how long after its completions that packet usually came (a moving average).
  std::atomic<uint32_t> answer_score_{0};
  // The last poll received the answer this long after it began (ns); kNeutral: the answer
  // had come already, the application's return says nothing.
  static constexpr uint64_t kNeutral = ~uint64_t{0};
  std::atomic<uint64_t> answered_after_{0};
  std::atomic<uint64_t> rx_seq_at_post_{0};  // the engine's rx_seq at the application's last post
  std::atomic<uint64_t> answer_gap_ns_{0};
  // The ACK rides with the reply: when the application's last poll returned completions, and
  // how often in a row it posted soon after one.
  std::atomic<uint64_t> completions_polled_at_{0};
  std::atomic<uint32_t> reply_score_{0};
  std::atomic<uint64_t> reply_gap_ns_{0};  // moving average of the replies' gaps (0: none yet)
  // The progress thread's nap (ProgressThreadPolicy): whether it naps, and until when. Taken
  // (exchange to false) by the one thread that kicks it out of it.
  std::atomic<bool> napping_{false};
  std::atomic<uint64_t> nap_until_{0};
  std::atomic<bool> handoff_{false};  // a poll handed the receiving over
};

/// `progress = poll` on a machine without a core to spare: a thread that spins beside
/// spinning applications on too few CPUs takes turns with them at the scheduler's pace
/// (milliseconds), and every packet waits for the turn (ib_write_lat on 2 cores: ~4,000 µs a
/// round, four spinning threads). The spinning thread measures what it gets: over each
/// kPollWindowNs of spinning, the share of the time it was not on a CPU (wall time minus its
/// own CPU time: a thread that never sleeps is off the CPU only when something else runs).
/// Over kPollOversubscribed it stops spinning and follows the shared policy (naps and parks,
/// as `progress = auto`); every kPollProbeNs it spins for one window again to see whether
/// the CPUs are free, and stays if it got all but kPollFree of the time.
inline constexpr uint64_t kPollWindowNs = 10'000'000;
inline constexpr uint64_t kPollProbeNs = 500'000'000;
inline constexpr double kPollOversubscribed = 0.25;
inline constexpr double kPollFree = 0.05;

/// The back-off of a spinning (`progress = poll`) progress thread. Its input is the time
/// (`now`) and the thread's own CPU time (`cpu_ns`, CLOCK_THREAD_CPUTIME_ID), read only when
/// `due` says so (once a window); no clock of its own.
class PollModePolicy {
 public:
  PollModePolicy(uint64_t now, uint64_t cpu_ns) { start_window(now, cpu_ns); }
  /// Is a reading of the thread's CPU time due at `now`?
  bool due(uint64_t now) const { return now >= next_; }
  /// The reading: what the thread does until the next one is due. True if it backs off
  /// (stops spinning, having spun) now.
  bool reading(uint64_t now, uint64_t cpu_ns);
  /// Spin (run the next pass at once), or follow the shared policy (ProgressThreadPolicy).
  bool spinning() const { return state_ != kBackedOff; }
  uint64_t backoffs() const { return backoffs_; }
  /// The share of the last window's time the thread was off the CPU.
  double last_off_cpu() const { return last_off_; }

 private:
  enum State : uint8_t { kSpinning, kBackedOff, kProbing };
  void start_window(uint64_t now, uint64_t cpu_ns) {
    window_at_ = now;
    window_cpu_ = cpu_ns;
    next_ = now + kPollWindowNs;
  }
  State state_ = kSpinning;
  uint64_t window_at_ = 0, window_cpu_ = 0, next_ = 0;
  uint64_t backoffs_ = 0;
  double last_off_ = 0;
};

/// What the progress thread does after a pass.
struct ThreadStep {
  enum Kind : uint8_t {
    kPass,   // run the next pass at once
    kNap,    // sleep ns (woken early by a kick), then ProgressThreadPolicy::nap_over
    kYield,  // give the CPU away once, then the next pass
    kPark,   // sleep in the kernel until traffic, the engine's deadline, a kick, or ns
  } kind = kPass;
  uint64_t ns = 0;
};

/// The progress thread's side of the policy: its own state, and the shared one.
class ProgressThreadPolicy {
 public:
  ProgressThreadPolicy(ProgressPolicy& shared, uint64_t now, bool has_wait_fd)
      : p_(shared), last_work_(now), has_fd_(has_wait_fd) {}
  /// A pass at `now` found `work` to do: what next?
  ThreadStep after_pass(uint64_t now, size_t work);
  /// A kNap is over (its time ran out, or a kick ended it).
  void nap_over() { p_.napping_.store(false); }

 private:
  ProgressPolicy& p_;
  uint64_t last_work_;
  bool has_fd_;
  uint32_t idle_ = 0;
  uint64_t app_nap_ = kAppAwayNs;  // doubles while the application stays active
  // last_app_poll when the application last handed over (it is away until that changes)
  uint64_t handed_at_ = UINT64_MAX;
};

}  // namespace uroce::verbs

// The progress policy (docs/threading.md): who runs the engine, and when. The engine runs in
// passes (Runtime::pass_locked) under the device's engine lock, taken by whoever wins its
// try-lock: an application thread that polls an empty CQ or posts, a control verb, or the
// progress thread. This room decides:
// - on the application's threads (app_back, app_posted, after_poll, send_posted): how soon
//   this application comes back, whether a post leaves now or waits for the next pass
//   (doorbell batching), and when the progress thread must be woken for it;
// - on the progress thread (progress_loop): run passes while there is work, nap while an
//   application thread is driving, park in the kernel until traffic, a deadline or a kick;
// - between them (Runtime::drive, wake_if_needed, kick): work posted while another thread
//   holds the engine is never left behind, and a parked thread wakes in time.
// Its state is ProgressState, one per device (Runtime::progress); its numbers are below.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

namespace uroce::verbs {

struct Runtime;

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
/// Waiting for the answer: an application that, after getting its completions, stays away
/// at least kAnswerMinAwayNs and comes back within kAnswerSlackNs of the next packet's
/// arrival waits for that packet (it spins on the memory the peer writes, as ib_write_lat
/// does; the slack covers a progress thread that had to be woken for the packet) ...
inline constexpr uint64_t kAnswerMinAwayNs = 2'000;
inline constexpr uint64_t kAnswerSlackNs = 20'000;
/// ... when it did so this many times in a row ...
inline constexpr uint32_t kAnswerScore = 4;
/// ... and then its poll that returns completions receives until the next packet comes
/// (for twice the usual wait plus kAnswerSlackNs; a peer whose answer would need longer
/// than this is not waited for) before returning them: the thread would only spin
/// meanwhile, and the progress thread need not be woken for the packet.
inline constexpr uint64_t kMaxAnswerWaitNs = 100'000;
inline constexpr uint64_t kAnswerNeutral = ~uint64_t{0};
/// The ACK rides with the reply: an application that posts within kAckHoldNs of a poll that
/// returned completions, kReplyScore times in a row, answers what it receives at once (a
/// ping-pong, a request-response middleware). Its polls (of CQs not armed for a completion
/// event) then keep ACKs that would leave alone for up to kAckHoldNs, so that each leaves
/// in one write with the reply that follows (Engine::hold_acks_next_poll): one system call,
/// and one trip through the kernel, fewer per message. An ACK that waited in vain resets the
/// count.
inline constexpr uint64_t kAckHoldNs = 5'000;
inline constexpr uint32_t kReplyScore = 3;

/// What the application's threads and the progress thread tell each other (atomics: read
/// and written without the engine lock).
struct ProgressState {
  std::atomic<bool> pending{false};  // new work was posted: the next engine pass must run
  std::atomic<uint64_t> last_app_poll{0};  // when an application thread last posted or polled
  // Doorbell batching (docs/threading.md): a post that comes less than kBatchGapNs after the
  // previous one returned is left for whoever drives the engine next (the application's
  // next poll, non-batched post or control verb, else the progress thread), so that a
  // posting loop's packets leave together, as sendmmsg batches and GSO super-frames.
  bool batch = true;                       // DeviceConfig::batch
  std::atomic<uint64_t> last_post_end{0};  // when the last post to this device returned
  std::atomic<uint32_t> batched{0};        // posts left to the next pass (reset by each pass)
  std::atomic<uint64_t> nap_until{0};      // when the progress thread's current nap ends
  std::atomic<uint64_t> first_batched{0};  // when the oldest post still batched was made
  std::atomic<uint64_t> last_cq_poll{0};   // when an application thread last polled a CQ
  std::atomic<uint64_t> last_rescue{0};    // when the progress thread last sent batched posts
                                           // that had waited over kAppAwayNs
  // How soon the application polls or posts again after a poll that returned completions (a
  // moving average, ns), and when that last happened (0: measured already). An application
  // that stays away (it spins on memory, or sleeps) hands the receiving over to the progress
  // thread at once: the poll sets `handoff` and kicks it out of its nap (`napping`).
  std::atomic<uint64_t> app_gap_ns{0};
  std::atomic<uint64_t> last_completion{0};
  // Waiting for the answer (kAnswerSlackNs): how often in a row the application came back
  // just after a packet arrived (Engine::last_rx_ns), and how long after its completions
  // that packet usually came (a moving average, ns).
  std::atomic<uint32_t> answer_score{0};
  // The last poll received the answer this long after it began (ns); kAnswerNeutral: the
  // answer had come already, the application's return says nothing.
  std::atomic<uint64_t> answered_after{0};
  std::atomic<uint64_t> rx_seq_at_post{0};  // Engine::rx_seq() at the application's last post
  std::atomic<uint64_t> answer_gap_ns{0};
  // The ACK rides with the reply (kAckHoldNs): when the application's last poll returned
  // completions, and how often in a row it posted soon after one.
  std::atomic<uint64_t> completions_polled_at{0};
  std::atomic<uint32_t> reply_score{0};
  std::atomic<bool> napping{false};
  std::atomic<bool> handoff{false};
  // Waking on traffic (docs/threading.md): with nothing to do, the progress thread sleeps in
  // ppoll on the port's wait_fd and on `wake_fd` until `parked_until`. A thread that leaves
  // the engine with work or a deadline sooner than that writes `wake_fd`.
  int wake_fd = -1;                          // eventfd
  std::atomic<bool> parked{false};
  std::atomic<uint64_t> parked_until{0};
};

/// The application is using the device (a poll or a post, datapath.cc): how long since its
/// last completions (app_back), and that it is active (app_posted, for posts).
void app_back(Runtime* rt, uint64_t now, bool posted);
void app_posted(Runtime* rt);
/// After a post to the send queue (ibv_post_send, ibv_wr_complete): sends now, or, when
/// this post follows the previous one closely, leaves it to the next pass (doorbell batching).
void send_posted(Runtime* rt);
/// A poll that returned `got` completions at `now` (datapath.cc's ibv_poll_cq): learns how
/// soon this application comes back after completions, and when it tends to stay away
/// (spinning on memory, sleeping), hands the receiving to the progress thread at once.
/// One that waits for the answer (kAnswerSlackNs) first receives it.
int after_poll(Runtime* rt, int got, uint64_t now, ibv_cq* cq);
/// The progress thread's body: until Runtime::stop. poll_mode: never sleeps (a core of its
/// own); cpu >= 0: pins this thread (only) there.
void progress_loop(Runtime* rt, bool poll_mode, int cpu);

}  // namespace uroce::verbs

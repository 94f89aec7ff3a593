// The progress policy (docs/threading.md): who runs the engine, and when. The engine runs in
// passes (Runtime::pass_locked) under the device's engine lock, taken by whoever wins its
// try-lock: an application thread that polls an empty CQ or posts, a control verb, or the
// progress thread. This room decides:
// - on the application's threads (app_posted, send_posted, after_poll): how soon
//   this application comes back, whether a post leaves now or waits for the next pass
//   (doorbell batching), and when the progress thread must be woken for it;
// - on the progress thread (progress_loop): run passes while there is work, nap while an
//   application thread is driving, park in the kernel until traffic, a deadline or a kick;
// - between them (Runtime::drive, wake_if_needed, kick): work posted while another thread
//   holds the engine is never left behind, and a parked thread wakes in time.
// Its decisions are ProgressPolicy's (progress_policy.h: a state machine with no clock of its
// own, unit-tested); its state is ProgressState, one per device (Runtime::progress).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "verbs/progress_policy.h"

namespace uroce::verbs {

struct Runtime;

/// The progress policy's shared state and the hand-offs between threads (atomics: read and
/// written without the engine lock). The decisions are `policy`'s (progress_policy.h); the
/// rest is how they are carried out.
struct ProgressState {
  ProgressPolicy policy;
  std::atomic<bool> pending{false};  // new work was posted: the next engine pass must run
  // Waking on traffic (docs/threading.md): with nothing to do, the progress thread sleeps in
  // ppoll on the port's wait_fd and on `wake_fd` until `parked_until`. A thread that leaves
  // the engine with work or a deadline sooner than that writes `wake_fd`.
  int wake_fd = -1;                          // eventfd
  std::atomic<bool> parked{false};
  std::atomic<uint64_t> parked_until{0};
};

/// A post to a send queue begins (datapath.cc, ext.cc): the application is active.
void app_posted(Runtime* rt);
/// After a post to the send queue (ibv_post_send, ibv_wr_complete): sends now, or, when
/// this post follows the previous one closely, leaves it to the next pass (doorbell batching).
void send_posted(Runtime* rt);
/// A poll that returned `got` completions at `now` (datapath.cc's ibv_poll_cq): learns how
/// soon this application comes back after completions, and when it tends to stay away
/// (spinning on memory, sleeping), hands the receiving to the progress thread at once.
/// One that waits for the answer (kAnswerSlackNs) first receives it, keeping ACKs back for
/// `ack_hold_ns` as the poll's own passes do (the reply follows the answer).
int after_poll(Runtime* rt, int got, uint64_t now, ibv_cq* cq, uint64_t ack_hold_ns);
/// The progress thread's body: until Runtime::stop. poll_mode: never sleeps (a core of its
/// own); cpu >= 0: pins this thread (only) there.
void progress_loop(Runtime* rt, bool poll_mode, int cpu);

}  // namespace uroce::verbs

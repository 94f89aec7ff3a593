// The data path of the provider: the context ops that verbs.h's inline ibv_post_send /
// ibv_post_recv / ibv_poll_cq / ibv_req_notify_cq call, and the progress policy's part that
// runs on the application's threads (how soon the application comes back, when a post
// leaves at once and when it waits for the next pass; docs/threading.md).
//
// None of these waits for the engine lock: posting goes into the queue under the queue's own
// lock and rings a doorbell, polling takes what is in the CQ, and either runs an engine pass
// only if nobody else is running one (Runtime::drive).
#include <atomic>
#include <cerrno>

#include "verbs/provider.h"

namespace uroce::verbs {

/// The application is back (a poll or a post): how long since its last completions?
void app_back(Runtime* rt, uint64_t now) {
  if (const uint64_t last = rt->last_completion.load(std::memory_order_relaxed); last != 0) {
    rt->last_completion.store(0, std::memory_order_relaxed);
    const uint64_t gap = now - last, avg = rt->app_gap_ns.load(std::memory_order_relaxed);
    rt->app_gap_ns.store(avg - avg / 8 + gap / 8, std::memory_order_relaxed);
  }
}

void app_posted(Runtime* rt) {
  const uint64_t now = now_ns();
  rt->last_app_poll.store(now, std::memory_order_relaxed);
  app_back(rt, now);
}

void send_posted(Runtime* rt) {
  const uint64_t now = now_ns();
  // A posting loop (the previous post returned moments ago): leave this one to the next pass,
  // which sends everything posted since in one go. The first post after a pause (a latency
  // test's every post) is sent at once.
  uint32_t waiting = 0;
  if (rt->batch && now - rt->last_post_end.load(std::memory_order_relaxed) < kBatchGapNs &&
      (waiting = rt->batched.fetch_add(1)) + 1 < kBatchMax) {
    if (waiting == 0) rt->first_batched.store(now, std::memory_order_relaxed);
    rt->pending.store(true);
    // Who sends it: the application's next poll or post, as a posting loop's comes soon.
    // Nobody must wait long for one that does not come back (it spins on memory for the
    // burst's answer, say): a parked progress thread is woken (once per park), and once the
    // progress thread had to send posts the application left waiting (last_rescue, in
    // drive()), a napping one whose nap ends later than kBatchFlushNs is kicked out of it
    // (it naps that long at most while posts wait). A nap whose end is not published yet
    // (`nap_until` in the past) counts as a long one. Before such a rescue, the longest wait
    // is a nap (kMaxAppNapNs).
    if (rt->parked.load()) {
      rt->wake_if_needed(now);
    } else if (now - rt->last_rescue.load(std::memory_order_relaxed) < kRescueMemoryNs &&
               rt->napping.load()) {
      const uint64_t until = rt->nap_until.load();
      if ((until < now || until > now + kBatchFlushNs) && rt->napping.exchange(false)) rt->kick();
    }
    rt->last_post_end.store(now, std::memory_order_relaxed);
    return;
  }
  rt->drive(true);  // send now, or leave it to the thread running the engine
  rt->last_post_end.store(now_ns(), std::memory_order_relaxed);
}

}  // namespace uroce::verbs

using namespace uroce;
using namespace uroce::verbs;

namespace {

// ---- Context ops (data path) ------------------------------------------------------------

/// Learns how soon this application uses the device again (polls or posts) after getting
/// completions; when it got some and tends to stay away afterwards (it spins on memory, or
/// sleeps), wakes the progress thread from its nap so that it waits for traffic in the
/// meantime (docs/threading.md).
int after_poll(Runtime* rt, int got, uint64_t now) {
  app_back(rt, now);
  if (got > 0) {
    rt->last_completion.store(now, std::memory_order_relaxed);
    if (rt->app_gap_ns.load(std::memory_order_relaxed) > kAppAwayNs &&
        rt->napping.load(std::memory_order_relaxed) && rt->napping.exchange(false)) {
      rt->handoff.store(true);
      rt->kick();
    }
  }
  return got;
}

int op_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  Runtime* rt = runtime_of(cq->context);
  const uint64_t now = now_ns();
  rt->last_app_poll.store(now, std::memory_order_relaxed);
  rt->last_cq_poll.store(now, std::memory_order_relaxed);
  // Posts batched by a posting loop leave now: the application polls for their completions.
  if (rt->batched.load(std::memory_order_relaxed) != 0) rt->drive(false);
  // What is already in the CQ first, without touching the engine.
  const int got = rt->engine->poll_cq(to_cq(cq), n, wc);
  if (got != 0 || n <= 0) return after_poll(rt, got, now);
  // Nothing there: a busy-polling application drives the engine itself, unless another
  // thread is doing so right now (then there is nothing to wait for: return empty).
  if (!rt->drive(false)) return after_poll(rt, 0, now);
  return after_poll(rt, rt->engine->poll_cq(to_cq(cq), n, wc), now);
}

int op_req_notify_cq(ibv_cq* cq, int) {
  // solicited_only is treated like "any completion": an extra wake-up is always allowed.
  Runtime* rt = runtime_of(cq->context);
  std::lock_guard<std::mutex> lock(rt->notify_mu);
  Cq* c = to_cq(cq);
  c->notify_seen = c->notify_gen.load(std::memory_order_acquire);
  if (!c->notify_armed) {
    c->notify_armed = true;
    rt->armed.push_back(c);
  }
  return 0;
}

int op_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Runtime* rt = runtime_of(qp->context);
  app_posted(rt);
  const ibv_send_wr* b = nullptr;
  const int rc = rt->engine->post_send(to_qp(qp), wr, &b);  // the WRs and the doorbell
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_send_wr*>(b);
  send_posted(rt);  // WRs ahead of a bad one were posted
  return rc;
}

int op_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Runtime* rt = runtime_of(qp->context);
  const ibv_recv_wr* b = nullptr;
  const int rc = rt->engine->post_recv(to_qp(qp), wr, &b);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_recv_wr*>(b);
  // Receives wait for traffic; only in ERR is there work now (flush completions).
  if (to_qp(qp)->post_state.load(std::memory_order_acquire) == IBV_QPS_ERR) rt->drive(true);
  return rc;
}

int op_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Runtime* rt = runtime_of(srq->context);
  const ibv_recv_wr* b = nullptr;
  const int rc = rt->engine->post_srq_recv(to_srq(srq), wr, &b);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_recv_wr*>(b);
  return rc;
}

}  // namespace

namespace uroce::verbs {

void install_data_ops(ibv_context_ops* o) {
  o->poll_cq = op_poll_cq;
  o->req_notify_cq = op_req_notify_cq;
  o->post_send = op_post_send;
  o->post_recv = op_post_recv;
  o->post_srq_recv = op_post_srq_recv;
}

}  // namespace uroce::verbs

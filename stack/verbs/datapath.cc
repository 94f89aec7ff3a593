// The data path of the provider: the context ops that verbs.h's inline ibv_post_send /
// ibv_post_recv / ibv_poll_cq / ibv_req_notify_cq call. When a post leaves and who runs the
// next pass is the progress policy's to say (progress.h: app_posted, send_posted, after_poll).
//
// None of these waits for the engine lock: posting goes into the queue under the queue's own
// lock and rings a doorbell, polling takes what is in the CQ, and either runs an engine pass
// only if nobody else is running one (Runtime::drive).
#include <sched.h>
#include <atomic>
#include <cerrno>

#include "verbs/provider.h"

using namespace uroce;
using namespace uroce::verbs;

namespace {

// ---- Context ops (data path) ------------------------------------------------------------

int op_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  Runtime* rt = runtime_of(cq->context);
  const uint64_t now = now_ns();
  // The passes this poll drives (and those waiting for the answer in after_poll) keep ACKs
  // back for the reply of an application that answers at once (its reply window).
  const uint64_t hold =
      rt->progress.policy.poll_begins(now, to_cq(cq)->notify_armed.load(std::memory_order_relaxed));
  const auto drive = [rt, hold] { return drive_holding_acks(rt, hold); };
  // Posts batched by a posting loop leave now: the application polls for their completions.
  if (rt->progress.policy.posts_waiting()) drive();
  // What is already in the CQ first, without touching the engine.
  const int got = rt->engine->poll_cq(to_cq(cq), n, wc);
  if (got != 0 || n <= 0) return after_poll(rt, got, now, cq, hold);
  // Nothing there: a busy-polling application drives the engine itself, unless another
  // thread is doing so right now (then there is nothing to wait for: return empty).
  if (!drive()) return after_poll(rt, 0, now, cq, hold);
  const int later = rt->engine->poll_cq(to_cq(cq), n, wc);
  // Nothing came, and what this application sends waits for the pacer (DCQCN holds a QP below
  // line rate): the application will spin until the next slot, which on an RNIC costs the
  // host nothing. Let anyone else who wants this CPU have it first: on a machine with fewer
  // cores than busy threads (the receiver, other senders, the switch of tools/bench/incast.sh)
  // a sender that spins through its slice delays the others' CNPs and ACKs by whole slices,
  // and the queue they share swings and overflows. With nobody else runnable it returns at
  // once.
  if (later == 0 && rt->engine->pacer_held()) {
    sched_yield();
    if (StatsShm* st = rt->stats) __atomic_fetch_add(&st->progress_yields, 1, __ATOMIC_RELAXED);
  }
  return after_poll(rt, later, now, cq, hold);
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

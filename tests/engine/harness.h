// Two engines joined by an in-memory link (optionally through other ports), driven by an
// injected clock: the building block of the end-to-end transport tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/engine.h"
#include "fault/fault_injector.h"
#include "memlink/memlink.h"

namespace uroce::test {

inline const wire::Ipv4Addr kIpA = {10, 0, 0, 1};
inline const wire::Ipv4Addr kIpB = {10, 0, 0, 2};

/// One side: an engine with a PD, a CQ and helpers to register memory.
struct Side {
  Side(Port& port, const wire::Ipv4Addr& ip, uint64_t seed, EngineConfig cfg = {}) {
    cfg.ipv4 = ip;
    cfg.seed = seed;
    cfg.key_seed = seed * 0x9E3779B97F4A7C15ull + 1;  // keys repeat from run to run
    engine = std::make_unique<Engine>(port, cfg);
    pd = engine->alloc_pd();
    cq = engine->create_cq(4096);
  }
  /// A buffer registered with `access`, filled with `fill`.
  mem::Mr* reg(std::vector<uint8_t>& buf, int access) {
    return engine->reg_mr(pd, buf.data(), buf.size(), access);
  }
  std::unique_ptr<Engine> engine;
  mem::Pd* pd = nullptr;
  Cq* cq = nullptr;
};

inline ibv_cq* as_ibv(Cq* c) { return &c->ibv; }

struct QpOptions {
  ibv_qp_type type = IBV_QPT_RC;
  ibv_mtu mtu = IBV_MTU_1024;
  uint32_t max_send_wr = 256;
  uint32_t max_recv_wr = 256;
  uint32_t max_sge = 4;
  uint8_t timeout = 10;    // 4.096 us * 2^10 = 4.2 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 10 us
  uint8_t rd_atomic = 16;
  uint32_t sq_psn = 0;
  uint32_t rq_psn = 0;  // the peer's sq_psn
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  Srq* srq = nullptr;
  // The path: source GID index (1: the IPv4-mapped GID) and, if set, the peer's GID instead
  // of the IPv4-mapped form of its address (e.g. its fe80:: link-local GID, index 0).
  uint8_t sgid_index = 1;
  std::optional<wire::Gid> dgid;
};

inline Qp* make_qp(Side& s, const QpOptions& o) {
  ibv_qp_init_attr ia{};
  ia.send_cq = as_ibv(s.cq);
  ia.recv_cq = as_ibv(s.cq);
  ia.srq = o.srq != nullptr ? &o.srq->ibv : nullptr;
  ia.qp_type = o.type;
  ia.cap.max_send_wr = o.max_send_wr;
  ia.cap.max_recv_wr = o.max_recv_wr;
  ia.cap.max_send_sge = o.max_sge;
  ia.cap.max_recv_sge = o.max_sge;
  ia.cap.max_inline_data = 64;
  return s.engine->create_qp(s.pd, &ia);
}

/// RESET -> INIT -> RTR -> RTS towards `peer_qpn` at `peer_ip`. Returns the first errno.
inline int connect_qp(Engine& engine, Qp* qp, uint32_t peer_qpn, const wire::Ipv4Addr& peer_ip,
                      const QpOptions& o, uint32_t qkey = 0x11111111) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = static_cast<unsigned>(o.access);
  a.qkey = qkey;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
             (o.type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
  if (int e = engine.modify_qp(qp, &a, mask)) return e;

  a = {};
  a.qp_state = IBV_QPS_RTR;
  mask = IBV_QP_STATE;
  if (o.type != IBV_QPT_UD) {
    a.path_mtu = o.mtu;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = o.rq_psn;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = o.sgid_index;
    const wire::Gid g = o.dgid ? *o.dgid : wire::ipv4_mapped_gid(peer_ip);
    std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (o.type == IBV_QPT_RC) {
      a.max_dest_rd_atomic = o.rd_atomic;
      a.min_rnr_timer = o.min_rnr_timer;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  }
  if (int e = engine.modify_qp(qp, &a, mask)) return e;

  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = o.sq_psn;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (o.type == IBV_QPT_RC) {
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.rd_atomic;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return engine.modify_qp(qp, &a, mask);
}

inline int connect_qp(Side& s, Qp* qp, uint32_t peer_qpn, const wire::Ipv4Addr& peer_ip,
                      const QpOptions& o, uint32_t qkey = 0x11111111) {
  return connect_qp(*s.engine, qp, peer_qpn, peer_ip, o, qkey);
}

/// Two sides on an in-memory link, optionally each behind a fault injector (applied to what
/// that side transmits).
struct Pair {
  explicit Pair(uint64_t seed = 1, const drivers::FaultConfig* faults = nullptr)
      : fa(faults ? std::make_unique<drivers::FaultInjector>(link.a(), with_seed(*faults, seed))
                  : nullptr),
        fb(faults ? std::make_unique<drivers::FaultInjector>(link.b(),
                                                             with_seed(*faults, seed * 31 + 7))
                  : nullptr),
        a(fa ? static_cast<Port&>(*fa) : link.a(), kIpA, seed),
        b(fb ? static_cast<Port&>(*fb) : link.b(), kIpB, seed + 1) {
    a.engine->set_neighbor(wire::ipv4_mapped_gid(kIpB), link.b().mac());
    b.engine->set_neighbor(wire::ipv4_mapped_gid(kIpA), link.a().mac());
  }
  static drivers::FaultConfig with_seed(drivers::FaultConfig c, uint64_t seed) {
    c.seed = seed;
    return c;
  }
  /// Connected QPs on both sides with the same options (PSNs crossed over).
  std::pair<Qp*, Qp*> rc_pair(QpOptions oa = {}, QpOptions ob = {}) {
    Qp* qa = make_qp(a, oa);
    Qp* qb = make_qp(b, ob);
    oa.rq_psn = ob.sq_psn;
    ob.rq_psn = oa.sq_psn;
    EXPECT_EQ(connect_qp(a, qa, qb->qpn, kIpB, oa), 0);
    EXPECT_EQ(connect_qp(b, qb, qa->qpn, kIpA, ob), 0);
    return {qa, qb};
  }
  size_t held() const { return (fa ? fa->held() : 0) + (fb ? fb->held() : 0); }
  /// Polls both engines, advancing time by `step_ns` per round, until `done()` or `max_ns`
  /// of simulated time pass. Returns whether done() became true.
  bool run_until(const std::function<bool()>& done, uint64_t max_ns = 10'000'000'000ull,
                 uint64_t step_ns = 1000) {
    const uint64_t end = now + max_ns;
    while (now < end) {
      if (done()) return true;
      if (fa) fa->pump(now);
      if (fb) fb->pump(now);
      a.engine->poll(now);
      b.engine->poll(now);
      // When nothing moves, jump to the next timer instead of stepping through idle time.
      if (link.in_flight() == 0 && !a.engine->has_tx_work() && !b.engine->has_tx_work()) {
        uint64_t next = std::min(a.engine->next_deadline(), b.engine->next_deadline());
        if (fa) next = std::min(next, fa->next_release());
        if (fb) next = std::min(next, fb->next_release());
        if (next == TimerWheel::kNever) {
          if (held() > 0) {  // frames held for reordering with no traffic behind them
            if (fa) fa->flush(now);
            if (fb) fb->flush(now);
            continue;
          }
          a.engine->poll(now);
          b.engine->poll(now);
          return done();
        }
        now = std::max(now + step_ns, next);
      } else {
        now += step_ns;
      }
    }
    return done();
  }

  drivers::MemLink link;
  std::unique_ptr<drivers::FaultInjector> fa, fb;
  uint64_t now = 1'000'000;
  Side a, b;
};

inline std::vector<ibv_wc> drain(Side& s) {
  std::vector<ibv_wc> out;
  ibv_wc wc[16];
  int n;
  while ((n = s.engine->poll_cq(s.cq, 16, wc)) > 0) out.insert(out.end(), wc, wc + n);
  return out;
}

}  // namespace uroce::test

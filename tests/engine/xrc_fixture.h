// The XRC pair the engine tests share: an initiator (XRC_SEND) on A, a target (XRC_RECV) on
// B whose domain has two SRQs, each with its own PD and CQ, connected as xsrq_pingpong and
// pyverbs connect them.
#pragma once

#include <cstring>
#include <vector>

#include "harness.h"

namespace uroce::test::xrc {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 8));
  return v;
}

inline std::vector<ibv_wc> drain_cq(Engine& e, Cq* cq) {
  std::vector<ibv_wc> out;
  ibv_wc wc[16];
  int n;
  while ((n = e.poll_cq(cq, 16, wc)) > 0) out.insert(out.end(), wc, wc + n);
  return out;
}

/// INIT -> RTR towards `dest` at `ip` (the responder attributes set, not necessarily asked for).
inline ibv_qp_attr rtr_attr(uint32_t dest, const wire::Ipv4Addr& ip) {
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTR;
  r.path_mtu = IBV_MTU_1024;
  r.dest_qp_num = dest;
  r.ah_attr.is_global = 1;
  r.ah_attr.port_num = 1;
  r.ah_attr.grh.sgid_index = 1;
  const wire::Gid g = wire::ipv4_mapped_gid(ip);
  std::memcpy(r.ah_attr.grh.dgid.raw, g.data(), 16);
  r.max_dest_rd_atomic = 4;
  r.min_rnr_timer = 1;
  return r;
}

struct XrcFixture {
  Pair p;
  Qp* ini = nullptr;  // on A
  Qp* tgt = nullptr;  // on B
  Xrcd* xrcd = nullptr;
  mem::Pd* pd2 = nullptr;  // B's second PD (SRQ 2's)
  Cq* cq1 = nullptr;       // B: SRQ 1's CQ
  Cq* cq2 = nullptr;       // B: SRQ 2's CQ
  Srq* srq1 = nullptr;
  Srq* srq2 = nullptr;

  XrcFixture() {
    Engine& b = *p.b.engine;
    xrcd = b.create_xrcd();
    pd2 = b.alloc_pd();
    cq1 = b.create_cq(256);
    cq2 = b.create_cq(256);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 64;
    sa.attr.max_sge = 2;
    srq1 = b.create_srq(p.b.pd, &sa, xrcd, cq1);
    srq2 = b.create_srq(pd2, &sa, xrcd, cq2);
    ibv_qp_init_attr ta{};
    ta.qp_type = IBV_QPT_XRC_RECV;
    tgt = b.create_qp(nullptr, &ta, xrcd);
    ibv_qp_init_attr ia{};
    ia.qp_type = IBV_QPT_XRC_SEND;
    ia.send_cq = as_ibv(p.a.cq);
    ia.cap.max_send_wr = 64;
    ia.cap.max_send_sge = 2;
    ini = p.a.engine->create_qp(p.a.pd, &ia);
    EXPECT_NE(srq1, nullptr);
    EXPECT_NE(srq2, nullptr);
    EXPECT_NE(tgt, nullptr);
    EXPECT_NE(ini, nullptr);
    EXPECT_EQ(connect(), 0);
  }

  /// The masks xsrq_pingpong and pyverbs use for each end.
  int connect() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAll;
    const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    if (int e = p.a.engine->modify_qp(ini, &a, init)) return e;
    if (int e = p.b.engine->modify_qp(tgt, &a, init)) return e;
    const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    ibv_qp_attr r = rtr_attr(tgt->qpn, kIpB);
    if (int e = p.a.engine->modify_qp(ini, &r, rtr_mask)) return e;
    r = rtr_attr(ini->qpn, kIpA);
    if (int e = p.b.engine->modify_qp(tgt, &r,
                                      rtr_mask | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return e;
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = 10;
    s.retry_cnt = 7;
    s.rnr_retry = 7;
    s.max_rd_atomic = 4;
    if (int e = p.a.engine->modify_qp(ini, &s,
                                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                          IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                          IBV_QP_MAX_QP_RD_ATOMIC))
      return e;
    return p.b.engine->modify_qp(tgt, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN);
  }

  void post_srq_recv(Srq* srq, uint64_t wr_id, std::vector<uint8_t>& buf, mem::Mr* mr) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), static_cast<uint32_t>(buf.size()),
                mr->key};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(p.b.engine->post_srq_recv(srq, &wr, nullptr), 0);
  }

  /// Posts `wr` (its remote SRQ set to `srqn`) on the initiator and runs until it completes.
  ibv_wc run_one(ibv_send_wr wr, uint32_t srqn) {
    wr.qp_type.xrc.remote_srqn = srqn;
    wr.send_flags |= IBV_SEND_SIGNALED;
    EXPECT_EQ(p.a.engine->post_send(ini, &wr, nullptr), 0);
    std::vector<ibv_wc> got;
    EXPECT_TRUE(p.run_until([&] {
      for (auto& w : drain(p.a)) got.push_back(w);
      return !got.empty();
    }));
    return got.empty() ? ibv_wc{} : got[0];
  }

  /// A 64-byte SEND into the SRQ numbered `srqn`, run until it completes.
  ibv_wc send_small(uint32_t srqn) {
    small.assign(64, 9);
    if (small_mr == nullptr) small_mr = p.a.reg(small, kAll);
    ibv_sge s{reinterpret_cast<uint64_t>(small.data()), 64, small_mr->key};
    ibv_send_wr w{};
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = IBV_WR_SEND;
    return run_one(w, srqn);
  }
  std::vector<uint8_t> small = std::vector<uint8_t>(64);
  mem::Mr* small_mr = nullptr;
};

}  // namespace uroce::test::xrc

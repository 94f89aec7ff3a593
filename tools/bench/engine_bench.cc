// Transport benchmark: two engines joined by the in-memory link in one process, one thread
// polling both. For RDMA WRITE and SEND at 64 B, 4 KiB and 64 KiB it keeps a window of
// signaled WRs in flight for a fixed time and reports messages/s and GB/s (median of runs).
// The clock passed to the engines is the real monotonic clock.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "memlink/memlink.h"

using namespace uroce;
using Clock = std::chrono::steady_clock;

namespace {

constexpr wire::Ipv4Addr kIpA = {10, 0, 0, 1};
constexpr wire::Ipv4Addr kIpB = {10, 0, 0, 2};
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

struct Side {
  Side(Port& port, const wire::Ipv4Addr& ip) {
    EngineConfig cfg;
    cfg.ipv4 = ip;
    engine = std::make_unique<Engine>(port, cfg);
    pd = engine->alloc_pd();
    cq = engine->create_cq(8192);
  }
  std::unique_ptr<Engine> engine;
  mem::Pd* pd;
  Cq* cq;
  Qp* qp = nullptr;
};

void bring_up(Side& s, uint32_t peer_qpn, const wire::Ipv4Addr& peer, ibv_mtu mtu) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAll;
  s.engine->modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = peer_qpn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1;
  const wire::Gid g = wire::ipv4_mapped_gid(peer);
  std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
  s.engine->modify_qp(s.qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  s.engine->modify_qp(s.qp, &a,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

struct Result {
  double msgs_per_s, gbytes_per_s;
};

Result run_once(ibv_wr_opcode op, uint32_t size, double seconds) {
  drivers::MemLink::Config lc;
  lc.frames = 8192;
  drivers::MemLink link(lc);
  Side a(link.a(), kIpA), b(link.b(), kIpB);
  a.engine->set_neighbor(wire::ipv4_mapped_gid(kIpB), link.b().mac());
  b.engine->set_neighbor(wire::ipv4_mapped_gid(kIpA), link.a().mac());
  constexpr uint32_t kDepth = 128;
  ibv_qp_init_attr ia{};
  ia.send_cq = &a.cq->ibv;
  ia.recv_cq = &a.cq->ibv;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {kDepth, kDepth, 1, 1, 64};
  a.qp = a.engine->create_qp(a.pd, &ia);
  ia.send_cq = &b.cq->ibv;
  ia.recv_cq = &b.cq->ibv;
  b.qp = b.engine->create_qp(b.pd, &ia);
  bring_up(a, b.qp->qpn, kIpB, IBV_MTU_4096);
  bring_up(b, a.qp->qpn, kIpA, IBV_MTU_4096);

  std::vector<uint8_t> src(size, 0x5A), dst(size, 0);
  auto* smr = a.engine->reg_mr(a.pd, src.data(), size, kAll);
  auto* dmr = b.engine->reg_mr(b.pd, dst.data(), size, kAll);
  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), size, smr->key};
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), size, dmr->key};
  ibv_send_wr w{};
  w.sg_list = &s;
  w.num_sge = 1;
  w.opcode = op;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data());
  w.wr.rdma.rkey = dmr->key;
  ibv_recv_wr rw{};
  rw.sg_list = &r;
  rw.num_sge = 1;
  const bool send = op == IBV_WR_SEND;
  if (send)
    for (uint32_t i = 0; i < kDepth; ++i) b.engine->post_recv(b.qp, &rw, nullptr);
  for (uint32_t i = 0; i < kDepth; ++i) a.engine->post_send(a.qp, &w, nullptr);

  uint64_t done = 0;
  ibv_wc wc[32];
  const uint64_t start = now_ns();
  const uint64_t end = start + static_cast<uint64_t>(seconds * 1e9);
  uint64_t t = start;
  while (t < end) {
    t = now_ns();
    a.engine->poll(t);
    b.engine->poll(t);
    int n = a.engine->poll_cq(a.cq, 32, wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        std::fprintf(stderr, "engine_bench: completion error %d\n", wc[i].status);
        return {0, 0};
      }
      a.engine->post_send(a.qp, &w, nullptr);
    }
    done += static_cast<uint64_t>(n);
    if (send) {
      n = b.engine->poll_cq(b.cq, 32, wc);
      for (int i = 0; i < n; ++i) b.engine->post_recv(b.qp, &rw, nullptr);
    }
  }
  const double secs = static_cast<double>(t - start) / 1e9;
  return {static_cast<double>(done) / secs, static_cast<double>(done) * size / secs / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  double seconds = 0.5;
  const char* csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::stoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::stod(argv[++i]);
    else if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: engine_bench [--runs N] [--seconds S] [--csv FILE]\n");
      return 2;
    }
  }
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv_path && !csv) {
    std::fprintf(stderr, "engine_bench: cannot write %s\n", csv_path);
    return 1;
  }
  if (csv) std::fprintf(csv, "op,size,msgs_per_s,gbytes_per_s\n");
  std::printf("two engines, one thread, in-memory link, MTU 4096, 128 WRs in flight\n");
  std::printf("%-6s %8s %14s %10s   (median of %d runs of %.1f s)\n", "op", "size", "msgs/s",
              "GB/s", runs, seconds);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_SEND}) {
    for (uint32_t size : {64u, 4096u, 65536u}) {
      std::vector<Result> r;
      for (int i = 0; i < runs; ++i) r.push_back(run_once(op, size, seconds));
      std::sort(r.begin(), r.end(),
                [](const Result& x, const Result& y) { return x.msgs_per_s < y.msgs_per_s; });
      const Result& m = r[r.size() / 2];
      const char* name = op == IBV_WR_SEND ? "SEND" : "WRITE";
      std::printf("%-6s %8u %14.0f %10.3f\n", name, size, m.msgs_per_s, m.gbytes_per_s);
      if (csv) std::fprintf(csv, "%s,%u,%.0f,%.3f\n", name, size, m.msgs_per_s, m.gbytes_per_s);
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}

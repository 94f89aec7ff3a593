// The hot path allocates nothing: once two engines are set up and warmed up, a stream of
// SENDs, WRITEs, READs and atomics over a lossy, reordering link makes zero heap allocations.
#include <gtest/gtest.h>

#include "../ports/alloc_counter.h"
#include "harness.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

TEST(NoAlloc, SteadyStateTrafficAllocatesNothing) {
  drivers::FaultConfig fc;
  fc.loss = 0.02;
  fc.duplicate = 0.01;
  fc.reorder = 0.02;
  fc.reorder_window = 3;
  Pair p(5, &fc);
  auto [qa, qb] = p.rc_pair();
  std::vector<uint8_t> src(20000, 1), dst(20000, 0), rd(20000, 0);
  uint64_t counter = 0, orig = 0;
  auto* smr = p.a.reg(src, kAll);
  auto* rmr = p.a.reg(rd, kAll);
  auto* omr = p.a.engine->reg_mr(p.a.pd, &orig, 8, kAll);
  auto* dmr = p.b.reg(dst, kAll);
  auto* cmr = p.b.engine->reg_mr(p.b.pd, &counter, 8, kAll);

  ibv_sge s{reinterpret_cast<uint64_t>(src.data()), 20000, smr->key};
  ibv_sge r{reinterpret_cast<uint64_t>(dst.data()), 20000, dmr->key};
  ibv_sge rs{reinterpret_cast<uint64_t>(rd.data()), 20000, rmr->key};
  ibv_sge os{reinterpret_cast<uint64_t>(&orig), 8, omr->key};
  ibv_send_wr send{}, write{}, read{}, fadd{};
  send.sg_list = &s;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  write = send;
  write.opcode = IBV_WR_RDMA_WRITE;
  write.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst.data());
  write.wr.rdma.rkey = dmr->key;
  read = write;
  read.sg_list = &rs;
  read.opcode = IBV_WR_RDMA_READ;
  fadd.sg_list = &os;
  fadd.num_sge = 1;
  fadd.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  fadd.send_flags = IBV_SEND_SIGNALED;
  fadd.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(&counter);
  fadd.wr.atomic.rkey = cmr->key;
  fadd.wr.atomic.compare_add = 1;
  send.next = &write;
  write.next = &read;
  read.next = &fadd;
  ibv_recv_wr rw{};
  rw.sg_list = &r;
  rw.num_sge = 1;
  ibv_wc wc[16];

  // qa and qb by init-capture: clang 14 cannot capture structured bindings (C++20, clang 16).
  auto round = [&, qa = qa, qb = qb] {
    ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
    ASSERT_EQ(p.a.engine->post_send(qa, &send, nullptr), 0);
    int got_a = 0, got_b = 0;
    ASSERT_TRUE(p.run_until([&] {
      got_a += p.a.engine->poll_cq(p.a.cq, 16, wc);
      got_b += p.b.engine->poll_cq(p.b.cq, 16, wc);
      return got_a == 4 && got_b == 1;
    }));
  };
  for (int i = 0; i < 5; ++i) round();  // warm up
  const size_t before = allocations();
  for (int i = 0; i < 50; ++i) round();
  // run_until's std::function may allocate once per call: allow that, nothing per packet.
  EXPECT_LE(allocations() - before, 50u) << "allocations: " << allocations() - before;
  EXPECT_GT(p.a.engine->counters()[Counter::tx_frames], 50u * 60);
  EXPECT_EQ(counter, 55u);
}

}  // namespace
}  // namespace uroce::test

// End to end over a lossy link: every RC operation x MTU (256, 1024, 4096) x message sizes
// (0, 1, MTU-1, MTU, MTU+1, 1 MiB) x scatter/gather shapes, over a clean link, 1 % loss and
// 10 % loss with reordering, duplication and corruption. Destination memory must be byte-exact
// and every signaled WR must complete exactly once, in order, with the right status and length.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "harness.h"

namespace uroce::test {
namespace {

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;

enum class Link { kClean, kLoss1, kLoss10Chaos };

drivers::FaultConfig faults(Link l) {
  drivers::FaultConfig c;
  switch (l) {
    case Link::kClean: break;
    case Link::kLoss1: c.loss = 0.01; break;
    case Link::kLoss10Chaos:
      c.loss = 0.10;
      c.duplicate = 0.02;
      c.corrupt = 0.02;
      c.reorder = 0.05;
      c.reorder_window = 4;
      break;
  }
  return c;
}

struct Op {
  ibv_wr_opcode opcode;
  uint32_t size;
  int sges;  // 1 or 3 on the local side
};

class LossGrid : public ::testing::TestWithParam<std::tuple<ibv_mtu, Link>> {};

TEST_P(LossGrid, EveryOperationSizeAndShapeArrivesExactlyOnce) {
  const auto [mtu_enum, link] = GetParam();
  const uint32_t mtu = 128u << mtu_enum;
  const drivers::FaultConfig fc = faults(link);
  Pair p(static_cast<uint64_t>(mtu_enum) * 10 + static_cast<uint64_t>(link),
         link == Link::kClean ? nullptr : &fc);
  QpOptions o;
  o.mtu = mtu_enum;
  o.max_send_wr = 512;
  o.max_recv_wr = 512;
  o.timeout = 12;  // ~16.8 ms
  o.sq_psn = 0xFFFF00;  // cross the PSN wrap during the run
  auto [qa, qb] = p.rc_pair(o, o);

  std::vector<Op> ops;
  const uint32_t sizes[] = {0, 1, mtu - 1, mtu, mtu + 1, 1u << 20};
  for (ibv_wr_opcode op : {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
                           IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ}) {
    for (uint32_t size : sizes) {
      // 1 MiB on the lossiest link only for WRITE and READ (go-back-N resends a lot).
      if (size == (1u << 20) && link == Link::kLoss10Chaos && op != IBV_WR_RDMA_WRITE &&
          op != IBV_WR_RDMA_READ)
        continue;
      for (int sges : {1, 3}) {
        if (sges == 3 && size < 3) continue;
        ops.push_back({op, size, sges});
      }
    }
  }
  ops.push_back({IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 1});
  ops.push_back({IBV_WR_ATOMIC_CMP_AND_SWP, 8, 1});
  ops.push_back({IBV_WR_ATOMIC_FETCH_AND_ADD, 8, 1});

  // Buffers: per op a source on the requester and a destination on the responder.
  std::mt19937 rng(42);
  std::vector<std::vector<uint8_t>> src(ops.size()), dst(ops.size()), res(ops.size());
  std::vector<mem::Mr*> smr(ops.size()), dmr(ops.size()), rmr(ops.size());
  uint64_t counter = 1000;  // the atomics' target
  mem::Mr* cmr = p.b.engine->reg_mr(p.b.pd, &counter, 8, kAll);
  uint64_t expect_counter = 1000;
  for (size_t i = 0; i < ops.size(); ++i) {
    src[i].resize(std::max<uint32_t>(ops[i].size, 1));
    for (auto& x : src[i]) x = static_cast<uint8_t>(rng());
    dst[i].assign(src[i].size() + 16, 0xCC);  // 16 guard bytes behind
    smr[i] = p.a.reg(src[i], kAll);
    dmr[i] = p.b.reg(dst[i], kAll);
  }
  // Receives for the SENDs and WRITE_WITH_IMMs, in order, each into its op's buffer with
  // 2 SGEs (the split falls mid-packet).
  std::vector<uint64_t> recv_ids;
  for (size_t i = 0; i < ops.size(); ++i) {
    const bool needs_recv = ops[i].opcode == IBV_WR_SEND || ops[i].opcode == IBV_WR_SEND_WITH_IMM ||
                            ops[i].opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (!needs_recv) continue;
    const uint32_t half = ops[i].size / 2;
    ibv_sge r[2] = {{reinterpret_cast<uint64_t>(dst[i].data()), half, dmr[i]->key},
                    {reinterpret_cast<uint64_t>(dst[i].data()) + half,
                     static_cast<uint32_t>(dst[i].size() - half), dmr[i]->key}};
    ibv_recv_wr rw{};
    rw.wr_id = i;
    rw.sg_list = r;
    rw.num_sge = 2;
    ASSERT_EQ(p.b.engine->post_recv(qb, &rw, nullptr), 0);
    recv_ids.push_back(i);
  }
  // The sends, all at once.
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    std::vector<ibv_sge> sg;
    const bool read = op.opcode == IBV_WR_RDMA_READ;
    const bool atomic = op.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                        op.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    // READ scatters into dst on the requester side: swap the roles of the buffers.
    uint8_t* local = read || atomic ? dst[i].data() : src[i].data();
    const uint32_t lkey = read || atomic ? 0 : smr[i]->key;
    mem::Mr* lmr = nullptr;
    if (read || atomic) {
      lmr = p.a.engine->reg_mr(p.a.pd, dst[i].data(), dst[i].size(), kAll);
    }
    const uint32_t key = lmr ? lmr->key : lkey;
    if (op.size > 0) {
      const uint32_t a = op.size / 3, b = op.size / 3 + 1;
      if (op.sges == 1) {
        sg.push_back({reinterpret_cast<uint64_t>(local), op.size, key});
      } else {
        sg.push_back({reinterpret_cast<uint64_t>(local), a, key});
        sg.push_back({reinterpret_cast<uint64_t>(local + a), b, key});
        sg.push_back({reinterpret_cast<uint64_t>(local + a + b), op.size - a - b, key});
      }
    }
    ibv_send_wr w{};
    w.wr_id = i;
    w.sg_list = sg.data();
    w.num_sge = static_cast<int>(sg.size());
    w.opcode = op.opcode;
    w.send_flags = IBV_SEND_SIGNALED;
    w.imm_data = static_cast<uint32_t>(i * 0x01010101u);
    if (atomic) {
      w.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(&counter);
      w.wr.atomic.rkey = cmr->key;
      if (op.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        w.wr.atomic.compare_add = 7;
        expect_counter += 7;
      } else {
        w.wr.atomic.compare_add = expect_counter;  // succeeds: swaps in 1
        w.wr.atomic.swap = 1;
        expect_counter = 1;
      }
    } else {
      // WRITE targets dst; READ reads src back from the responder's side of the same op.
      if (read) {
        rmr[i] = p.b.reg(src[i], kAll);
        w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(src[i].data());
        w.wr.rdma.rkey = rmr[i]->key;
      } else {
        w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(dst[i].data());
        w.wr.rdma.rkey = dmr[i]->key;
      }
    }
    ASSERT_EQ(p.a.engine->post_send(qa, &w, nullptr), 0) << i;
  }

  std::vector<ibv_wc> wa, wb;
  const bool done = p.run_until(
      [&] {
        for (auto& x : drain(p.a)) wa.push_back(x);
        for (auto& x : drain(p.b)) wb.push_back(x);
        return wa.size() >= ops.size() && wb.size() >= recv_ids.size();
      },
      600'000'000'000ull);
  ASSERT_TRUE(done) << "send completions " << wa.size() << "/" << ops.size() << ", receive "
                    << wb.size() << "/" << recv_ids.size();
  // Give stray duplicates time to arrive: nothing more may complete.
  p.run_until([] { return false; }, 100'000'000);
  for (auto& x : drain(p.a)) wa.push_back(x);
  for (auto& x : drain(p.b)) wb.push_back(x);
  ASSERT_EQ(wa.size(), ops.size());
  ASSERT_EQ(wb.size(), recv_ids.size());

  for (size_t i = 0; i < ops.size(); ++i) {
    SCOPED_TRACE("op " + std::to_string(i) + " opcode " + std::to_string(ops[i].opcode) +
                 " size " + std::to_string(ops[i].size) + " sges " + std::to_string(ops[i].sges));
    EXPECT_EQ(wa[i].wr_id, i);
    EXPECT_EQ(wa[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wa[i].byte_len, ops[i].size);
    if (ops[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || ops[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP)
      continue;
    // Byte-exact data and untouched guard bytes.
    EXPECT_TRUE(std::equal(src[i].begin(), src[i].begin() + ops[i].size, dst[i].begin()));
    for (size_t g = src[i].size(); g < dst[i].size(); ++g) ASSERT_EQ(dst[i][g], 0xCC);
  }
  for (size_t j = 0; j < recv_ids.size(); ++j) {
    const size_t i = recv_ids[j];
    EXPECT_EQ(wb[j].wr_id, i);
    EXPECT_EQ(wb[j].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wb[j].byte_len, ops[i].size);
    const bool imm = ops[i].opcode != IBV_WR_SEND;
    EXPECT_EQ((wb[j].wc_flags & IBV_WC_WITH_IMM) != 0, imm);
    if (imm) {
      EXPECT_EQ(wb[j].imm_data, static_cast<uint32_t>(i * 0x01010101u));
    }
  }
  EXPECT_EQ(counter, expect_counter);
  if (link == Link::kClean) {
    EXPECT_EQ(p.a.engine->counters()[Counter::retransmitted_pkts], 0u);
    EXPECT_EQ(p.b.engine->counters()[Counter::dup_requests], 0u);
  } else {
    EXPECT_GT(p.a.engine->counters()[Counter::retransmitted_pkts], 0u);
  }
}

std::string grid_name(const ::testing::TestParamInfo<std::tuple<ibv_mtu, Link>>& info) {
  static const char* const kNames[] = {"clean", "loss1", "loss10chaos"};
  return "mtu" + std::to_string(128u << std::get<0>(info.param)) + "_" +
         kNames[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    Grid, LossGrid,
    ::testing::Combine(::testing::Values(IBV_MTU_256, IBV_MTU_1024, IBV_MTU_4096),
                       ::testing::Values(Link::kClean, Link::kLoss1, Link::kLoss10Chaos)),
    grid_name);

}  // namespace
}  // namespace uroce::test

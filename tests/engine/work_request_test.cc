// The work-request table (stack/engine/work_request.h) against the rules it encodes, written
// out here independently (IBA 9.x, rdma-core's ibv_post_send(3) and rxe's opcode table), and
// against what the engine's post_send really accepts: every ibv_wr_opcode value, valid or
// not, on every QP type.
#include <gtest/gtest.h>

#include <cerrno>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/work_request.h"
#include "xrc_fixture.h"

namespace uroce::test {
namespace {

using namespace xrc;

// Which QP types take which work request, by hand: an XRC target posts nothing, UD only
// SENDs, UC no READ/atomics/SEND_WITH_INV, XRC no ATOMIC WRITE or FLUSH (IBA 1.5 gives them
// RC opcodes only).
const std::set<std::pair<ibv_qp_type, int>> kAllowed = [] {
  std::set<std::pair<ibv_qp_type, int>> s;
  for (int op : {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM}) {
    for (ibv_qp_type t : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_XRC_SEND}) s.insert({t, op});
  }
  for (int op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV}) {
    for (ibv_qp_type t : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_XRC_SEND}) s.insert({t, op});
  }
  for (int op : {IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
                 IBV_WR_SEND_WITH_INV}) {
    for (ibv_qp_type t : {IBV_QPT_RC, IBV_QPT_XRC_SEND}) s.insert({t, op});
  }
  s.insert({IBV_QPT_RC, IBV_WR_ATOMIC_WRITE});
  s.insert({IBV_QPT_RC, UROCE_WR_FLUSH});
  return s;
}();

constexpr ibv_qp_type kTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_XRC_SEND,
                                  IBV_QPT_XRC_RECV};
// Every value the table answers for: past IBV_WR_ATOMIC_WRITE (15). A work request can carry
// values up to 15 only (the enum's range; a larger one is undefined behaviour to load), the
// gaps 12-14 and TSO / DRIVER1 included.
constexpr int kLastOpcode = 17;
constexpr int kLastPostable = IBV_WR_ATOMIC_WRITE;

TEST(WorkRequestTable, AllowedQpTypesAreTheRulesOfTheSpec) {
  for (ibv_qp_type t : kTypes) {
    for (int op = -1; op <= kLastOpcode; ++op)
      EXPECT_EQ(wr_allowed(t, op), kAllowed.count({t, op}) == 1)
          << "QP type " << t << ", opcode " << op << " (" << wr_info(op).name << ")";
  }
}

TEST(WorkRequestTable, FactsPerOpcode) {
  // Completions as ibv_poll_cq(3) names them.
  EXPECT_EQ(wr_info(IBV_WR_RDMA_WRITE_WITH_IMM).wc_opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wr_info(IBV_WR_SEND_WITH_INV).wc_opcode, IBV_WC_SEND);
  EXPECT_EQ(wr_info(IBV_WR_ATOMIC_FETCH_AND_ADD).wc_opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(wr_info(IBV_WR_ATOMIC_WRITE).wc_opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(wr_info(IBV_WR_LOCAL_INV).wc_opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(static_cast<int>(wr_info(UROCE_WR_FLUSH).wc_opcode), UROCE_WC_FLUSH);
  // The responder's READ/atomic resources: READ, the two atomics that return a value, ATOMIC
  // WRITE and FLUSH (answered by a READ RESPONSE without data, IBA 1.5).
  std::set<int> rd_atomic;
  for (int op = 0; op <= kLastOpcode; ++op)
    if (wr_info(op).rd_atomic) rd_atomic.insert(op);
  EXPECT_EQ(rd_atomic, (std::set<int>{IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
                                      IBV_WR_ATOMIC_FETCH_AND_ADD, UROCE_WR_FLUSH,
                                      IBV_WR_ATOMIC_WRITE}));
  // FLUSH carries no data: any length is its own (the range's is in the WQE), one PSN.
  EXPECT_EQ(wr_info(UROCE_WR_FLUSH).fixed_length, 0u);
  EXPECT_TRUE(wr_info(UROCE_WR_FLUSH).one_psn);
  EXPECT_FALSE(wr_info(UROCE_WR_FLUSH).inline_ok);
  // PSNs: a READ one per response packet, an atomic one.
  EXPECT_FALSE(wr_info(IBV_WR_RDMA_READ).one_psn);
  EXPECT_TRUE(wr_info(IBV_WR_ATOMIC_WRITE).one_psn);
  EXPECT_TRUE(wr_info(IBV_WR_RDMA_READ).one_packet);
  // IBV_SEND_INLINE: never where the SGEs are written into.
  EXPECT_FALSE(wr_info(IBV_WR_RDMA_READ).inline_ok);
  EXPECT_FALSE(wr_info(IBV_WR_ATOMIC_CMP_AND_SWP).inline_ok);
  EXPECT_TRUE(wr_info(IBV_WR_ATOMIC_WRITE).inline_ok);
  EXPECT_TRUE(wr_info(IBV_WR_SEND_WITH_INV).inline_ok);
  // The BTH opcodes (RC numbering) and back.
  EXPECT_EQ(wr_info(IBV_WR_RDMA_WRITE_WITH_IMM).bth_last, wire::opcode::kRcWriteLastImm);
  EXPECT_EQ(wr_info(IBV_WR_SEND_WITH_INV).bth_only, wire::opcode::kRcSendOnlyInv);
  for (int op = 0; op <= kLastOpcode; ++op) {
    const WrOpInfo& i = wr_info(op);
    if (i.kind == WrKind::kUnsupported || i.kind == WrKind::kLocal) continue;
    EXPECT_EQ(wr_for_bth(i.bth_only), op) << i.name;
    if (i.qp_types & kWrOnUc) {
      EXPECT_EQ(wr_for_bth(0x20 | i.bth_only), op) << "UC " << i.name;
    }
  }
  EXPECT_EQ(wr_for_bth(wire::opcode::kUdSendOnlyImm), IBV_WR_SEND_WITH_IMM);
  EXPECT_EQ(wr_for_bth(wire::opcode::kRcReadResponseOnly), -1);
  // One ibv_qp_ex flag each, and ibv_create_qp_ex takes exactly those.
  EXPECT_EQ(wr_qp_ex_flags(),
            uint64_t{IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                     IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                     IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
                     IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
                     IBV_QP_EX_WITH_ATOMIC_WRITE | UROCE_QP_EX_WITH_FLUSH});
}

/// A QP of each type in RTS (an XRC target in RTR: it never sends), with what a valid work
/// request of each kind needs.
struct EveryType {
  XrcFixture x;
  Pair& p = x.p;
  Qp* rc = nullptr;
  Qp* uc = nullptr;
  Qp* ud = nullptr;
  Ah* ah = nullptr;
  mem::Mw* mw = nullptr;
  ibv_mw mw_view{};  // what the verbs layer hands post_send for it
  ibv_mr mr_view{};
  std::vector<uint8_t> buf = std::vector<uint8_t>(256, 1);
  mem::Mr* mr = nullptr;

  EveryType() {
    rc = p.rc_pair().first;
    QpOptions o;
    o.type = IBV_QPT_UC;
    uc = p.rc_pair(o, o).first;
    o.type = IBV_QPT_UD;
    ud = make_qp(p.a, o);
    EXPECT_EQ(connect_qp(p.a, ud, 0, kIpB, o), 0);
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = 1;
    a.grh.sgid_index = 1;
    const wire::Gid g = wire::ipv4_mapped_gid(kIpB);
    std::memcpy(a.grh.dgid.raw, g.data(), 16);
    ah = p.a.engine->create_ah(p.a.pd, &a);
    mr = p.a.reg(buf, kAll | IBV_ACCESS_MW_BIND);
    mw = p.a.engine->alloc_mw(p.a.pd, IBV_MW_TYPE_2);
    if (mw != nullptr) {
      mw_view.rkey = mw->key;
      mw_view.type = IBV_MW_TYPE_2;
    }
    mr_view.lkey = mr->key;
  }
  Qp* qp(ibv_qp_type t) {
    switch (t) {
      case IBV_QPT_RC: return rc;
      case IBV_QPT_UC: return uc;
      case IBV_QPT_UD: return ud;
      case IBV_QPT_XRC_SEND: return x.ini;
      default: return x.tgt;
    }
  }
  Engine& engine(ibv_qp_type t) { return t == IBV_QPT_XRC_RECV ? *p.b.engine : *p.a.engine; }

  /// What post_send answers for a work request of `op` that is valid in every other way.
  int post(ibv_qp_type t, int op) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 8, mr->key};
    ibv_send_wr w{};
    w.wr_id = static_cast<uint64_t>(op);
    w.opcode = static_cast<ibv_wr_opcode>(op);
    w.sg_list = &sge;
    w.num_sge = 1;
    const WrOpInfo& i = wr_info(op);
    if (i.kind == WrKind::kAtomic) {
      w.wr.atomic.remote_addr = 0x1000;
      w.wr.atomic.rkey = 1;
    } else {
      w.wr.rdma.remote_addr = 0x1000;
      w.wr.rdma.rkey = 1;
    }
    if (op == IBV_WR_BIND_MW) {
      w.bind_mw.mw = &mw_view;
      w.bind_mw.rkey = ibv_inc_rkey(mw->key);
      w.bind_mw.bind_info = {&mr_view, reinterpret_cast<uint64_t>(buf.data()), 64,
                             IBV_ACCESS_REMOTE_READ};
    }
    if (t == IBV_QPT_UD) {
      w.wr.ud.ah = &ah->ibv;
      w.wr.ud.remote_qpn = 0x11;
      w.wr.ud.remote_qkey = 0x11111111;
    }
    if (t == IBV_QPT_XRC_SEND) w.qp_type.xrc.remote_srqn = x.srq1->handle;
    const ibv_send_wr* bad = nullptr;
    return engine(t).post_send(qp(t), &w, &bad);
  }
};

TEST(WorkRequestTable, PostSendAcceptsExactlyWhatTheTableAllows) {
  EveryType e;
  for (ibv_qp_type t : kTypes) ASSERT_NE(e.qp(t), nullptr) << t;
  ASSERT_NE(e.ah, nullptr);
  ASSERT_NE(e.mw, nullptr);
  for (ibv_qp_type t : kTypes) {
    for (int op = 0; op <= kLastPostable; ++op) {
      // FLUSH is allowed, but not through ibv_post_send: its ibv_send_wr has no placement
      // type or selectivity level (ibv_wr_flush posts it; RcBasic.Flush*).
      const bool postable = wr_allowed(t, op) && op != UROCE_WR_FLUSH;
      EXPECT_EQ(e.post(t, op), postable ? 0 : EINVAL)
          << "QP type " << t << ", IBV_WR_" << wr_info(op).name << " (" << op << ")";
    }
  }
}

}  // namespace
}  // namespace uroce::test

// The QP state machine and the device queries, against the IBA QP state transition table
// (IBA 10.3.1, as implemented by the kernel's ib_modify_qp_is_ok) and ibv_modify_qp(3),
// ibv_query_qp(3), ibv_create_qp(3), ibv_query_device(3), ibv_query_port(3).
//
// The table below is written out here from the spec, independently of the engine's own
// table: for every valid (current, next) pair and QP type, the attributes that must be given
// and those that may be. Each QP type runs every row: exactly the required attributes work;
// dropping any one of them, or adding any attribute that is not allowed, fails with EINVAL and
// changes nothing; every pair that is not in the table fails.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "capture_port.h"
#include "harness.h"
#include "memlink/memlink.h"

namespace uroce::test {
namespace {

using namespace wire;

const Ipv4Addr kIpC = {10, 0, 0, 3};  // a second neighbour, for attributes changed later
const MacAddr kMacA = {0x02, 0, 0, 0, 0, 0x0a};
const MacAddr kMacC = {0x02, 0, 0, 0, 0, 0x0c};
const Ipv6Addr kIp6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};

// ---- The spec's table -------------------------------------------------------------------

enum TypeIdx { kUd, kUc, kRc };

struct Row {
  ibv_qp_state from, to;
  int req[3];  // UD, UC, RC
  int opt[3];
};

constexpr int kInitAttrsUd = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr int kInitAttrsConn = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrReqUc = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr int kRtrReqRc = kRtrReqUc | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRtrOptConn = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
constexpr int kRtsReqRc = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC;
constexpr int kToRtsOptUd = IBV_QP_CUR_STATE | IBV_QP_QKEY;
constexpr int kToRtsOptUc =
    IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
constexpr int kToRtsOptRc = kToRtsOptUc | IBV_QP_MIN_RNR_TIMER;
constexpr int kSqdSqdUc = IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                          IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE;
constexpr int kSqdSqdRc = IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                          IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;

// SQE (reached only by UD after a send error, which uroce never enters) is left out.
const std::vector<Row> kSpec = {
    {IBV_QPS_RESET, IBV_QPS_RESET, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_RESET, IBV_QPS_INIT, {kInitAttrsUd, kInitAttrsConn, kInitAttrsConn}, {0, 0, 0}},
    {IBV_QPS_INIT, IBV_QPS_RESET, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_INIT, IBV_QPS_ERR, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_INIT, IBV_QPS_INIT, {0, 0, 0}, {kInitAttrsUd, kInitAttrsConn, kInitAttrsConn}},
    {IBV_QPS_INIT, IBV_QPS_RTR, {0, kRtrReqUc, kRtrReqRc},
     {IBV_QP_PKEY_INDEX | IBV_QP_QKEY, kRtrOptConn, kRtrOptConn}},
    {IBV_QPS_RTR, IBV_QPS_RESET, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_RTR, IBV_QPS_ERR, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_RTR, IBV_QPS_RTS, {IBV_QP_SQ_PSN, IBV_QP_SQ_PSN, kRtsReqRc},
     {kToRtsOptUd, kToRtsOptUc, kToRtsOptRc}},
    {IBV_QPS_RTS, IBV_QPS_RESET, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_RTS, IBV_QPS_ERR, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_RTS, IBV_QPS_RTS, {0, 0, 0}, {kToRtsOptUd, kToRtsOptUc, kToRtsOptRc}},
    {IBV_QPS_RTS, IBV_QPS_SQD, {0, 0, 0},
     {IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY}},
    {IBV_QPS_SQD, IBV_QPS_RESET, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_SQD, IBV_QPS_ERR, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_SQD, IBV_QPS_RTS, {0, 0, 0}, {kToRtsOptUd, kToRtsOptUc, kToRtsOptRc}},
    {IBV_QPS_SQD, IBV_QPS_SQD, {0, 0, 0}, {IBV_QP_PKEY_INDEX | IBV_QP_QKEY, kSqdSqdUc, kSqdSqdRc}},
    {IBV_QPS_ERR, IBV_QPS_RESET, {0, 0, 0}, {0, 0, 0}},
    {IBV_QPS_ERR, IBV_QPS_ERR, {0, 0, 0}, {0, 0, 0}},
};

/// Every attribute bit ibv_modify_qp(3) lists, except IBV_QP_STATE and IBV_QP_RATE_LIMIT
/// (which has its own test: RC only here, and only on the way into RTS or in it).
const std::vector<int> kAttrBits = {
    IBV_QP_CUR_STATE,        IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS,
    IBV_QP_PKEY_INDEX,       IBV_QP_PORT,                IBV_QP_QKEY,
    IBV_QP_AV,               IBV_QP_PATH_MTU,            IBV_QP_TIMEOUT,
    IBV_QP_RETRY_CNT,        IBV_QP_RNR_RETRY,           IBV_QP_RQ_PSN,
    IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH,            IBV_QP_MIN_RNR_TIMER,
    IBV_QP_SQ_PSN,           IBV_QP_MAX_DEST_RD_ATOMIC,  IBV_QP_PATH_MIG_STATE,
    IBV_QP_CAP,              IBV_QP_DEST_QPN,
};

const std::vector<ibv_qp_state> kStates = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                           IBV_QPS_RTS,   IBV_QPS_SQD,  IBV_QPS_SQE,
                                           IBV_QPS_ERR};

const char* state_name(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "?";
  }
}

const Row* find_row(ibv_qp_state from, ibv_qp_state to) {
  for (const Row& r : kSpec)
    if (r.from == from && r.to == to) return &r;
  return nullptr;
}

TypeIdx type_idx(ibv_qp_type t) { return t == IBV_QPT_UD ? kUd : t == IBV_QPT_UC ? kUc : kRc; }

void set_av(ibv_ah_attr* ah, const Ipv4Addr& dst, uint8_t hop_limit) {
  *ah = {};
  ah->is_global = 1;
  ah->port_num = 1;
  ah->sl = 0;
  ah->grh.sgid_index = 1;  // the IPv4-mapped GID
  ah->grh.hop_limit = hop_limit;
  ah->grh.traffic_class = 0;
  const Gid g = ipv4_mapped_gid(dst);
  std::memcpy(ah->grh.dgid.raw, g.data(), 16);
}

/// Valid values for every attribute. Set 0 is used to bring a QP up; set 1 differs in every
/// field, so that a later modify visibly changes what query_qp reports.
ibv_qp_attr values(int set, ibv_qp_state from, ibv_qp_state to) {
  ibv_qp_attr a{};
  a.qp_state = to;
  a.cur_qp_state = from;
  a.en_sqd_async_notify = 1;
  a.pkey_index = 0;  // the only P_Key index
  a.port_num = 1;    // the only port
  a.path_mig_state = IBV_MIG_MIGRATED;
  if (set == 0) {
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    a.qkey = 0x11111111;
    set_av(&a.ah_attr, kIpA, 64);
    a.path_mtu = IBV_MTU_1024;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.rq_psn = 0x000100;
    a.max_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.sq_psn = 0x000200;
    a.max_dest_rd_atomic = 4;
    a.dest_qp_num = 0x99;
  } else {
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
    a.qkey = 0x22222222;
    set_av(&a.ah_attr, kIpC, 9);
    a.path_mtu = IBV_MTU_2048;
    a.timeout = 20;
    a.retry_cnt = 3;
    a.rnr_retry = 5;
    a.rq_psn = 0xABCDEF;
    a.max_rd_atomic = 8;
    a.min_rnr_timer = 20;
    a.sq_psn = 0x123456;
    a.max_dest_rd_atomic = 16;
    a.dest_qp_num = 0xFFFFFF;
  }
  a.alt_ah_attr = a.ah_attr;
  a.alt_port_num = 1;
  a.alt_timeout = a.timeout;
  return a;
}

/// Everything query_qp reports, as text: equal strings mean nothing changed.
std::string describe(const ibv_qp_attr& a) {
  std::ostringstream s;
  s << "state=" << state_name(a.qp_state) << " mtu=" << a.path_mtu << " qkey=" << a.qkey
    << " rq_psn=" << a.rq_psn << " sq_psn=" << a.sq_psn << " dqpn=" << a.dest_qp_num
    << " access=" << a.qp_access_flags << " pkey=" << a.pkey_index
    << " rd_atomic=" << int{a.max_rd_atomic} << " dest_rd_atomic=" << int{a.max_dest_rd_atomic}
    << " min_rnr=" << int{a.min_rnr_timer} << " port=" << int{a.port_num}
    << " timeout=" << int{a.timeout} << " retry=" << int{a.retry_cnt}
    << " rnr_retry=" << int{a.rnr_retry} << " av.global=" << int{a.ah_attr.is_global}
    << " av.port=" << int{a.ah_attr.port_num} << " av.sgid=" << int{a.ah_attr.grh.sgid_index}
    << " av.hop=" << int{a.ah_attr.grh.hop_limit} << " av.dgid=";
  for (uint8_t b : a.ah_attr.grh.dgid.raw) s << std::hex << int{b} << std::dec << ':';
  return s.str();
}

/// Asserts that the attributes in `mask` read back as they were set.
void expect_applied(const ibv_qp_attr& set, const ibv_qp_attr& got, int mask) {
  if (mask & IBV_QP_ACCESS_FLAGS) {
    EXPECT_EQ(got.qp_access_flags, set.qp_access_flags);
  }
  if (mask & IBV_QP_PKEY_INDEX) {
    EXPECT_EQ(got.pkey_index, set.pkey_index);
  }
  if (mask & IBV_QP_PORT) {
    EXPECT_EQ(got.port_num, set.port_num);
  }
  if (mask & IBV_QP_QKEY) {
    EXPECT_EQ(got.qkey, set.qkey);
  }
  if (mask & IBV_QP_AV) {
    EXPECT_EQ(got.ah_attr.is_global, 1);
    EXPECT_EQ(got.ah_attr.grh.sgid_index, set.ah_attr.grh.sgid_index);
    EXPECT_EQ(got.ah_attr.grh.hop_limit, set.ah_attr.grh.hop_limit);
    EXPECT_EQ(0, std::memcmp(got.ah_attr.grh.dgid.raw, set.ah_attr.grh.dgid.raw, 16));
  }
  if (mask & IBV_QP_PATH_MTU) {
    EXPECT_EQ(got.path_mtu, set.path_mtu);
  }
  if (mask & IBV_QP_TIMEOUT) {
    EXPECT_EQ(got.timeout, set.timeout);
  }
  if (mask & IBV_QP_RETRY_CNT) {
    EXPECT_EQ(got.retry_cnt, set.retry_cnt);
  }
  if (mask & IBV_QP_RNR_RETRY) {
    EXPECT_EQ(got.rnr_retry, set.rnr_retry);
  }
  if (mask & IBV_QP_RQ_PSN) {
    EXPECT_EQ(got.rq_psn, set.rq_psn);
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) {
    EXPECT_EQ(got.max_rd_atomic, set.max_rd_atomic);
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) {
    EXPECT_EQ(got.min_rnr_timer, set.min_rnr_timer);
  }
  if (mask & IBV_QP_SQ_PSN) {
    EXPECT_EQ(got.sq_psn, set.sq_psn);
  }
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    EXPECT_EQ(got.max_dest_rd_atomic, set.max_dest_rd_atomic);
  }
  if (mask & IBV_QP_DEST_QPN) {
    EXPECT_EQ(got.dest_qp_num, set.dest_qp_num);
  }
}

/// One engine on a capture port (no traffic here), with two neighbours, an IPv6 address
/// and the active MTU limited to 2048.
class Verbs : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineConfig cfg;
    cfg.ipv4 = kIpB;
    cfg.ipv6 = kIp6;
    cfg.active_mtu = IBV_MTU_2048;
    engine = std::make_unique<Engine>(port, cfg);
    engine->set_neighbor(ipv4_mapped_gid(kIpA), kMacA);
    engine->set_neighbor(ipv4_mapped_gid(kIpC), kMacC);
    pd = engine->alloc_pd();
    cq = engine->create_cq(256);
    ASSERT_NE(pd, nullptr);
    ASSERT_NE(cq, nullptr);
  }

  Qp* create(ibv_qp_type type) {
    ibv_qp_init_attr ia{};
    ia.send_cq = &cq->ibv;
    ia.recv_cq = &cq->ibv;
    ia.qp_type = type;
    ia.cap = {16, 16, 2, 2, 64};
    Qp* qp = engine->create_qp(pd, &ia);
    EXPECT_NE(qp, nullptr);
    return qp;
  }

  int modify(Qp* qp, const ibv_qp_attr& a, int mask) {
    ibv_qp_attr copy = a;
    return engine->modify_qp(qp, &copy, mask);
  }

  ibv_qp_attr query(Qp* qp) {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(engine->query_qp(qp, &a, -1, &init), 0);
    return a;
  }

  /// Brings a new QP from RESET to `s` along RESET -> INIT -> RTR -> RTS -> SQD with the
  /// required attributes only (ERR: from INIT).
  void bring_to(Qp* qp, ibv_qp_state s) {
    const int t = type_idx(qp->type);
    std::vector<ibv_qp_state> path;
    switch (s) {
      case IBV_QPS_RESET: break;
      case IBV_QPS_INIT: path = {IBV_QPS_INIT}; break;
      case IBV_QPS_RTR: path = {IBV_QPS_INIT, IBV_QPS_RTR}; break;
      case IBV_QPS_RTS: path = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}; break;
      case IBV_QPS_SQD: path = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD}; break;
      case IBV_QPS_ERR: path = {IBV_QPS_INIT, IBV_QPS_ERR}; break;
      default: FAIL() << "cannot reach " << state_name(s);
    }
    ibv_qp_state cur = IBV_QPS_RESET;
    for (ibv_qp_state next : path) {
      const Row* r = find_row(cur, next);
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(modify(qp, values(0, cur, next), IBV_QP_STATE | r->req[t]), 0)
          << state_name(cur) << "->" << state_name(next);
      cur = next;
    }
    ASSERT_EQ(query(qp).qp_state, s);
  }

  CapturePort port;
  std::unique_ptr<Engine> engine;
  mem::Pd* pd = nullptr;
  Cq* cq = nullptr;
};

// ---- The transition table, per QP type -----------------------------------------------------

class Transitions : public Verbs, public ::testing::WithParamInterface<ibv_qp_type> {
 protected:
  int t() const { return type_idx(GetParam()); }
  /// A fresh QP in `from` (QPNs are reused after destroy, so the table never runs out).
  Qp* fresh(ibv_qp_state from) {
    if (last_ != nullptr) {
      EXPECT_EQ(engine->destroy_qp(last_), 0);
    }
    last_ = create(GetParam());
    bring_to(last_, from);
    return last_;
  }
  Qp* last_ = nullptr;
};

TEST_P(Transitions, EveryValidTransitionWorksWithExactlyItsRequiredAttributes) {
  for (const Row& r : kSpec) {
    SCOPED_TRACE(std::string(state_name(r.from)) + "->" + state_name(r.to));
    Qp* qp = fresh(r.from);
    const ibv_qp_attr a = values(1, r.from, r.to);
    ASSERT_EQ(modify(qp, a, IBV_QP_STATE | r.req[t()]), 0);
    const ibv_qp_attr got = query(qp);
    EXPECT_EQ(got.qp_state, r.to);
    EXPECT_EQ(qp->ibv.state, r.to);
    expect_applied(a, got, r.req[t()]);
  }
}

TEST_P(Transitions, EachRequiredAttributeIsRequiredAndAFailureChangesNothing) {
  for (const Row& r : kSpec) {
    for (int bit : kAttrBits) {
      if (!(r.req[t()] & bit)) continue;
      SCOPED_TRACE(std::string(state_name(r.from)) + "->" + state_name(r.to) +
                   " without attribute " + std::to_string(bit));
      Qp* qp = fresh(r.from);
      const std::string before = describe(query(qp));
      EXPECT_EQ(modify(qp, values(1, r.from, r.to), IBV_QP_STATE | (r.req[t()] & ~bit)), EINVAL);
      EXPECT_EQ(describe(query(qp)), before);
    }
  }
}

TEST_P(Transitions, EachOptionalAttributeIsAccepted) {
  for (const Row& r : kSpec) {
    for (int bit : kAttrBits) {
      if (!(r.opt[t()] & bit)) continue;
      SCOPED_TRACE(std::string(state_name(r.from)) + "->" + state_name(r.to) +
                   " with optional attribute " + std::to_string(bit));
      Qp* qp = fresh(r.from);
      const std::string before = describe(query(qp));
      const ibv_qp_attr a = values(1, r.from, r.to);
      const int mask = IBV_QP_STATE | r.req[t()] | bit;
      if (bit == IBV_QP_ALT_PATH) {
        // Allowed by the table, but no alternate path / APM on RoCE here.
        EXPECT_EQ(modify(qp, a, mask), EOPNOTSUPP);
        EXPECT_EQ(describe(query(qp)), before);
        continue;
      }
      ASSERT_EQ(modify(qp, a, mask), 0);
      const ibv_qp_attr got = query(qp);
      EXPECT_EQ(got.qp_state, r.to);
      expect_applied(a, got, mask);
    }
    // All of them at once (but the alternate path).
    SCOPED_TRACE(std::string(state_name(r.from)) + "->" + state_name(r.to) + " with all");
    Qp* qp = fresh(r.from);
    const int mask = IBV_QP_STATE | r.req[t()] | (r.opt[t()] & ~IBV_QP_ALT_PATH);
    ASSERT_EQ(modify(qp, values(1, r.from, r.to), mask), 0);
    EXPECT_EQ(query(qp).qp_state, r.to);
  }
}

TEST_P(Transitions, AnAttributeNotAllowedForTheTransitionIsEinval) {
  for (const Row& r : kSpec) {
    for (int bit : kAttrBits) {
      if ((r.req[t()] | r.opt[t()]) & bit) continue;
      SCOPED_TRACE(std::string(state_name(r.from)) + "->" + state_name(r.to) +
                   " with attribute " + std::to_string(bit));
      Qp* qp = fresh(r.from);
      const std::string before = describe(query(qp));
      EXPECT_EQ(modify(qp, values(1, r.from, r.to), IBV_QP_STATE | r.req[t()] | bit), EINVAL);
      EXPECT_EQ(describe(query(qp)), before);
    }
  }
}

TEST_P(Transitions, PairsNotInTheTableAreEinval) {
  const std::vector<ibv_qp_state> reachable = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                               IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR};
  for (ibv_qp_state from : reachable) {
    for (ibv_qp_state to : kStates) {
      if (find_row(from, to) != nullptr) continue;
      SCOPED_TRACE(std::string(state_name(from)) + "->" + state_name(to));
      // Whatever the attributes: none, or every one a valid way into `to` would need.
      int into = 0;
      for (const Row& r : kSpec)
        if (r.to == to) into |= r.req[t()];
      for (int extra : {0, into}) {
        Qp* qp = fresh(from);
        const std::string before = describe(query(qp));
        EXPECT_EQ(modify(qp, values(1, from, to), IBV_QP_STATE | extra), EINVAL);
        EXPECT_EQ(describe(query(qp)), before);
      }
    }
  }
  // A state value that is not a state at all.
  Qp* qp = fresh(IBV_QPS_INIT);
  ibv_qp_attr a = values(1, IBV_QPS_INIT, IBV_QPS_INIT);
  a.qp_state = static_cast<ibv_qp_state>(IBV_QPS_ERR + 1);
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(query(qp).qp_state, IBV_QPS_INIT);
}

TEST_P(Transitions, SpelledOutExamples) {
  // RESET -> RTR and INIT -> RTS skip a state; RTR -> SQD is not a transition; RESET -> ERR
  // is not in the table either (Error is entered from INIT or later).
  struct Bad {
    ibv_qp_state from, to;
  };
  for (Bad b : {Bad{IBV_QPS_RESET, IBV_QPS_RTR}, Bad{IBV_QPS_INIT, IBV_QPS_RTS},
                Bad{IBV_QPS_RTR, IBV_QPS_SQD}, Bad{IBV_QPS_RESET, IBV_QPS_ERR},
                Bad{IBV_QPS_RESET, IBV_QPS_RTS}, Bad{IBV_QPS_ERR, IBV_QPS_RTS},
                Bad{IBV_QPS_SQD, IBV_QPS_INIT}, Bad{IBV_QPS_RTS, IBV_QPS_RTR}}) {
    SCOPED_TRACE(std::string(state_name(b.from)) + "->" + state_name(b.to));
    Qp* qp = fresh(b.from);
    EXPECT_EQ(modify(qp, values(1, b.from, b.to), IBV_QP_STATE), EINVAL);
    EXPECT_EQ(query(qp).qp_state, b.from);
  }
}

TEST_P(Transitions, AnyStateGoesToResetAndAnyButResetToError) {
  for (ibv_qp_state from : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR}) {
    SCOPED_TRACE(state_name(from));
    Qp* qp = fresh(from);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(engine->modify_qp(qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(query(qp).qp_state, IBV_QPS_ERR);
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(engine->modify_qp(qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(query(qp).qp_state, IBV_QPS_RESET);
    // A reset QP can be brought up again.
    const Row* r = find_row(IBV_QPS_RESET, IBV_QPS_INIT);
    EXPECT_EQ(modify(qp, values(0, IBV_QPS_RESET, IBV_QPS_INIT), IBV_QP_STATE | r->req[t()]), 0);
    EXPECT_EQ(query(qp).qp_state, IBV_QPS_INIT);
  }
}

TEST_P(Transitions, WithoutIbvQpStateTheQpStaysWhereItIs) {
  // A mask without IBV_QP_STATE modifies attributes within the current state: that is the
  // (current, current) row of the table.
  Qp* qp = fresh(IBV_QPS_RTS);
  const ibv_qp_attr a = values(1, IBV_QPS_RTS, IBV_QPS_RTS);
  const int bit = t() == kUd ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
  ASSERT_EQ(modify(qp, a, bit), 0);
  expect_applied(a, query(qp), bit);
  EXPECT_EQ(query(qp).qp_state, IBV_QPS_RTS);
  // RTR -> RTR is not a transition.
  qp = fresh(IBV_QPS_RTR);
  const std::string before = describe(query(qp));
  EXPECT_EQ(modify(qp, a, bit), EINVAL);
  EXPECT_EQ(describe(query(qp)), before);
  // In RESET nothing but "nothing" is accepted.
  qp = fresh(IBV_QPS_RESET);
  EXPECT_EQ(modify(qp, a, 0), 0);
  EXPECT_EQ(modify(qp, a, IBV_QP_PORT), EINVAL);
  EXPECT_EQ(query(qp).qp_state, IBV_QPS_RESET);
}

TEST_P(Transitions, CurStateMustMatchTheRealState) {
  Qp* qp = fresh(IBV_QPS_RTR);
  const Row* r = find_row(IBV_QPS_RTR, IBV_QPS_RTS);
  ibv_qp_attr a = values(1, IBV_QPS_RTR, IBV_QPS_RTS);
  a.cur_qp_state = IBV_QPS_RTS;  // wrong: the QP is in RTR
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | IBV_QP_CUR_STATE | r->req[t()]), EINVAL);
  EXPECT_EQ(query(qp).qp_state, IBV_QPS_RTR);
  a.cur_qp_state = IBV_QPS_RTR;
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | IBV_QP_CUR_STATE | r->req[t()]), 0);
  EXPECT_EQ(query(qp).qp_state, IBV_QPS_RTS);
  a.cur_qp_state = IBV_QPS_SQD;  // RTS -> RTS claiming SQD
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
  EXPECT_EQ(query(qp).qp_state, IBV_QPS_RTS);
}

TEST_P(Transitions, RateLimitIsForRcOnTheWayIntoRtsOrInIt) {
  // The kernel's table: IBV_QP_RATE_LIMIT is optional RTR -> RTS and RTS -> RTS on RC (and
  // raw-packet QPs); anywhere else the modify fails and changes nothing.
  const bool rc = GetParam() == IBV_QPT_RC;
  Qp* qp = fresh(IBV_QPS_RTS);
  ibv_qp_attr a = values(1, IBV_QPS_RTS, IBV_QPS_RTS);
  a.rate_limit = 1000;
  const std::string before = describe(query(qp));
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | IBV_QP_RATE_LIMIT), rc ? 0 : EINVAL);
  EXPECT_EQ(qp->cc.rate_limit_kbps, rc ? 1000u : 0u);
  EXPECT_EQ(describe(query(qp)), before);
  Qp* init = fresh(IBV_QPS_INIT);
  a = values(1, IBV_QPS_INIT, IBV_QPS_INIT);
  a.rate_limit = 1000;
  EXPECT_EQ(modify(init, a, IBV_QP_STATE | IBV_QP_RATE_LIMIT), EINVAL);
  EXPECT_EQ(init->cc.rate_limit_kbps, 0u);
}

TEST_P(Transitions, NullArgumentsAndUnknownMaskBits) {
  Qp* qp = fresh(IBV_QPS_INIT);
  ibv_qp_attr a = values(1, IBV_QPS_INIT, IBV_QPS_INIT);
  EXPECT_EQ(engine->modify_qp(nullptr, &a, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(engine->modify_qp(qp, nullptr, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | (1 << 30)), EINVAL);
  EXPECT_EQ(query(qp).qp_state, IBV_QPS_INIT);
}

std::string type_name(const ::testing::TestParamInfo<ibv_qp_type>& p) {
  return p.param == IBV_QPT_RC ? "RC" : p.param == IBV_QPT_UC ? "UC" : "UD";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Transitions,
                         ::testing::Values(IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD), type_name);

// ---- Attribute values -------------------------------------------------------------------------

/// An RC QP in INIT and the RTR / RTS attribute sets to try bad values in.
class Values : public Verbs {
 protected:
  void SetUp() override {
    Verbs::SetUp();
    qp = create(IBV_QPT_RC);
    bring_to(qp, IBV_QPS_INIT);
  }
  /// INIT -> RTR with one field changed must fail with `err` and leave the QP as it was.
  void rtr_fails(int err, const std::function<void(ibv_qp_attr&)>& change) {
    ibv_qp_attr a = values(0, IBV_QPS_INIT, IBV_QPS_RTR);
    change(a);
    const std::string before = describe(query(qp));
    EXPECT_EQ(modify(qp, a, IBV_QP_STATE | kRtrReqRc), err);
    EXPECT_EQ(describe(query(qp)), before);
  }
  void rtr_ok(const std::function<void(ibv_qp_attr&)>& change) {
    ibv_qp_attr a = values(0, IBV_QPS_INIT, IBV_QPS_RTR);
    change(a);
    ASSERT_EQ(modify(qp, a, IBV_QP_STATE | kRtrReqRc), 0);
    expect_applied(a, query(qp), kRtrReqRc);
  }
  void rts_fails(int err, const std::function<void(ibv_qp_attr&)>& change) {
    ibv_qp_attr a = values(0, IBV_QPS_RTR, IBV_QPS_RTS);
    change(a);
    const std::string before = describe(query(qp));
    EXPECT_EQ(modify(qp, a, IBV_QP_STATE | kRtsReqRc), err);
    EXPECT_EQ(describe(query(qp)), before);
  }
  void rts_ok(const std::function<void(ibv_qp_attr&)>& change) {
    ibv_qp_attr a = values(0, IBV_QPS_RTR, IBV_QPS_RTS);
    change(a);
    ASSERT_EQ(modify(qp, a, IBV_QP_STATE | kRtsReqRc), 0);
    expect_applied(a, query(qp), kRtsReqRc);
  }
  Qp* qp = nullptr;
};

TEST_F(Values, PathMtuAboveTheActiveMtuOrNotAnMtu) {
  ibv_port_attr pa{};
  ASSERT_EQ(engine->query_port(1, &pa), 0);
  ASSERT_EQ(pa.active_mtu, IBV_MTU_2048);  // as configured
  rtr_fails(EINVAL, [](ibv_qp_attr& a) { a.path_mtu = IBV_MTU_4096; });
  rtr_fails(EINVAL, [](ibv_qp_attr& a) { a.path_mtu = static_cast<ibv_mtu>(0); });
  rtr_fails(EINVAL, [](ibv_qp_attr& a) { a.path_mtu = static_cast<ibv_mtu>(6); });
  rtr_ok([](ibv_qp_attr& a) { a.path_mtu = IBV_MTU_2048; });
}

TEST_F(Values, SmallestMtuIsAccepted) {
  rtr_ok([](ibv_qp_attr& a) { a.path_mtu = IBV_MTU_256; });
}

TEST_F(Values, RtrFieldLimits) {
  ibv_device_attr da{};
  engine->query_device(&da);
  const int max_rd = da.max_qp_rd_atom;
  ASSERT_GT(max_rd, 0);
  rtr_fails(EINVAL, [&](ibv_qp_attr& a) { a.max_dest_rd_atomic = static_cast<uint8_t>(max_rd + 1); });
  rtr_fails(EINVAL, [](ibv_qp_attr& a) { a.min_rnr_timer = 32; });  // a 5-bit code
  rtr_fails(EINVAL, [](ibv_qp_attr& a) { a.dest_qp_num = 1u << 24; });  // QPNs are 24 bits
  rtr_ok([&](ibv_qp_attr& a) {
    a.max_dest_rd_atomic = static_cast<uint8_t>(max_rd);
    a.min_rnr_timer = 31;
    a.dest_qp_num = 0xFFFFFF;
  });
}

TEST_F(Values, RtsFieldLimits) {
  rtr_ok([](ibv_qp_attr&) {});
  ibv_device_attr da{};
  engine->query_device(&da);
  const int max_init = da.max_qp_init_rd_atom;
  ASSERT_GT(max_init, 0);
  rts_fails(EINVAL, [](ibv_qp_attr& a) { a.timeout = 32; });    // 5 bits
  rts_fails(EINVAL, [](ibv_qp_attr& a) { a.retry_cnt = 8; });   // 3 bits
  rts_fails(EINVAL, [](ibv_qp_attr& a) { a.rnr_retry = 8; });   // 3 bits
  rts_fails(EINVAL, [&](ibv_qp_attr& a) { a.max_rd_atomic = static_cast<uint8_t>(max_init + 1); });
  rts_ok([&](ibv_qp_attr& a) {
    a.timeout = 31;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = static_cast<uint8_t>(max_init);
  });
}

TEST_F(Values, PortAndPkeyIndex) {
  // RESET -> INIT on a second QP: port 1 and P_Key index 0 are the only ones.
  Qp* q = create(IBV_QPT_RC);
  for (uint8_t port_num : {uint8_t{0}, uint8_t{2}}) {
    ibv_qp_attr a = values(0, IBV_QPS_RESET, IBV_QPS_INIT);
    a.port_num = port_num;
    EXPECT_EQ(modify(q, a, IBV_QP_STATE | kInitAttrsConn), EINVAL) << int{port_num};
    EXPECT_EQ(query(q).qp_state, IBV_QPS_RESET);
  }
  ibv_qp_attr a = values(0, IBV_QPS_RESET, IBV_QPS_INIT);
  a.pkey_index = 1;
  EXPECT_EQ(modify(q, a, IBV_QP_STATE | kInitAttrsConn), EINVAL);
  EXPECT_EQ(query(q).qp_state, IBV_QPS_RESET);
  // ...and in INIT -> RTR, where P_Key index is optional.
  a = values(0, IBV_QPS_INIT, IBV_QPS_RTR);
  a.pkey_index = 1;
  const std::string before = describe(query(qp));
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | kRtrReqRc | IBV_QP_PKEY_INDEX), EINVAL);
  EXPECT_EQ(describe(query(qp)), before);
  a.pkey_index = 0;
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | kRtrReqRc | IBV_QP_PKEY_INDEX), 0);
}

TEST_F(Values, UnknownAccessFlag) {
  ibv_qp_attr a = values(0, IBV_QPS_INIT, IBV_QPS_INIT);
  a.qp_access_flags = 1u << 30;
  EXPECT_EQ(modify(qp, a, IBV_QP_ACCESS_FLAGS), EINVAL);
  EXPECT_EQ(query(qp).qp_access_flags, static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE));
}

TEST_F(Values, AddressVector) {
  // A destination with no neighbour entry: no route to it.
  rtr_fails(EHOSTUNREACH, [](ibv_qp_attr& a) { set_av(&a.ah_attr, {10, 9, 9, 9}, 64); });
  // RoCE needs the GRH: a destination GID.
  rtr_fails(EINVAL, [](ibv_qp_attr& a) { a.ah_attr.is_global = 0; });
  // A source GID index beyond the GID table.
  ibv_port_attr pa{};
  ASSERT_EQ(engine->query_port(1, &pa), 0);
  rtr_fails(EINVAL, [&](ibv_qp_attr& a) {
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(pa.gid_tbl_len);
  });
  // An empty entry of the table is no source either.
  rtr_fails(EINVAL, [&](ibv_qp_attr& a) { a.ah_attr.grh.sgid_index = 5; });
  // The port the AV leaves from must exist.
  rtr_fails(EINVAL, [](ibv_qp_attr& a) { a.ah_attr.port_num = 2; });
  // The neighbour becomes known: now it works.
  engine->set_neighbor(ipv4_mapped_gid({10, 9, 9, 9}), {0x02, 9, 9, 9, 9, 9});
  rtr_ok([](ibv_qp_attr& a) { set_av(&a.ah_attr, {10, 9, 9, 9}, 64); });
}

TEST_F(Values, AlternatePathIsNotSupported) {
  ibv_qp_attr a = values(0, IBV_QPS_INIT, IBV_QPS_RTR);
  const std::string before = describe(query(qp));
  EXPECT_EQ(modify(qp, a, IBV_QP_STATE | kRtrReqRc | IBV_QP_ALT_PATH), EOPNOTSUPP);
  EXPECT_EQ(describe(query(qp)), before);
}

TEST_F(Values, QueryReportsWhatWasSet) {
  ibv_qp_attr a = values(1, IBV_QPS_INIT, IBV_QPS_RTR);
  ASSERT_EQ(modify(qp, a, IBV_QP_STATE | kRtrReqRc | IBV_QP_ACCESS_FLAGS), 0);
  ibv_qp_attr b = values(1, IBV_QPS_RTR, IBV_QPS_RTS);
  ASSERT_EQ(modify(qp, b, IBV_QP_STATE | kRtsReqRc), 0);
  ibv_qp_attr got{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(engine->query_qp(qp, &got, -1, &init), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(got.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(got.dest_qp_num, 0xFFFFFFu);
  EXPECT_EQ(got.rq_psn, 0xABCDEFu);
  EXPECT_EQ(got.sq_psn, 0x123456u);
  EXPECT_EQ(got.qp_access_flags, static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE |
                                                       IBV_ACCESS_REMOTE_READ |
                                                       IBV_ACCESS_REMOTE_ATOMIC));
  EXPECT_EQ(got.max_dest_rd_atomic, 16);
  EXPECT_EQ(got.min_rnr_timer, 20);
  EXPECT_EQ(got.timeout, 20);
  EXPECT_EQ(got.retry_cnt, 3);
  EXPECT_EQ(got.rnr_retry, 5);
  EXPECT_EQ(got.max_rd_atomic, 8);
  EXPECT_EQ(got.port_num, 1);
  EXPECT_EQ(got.pkey_index, 0);
  EXPECT_EQ(got.ah_attr.is_global, 1);
  EXPECT_EQ(got.ah_attr.port_num, 1);
  EXPECT_EQ(got.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(got.ah_attr.grh.hop_limit, 9);
  const Gid c = ipv4_mapped_gid(kIpC);
  EXPECT_EQ(0, std::memcmp(got.ah_attr.grh.dgid.raw, c.data(), 16));
  // The init attributes: as created (ibv_query_qp(3) fills the ibv_qp_init_attr too).
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_EQ(init.send_cq, &cq->ibv);
  EXPECT_EQ(init.recv_cq, &cq->ibv);
  EXPECT_EQ(init.srq, nullptr);
  EXPECT_EQ(init.sq_sig_all, 0);
  EXPECT_EQ(init.cap.max_send_wr, 16u);
  EXPECT_EQ(init.cap.max_recv_wr, 16u);
  EXPECT_EQ(init.cap.max_send_sge, 2u);
  EXPECT_EQ(init.cap.max_recv_sge, 2u);
  EXPECT_EQ(init.cap.max_inline_data, kMaxInline);  // asked 64, granted the device's all
  EXPECT_EQ(got.cap.max_send_wr, 16u);
  EXPECT_EQ(engine->query_qp(nullptr, &got, -1, nullptr), EINVAL);
}

TEST_F(Values, UdQueryReportsQkeyAndSqPsn) {
  Qp* ud = create(IBV_QPT_UD);
  bring_to(ud, IBV_QPS_RTS);
  ibv_qp_attr a = values(1, IBV_QPS_RTS, IBV_QPS_RTS);
  ASSERT_EQ(modify(ud, a, IBV_QP_QKEY), 0);
  ibv_qp_attr got = query(ud);
  EXPECT_EQ(got.qkey, 0x22222222u);
  EXPECT_EQ(got.sq_psn, 0x000200u);  // from bring-up (set 0)
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
}

// ---- create_qp ----------------------------------------------------------------------------

class CreateQp : public Verbs {
 protected:
  ibv_qp_init_attr base(ibv_qp_type type = IBV_QPT_RC) {
    ibv_qp_init_attr ia{};
    ia.send_cq = &cq->ibv;
    ia.recv_cq = &cq->ibv;
    ia.qp_type = type;
    ia.cap = {8, 8, 1, 1, 0};
    return ia;
  }
  int fails(mem::Pd* p, ibv_qp_init_attr* ia) {
    errno = 0;
    Qp* qp = engine->create_qp(p, ia);
    EXPECT_EQ(qp, nullptr);
    return errno;
  }
};

TEST_F(CreateQp, NullArguments) {
  ibv_qp_init_attr ia = base();
  EXPECT_EQ(fails(nullptr, &ia), EINVAL);
  EXPECT_EQ(fails(pd, nullptr), EINVAL);
  ia.send_cq = nullptr;
  EXPECT_EQ(fails(pd, &ia), EINVAL);
  ia = base();
  ia.recv_cq = nullptr;
  EXPECT_EQ(fails(pd, &ia), EINVAL);
  EXPECT_EQ(pd->users, 0u);
  EXPECT_EQ(cq->users, 0u);
}

TEST_F(CreateQp, UnsupportedTypes) {
  for (ibv_qp_type type : {IBV_QPT_RAW_PACKET, IBV_QPT_DRIVER}) {
    ibv_qp_init_attr ia = base(type);
    EXPECT_EQ(fails(pd, &ia), EOPNOTSUPP) << type;
  }
  // XRC is supported (xrc_test.cc); a target QP is made through its domain, never a PD.
  ibv_qp_init_attr ia = base(IBV_QPT_XRC_RECV);
  EXPECT_EQ(fails(pd, &ia), EINVAL);
}

TEST_F(CreateQp, CapsAboveTheDeviceLimits) {
  ibv_device_attr da{};
  engine->query_device(&da);
  const auto max_wr = static_cast<uint32_t>(da.max_qp_wr);
  const auto max_sge = static_cast<uint32_t>(da.max_sge);
  ibv_qp_init_attr ia = base();
  ia.cap.max_send_wr = max_wr + 1;
  EXPECT_EQ(fails(pd, &ia), EINVAL);
  ia = base();
  ia.cap.max_recv_wr = max_wr + 1;
  EXPECT_EQ(fails(pd, &ia), EINVAL);
  ia = base();
  ia.cap.max_send_sge = max_sge + 1;
  EXPECT_EQ(fails(pd, &ia), EINVAL);
  ia = base();
  ia.cap.max_recv_sge = max_sge + 1;
  EXPECT_EQ(fails(pd, &ia), EINVAL);
  ia = base();
  ia.cap.max_inline_data = kMaxInline + 1;
  EXPECT_EQ(fails(pd, &ia), EINVAL);
  // Exactly at the limits is fine.
  ia = base();
  ia.cap = {max_wr, max_wr, max_sge, max_sge, kMaxInline};
  Qp* qp = engine->create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
}

TEST_F(CreateQp, SrqMakesRecvCapsIrrelevantButOnlyForRcAndUd) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  Srq* srq = engine->create_srq(pd, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_device_attr da{};
  engine->query_device(&da);
  // ibv_create_qp(3): max_recv_wr and max_recv_sge are ignored with an SRQ.
  ibv_qp_init_attr ia = base();
  ia.srq = &srq->ibv;
  ia.cap.max_recv_wr = static_cast<uint32_t>(da.max_qp_wr) + 1;
  ia.cap.max_recv_sge = static_cast<uint32_t>(da.max_sge) + 1;
  Qp* qp = engine->create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(srq->users, 1u);
  ia.qp_type = IBV_QPT_UD;
  EXPECT_NE(engine->create_qp(pd, &ia), nullptr);
  // "ibv_create_qp() will fail if it is asked to create QP of a type other than IBV_QPT_RC or
  // IBV_QPT_UD associated with an SRQ."
  ia.qp_type = IBV_QPT_UC;
  errno = 0;
  EXPECT_EQ(engine->create_qp(pd, &ia), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(srq->users, 2u);
}

TEST_F(CreateQp, NumbersStartAt0x11AreUniqueAndNotReusedAtOnce) {
  ibv_qp_init_attr ia = base();
  Qp* a = engine->create_qp(pd, &ia);
  Qp* b = engine->create_qp(pd, &ia);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_GE(a->qpn, 0x11u);  // QP0 and QP1 are special
  EXPECT_NE(a->qpn, b->qpn);
  EXPECT_EQ(a->ibv.qp_num, a->qpn);
  EXPECT_EQ(engine->qp_by_num(a->qpn), a);
  EXPECT_EQ(engine->qp_by_num(1), nullptr);
  EXPECT_EQ(pd->users, 2u);
  EXPECT_EQ(cq->users, 4u);  // send and receive CQ of both
  const uint32_t qpn = a->qpn;
  ASSERT_EQ(engine->destroy_qp(a), 0);
  EXPECT_EQ(engine->qp_by_num(qpn), nullptr);
  EXPECT_EQ(pd->users, 1u);
  EXPECT_EQ(cq->users, 2u);
  // A destroyed QP's number is not handed out next (frames in flight for it must find no
  // QP, not its successor).
  Qp* c = engine->create_qp(pd, &ia);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->qpn, qpn);
  EXPECT_NE(c->qpn, b->qpn);
}

/// A small engine (max_qp 3) with a PD, a CQ and the attributes of a minimal UD QP.
struct SmallEngine {
  explicit SmallEngine(uint32_t span = 0, uint32_t first = 0x11) {
    EngineConfig cfg;
    cfg.ipv4 = kIpB;
    cfg.max_qp = 3;
    if (span != 0) cfg.qpn_span = span;
    cfg.first_qpn = first;
    e = std::make_unique<Engine>(port, cfg);
    pd = e->alloc_pd();
    cq = e->create_cq(16);
    ia.send_cq = &cq->ibv;
    ia.recv_cq = &cq->ibv;
    ia.qp_type = IBV_QPT_UD;
    ia.cap = {1, 1, 1, 1, 0};
  }
  CapturePort port;
  std::unique_ptr<Engine> e;
  mem::Pd* pd = nullptr;
  Cq* cq = nullptr;
  ibv_qp_init_attr ia{};
};

TEST(CreateQpRotation, NumbersGoRoundTheWholeSpanSkippingLiveOnes) {
  SmallEngine s(8, 0x100);
  Qp* keep = s.e->create_qp(s.pd, &s.ia);  // 0x100 stays alive throughout
  ASSERT_NE(keep, nullptr);
  EXPECT_EQ(keep->qpn, 0x100u);
  std::vector<uint32_t> got;
  for (int i = 0; i < 16; ++i) {  // create and destroy, one at a time
    Qp* q = s.e->create_qp(s.pd, &s.ia);
    ASSERT_NE(q, nullptr) << i;
    got.push_back(q->qpn);
    ASSERT_EQ(s.e->destroy_qp(q), 0);
  }
  const std::vector<uint32_t> want = {0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107,
                                      0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107,
                                      0x101, 0x102};
  EXPECT_EQ(got, want);
}

TEST(CreateQpLimit, MaxQpIsEnforced) {
  SmallEngine s;
  Engine& e = *s.e;
  mem::Pd* pd = s.pd;
  ibv_qp_init_attr& ia = s.ia;
  for (int i = 0; i < 3; ++i) ASSERT_NE(e.create_qp(pd, &ia), nullptr) << i;
  errno = 0;
  EXPECT_EQ(e.create_qp(pd, &ia), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_device_attr da{};
  e.query_device(&da);
  EXPECT_EQ(da.max_qp, 3);
}

// ---- Device, port, GIDs -------------------------------------------------------------------

TEST_F(Verbs, QueryDevice) {
  ibv_device_attr d{};
  engine->query_device(&d);
  const EngineConfig def;
  EXPECT_EQ(d.phys_port_cnt, 1);
  EXPECT_EQ(d.max_qp, static_cast<int>(def.max_qp));
  EXPECT_EQ(d.max_qp_wr, static_cast<int>(def.max_qp_wr));
  EXPECT_EQ(d.max_sge, static_cast<int>(kMaxSge));
  EXPECT_EQ(d.max_cq, static_cast<int>(def.max_cq));
  EXPECT_EQ(d.max_cqe, static_cast<int>(def.max_cqe));
  EXPECT_EQ(d.max_mr, static_cast<int>(def.max_mr));
  EXPECT_EQ(d.max_pd, static_cast<int>(def.max_pd));
  EXPECT_EQ(d.max_srq, static_cast<int>(def.max_srq));
  EXPECT_EQ(d.max_srq_wr, static_cast<int>(def.max_srq_wr));
  EXPECT_EQ(d.max_qp_rd_atom, def.max_rd_atomic);
  EXPECT_EQ(d.max_qp_init_rd_atom, def.max_rd_atomic);
  EXPECT_EQ(d.max_pkeys, 1);
  EXPECT_NE(d.atomic_cap, IBV_ATOMIC_NONE);
  EXPECT_NE(d.node_guid, 0u);
  EXPECT_EQ(d.sys_image_guid, d.node_guid);
  // The node GUID is built from the MAC (02:00:00:00:00:0b): its last byte is the MAC's.
  uint8_t guid[8];
  std::memcpy(guid, &d.node_guid, 8);  // network order
  EXPECT_EQ(guid[7], 0x0b);
  EXPECT_EQ(guid[3], 0xff);
  EXPECT_EQ(guid[4], 0xfe);
}

TEST_F(Verbs, QueryPort) {
  ibv_port_attr p{};
  ASSERT_EQ(engine->query_port(1, &p), 0);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(p.active_mtu, IBV_MTU_2048);
  EXPECT_GE(p.max_mtu, p.active_mtu);
  EXPECT_EQ(p.gid_tbl_len, Engine::kGidTableLen);  // 3 populated: see GidTable
  EXPECT_EQ(p.pkey_tbl_len, 1);
  EXPECT_GE(p.max_msg_sz, 1u << 31);
  EXPECT_EQ(engine->query_port(0, &p), EINVAL);
  EXPECT_EQ(engine->query_port(2, &p), EINVAL);
}

TEST(QueryPortMtu, ActiveMtuIsCappedByTheFrameSize) {
  // 1500-byte IP MTU (1518-byte frames): a 2048-byte RoCE payload plus headers does not fit,
  // 1024 does.
  drivers::MemLink::Config lc;
  lc.max_frame_len = 1518;
  drivers::MemLink link(lc);
  EngineConfig cfg;
  cfg.ipv4 = kIpA;
  Engine e(link.a(), cfg);
  ibv_port_attr p{};
  ASSERT_EQ(e.query_port(1, &p), 0);
  EXPECT_EQ(p.active_mtu, IBV_MTU_1024);
}

TEST_F(Verbs, GidTable) {
  ibv_gid g{};
  // [0]: fe80::/64 with the modified EUI-64 of MAC 02:00:00:00:00:0b.
  ASSERT_EQ(engine->query_gid(1, 0, &g), 0);
  const uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0, 0, 0xff, 0xfe, 0, 0, 0x0b};
  EXPECT_EQ(0, std::memcmp(g.raw, ll, 16));
  // [1]: ::ffff:10.0.0.2, the configured IPv4 address.
  ASSERT_EQ(engine->query_gid(1, 1, &g), 0);
  const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  EXPECT_EQ(0, std::memcmp(g.raw, v4, 16));
  // [2]: the global IPv6 address.
  ASSERT_EQ(engine->query_gid(1, 2, &g), 0);
  EXPECT_EQ(0, std::memcmp(g.raw, kIp6.data(), 16));
  // The rest of the table is empty: ENODATA and a zero GID, past its end EINVAL.
  EXPECT_EQ(engine->query_gid(1, 3, &g), ENODATA);
  EXPECT_EQ(0, std::memcmp(g.raw, std::array<uint8_t, 16>{}.data(), 16));
  EXPECT_EQ(engine->query_gid(1, Engine::kGidTableLen - 1, &g), ENODATA);
  EXPECT_EQ(engine->query_gid(1, Engine::kGidTableLen, &g), EINVAL);
  EXPECT_EQ(engine->query_gid(1, -1, &g), EINVAL);
  EXPECT_EQ(engine->query_gid(2, 0, &g), EINVAL);
  uint16_t pkey = 0;
  ASSERT_EQ(engine->query_pkey(1, 0, &pkey), 0);
  EXPECT_EQ(pkey, 0xFFFF);  // the default partition, full member
  EXPECT_EQ(engine->query_pkey(1, 1, &pkey), EINVAL);
}

TEST(GidTableV4Only, IndexOneIsTheIpv4MappedGid) {
  CapturePort port;
  EngineConfig cfg;
  cfg.ipv4 = Ipv4Addr{192, 168, 7, 9};
  Engine e(port, cfg);
  EXPECT_EQ(e.gid_count(), 2);
  ibv_gid g{};
  ASSERT_EQ(e.query_gid(1, 1, &g), 0);
  const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 9};
  EXPECT_EQ(0, std::memcmp(g.raw, v4, 16));
  EXPECT_EQ(e.query_gid(1, 2, &g), ENODATA);  // no global IPv6 address: an empty entry
}

}  // namespace
}  // namespace uroce::test

// libFuzzer target over the engine with state: a victim engine with QPs of every kind up (RC,
// UC, UD, RC on an SRQ, an XRC target on a domain of two SRQs, an RC requester with work
// outstanding), receives posted, memory registered between guard bytes. Each input is a
// program the fuzzer writes for the peer on the other end of an in-memory link: packets
// built from its bytes (any valid opcode to any QP, PSNs around the expected ones, keys that
// are valid, another PD's, read-only or made up, addresses inside and outside the MRs,
// lengths, AETH syndromes, XRC SRQ numbers, Q_Keys), raw frames, time passing (the
// retransmission, RNR and ACK timers fire), and the victim's own verbs (posting, moving a QP
// to the error state, resetting and reconnecting it, deregistering and registering memory).
//
// Findings: any crash or sanitizer report; a byte written outside every MR (the guard bytes);
// a frame not returned to the pool once everything is torn down. (Loosening the MR bounds
// check by 16 bytes is found within two minutes.) ENGINE_FUZZ_COUNTERS=1 prints the victim's
// nonzero counters for each input run: where its packets went.
//
// The generator keeps most packets valid enough to reach the transport: an opcode of the QP's
// own transport, the PSN expected next, a WRITE's RETH length equal to its payload; each
// field is made wrong now and then.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>
#include <cstdio>
#include <string>

#include "engine/engine.h"
#include "memlink/memlink.h"
#include "wire/packet.h"

using namespace uroce;
using namespace uroce::wire;

namespace {

const Ipv4Addr kPeer = {10, 0, 0, 1};
const Ipv4Addr kMe = {10, 0, 0, 2};
constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;
// Queues as small as still leave room for work: the rings are built (and zeroed) for every
// input, and at 64 WRs per queue and 1024 CQEs that was a fifth of each run's time. Full
// queues and a CQ that overflows are paths worth reaching too.
constexpr uint32_t kWr = 16;
constexpr int kCqe = 256;

/// A cursor over the fuzzer's bytes (zeros once they run out).
struct In {
  const uint8_t* p;
  size_t n;
  uint8_t u8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return u16() | static_cast<uint32_t>(u16()) << 16; }
  uint64_t u64() { return u32() | static_cast<uint64_t>(u32()) << 32; }
};

/// Registered memory with guard bytes on both sides.
struct Region {
  std::vector<uint8_t> buf;
  mem::Mr* mr = nullptr;
  explicit Region(size_t len) : buf(len + 2 * kGuard, 0) {
    std::memset(buf.data(), kGuardByte, kGuard);
    std::memset(buf.data() + kGuard + len, kGuardByte, kGuard);
  }
  uint8_t* base() { return buf.data() + kGuard; }
  size_t len() const { return buf.size() - 2 * kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (buf[i] != kGuardByte || buf[buf.size() - 1 - i] != kGuardByte) return false;
    return true;
  }
};

/// The valid opcodes, all of them and by transport.
struct Opcodes {
  std::vector<uint8_t> all, rc, uc, ud, xrc;
  Opcodes() {
    for (unsigned op = 0; op < 256; ++op) {
      const OpcodeInfo& i = opcode_info(static_cast<uint8_t>(op));
      if (!i.valid) continue;
      all.push_back(static_cast<uint8_t>(op));
      if (i.transport == Transport::kRc) rc.push_back(static_cast<uint8_t>(op));
      if (i.transport == Transport::kUc) uc.push_back(static_cast<uint8_t>(op));
      if (i.transport == Transport::kUd) ud.push_back(static_cast<uint8_t>(op));
      if (i.transport == Transport::kXrc) xrc.push_back(static_cast<uint8_t>(op));
    }
  }
  const std::vector<uint8_t>& of(ibv_qp_type t) const {
    switch (t) {
      case IBV_QPT_UC: return uc;
      case IBV_QPT_UD: return ud;
      case IBV_QPT_XRC_RECV: return xrc;
      default: return rc;
    }
  }
};

enum QpIx : size_t { kRc, kUc, kUd, kRcSrq, kXrcTgt, kRcReq, kQps };

struct Victim {
  drivers::MemLink& link;
  std::unique_ptr<Engine> e;
  mem::Pd* pd = nullptr;
  mem::Pd* pd2 = nullptr;
  Cq* cq = nullptr;
  Cq* cq2 = nullptr;
  Region rw{16384}, ro{4096}, other{8192};  // rw, ro: pd; other: pd2
  Srq* srq = nullptr;
  Xrcd* xrcd = nullptr;
  Srq* xsrq[2] = {nullptr, nullptr};
  std::array<Qp*, kQps> qp{};
  uint64_t now = 1'000'000;

  explicit Victim(drivers::MemLink& l) : link(l) {
    EngineConfig cfg;
    cfg.ipv4 = kMe;
    cfg.seed = 7;
    cfg.key_seed = 11;
    // A small device: its tables are made for every input, and a device's full-size ones
    // (4096 QPs, 4096 async events) cost more to build than most programs cost to run.
    // (Smaller tables also bring their full-table paths within the fuzzer's reach.)
    cfg.max_qp = 16;
    cfg.qpn_span = 16;
    cfg.max_async_events = 64;
    e = std::make_unique<Engine>(link.b(), cfg);
    e->set_neighbor(ipv4_mapped_gid(kPeer), link.a().mac());
    pd = e->alloc_pd();
    pd2 = e->alloc_pd();
    cq = e->create_cq(kCqe);
    cq2 = e->create_cq(kCqe);
    rw.mr = e->reg_mr(pd, rw.base(), rw.len(), kAll);
    ro.mr = e->reg_mr(pd, ro.base(), ro.len(), IBV_ACCESS_REMOTE_READ);
    other.mr = e->reg_mr(pd2, other.base(), other.len(), kAll);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = kWr;
    sa.attr.max_sge = 2;
    srq = e->create_srq(pd, &sa);
    xrcd = e->create_xrcd();
    xsrq[0] = e->create_srq(pd, &sa, xrcd, cq);
    xsrq[1] = e->create_srq(pd2, &sa, xrcd, cq2);
    const ibv_qp_type types[kQps] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
                                     IBV_QPT_RC, IBV_QPT_XRC_RECV, IBV_QPT_RC};
    for (size_t i = 0; i < kQps; ++i) {
      ibv_qp_init_attr a{};
      a.qp_type = types[i];
      a.send_cq = &cq->ibv;
      a.recv_cq = &cq->ibv;
      a.srq = i == kRcSrq ? &srq->ibv : nullptr;
      a.cap.max_send_wr = kWr;
      a.cap.max_recv_wr = kWr;
      a.cap.max_send_sge = 2;
      a.cap.max_recv_sge = 2;
      qp[i] = e->create_qp(i == kXrcTgt ? nullptr : pd, &a, i == kXrcTgt ? xrcd : nullptr);
      if (qp[i] == nullptr) std::abort();
      connect(i);
    }
  }

  /// RESET -> INIT -> RTR -> RTS towards the peer's QP 0x100 + i.
  void connect(size_t i) {
    Qp* q = qp[i];
    const bool ud = q->type == IBV_QPT_UD, tgt = q->type == IBV_QPT_XRC_RECV;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = kAll;
    a.qkey = 0x1234;
    e->modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                            (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
    a = {};
    a.qp_state = IBV_QPS_RTR;
    int mask = IBV_QP_STATE;
    if (!ud) {
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = 0x100 + static_cast<uint32_t>(i);
      a.rq_psn = 1000;
      a.ah_attr.is_global = 1;
      a.ah_attr.port_num = 1;
      a.ah_attr.grh.sgid_index = 1;
      const Gid g = ipv4_mapped_gid(kPeer);
      std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
      a.max_dest_rd_atomic = 4;
      a.min_rnr_timer = 1;
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (q->type == IBV_QPT_RC || tgt) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    e->modify_qp(q, &a, mask);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 5000;
    a.timeout = 8;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (q->type == IBV_QPT_RC)
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    if (tgt) mask |= IBV_QP_TIMEOUT;
    e->modify_qp(q, &a, mask);
  }

  Region& region(uint8_t pick) {
    switch (pick % 3) {
      case 0: return rw;
      case 1: return ro;
      default: return other;
    }
  }
  uint32_t key(In& in) {
    switch (in.u8() % 5) {
      case 0: return rw.mr != nullptr ? rw.mr->key : 0;
      case 1: return ro.mr != nullptr ? ro.mr->key : 0;
      case 2: return other.mr != nullptr ? other.mr->key : 0;
      case 3: return 0;
      default: return in.u32();
    }
  }
  /// Inside a region, near either of its ends (where bounds checks matter), or anywhere.
  uint64_t va(In& in) {
    const uint8_t how = in.u8();
    Region& r = region(how >> 3);
    const uint64_t base = reinterpret_cast<uintptr_t>(r.base());
    switch (how % 8) {
      case 0:
      case 1:
      case 2: return base + in.u16() % r.len();
      case 3:
      case 4: return base + r.len() - in.u8() % 80;
      case 5: return base - in.u8() % 40;
      case 6: return base + (in.u16() % r.len() & ~7ull);  // aligned, for atomics
      default: return in.u64();
    }
  }

  void post_recv(In& in) {
    Region& r = region(in.u8());
    const uint32_t off = in.u16() % static_cast<uint32_t>(r.len());
    ibv_sge sge{reinterpret_cast<uintptr_t>(r.base()) + off,
                static_cast<uint32_t>(in.u16() % (r.len() - off + 1)),
                r.mr != nullptr ? r.mr->key : 0};
    ibv_recv_wr wr{};
    wr.wr_id = in.u8();
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const uint8_t where = in.u8() % 6;
    if (where < 3) e->post_recv(qp[where], &wr, nullptr);  // RC, UC, UD
    else if (where == 3) e->post_srq_recv(srq, &wr, nullptr);
    else if (xsrq[where - 4] != nullptr) e->post_srq_recv(xsrq[where - 4], &wr, nullptr);
  }

  /// The requester's work, so that responses find state to act on.
  void post_send(In& in) {
    Region& r = rw;
    const uint32_t off = in.u16() % 8192;
    ibv_sge sge{reinterpret_cast<uintptr_t>(r.base()) + off, in.u16() % 4096u,
                r.mr != nullptr ? r.mr->key : 0};
    ibv_send_wr wr{};
    wr.wr_id = in.u8();
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    const ibv_wr_opcode ops[] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ,
                                 IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP,
                                 IBV_WR_SEND_WITH_IMM};
    wr.opcode = ops[in.u8() % 6];
    if (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
      sge.length = 8;
      sge.addr &= ~7ull;
      wr.wr.atomic.remote_addr = in.u64();
      wr.wr.atomic.rkey = in.u32();
    } else {
      wr.wr.rdma.remote_addr = in.u64();
      wr.wr.rdma.rkey = in.u32();
    }
    e->post_send(qp[kRcReq], &wr, nullptr);
  }

  /// A packet from the peer, its fields from the input.
  void packet(In& in, const Opcodes& opcodes) {
    const size_t ix = in.u8() % kQps;
    Qp* q = qp[ix];
    const uint8_t rare = in.u8();  // each of these one time in 16
    RoceHeaders h;
    h.eth.src = link.a().mac();
    h.eth.dst = link.b().mac();
    h.ip4.src = kPeer;
    h.ip4.dst = kMe;
    h.ip4.ttl = 64;
    h.udp.src_port = 0xC000;
    h.udp.dst_port = kRoceV2Port;
    // An opcode of the QP's own transport, or (rarely) any valid one.
    const std::vector<uint8_t>& ops = (rare & 0x30) == 0x30 ? opcodes.all : opcodes.of(q->type);
    h.bth.opcode = ops[in.u8() % ops.size()];
    const OpcodeInfo& info = opcode_info(h.bth.opcode);
    const uint8_t flags = in.u8();
    h.bth.dest_qp = (rare & 0x0F) == 0x0F ? (in.u32() & 0xFFFFFF) : q->qpn;
    h.bth.pkey = (rare & 0xC0) == 0xC0 && (flags & 0x40) ? in.u16() : 0xFFFF;
    h.bth.ack_req = flags & 1;
    h.bth.se = flags & 2;
    // Mostly the PSN expected next (so that requests execute), else one around it.
    const Psn base = info.is_request() ? q->resp.epsn : q->comp.psn;
    const int32_t delta = in.u8() < 192 ? 0 : static_cast<int8_t>(in.u8());
    h.bth.psn = (base + delta).value();
    ExtHeaders& x = h.ext;
    x.xrceth.srqn = [&]() -> uint32_t {
      switch (in.u8() % 4) {
        case 0: return xsrq[0] != nullptr ? xsrq[0]->handle : 0;
        case 1: return xsrq[1] != nullptr ? xsrq[1]->handle : 0;
        case 2: return srq->handle;
        default: return in.u32() & 0xFFFFFF;
      }
    }();
    std::array<uint8_t, 1100> payload{};
    size_t plen = info.fixed_payload != 0 ? info.fixed_payload
                  : info.has_payload      ? (info.ends_message() ? in.u16() % 1100u : 1024)
                                          : 0;
    if (flags & 16) plen = in.u16() % 1100u;  // a wrong length, now and then
    // A WRITE's RETH length agrees with its packets unless the input says otherwise (so that
    // its bytes do get written, to wherever va and the key let them go).
    uint32_t dma_len = in.u16() % 5000u;
    if (flags & 4) dma_len = in.u32();
    else if (info.op == Operation::kWrite && info.pos == Position::kOnly) dma_len = static_cast<uint32_t>(plen);
    else if (info.op == Operation::kWrite && info.pos == Position::kFirst) dma_len = 1024 * (1 + in.u8() % 4) - in.u8() % 1024;
    x.reth = {va(in), key(in), dma_len};
    x.atomic = {va(in), key(in), in.u64(), in.u64()};
    x.aeth = {in.u8(), in.u32() & 0xFFFFFF};
    x.atomic_ack = {in.u64()};
    x.imm = {in.u32()};
    x.ieth = {key(in)};
    x.deth = {(flags & 8) ? in.u32() : 0x1234, 0, 0x100 + static_cast<uint32_t>(ix)};
    x.feth.raw = in.u8();
    for (size_t i = 0; i < plen; i += 64) payload[i] = in.u8();
    send(h, Bytes(payload.data(), plen));
  }

  void send(const RoceHeaders& h, Bytes payload) {
    Frame* f = link.a().alloc_frame();
    if (f == nullptr) return;
    const size_t n = build_frame(h, payload, MutBytes(f->data, f->cap));
    if (n == 0) {
      link.a().free_frame(f);
      return;
    }
    f->len = static_cast<uint32_t>(n);
    Frame* fs[1] = {f};
    if (link.a().tx_burst(now, fs) == 0) link.a().free_frame(f);
  }

  /// A valid frame's bytes, then the input's: the parser's and the engine's error paths.
  void raw(In& in) {
    Frame* f = link.a().alloc_frame();
    if (f == nullptr) return;
    const size_t n = std::min<size_t>(in.u16() % 1200u, f->cap);
    for (size_t i = 0; i < n; ++i) f->data[i] = in.u8();
    if (n >= 14) {  // addressed to the victim, so that it gets as far as it can
      const auto mac = link.b().mac();
      std::memcpy(f->data, mac.data(), 6);
    }
    f->len = static_cast<uint32_t>(n);
    Frame* fs[1] = {f};
    if (link.a().tx_burst(now, fs) == 0) link.a().free_frame(f);
  }

  /// Runs the victim; what it sends the peer is dropped.
  void run(uint64_t ns) {
    now += ns;
    e->poll(now);
    Frame* out[32];
    uint16_t k;
    while ((k = link.a().rx_burst(now, out)) > 0)
      for (uint16_t i = 0; i < k; ++i) link.a().free_frame(out[i]);
    ibv_wc wc[16];
    while (e->poll_cq(cq, 16, wc) > 0) {
    }
    while (e->poll_cq(cq2, 16, wc) > 0) {
    }
  }

  void verbs(In& in) {
    const uint8_t op = in.u8();
    Qp* q = qp[in.u8() % kQps];
    ibv_qp_attr a{};
    switch (op % 6) {
      case 0:
        a.qp_state = IBV_QPS_ERR;
        e->modify_qp(q, &a, IBV_QP_STATE);
        break;
      case 1:
        a.qp_state = IBV_QPS_RESET;
        e->modify_qp(q, &a, IBV_QP_STATE);
        for (size_t i = 0; i < kQps; ++i)
          if (qp[i] == q) connect(i);
        break;
      case 2: {  // memory goes away while packets may be on their way to it
        Region& r = region(in.u8());
        if (r.mr != nullptr && e->dereg_mr(r.mr) == 0) r.mr = nullptr;
        break;
      }
      case 3: {
        Region& r = region(in.u8());
        if (r.mr == nullptr)
          r.mr = e->reg_mr(&r == &other ? pd2 : pd, r.base(), r.len(), &r == &ro ? IBV_ACCESS_REMOTE_READ : kAll);
        break;
      }
      case 4: {  // an XRC SRQ goes (and comes back) while its target may be receiving
        const size_t i = in.u8() % 2;
        if (xsrq[i] != nullptr) {
          if (e->destroy_srq(xsrq[i]) == 0) xsrq[i] = nullptr;
        } else {
          ibv_srq_init_attr sa{};
          sa.attr.max_wr = kWr;
          sa.attr.max_sge = 2;
          xsrq[i] = e->create_srq(i == 0 ? pd : pd2, &sa, xrcd, i == 0 ? cq : cq2);
        }
        break;
      }
      default: post_send(in); break;
    }
  }

  ~Victim() {
    run(10'000'000'000ull);  // every timer that is due fires
    if (getenv("ENGINE_FUZZ_COUNTERS") != nullptr)  // where an input's packets went
      for (size_t c = 0; c < kCounterInfo.size(); ++c)
        if (e->counters()[static_cast<Counter>(c)] != 0)
          fprintf(stderr, "%s=%llu ", std::string(kCounterInfo[c].name).c_str(), static_cast<unsigned long long>(e->counters()[static_cast<Counter>(c)]));
    for (Qp* q : qp) e->destroy_qp(q);
    for (Srq* s : xsrq)
      if (s != nullptr) e->destroy_srq(s);
    e->destroy_srq(srq);
    e->destroy_xrcd(xrcd);
    for (Region* r : {&rw, &ro, &other})
      if (r->mr != nullptr) e->dereg_mr(r->mr);
    run(0);
    e.reset();
    Frame* out[32];
    uint16_t k;
    while ((k = link.b().rx_burst(now, out)) > 0)
      for (uint16_t i = 0; i < k; ++i) link.b().free_frame(out[i]);
    while ((k = link.a().rx_burst(now, out)) > 0)
      for (uint16_t i = 0; i < k; ++i) link.a().free_frame(out[i]);
  }
};



}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Opcodes opcodes;
  In in{data, size};
  // One link for every input (making its frame pool was a third of each run's time): an
  // input that leaves a frame out of the pool aborts below, so each input starts with every
  // frame back and both queues empty, as on a new link.
  static drivers::MemLink link([] {
    drivers::MemLink::Config lc;  // small
    lc.frames = 256;
    lc.max_frame_len = 2048;
    lc.rx_queue = 256;
    return lc;
  }());
  static const size_t pool_total = link.pool().available();
  {
    Victim v(link);
    for (int i = 0; i < 8; ++i) v.post_recv(in);  // some receives from the start
    for (int steps = 0; in.n > 0 && steps < 256; ++steps) {
      switch (in.u8() % 8) {
        case 0:
        case 1:
        case 2:
        case 3: v.packet(in, opcodes); break;
        case 4: v.raw(in); break;
        case 5: v.run(static_cast<uint64_t>(in.u16()) << (in.u8() % 24)); break;
        case 6: v.post_recv(in); break;
        default: v.verbs(in); break;
      }
      v.run(1000);
    }
    for (const Region* r : {&v.rw, &v.ro, &v.other})
      if (!r->guards_intact()) std::abort();  // written outside every MR
  }
  if (link.pool().available() != pool_total) std::abort();  // a frame never came back
  return 0;
}

// The replay itself: an Engine on a ReplayPort, fed the other host's packets in capture order.
//
// Address translation: the engine *becomes* the replaced host. Its port has that host's MAC,
// the engine that host's IPv4 address, its QPs that host's QP numbers (lower numbers are
// taken by idle placeholder QPs), and its memory regions are registered at the recorded
// virtual addresses (reg_mr_iova). The only field that cannot be chosen is the R_Key (the
// engine makes its own), so fed requests get their RETH / AtomicETH / IETH R_Key rewritten
// to the engine's key and their ICRC recomputed. Nothing uroce sends is rewritten.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <set>
#include <utility>

#include "common/frame_pool.h"
#include "engine/engine.h"
#include "replay/replay.h"

namespace uroce::replay {

using wire::Ext;
using wire::Operation;
using wire::Position;
using wire::Psn;

namespace {

/// A port whose receive side is fed by the replay and whose transmit side is recorded.
class ReplayPort final : public Port {
 public:
  explicit ReplayPort(const wire::MacAddr& mac) : pool_(512, 9018), mac_(mac) {}
  ~ReplayPort() override {
    for (Frame* f : rx_) pool_.free(f);
  }
  ReplayPort(const ReplayPort&) = delete;
  ReplayPort& operator=(const ReplayPort&) = delete;

  bool inject(wire::Bytes bytes) {
    if (bytes.size() > pool_.frame_cap()) return false;
    Frame* f = pool_.alloc();
    if (f == nullptr) return false;
    std::memcpy(f->data, bytes.data(), bytes.size());
    f->len = static_cast<uint32_t>(bytes.size());
    rx_.push_back(f);
    return true;
  }
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> take_sent() {
    return std::exchange(sent_, {});
  }
  size_t rx_pending() const { return rx_.size(); }

  uint16_t rx_burst(uint64_t, std::span<Frame*> out) override {
    uint16_t n = 0;
    while (n < out.size() && !rx_.empty()) {
      out[n++] = rx_.front();
      rx_.pop_front();
    }
    return n;
  }
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override {
    for (Frame* f : frames) {
      sent_.emplace_back(now_ns, std::vector<uint8_t>(f->data, f->data + f->len));
      pool_.free(f);
    }
    return static_cast<uint16_t>(frames.size());
  }
  Frame* alloc_frame() override { return pool_.alloc(); }
  void free_frame(Frame* f) override { pool_.free(f); }
  uint32_t max_frame_len() const override { return 9018; }
  std::array<uint8_t, 6> mac() const override { return mac_; }

 private:
  drivers::FramePool pool_;
  wire::MacAddr mac_;
  std::deque<Frame*> rx_;
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> sent_;
};

/// A message the replaced peer sent as requester, rebuilt from its packets.
struct XMsg {
  size_t spec = 0;        // QpSpec index
  size_t post_at = 0;     // capture index where it is posted (its earliest packet)
  uint8_t opcode = 0;     // of its first packet
  Operation op = Operation::kSend;
  uint32_t psn = 0;
  std::vector<uint8_t> payload;
  bool complete = true;
  wire::ExtHeaders ext;
  size_t local_off = 0;  // in the local arena
};

ibv_mtu to_ibv_mtu(uint32_t mtu) {
  switch (mtu) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

std::string hex(uint64_t v, int w = 6) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%0*llx", w, static_cast<unsigned long long>(v));
  return b;
}

std::string wc_status_name(ibv_wc_status st) {
  switch (st) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
    default: return "status " + std::to_string(static_cast<int>(st));
  }
}

/// 8-byte aligned host memory whose address has the same low bits as the peer's VA, so that
/// atomics at 8-byte aligned VAs land on 8-byte aligned host addresses. A shared mapping of
/// a memory file: an MR over it may have IBV_ACCESS_FLUSH_PERSISTENT, so that the recorded
/// peer's FLUSHes for persistence are carried out as they were for it.
struct HostBuf {
  uint8_t* map = nullptr;
  size_t map_len = 0;
  uint8_t* base = nullptr;
  HostBuf() = default;
  HostBuf(const HostBuf&) = delete;
  HostBuf& operator=(const HostBuf&) = delete;
  ~HostBuf() {
    if (map != nullptr) munmap(map, map_len);
  }
  bool make(uint64_t va, size_t len) {
    map_len = len + 16;
    const int fd = memfd_create("uroce-replay", MFD_CLOEXEC);
    if (fd < 0) return false;
    void* p = ftruncate(fd, static_cast<off_t>(map_len)) == 0
                  ? mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return false;
    map = static_cast<uint8_t*>(p);  // page aligned, zero filled
    base = map + (va & 7);
    return true;
  }
};

}  // namespace

bool run_replay(const Capture& cap, const Scenario& sc, Replay& out, std::string& error) {
  constexpr size_t kMaxPerStep = 16384;
  const int x = replaced_host(sc);
  const int o = 1 - x;
  auto from_x = [&](const Pkt& p) { return cap.host_of(p) == x; };
  auto spec_index = [&](const Pkt& p) -> int {
    for (size_t i = 0; i < sc.qps.size(); ++i) {
      const QpSpec& q = sc.qps[i];
      if (from_x(p) ? p.dest_qp() == q.peer_qpn : p.dest_qp() == q.qpn)
        return static_cast<int>(i);
    }
    return -1;
  };

  // ---- The replaced peer's messages (posted as work requests when they start).
  std::vector<XMsg> msgs;
  {
    for (size_t s = 0; s < sc.qps.size(); ++s) {
      const QpSpec& q = sc.qps[s];
      std::map<int32_t, size_t> by_psn;  // distance from sq_psn -> first capture index
      for (size_t i = 0; i < cap.pkts.size(); ++i) {
        const Pkt& p = cap.pkts[i];
        if (!from_x(p) || !p.info->is_request() || spec_index(p) != static_cast<int>(s)) continue;
        const int32_t d = Psn(p.psn()) - Psn(*q.sq_psn);
        if (q.type == QpType::kUd) {
          by_psn.emplace(static_cast<int32_t>(by_psn.size()), i);  // every datagram is new
        } else {
          by_psn.emplace(d, i);
        }
      }
      // A READ takes one PSN per response packet: a request inside an earlier READ's range is
      // that READ asked again (after lost responses), not a new message.
      int32_t covered = INT32_MIN;
      for (auto it = by_psn.begin(); it != by_psn.end();) {
        const Pkt& p = cap.pkts[it->second];
        if (q.type != QpType::kUd && it->first <= covered) {
          it = by_psn.erase(it);
          continue;
        }
        if (p.info->op == Operation::kReadRequest)
          covered = it->first + static_cast<int32_t>(
                                    std::max<uint32_t>(1, (p.hdr.ext.reth.dma_len + sc.mtu - 1) / sc.mtu)) - 1;
        ++it;
      }
      XMsg* cur = nullptr;
      int32_t last_d = -1;
      for (const auto& [d, i] : by_psn) {
        const Pkt& p = cap.pkts[i];
        const int32_t lost = q.type != QpType::kUd && d > last_d + 1 ? d - last_d - 1 : 0;
        if (lost > 4096)
          return error = "QP " + hex(q.qpn) + " sends PSN " + hex(p.psn()) + " after a gap of " +
                         std::to_string(lost) + " PSNs never seen: not one conversation",
                 false;
        if (cur != nullptr && lost > 0)  // never captured: zeros of one MTU each
          cur->payload.resize(cur->payload.size() + static_cast<size_t>(lost) * sc.mtu);
        last_d = d;
        if (p.info->starts_message() || cur == nullptr) {
          XMsg m;
          m.spec = s;
          m.post_at = i;
          m.opcode = p.hdr.bth.opcode;
          m.op = p.info->op;
          m.psn = p.psn();
          m.ext = p.hdr.ext;
          m.complete = false;
          msgs.push_back(std::move(m));
          cur = &msgs.back();
          if (!p.info->starts_message()) {  // the start was never captured
            cur->ext = {};
            cur->opcode = p.hdr.bth.opcode;
            cur->psn = (Psn(p.psn()) - lost).value();
            cur->payload.resize(static_cast<size_t>(lost) * sc.mtu);
          }
        }
        cur->post_at = std::min(cur->post_at, i);
        const wire::Bytes pl = p.payload();
        cur->payload.insert(cur->payload.end(), pl.begin(), pl.end());
        if (p.info->has(Ext::kImmDt)) cur->ext.imm = p.hdr.ext.imm;
        if (p.info->has(Ext::kIeth)) cur->ext.ieth = p.hdr.ext.ieth;
        if (p.info->ends_message()) {
          cur->complete = true;
          cur->opcode = p.info->pos == Position::kLast ? p.hdr.bth.opcode : cur->opcode;
          cur = nullptr;
        }
      }
    }
    for (XMsg& m : msgs) {
      if (m.complete) continue;
      // Cut off by the end of the capture: a WRITE's length is in its RETH; a SEND gets
      // one more (unknown, zero) packet so that the captured ones stay FIRST/MIDDLE.
      if (m.op == Operation::kWrite && m.ext.reth.dma_len > (64u << 20))
        return error = "a WRITE of " + std::to_string(m.ext.reth.dma_len) +
                       " bytes is cut off by the capture end: too large to rebuild",
               false;
      if (m.op == Operation::kWrite && m.ext.reth.dma_len > m.payload.size())
        m.payload.resize(m.ext.reth.dma_len);
      else if (m.op == Operation::kSend || m.op == Operation::kWrite)
        m.payload.resize(m.payload.size() + sc.mtu);
    }
  }

  // ---- Which of the other host's SENDs found no receive buffer (the recorded peer RNR-NAKed).
  std::set<size_t> no_buffer;
  for (size_t i = 0; i < cap.pkts.size(); ++i) {
    const Pkt& p = cap.pkts[i];
    if (!from_x(p) || !p.has(Ext::kAeth) || !p.hdr.ext.aeth.is_rnr_nak()) continue;
    for (size_t j = i; j-- > 0;) {
      const Pkt& r = cap.pkts[j];
      if (!from_x(r) && spec_index(r) == spec_index(p) && r.psn() == p.psn() &&
          r.info->is_request()) {
        no_buffer.insert(j);
        break;
      }
    }
  }
  size_t sends_in = 0;
  for (const Pkt& p : cap.pkts)
    if (!from_x(p) && p.info->op == Operation::kSend && p.info->starts_message()) ++sends_in;

  // ---- The engine, as the replaced host.
  ReplayPort port(cap.mac[x]);
  EngineConfig cfg;
  // The replaced host's address: IPv4 (GID 1, mapped), a global IPv6 one (GID 1) or the
  // link-local one its MAC gives (GID 0).
  uint8_t sgid = 1;
  if (wire::is_ipv4_mapped(cap.ip[x])) {
    const wire::Gid& g = cap.ip[x];
    cfg.ipv4 = wire::Ipv4Addr{g[12], g[13], g[14], g[15]};
  } else if (cap.ip[x] == wire::link_local_gid(cap.mac[x])) {
    sgid = 0;
  } else {
    cfg.ipv6 = cap.ip[x];
  }
  cfg.active_mtu = IBV_MTU_4096;
  cfg.max_qp = 16384;
  cfg.seed = 0x7265706c;
  cfg.qpn_span = 0x1000000 - Engine::kFirstQpn;  // any recorded QPN (set_next_qpn below)
  cfg.key_seed = 0x7265706b;                     // the same keys at every replay
  if (cap.pkts.front().hdr.eth.has_vlan) cfg.vlan_id = cap.pkts.front().hdr.eth.vid;
  Engine eng(port, cfg);
  eng.set_neighbor(cap.ip[o], cap.mac[o]);
  mem::Pd* pd = eng.alloc_pd();
  Cq* cq = eng.create_cq(1 << 16);
  if (pd == nullptr || cq == nullptr) return error = "engine: cannot create PD/CQ", false;
  constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                          UROCE_ACCESS_FLUSH_GLOBAL | UROCE_ACCESS_FLUSH_PERSISTENT;

  std::vector<HostBuf> mem(sc.mrs.size());
  std::map<uint32_t, uint32_t> rkey_map;  // recorded -> engine
  for (size_t i = 0; i < sc.mrs.size(); ++i) {
    const MrSpec& m = sc.mrs[i];
    if (!mem[i].make(m.va, m.length)) return error = "cannot map memory for an MR", false;
    if (!m.init.empty())
      std::memcpy(mem[i].base, m.init.data(), std::min<size_t>(m.init.size(), m.length));
    mem::Mr* mr = eng.reg_mr_iova(pd, mem[i].base, m.length, m.va, kRemote);
    if (mr == nullptr) return error = "engine: cannot register MR at " + hex(m.va, 1), false;
    rkey_map[m.rkey] = mr->key;
  }
  // Local memory for the replaced peer's own work requests and receive buffers.
  size_t local_len = 8;
  for (const XMsg& m : msgs)
    if (m.op == Operation::kReadRequest && m.ext.reth.dma_len > (256u << 20))
      return error = "a READ of " + std::to_string(m.ext.reth.dma_len) + " bytes: too large to replay",
             false;
  for (XMsg& m : msgs) {
    m.local_off = local_len;
    const size_t n = m.op == Operation::kReadRequest ? m.ext.reth.dma_len
                     : (m.op == Operation::kCompareSwap || m.op == Operation::kFetchAdd)
                         ? 8
                         : m.payload.size();
    local_len += (n + 7) & ~size_t{7};
  }
  const size_t recv_slots = sends_in + 16;
  const size_t recv_base = local_len;
  local_len += recv_slots * sc.recv_size;
  if (local_len > (size_t{1} << 30)) return error = "the replay needs more than 1 GiB", false;
  HostBuf local;
  if (!local.make(0, local_len)) return error = "cannot map the local memory", false;
  for (const XMsg& m : msgs)
    if ((m.op == Operation::kSend || m.op == Operation::kWrite ||
         m.op == Operation::kAtomicWrite) &&
        !m.payload.empty())
      std::memcpy(local.base + m.local_off, m.payload.data(), m.payload.size());
  mem::Mr* lmr = eng.reg_mr(pd, local.base, local_len, IBV_ACCESS_LOCAL_WRITE);
  if (lmr == nullptr) return error = "engine: cannot register local memory", false;

  Srq* srq = nullptr;
  if (sc.srq) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = static_cast<uint32_t>(std::min<size_t>(recv_slots, 16384));
    sa.attr.max_sge = 1;
    srq = eng.create_srq(pd, &sa);
    if (srq == nullptr) return error = "engine: cannot create the SRQ", false;
  }

  // QPs with the recorded numbers: placeholders take the numbers below.
  std::vector<Qp*> qps(sc.qps.size(), nullptr);
  std::vector<Ah*> ahs(sc.qps.size(), nullptr);
  {
    std::vector<size_t> order(sc.qps.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return sc.qps[a].qpn < sc.qps[b].qpn; });
    for (size_t s : order) {
      const QpSpec& q = sc.qps[s];
      if (q.qpn < Engine::kFirstQpn || q.qpn - Engine::kFirstQpn >= cfg.qpn_span)
        return error = "engine: QPN " + hex(q.qpn) + " is outside the range uroce allocates (" +
                       hex(Engine::kFirstQpn) + ".." + hex(Engine::kFirstQpn + cfg.qpn_span - 1) +
                       ")",
               false;
      ibv_qp_init_attr ia{};
      ia.send_cq = &cq->ibv;
      ia.recv_cq = &cq->ibv;
      ia.qp_type = q.type == QpType::kRc ? IBV_QPT_RC
                   : q.type == QpType::kUc ? IBV_QPT_UC
                                           : IBV_QPT_UD;
      ia.cap.max_send_wr = 16384;  // room for the whole capture
      ia.cap.max_recv_wr = 16384;
      ia.cap.max_send_sge = 1;
      ia.cap.max_recv_sge = 1;
      ia.srq = srq != nullptr && q.type != QpType::kUd ? &srq->ibv : nullptr;
      eng.set_next_qpn(q.qpn);  // the recorded number (QPNs otherwise go in rotation)
      Qp* qp = eng.create_qp(pd, &ia);
      if (qp == nullptr)
        return error = "engine: cannot create QP " + hex(q.qpn) + " (" + std::strerror(errno) + ")",
               false;
      if (qp->qpn != q.qpn)
        return error = "engine: QPN " + hex(q.qpn) + " is taken (QPs must be distinct)", false;
      qps[s] = qp;
      const wire::Gid dgid = cap.ip[o];
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      a.qp_access_flags = kRemote;
      a.qkey = q.qkey;
      int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                 (q.type == QpType::kUd ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
      int e = eng.modify_qp(qp, &a, mask);
      a = {};
      a.qp_state = IBV_QPS_RTR;
      mask = IBV_QP_STATE;
      if (q.type != QpType::kUd) {
        a.path_mtu = to_ibv_mtu(sc.mtu);
        a.dest_qp_num = q.peer_qpn;
        a.rq_psn = *q.rq_psn;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.sgid_index = sgid;
        a.ah_attr.grh.hop_limit = 64;
        std::memcpy(a.ah_attr.grh.dgid.raw, dgid.data(), 16);
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (q.type == QpType::kRc) {
          a.max_dest_rd_atomic = 16;
          a.min_rnr_timer = sc.min_rnr_timer.value_or(12);
          mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
      }
      if (e == 0) e = eng.modify_qp(qp, &a, mask);
      a = {};
      a.qp_state = IBV_QPS_RTS;
      a.sq_psn = *q.sq_psn;
      mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (q.type == QpType::kRc) {
        a.timeout = sc.timeout;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      if (e == 0) e = eng.modify_qp(qp, &a, mask);
      if (e != 0)
        return error = "engine: cannot bring QP " + hex(q.qpn) + " to RTS (" +
                       std::strerror(e) + ")",
               false;
      if (q.type == QpType::kUd) {
        ibv_ah_attr aa{};
        aa.is_global = 1;
        aa.port_num = 1;
        aa.grh.sgid_index = sgid;
        aa.grh.hop_limit = 64;
        std::memcpy(aa.grh.dgid.raw, dgid.data(), 16);
        ahs[s] = eng.create_ah(pd, &aa);
        if (ahs[s] == nullptr) return error = "engine: cannot create an address handle", false;
      }
    }
  }

  // ---- Receive buffers, posted just in time (one outstanding per QP / SRQ).
  std::vector<uint64_t> recv_posted(sc.qps.size() + 1, 0), recv_done(sc.qps.size() + 1, 0);
  size_t next_slot = 0;
  out.received.assign(sc.qps.size(), {});
  auto rq_index = [&](size_t s) { return srq != nullptr && sc.qps[s].type != QpType::kUd ? sc.qps.size() : s; };
  auto ensure_recv = [&](size_t s) {
    const size_t r = rq_index(s);
    if (recv_posted[r] > recv_done[r] || next_slot >= recv_slots) return;
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(local.base + recv_base + next_slot * sc.recv_size);
    sge.length = sc.recv_size;
    sge.lkey = lmr->key;
    ibv_recv_wr wr{};
    wr.wr_id = next_slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    const int e = r == sc.qps.size() ? eng.post_srq_recv(srq, &wr, &bad)
                                     : eng.post_recv(qps[s], &wr, &bad);
    if (e == 0) {
      ++recv_posted[r];
      ++next_slot;
    }
  };
  std::vector<int> wr_status(msgs.size(), -1);
  auto drain_cq = [&] {
    ibv_wc wc[32];
    int n;
    while ((n = eng.poll_cq(cq, 32, wc)) > 0) {
      for (int i = 0; i < n; ++i) {
        if ((wc[i].opcode & IBV_WC_RECV) == 0 && wc[i].wr_id < wr_status.size())
          wr_status[wc[i].wr_id] = static_cast<int>(wc[i].status);
        if ((wc[i].opcode & IBV_WC_RECV) == 0 && wc[i].status == IBV_WC_SUCCESS) continue;
        size_t s = 0;
        while (s < qps.size() && qps[s]->qpn != wc[i].qp_num) ++s;
        if (s == qps.size()) continue;
        if ((wc[i].opcode & IBV_WC_RECV) == 0) {
          if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
            out.notes.push_back("uroce completed a send work request on QP " + hex(qps[s]->qpn) +
                                " with " + wc_status_name(wc[i].status));
          continue;
        }
        ++recv_done[rq_index(s)];
        if (wc[i].status != IBV_WC_SUCCESS) continue;
        const uint8_t* b = local.base + recv_base + wc[i].wr_id * sc.recv_size;
        size_t len = std::min<size_t>(wc[i].byte_len, sc.recv_size);
        if (sc.qps[s].type == QpType::kUd && len >= 40) {
          b += 40;
          len -= 40;
        }
        out.received[s].emplace_back(b, b + len);
      }
    }
  };

  // ---- The loop.
  const uint64_t t0 = cap.pkts.front().ts_ns;
  uint64_t now = 1'000'000;
  auto settle = [&](Step& st) {
    for (int i = 0; i < 100000; ++i) {
      const size_t w = eng.poll(now);
      drain_cq();
      if (w == 0 && !eng.has_tx_work() && port.rx_pending() == 0) break;
    }
    for (auto& [t, bytes] : port.take_sent()) {
      if (st.uroce.size() >= kMaxPerStep) {  // e.g. a 1 GiB READ: keep the report bounded
        if (st.what.empty()) st.what = "uroce sent more packets than are kept per step";
        continue;
      }
      Pkt p;
      if (!decode_pkt(std::move(bytes), p)) continue;  // ARP and the like
      p.ts_ns = t;
      st.uroce.push_back(std::move(p));
    }
  };
  auto advance = [&](uint64_t t) {
    for (int i = 0; i < 100000; ++i) {
      const uint64_t d = eng.next_deadline();
      if (d == TimerWheel::kNever || d > t) break;
      now = std::max(now, d);
      Step st;
      st.kind = StepKind::kTimer;
      st.now_ns = now;
      st.pkt = out.steps.empty() ? 0 : out.steps.back().pkt;
      settle(st);
      if (!st.uroce.empty()) out.steps.push_back(std::move(st));
      if (eng.next_deadline() <= now) now += 1024;  // a timer that re-arms at once
    }
    now = std::max(now, t);
  };

  std::map<size_t, std::vector<size_t>> posts;  // capture index -> messages posted there
  for (size_t m = 0; m < msgs.size(); ++m) posts[msgs[m].post_at].push_back(m);

  for (size_t i = 0; i < cap.pkts.size(); ++i) {
    const Pkt& p = cap.pkts[i];
    const int s = spec_index(p);
    if (s < 0) continue;  // another QP's conversation
    advance(1'000'000 + (p.ts_ns >= t0 ? p.ts_ns - t0 : 0));
    if (from_x(p)) {
      if (auto it = posts.find(i); it != posts.end()) {
        for (size_t mi : it->second) {
          const XMsg& m = msgs[mi];
          Step st;
          st.kind = StepKind::kPosted;
          st.pkt = i;
          st.now_ns = now;
          ibv_sge sge{};
          sge.addr = reinterpret_cast<uintptr_t>(local.base + m.local_off);
          sge.lkey = lmr->key;
          ibv_send_wr wr{};
          wr.wr_id = mi;
          wr.sg_list = &sge;
          wr.num_sge = 1;
          wr.send_flags = IBV_SEND_SIGNALED;
          const wire::OpcodeInfo& info = wire::opcode_info(m.opcode);
          // The work request whose packets these are (its last packet names the variant).
          const int wop = wr_for_bth(m.opcode);
          const WrOpInfo& winfo = wr_info(wop);
          wr.opcode = static_cast<ibv_wr_opcode>(wop);
          switch (winfo.kind) {
            case WrKind::kSend:
              sge.length = static_cast<uint32_t>(m.payload.size());
              break;
            case WrKind::kWrite:
              sge.length = static_cast<uint32_t>(m.payload.size());
              wr.wr.rdma.remote_addr = m.ext.reth.va;
              wr.wr.rdma.rkey = m.ext.reth.rkey;
              break;
            case WrKind::kRead:
              sge.length = m.ext.reth.dma_len;
              wr.wr.rdma.remote_addr = m.ext.reth.va;
              wr.wr.rdma.rkey = m.ext.reth.rkey;
              break;
            case WrKind::kAtomic:
              sge.length = winfo.fixed_length;
              wr.wr.atomic.remote_addr = m.ext.atomic.va;
              wr.wr.atomic.rkey = m.ext.atomic.rkey;
              wr.wr.atomic.compare_add =
                  m.op == Operation::kCompareSwap ? m.ext.atomic.compare : m.ext.atomic.swap_add;
              wr.wr.atomic.swap = m.ext.atomic.swap_add;
              break;
            case WrKind::kAtomicWrite:  // its 8 bytes are in the local memory
              sge.length = 8;
              wr.wr.rdma.remote_addr = m.ext.reth.va;
              wr.wr.rdma.rkey = m.ext.reth.rkey;
              break;
            case WrKind::kFlush:  // ibv_wr_flush's WQE: ibv_send_wr has no place for it
              sge.length = 0;
              break;
            default:  // what no work request sends
              st.what = "not posted: " + std::string(info.name) + " (not supported by the replay)";
              out.steps.push_back(std::move(st));
              continue;
          }
          if (info.has_imm()) wr.imm_data = __builtin_bswap32(m.ext.imm.imm);
          if (info.has(Ext::kIeth)) wr.invalidate_rkey = m.ext.ieth.rkey;
          if (sge.length == 0) wr.num_sge = 0;
          if (sc.qps[m.spec].type == QpType::kUd) {
            wr.wr.ud.ah = &ahs[m.spec]->ibv;
            wr.wr.ud.remote_qpn = sc.qps[m.spec].peer_qpn;
            wr.wr.ud.remote_qkey = m.ext.deth.qkey;
          }
          int e;
          if (winfo.kind == WrKind::kFlush) {
            // As ibv_wr_flush posts it: placement type and selectivity from the FETH.
            Engine::FlushWr f;
            f.wr_id = mi;
            f.va = m.ext.reth.va;
            f.rkey = m.ext.reth.rkey;
            f.len = m.ext.reth.dma_len;
            f.type = m.ext.feth.placement();
            f.level = m.ext.feth.selectivity();
            e = eng.post_flush(qps[m.spec], f);
          } else {
            const ibv_send_wr* bad = nullptr;
            e = eng.post_send(qps[m.spec], &wr, &bad);
          }
          st.what = std::string("IBV_WR_") + winfo.name + " " +
                    std::to_string(winfo.kind == WrKind::kFlush ? m.ext.reth.dma_len
                                                                : sge.length) +
                    " bytes on QP " + hex(sc.qps[m.spec].qpn) + " (first PSN " + hex(m.psn) + ")" +
                    (m.complete ? "" : " (its end is past the capture: length guessed)");
          if (e != 0) st.what += std::string(" — post_send failed: ") + std::strerror(e);
          settle(st);
          out.steps.push_back(std::move(st));
        }
      }
      if (out.steps.empty()) {
        Step st;
        st.kind = StepKind::kTimer;
        st.pkt = i;
        st.now_ns = now;
        st.what = "before anything was fed";
        out.steps.push_back(std::move(st));
      }
      out.steps.back().recorded.push_back(i);
      continue;
    }
    // The other host's packet: to the engine.
    Step st;
    st.kind = StepKind::kFed;
    st.pkt = i;
    st.now_ns = now;
    size_t app_bytes = 0;
    uint64_t app_lo = UINT64_MAX, app_hi = 0;
    for (const Scenario::AppWrite& w : sc.app_writes) {
      if (w.before_pkt != i) continue;
      std::memcpy(mem[w.mr].base + w.off, w.bytes.data(), w.bytes.size());
      app_bytes += w.bytes.size();
      app_lo = std::min(app_lo, sc.mrs[w.mr].va + w.off);
      app_hi = std::max(app_hi, sc.mrs[w.mr].va + w.off + w.bytes.size());
    }
    if (app_bytes != 0)
      st.what = "the application had changed " + std::to_string(app_bytes) +
                " bytes of its memory in VA " + hex(app_lo, 12) + ".." + hex(app_hi, 12) +
                " since the last READ of them (as the recorded READ response shows)";
    if (p.info->op == Operation::kSend && p.info->starts_message() && no_buffer.count(i) == 0)
      ensure_recv(static_cast<size_t>(s));
    wire::RoceHeaders h = p.hdr;
    bool rewrite = false;
    auto map_key = [&](uint32_t& k) {
      auto it = rkey_map.find(k);
      // An R_Key the scenario does not know stays unknown to the engine too.
      const uint32_t nk = it != rkey_map.end() ? it->second : 0xFFFFFFFFu;
      if (nk != k) {
        k = nk;
        rewrite = true;
      }
    };
    if (p.has(Ext::kReth)) map_key(h.ext.reth.rkey);
    if (p.has(Ext::kAtomicEth)) map_key(h.ext.atomic.rkey);
    if (p.has(Ext::kIeth)) map_key(h.ext.ieth.rkey);
    bool ok;
    if (rewrite) {
      std::vector<uint8_t> buf(p.bytes.size() + 64);
      const size_t n = wire::build_frame(h, p.payload(), buf);
      ok = n != 0 && port.inject({buf.data(), n});
    } else {
      ok = port.inject(p.bytes);
    }
    if (!ok) st.what = "could not be fed (frame too large)";
    settle(st);
    out.steps.push_back(std::move(st));
  }
  Step end;
  end.kind = StepKind::kEnd;
  end.pkt = cap.pkts.size();
  end.now_ns = now;
  settle(end);
  out.steps.push_back(std::move(end));

  for (size_t mi = 0; mi < msgs.size(); ++mi) {
    const XMsg& m = msgs[mi];
    if (m.op != Operation::kReadRequest && m.op != Operation::kCompareSwap &&
        m.op != Operation::kFetchAdd)
      continue;
    Replay::LocalResult r;
    r.spec = m.spec;
    r.psn = m.psn;
    r.op = m.op;
    const size_t n = m.op == Operation::kReadRequest ? m.ext.reth.dma_len : 8;
    r.data.assign(local.base + m.local_off, local.base + m.local_off + n);
    r.status = wr_status[mi];
    out.local_results.push_back(std::move(r));
  }
  out.mem_after.clear();
  for (size_t i = 0; i < sc.mrs.size(); ++i)
    out.mem_after.emplace_back(mem[i].base, mem[i].base + sc.mrs[i].length);
  return true;
}

}  // namespace uroce::replay

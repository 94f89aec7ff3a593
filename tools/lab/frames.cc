// lab-frames: one scripted RoCE session between two engines joined by the in-memory link,
// on an injected clock, every frame either side sends listed (its length and CRC-32) with the
// completions. The same program is built natively and for WebAssembly (build_wasm.sh): the
// lab in the browser (issue 46) runs the real engine, and ctest lab.wasm_frames checks that
// both builds send the same frames, byte for byte.
//
// The script: an RC connection at MTU 1024; a 3000-byte SEND, a 2000-byte RDMA WRITE, a
// 1500-byte RDMA READ and a FETCH_ADD from host A; host A's first RDMA WRITE packet lost on
// the link (so a NAK and a retransmission), and a UD SEND.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/engine.h"
#include "memlink/memlink.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace {

using namespace uroce;

// Lists every frame a host sends, and can lose one of them.
class Tap final : public PortDecorator {
 public:
  Tap(Port& p, char host) : PortDecorator(p), host_(host) {}
  uint16_t tx_burst(uint64_t now, std::span<Frame* const> frames) override {
    uint16_t sent = 0;
    for (Frame* f : frames) {
      wire::ParsedPacket pk;
      const bool roce = wire::parse_frame(f->bytes(), pk) == wire::ParseError::kOk;
      const bool lose = roce && lose_opcode_ != 0 && pk.hdr.bth.opcode == lose_opcode_;
      std::printf("%" PRIu64 " us %c %-28s %4u B crc %08x%s\n", now / 1000, host_,
                  roce ? std::string(pk.info->name).c_str() : "(not RoCE)", f->len,
                  wire::crc32(0, f->bytes()), lose ? "  lost on the link" : "");
      if (lose) {
        lose_opcode_ = 0;
        inner_.free_frame(f);
      } else if (inner_.tx_burst(now, std::span<Frame* const>(&f, 1)) != 1) {
        break;
      }
      ++sent;
    }
    return sent;
  }
  void lose_next(uint8_t opcode) { lose_opcode_ = opcode; }

 private:
  char host_;
  uint8_t lose_opcode_ = 0;
};

struct Host {
  Host(Port& port, const wire::Ipv4Addr& ip, uint64_t seed) {
    EngineConfig c;
    c.ipv4 = ip;
    c.seed = seed;
    c.key_seed = seed * 7 + 1;
    engine = std::make_unique<Engine>(port, c);
    pd = engine->alloc_pd();
    cq = engine->create_cq(64);
    buf.resize(16384);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 13 + seed);
    mr = engine->reg_mr(pd, buf.data(), buf.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC);
  }
  Qp* qp(ibv_qp_type type) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = &cq->ibv;
    ia.qp_type = type;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    return engine->create_qp(pd, &ia);
  }
  ibv_sge sge(size_t off, uint32_t len) const {
    return {reinterpret_cast<uint64_t>(buf.data() + off), len, mr->key};
  }
  std::unique_ptr<Engine> engine;
  mem::Pd* pd = nullptr;
  Cq* cq = nullptr;
  std::vector<uint8_t> buf;
  mem::Mr* mr = nullptr;
};

int to_rts(Engine& e, Qp* qp, uint32_t peer_qpn, const wire::Ipv4Addr& peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x11111111;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  const bool ud = qp->type == IBV_QPT_UD;
  int err = e.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
  a = {};
  a.qp_state = IBV_QPS_RTR;
  int mask = IBV_QP_STATE;
  if (!ud) {
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 100;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 1;
    const wire::Gid g = wire::ipv4_mapped_gid(peer);
    std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
            IBV_QP_MIN_RNR_TIMER;
  }
  err = err != 0 ? err : e.modify_qp(qp, &a, mask);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 100;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (!ud) {
    a.timeout = 10;  // 4.2 ms
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return err != 0 ? err : e.modify_qp(qp, &a, mask);
}

}  // namespace

int main() {
  using namespace uroce;
  drivers::MemLink link;
  Tap ta(link.a(), 'A'), tb(link.b(), 'B');
  const wire::Ipv4Addr ipa{10, 0, 0, 1}, ipb{10, 0, 0, 2};
  Host a(ta, ipa, 1), b(tb, ipb, 2);
  a.engine->set_neighbor(wire::ipv4_mapped_gid(ipb), link.b().mac());
  b.engine->set_neighbor(wire::ipv4_mapped_gid(ipa), link.a().mac());
  Qp* qa = a.qp(IBV_QPT_RC);
  Qp* qb = b.qp(IBV_QPT_RC);
  Qp* ua = a.qp(IBV_QPT_UD);
  Qp* ub = b.qp(IBV_QPT_UD);
  if (a.mr == nullptr || b.mr == nullptr || qa == nullptr || qb == nullptr || ua == nullptr || ub == nullptr ||
      to_rts(*a.engine, qa, qb->qpn, ipb) ||
      to_rts(*b.engine, qb, qa->qpn, ipa) || to_rts(*a.engine, ua, 0, ipb) || to_rts(*b.engine, ub, 0, ipa)) {
    std::printf("setup failed\n");
    return 1;
  }
  // B: a receive for the SEND and one for the datagram.
  const ibv_recv_wr* bad_r;
  ibv_sge rs = b.sge(0, 4096), us = b.sge(12288, 1024);
  ibv_recv_wr rw{};
  rw.wr_id = 10;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  b.engine->post_recv(qb, &rw, &bad_r);
  rw.wr_id = 11;
  rw.sg_list = &us;
  b.engine->post_recv(ub, &rw, &bad_r);
  // A: SEND, WRITE (its first packet lost), READ, FETCH_ADD; a UD SEND.
  ta.lose_next(wire::opcode::kRcWriteFirst);
  ibv_sge s1 = a.sge(0, 3000), s2 = a.sge(4096, 2000), s3 = a.sge(8192, 1500), s4 = a.sge(10240, 8),
          s5 = a.sge(11000, 200);
  ibv_send_wr w[4]{};
  w[0].wr_id = 1, w[0].sg_list = &s1, w[0].opcode = IBV_WR_SEND;
  w[1].wr_id = 2, w[1].sg_list = &s2, w[1].opcode = IBV_WR_RDMA_WRITE;
  w[1].wr.rdma.remote_addr = reinterpret_cast<uint64_t>(b.buf.data() + 5000), w[1].wr.rdma.rkey = b.mr->key;
  w[2].wr_id = 3, w[2].sg_list = &s3, w[2].opcode = IBV_WR_RDMA_READ;
  w[2].wr.rdma.remote_addr = reinterpret_cast<uint64_t>(b.buf.data() + 7000), w[2].wr.rdma.rkey = b.mr->key;
  w[3].wr_id = 4, w[3].sg_list = &s4, w[3].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  w[3].wr.atomic.remote_addr = reinterpret_cast<uint64_t>(b.buf.data() + 9000), w[3].wr.atomic.rkey = b.mr->key;
  w[3].wr.atomic.compare_add = 5;
  for (int i = 0; i < 4; ++i) {
    w[i].num_sge = 1;
    w[i].send_flags = IBV_SEND_SIGNALED;
    if (i < 3) w[i].next = &w[i + 1];
  }
  const ibv_send_wr* bad_s;
  int err = a.engine->post_send(qa, &w[0], &bad_s);
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.sgid_index = 1;
  const wire::Gid gb = wire::ipv4_mapped_gid(ipb);
  std::memcpy(aa.grh.dgid.raw, gb.data(), 16);
  Ah* ah = a.engine->create_ah(a.pd, &aa);
  ibv_send_wr u{};
  u.wr_id = 5, u.sg_list = &s5, u.num_sge = 1, u.opcode = IBV_WR_SEND, u.send_flags = IBV_SEND_SIGNALED;
  u.wr.ud.ah = ah != nullptr ? &ah->ibv : nullptr;
  u.wr.ud.remote_qpn = ub->qpn;
  u.wr.ud.remote_qkey = 0x11111111;
  err = err != 0 ? err : a.engine->post_send(ua, &u, &bad_s);
  if (err != 0 || ah == nullptr) {
    std::printf("post failed: %d\n", err);
    return 1;
  }
  int done = 0;
  uint64_t now = 0;
  for (int step = 0; step < 100000 && done < 7; ++step) {
    now += 1000;  // 1 us a step
    a.engine->poll(now);
    b.engine->poll(now);
    Host* h[2] = {&a, &b};
    for (int i = 0; i < 2; ++i) {
      ibv_wc wc[8];
      const int n = h[i]->engine->poll_cq(h[i]->cq, 8, wc);
      for (int k = 0; k < n; ++k, ++done)
        std::printf("%" PRIu64 " us %c completion wr %" PRIu64 " status %d opcode %d bytes %u\n", now / 1000,
                    'A' + i, wc[k].wr_id, wc[k].status, wc[k].opcode, wc[k].byte_len);
    }
  }
  const bool data = std::memcmp(b.buf.data(), a.buf.data(), 3000) == 0 &&
                    std::memcmp(b.buf.data() + 5000, a.buf.data() + 4096, 2000) == 0 &&
                    std::memcmp(a.buf.data() + 8192, b.buf.data() + 7000, 1500) == 0 &&
                    std::memcmp(b.buf.data() + 12288 + 40, a.buf.data() + 11000, 200) == 0;
  std::printf("%d completions, data %s\n", done, data ? "as sent" : "WRONG");
  return done == 7 && data ? 0 : 1;
}

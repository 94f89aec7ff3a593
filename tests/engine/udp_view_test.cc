// The engine behind a UDP socket (drivers/udp/udp_port.h), on an in-memory link: a decorator
// shows each receiver what a UDP socket shows, the IPv4 identification and DF replaced by
// the port's guess (0, DF). An engine built for that port sends what the kernel will write
// (identification 0, DF, source port 4791 on every packet, CNPs and ACKs included) and needs
// no solving; from a peer that numbers its packets (the kernel's rxe does), the receiver
// solves the ICRC for the identification; without the setting it would drop them all.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "harness.h"
#include "wire/ipv4.h"

namespace uroce::test {
namespace {

/// What a UDP socket shows a receiver, and a record of what was sent.
class SocketView final : public PortDecorator {
 public:
  using PortDecorator::PortDecorator;
  uint16_t rx_burst(uint64_t now, std::span<Frame*> out) override {
    const uint16_t n = inner_.rx_burst(now, out);
    for (uint16_t i = 0; i < n; ++i) {
      uint8_t* d = out[i]->data;
      if (out[i]->len < 34 || d[12] != 0x08 || d[13] != 0x00) continue;
      uint8_t* ip = d + 14;
      ip[4] = ip[5] = 0;
      ip[6] = 0x40;
      ip[10] = ip[11] = 0;
      const uint16_t c = wire::internet_checksum(wire::Bytes(ip, 20));
      ip[10] = static_cast<uint8_t>(c >> 8);
      ip[11] = static_cast<uint8_t>(c);
    }
    return n;
  }
  uint16_t tx_burst(uint64_t now, std::span<Frame* const> frames) override {
    for (Frame* f : frames) {
      wire::ParsedPacket p;
      if (wire::parse_frame(f->bytes(), p) != wire::ParseError::kOk) continue;
      ++sent;
      if (p.hdr.ip4.ident != 0 || !p.hdr.ip4.dont_frag) ++numbered;
      if (p.hdr.udp.src_port != wire::kRoceV2Port) ++other_port;
      ports_by_qp[p.hdr.bth.dest_qp].insert(p.hdr.udp.src_port);
    }
    return inner_.tx_burst(now, frames);
  }
  uint64_t sent = 0, numbered = 0, other_port = 0;
  std::map<uint32_t, std::set<uint16_t>> ports_by_qp;  // destination QP -> source ports
};

EngineConfig for_udp_port() {
  EngineConfig c;
  c.udp_src_ports = {wire::kRoceV2Port};
  c.ipv4_ident_zero = true;
  return c;
}

struct ViewPair {
  ViewPair(EngineConfig ca, EngineConfig cb)
      : va(link.a()), vb(link.b()), a(va, kIpA, 3, ca), b(vb, kIpB, 4, cb) {
    a.engine->set_neighbor(wire::ipv4_mapped_gid(kIpB), link.b().mac());
    b.engine->set_neighbor(wire::ipv4_mapped_gid(kIpA), link.a().mac());
  }
  /// A writes `n` bytes into B and B sends them back to A (both directions carry data).
  bool round_trip(size_t n) {
    std::vector<uint8_t> src(n), mid(n, 0), back(n, 0);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 13 + 5);
    const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    auto* smr = a.reg(src, all);
    auto* mmr = b.reg(mid, all);
    auto* bmr = a.reg(back, all);
    QpOptions o;
    Qp* qa = make_qp(a, o);
    Qp* qb = make_qp(b, o);
    EXPECT_EQ(connect_qp(a, qa, qb->qpn, kIpB, o), 0);
    EXPECT_EQ(connect_qp(b, qb, qa->qpn, kIpA, o), 0);
    ibv_sge s{reinterpret_cast<uint64_t>(src.data()), static_cast<uint32_t>(n), smr->key};
    ibv_send_wr w{};
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(mid.data());
    w.wr.rdma.rkey = mmr->key;
    EXPECT_EQ(a.engine->post_send(qa, &w, nullptr), 0);
    if (!run([&] { return !drain(a).empty(); })) return false;
    // A reads it back: READ responses carry data from B to A.
    ibv_sge r{reinterpret_cast<uint64_t>(back.data()), static_cast<uint32_t>(n), bmr->key};
    w.sg_list = &r;
    w.opcode = IBV_WR_RDMA_READ;
    EXPECT_EQ(a.engine->post_send(qa, &w, nullptr), 0);
    if (!run([&] { return !drain(a).empty(); })) return false;
    return mid == src && back == src;
  }
  bool run(const std::function<bool()>& done) {
    for (int i = 0; i < 200000; ++i) {
      if (done()) return true;
      a.engine->poll(now);
      b.engine->poll(now);
      now += 1000;
    }
    return false;
  }
  drivers::MemLink link;
  SocketView va, vb;
  Side a, b;
  uint64_t now = 1'000'000;
};

TEST(UdpView, AnEngineForTheUdpPortSendsTheHeadersTheKernelWritesAndNeedsNoSolving) {
  ViewPair p(for_udp_port(), for_udp_port());
  ASSERT_TRUE(p.round_trip(100000));
  EXPECT_GE(p.va.sent, 98u);  // 100 kB in 1 KiB packets each way
  EXPECT_GE(p.vb.sent, 98u);
  EXPECT_EQ(p.va.numbered + p.vb.numbered, 0u) << "identification 0 and DF on every packet";
  EXPECT_EQ(p.va.other_port + p.vb.other_port, 0u) << "the socket's source port on every packet";
  EXPECT_EQ(p.a.engine->counters()[Counter::rx_icrc_ident_solved], 0u);
  EXPECT_EQ(p.b.engine->counters()[Counter::rx_icrc_ident_solved], 0u);
  EXPECT_EQ(p.a.engine->counters()[wire::ParseError::kBadIcrc], 0u);
  EXPECT_EQ(p.b.engine->counters()[wire::ParseError::kBadIcrc], 0u);
}

TEST(UdpView, EachQpSendsFromOneOfTheSocketsPorts) {
  // A port with sockets on three source ports (udp_port.h: per-QP entropy): every QP's
  // packets leave from one of them, always the same one, and the QPs spread over them.
  EngineConfig c = for_udp_port();
  c.udp_src_ports = {50001, 50002, 50003};
  ViewPair p(c, c);
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(p.round_trip(3000));
  std::set<uint16_t> used;
  for (const SocketView* v : {&p.va, &p.vb}) {
    ASSERT_EQ(v->ports_by_qp.size(), 12u);
    for (const auto& [qpn, ports] : v->ports_by_qp) {
      EXPECT_EQ(ports.size(), 1u) << "QP 0x" << std::hex << qpn << " changed its source port";
      for (uint16_t port : ports) {
        EXPECT_TRUE(port >= 50001 && port <= 50003) << port;
        used.insert(port);
      }
    }
  }
  EXPECT_EQ(used.size(), 3u) << "24 QPs over 3 ports";
  EXPECT_EQ(p.a.engine->counters()[wire::ParseError::kBadIcrc], 0u);
  EXPECT_EQ(p.b.engine->counters()[wire::ParseError::kBadIcrc], 0u);
}

TEST(UdpView, FromAPeerThatNumbersItsPacketsTheIdentificationIsSolvedFor) {
  ViewPair p(EngineConfig{}, for_udp_port());  // A numbers its packets, as rxe does
  ASSERT_TRUE(p.round_trip(100000));
  EXPECT_GE(p.va.numbered, 97u);
  EXPECT_GE(p.b.engine->counters()[Counter::rx_icrc_ident_solved], p.va.numbered - 1)
      << "every packet but the one numbered 0";
  EXPECT_EQ(p.b.engine->counters()[wire::ParseError::kBadIcrc], 0u);
}

TEST(UdpView, WithoutTheSettingThoseIcrcsFailAndNothingArrives) {
  ViewPair p(EngineConfig{}, EngineConfig{});
  EXPECT_FALSE(p.round_trip(10000));
  EXPECT_GT(p.b.engine->counters()[wire::ParseError::kBadIcrc], 0u);
}

}  // namespace
}  // namespace uroce::test

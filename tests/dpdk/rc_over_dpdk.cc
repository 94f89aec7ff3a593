// Two processes, two network namespaces joined by a veth pair, one uroce engine each on a
// DPDK net_af_packet port: the client RDMA-WRITEs a buffer into the server, then READs it
// back, then SENDs it; both check the bytes. Driven by rc_over_dpdk.sh.
//
//   rc_over_dpdk server IFACE MY_IP PEER_IP PEER_MAC DIR SIZE
//   rc_over_dpdk client IFACE MY_IP PEER_IP PEER_MAC DIR SIZE
//
// The two sides swap QPN, R_Key and buffer address through files in DIR (the way perftest
// swaps them over TCP).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dpdk/dpdk_port.h"
#include "engine/engine.h"

using namespace uroce;

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

int fail(const std::string& why) {
  std::fprintf(stderr, "rc_over_dpdk: %s\n", why.c_str());
  return 1;
}

bool wait_file(const std::string& path, Engine& e, int seconds) {
  const uint64_t end = now_ns() + uint64_t(seconds) * 1'000'000'000ull;
  while (now_ns() < end) {
    std::ifstream f(path);
    if (f.good()) return true;
    e.poll(now_ns());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) return fail("usage: rc_over_dpdk server|client IFACE MY_IP PEER_IP PEER_MAC DIR SIZE");
  const std::string role = argv[1], iface = argv[2], dir = argv[6];
  const auto my_ip = wire::parse_ipv4(argv[3]);
  const auto peer_ip = wire::parse_ipv4(argv[4]);
  const auto peer_mac = wire::parse_mac(argv[5]);
  const uint32_t size = static_cast<uint32_t>(std::stoul(argv[7]));
  if (!my_ip || !peer_ip || !peer_mac) return fail("bad address argument");
  const bool server = role == "server";

  drivers::DpdkConfig dc;
  dc.iface = iface;
  std::string err;
  auto port = drivers::DpdkPort::open(dc, &err);
  if (!port) return fail(err);
  EngineConfig cfg;
  cfg.ipv4 = *my_ip;
  cfg.seed = server ? 1 : 2;
  Engine e(*port, cfg);
  e.set_neighbor(wire::ipv4_mapped_gid(*peer_ip), *peer_mac);

  mem::Pd* pd = e.alloc_pd();
  Cq* cq = e.create_cq(256);
  ibv_qp_init_attr ia{};
  ia.send_cq = &cq->ibv;
  ia.recv_cq = &cq->ibv;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {64, 64, 1, 1, 0};
  Qp* qp = e.create_qp(pd, &ia);
  std::vector<uint8_t> buf(size), back(size, 0);
  for (uint32_t i = 0; i < size; ++i) buf[i] = server ? 0 : static_cast<uint8_t>(i * 7 + 3);
  const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  mem::Mr* mr = e.reg_mr(pd, buf.data(), size, acc);
  mem::Mr* bmr = e.reg_mr(pd, back.data(), size, acc);

  // Publish our QPN, R_Key and address; read the peer's.
  {
    std::ofstream f(dir + "/" + role + ".tmp");
    f << qp->qpn << " " << mr->key << " " << reinterpret_cast<uint64_t>(buf.data()) << "\n";
  }
  std::rename((dir + "/" + role + ".tmp").c_str(), (dir + "/" + role).c_str());
  const std::string peer_file = dir + "/" + (server ? "client" : "server");
  if (!wait_file(peer_file, e, 30)) return fail("peer never published its QP");
  uint32_t peer_qpn = 0, peer_rkey = 0;
  uint64_t peer_va = 0;
  std::ifstream(peer_file) >> peer_qpn >> peer_rkey >> peer_va;

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = acc;
  int rc = e.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer_qpn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1;
  const wire::Gid g = wire::ipv4_mapped_gid(*peer_ip);
  std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
  rc |= e.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  rc |= e.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) return fail("modify_qp failed");

  const uint64_t deadline = now_ns() + 20'000'000'000ull;
  ibv_wc wc;
  if (server) {
    // Receive the client's SEND, then wait for its "done" file.
    ibv_sge r{reinterpret_cast<uint64_t>(back.data()), size, bmr->key};
    ibv_recv_wr rw{};
    rw.sg_list = &r;
    rw.num_sge = 1;
    e.post_recv(qp, &rw, nullptr);
    bool got = false;
    while (!got && now_ns() < deadline) {
      e.poll(now_ns());
      if (e.poll_cq(cq, 1, &wc) == 1) {
        if (wc.status != IBV_WC_SUCCESS) return fail("receive completed with error");
        got = true;
      }
    }
    if (!got) return fail("server: no SEND arrived");
    for (uint32_t i = 0; i < size; ++i)
      if (buf[i] != static_cast<uint8_t>(i * 7 + 3) || back[i] != buf[i])
        return fail("server: data mismatch at byte " + std::to_string(i));
    // Keep answering (ACKs) until the client is finished.
    while (!std::ifstream(dir + "/client.done").good() && now_ns() < deadline) e.poll(now_ns());
    std::printf("server: WRITE and SEND of %u bytes verified; %llu frames rx, %llu tx\n", size,
                static_cast<unsigned long long>(e.counters()[Counter::rx_frames]),
                static_cast<unsigned long long>(e.counters()[Counter::tx_frames]));
    return 0;
  }
  ibv_sge s{reinterpret_cast<uint64_t>(buf.data()), size, mr->key};
  ibv_sge b{reinterpret_cast<uint64_t>(back.data()), size, bmr->key};
  ibv_send_wr w[3] = {};
  w[0].sg_list = &s;
  w[0].num_sge = 1;
  w[0].opcode = IBV_WR_RDMA_WRITE;
  w[0].wr.rdma.remote_addr = peer_va;
  w[0].wr.rdma.rkey = peer_rkey;
  w[0].send_flags = IBV_SEND_SIGNALED;
  w[1] = w[0];
  w[1].opcode = IBV_WR_RDMA_READ;
  w[1].sg_list = &b;
  w[2] = w[0];
  w[2].opcode = IBV_WR_SEND;
  w[0].next = &w[1];
  w[1].next = &w[2];
  if (e.post_send(qp, w, nullptr) != 0) return fail("post_send failed");
  int done = 0;
  while (done < 3 && now_ns() < deadline) {
    e.poll(now_ns());
    while (e.poll_cq(cq, 1, &wc) == 1) {
      if (wc.status != IBV_WC_SUCCESS)
        return fail("client: completion status " + std::to_string(wc.status));
      ++done;
    }
  }
  if (done < 3) return fail("client: only " + std::to_string(done) + "/3 completions");
  if (back != buf) return fail("client: READ returned different bytes");
  std::ofstream(dir + "/client.done") << "1\n";
  std::printf("client: WRITE, READ and SEND of %u bytes completed; %llu retransmitted\n", size,
              static_cast<unsigned long long>(e.counters()[Counter::retransmitted_pkts]));
  return 0;
}

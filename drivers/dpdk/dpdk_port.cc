#include "dpdk/dpdk_port.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <mutex>

namespace uroce::drivers {

namespace {

std::mutex g_eal_mutex;
bool g_eal_up = false;
std::atomic<int> g_ports{0};
int g_open = 0;  // open ports (under g_eal_mutex)

// Each mbuf carries its Frame in the private area just after the rte_mbuf header.
Frame* frame_of(rte_mbuf* m) { return static_cast<Frame*>(rte_mbuf_to_priv(m)); }

Frame* wrap(rte_mbuf* m) {
  Frame* f = frame_of(m);
  f->data = rte_pktmbuf_mtod(m, uint8_t*);
  f->len = rte_pktmbuf_data_len(m);
  f->cap = rte_pktmbuf_tailroom(m) + rte_pktmbuf_data_len(m);
  f->cookie = m;
  return f;
}

bool start_eal(const DpdkConfig& cfg, std::string* error) {
  std::lock_guard<std::mutex> lock(g_eal_mutex);
  if (g_eal_up) return true;
  std::vector<std::string> args = {"uroce",
                                   "--no-huge",
                                   "-m",
                                   "256",
                                   "--no-pci",
                                   "--no-shconf",
                                   "--no-telemetry",
                                   "--file-prefix=uroce-" + std::to_string(getpid()),
                                   "--log-level=lib.eal:error",
                                   "--log-level=pmd.net.af_packet:error"};
  args.insert(args.end(), cfg.eal_args.begin(), cfg.eal_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
    *error = std::string("DPDK EAL failed to start (") + rte_strerror(rte_errno) +
             "): check UROCE_EAL_ARGS; running as root?";
    return false;
  }
  g_eal_up = true;
  return true;
}

}  // namespace

std::unique_ptr<DpdkPort> DpdkPort::open(const DpdkConfig& cfg, std::string* error) {
  if (cfg.iface.empty() && cfg.devargs.empty()) {
    *error = "no interface: set the device's iface (a Linux interface) or its DPDK devargs";
    return nullptr;
  }
  if (!start_eal(cfg, error)) return nullptr;
  const int n = g_ports.fetch_add(1);
  const std::string name = "net_af_packet_uroce" + std::to_string(n);
  const std::string devargs =
      !cfg.devargs.empty()
          ? cfg.devargs
          // Frames up to 10 KiB in the af_packet rings (the default 2 KiB would cut jumbo
          // frames); each ring frame must fit an mbuf. Shared: qdisc_bypass=0, the kernel's
          // normal transmit path, which shows our frames to the other packet sockets on the
          // interface (another uroce process); the bypass is faster but hides them.
          : name + ",iface=" + cfg.iface + ",qpairs=1,blocksz=20480,framesz=10240,framecnt=1024" +
                (cfg.shared ? ",qdisc_bypass=0" : ",qdisc_bypass=1");
  const std::string dev_name = devargs.substr(0, devargs.find(','));
  if (rte_dev_probe(devargs.c_str()) < 0) {
    *error = "cannot open DPDK device '" + devargs + "' (" + rte_strerror(rte_errno) +
             "): does interface '" + cfg.iface + "' exist in this network namespace?";
    return nullptr;
  }
  std::unique_ptr<DpdkPort> p(new DpdkPort());
  if (rte_eth_dev_get_port_by_name(dev_name.c_str(), &p->port_id_) != 0) {
    *error = "DPDK device '" + dev_name + "' probed but has no ethdev port";
    return nullptr;
  }
  const uint16_t room = static_cast<uint16_t>(cfg.max_frame + RTE_PKTMBUF_HEADROOM);
  const std::string pool_name = "uroce_pool" + std::to_string(n);
  p->pool_ = rte_pktmbuf_pool_create(pool_name.c_str(), cfg.mbufs, 256,
                                     static_cast<uint16_t>(RTE_ALIGN(sizeof(Frame), 8)), room,
                                     static_cast<int>(rte_socket_id()));
  if (p->pool_ == nullptr) {
    *error = std::string("cannot create the mbuf pool (") + rte_strerror(rte_errno) +
             "): lower mbufs or raise the EAL memory (-m)";
    return nullptr;
  }
  rte_eth_dev_info info{};
  rte_eth_dev_info_get(p->port_id_, &info);
  rte_eth_conf conf{};
  // Offload nothing we would have to undo: RoCEv2 carries its own ICRC; IPv4 header
  // checksums are computed in software (cheap) so that every PMD behaves the same.
  if (rte_eth_dev_configure(p->port_id_, 1, 1, &conf) < 0 ||
      rte_eth_rx_queue_setup(p->port_id_, 0, cfg.rx_desc, rte_eth_dev_socket_id(p->port_id_),
                             nullptr, p->pool_) < 0 ||
      rte_eth_tx_queue_setup(p->port_id_, 0, cfg.tx_desc, rte_eth_dev_socket_id(p->port_id_),
                             nullptr) < 0 ||
      rte_eth_dev_start(p->port_id_) < 0) {
    *error = "cannot start DPDK port '" + dev_name + "' (" + rte_strerror(rte_errno) + ")";
    return nullptr;
  }
  rte_eth_promiscuous_disable(p->port_id_);
  rte_eth_allmulticast_enable(p->port_id_);  // IPv6 neighbour solicitations are multicast
  {
    std::lock_guard<std::mutex> lock(g_eal_mutex);
    ++g_open;
  }
  rte_ether_addr mac{};
  rte_eth_macaddr_get(p->port_id_, &mac);
  std::copy(mac.addr_bytes, mac.addr_bytes + 6, p->mac_.begin());
  uint16_t mtu = 1500;
  rte_eth_dev_get_mtu(p->port_id_, &mtu);
  // net_af_packet reports a fixed MTU: the Linux interface's own is the one that counts.
  if (!cfg.iface.empty()) {
    std::ifstream f("/sys/class/net/" + cfg.iface + "/mtu");
    unsigned v = 0;
    if (f >> v && v >= 576 && v <= 65535) mtu = static_cast<uint16_t>(v);
  }
  p->max_frame_ = std::min<uint32_t>(cfg.max_frame, uint32_t{mtu} + 18);
  return p;
}

DpdkPort::~DpdkPort() {
  rte_eth_dev_stop(port_id_);
  rte_eth_dev_close(port_id_);
  if (pool_ != nullptr) rte_mempool_free(pool_);
  std::lock_guard<std::mutex> lock(g_eal_mutex);
  if (--g_open == 0 && g_eal_up) {
    // The last port of the process: stop the EAL and remove its (empty) runtime directory.
    const std::string dir = rte_eal_get_runtime_dir();
    rte_eal_cleanup();
    rmdir(dir.c_str());
    g_eal_up = false;
  }
}

uint16_t DpdkPort::rx_burst(uint64_t, std::span<Frame*> out) {
  rte_mbuf* m[64];
  const uint16_t want = static_cast<uint16_t>(std::min<size_t>(out.size(), 64));
  const uint16_t n = rte_eth_rx_burst(port_id_, 0, m, want);
  uint16_t kept = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (m[i]->nb_segs != 1) {  // we never enable scatter: a chained mbuf is not ours
      rte_pktmbuf_free(m[i]);
      continue;
    }
    out[kept++] = wrap(m[i]);
  }
  return kept;
}

uint16_t DpdkPort::tx_burst(uint64_t, std::span<Frame* const> frames) {
  rte_mbuf* m[64];
  uint16_t sent = 0;
  while (sent < frames.size()) {
    const uint16_t n = static_cast<uint16_t>(std::min<size_t>(frames.size() - sent, 64));
    for (uint16_t i = 0; i < n; ++i) {
      Frame* f = frames[sent + i];
      rte_mbuf* mb = static_cast<rte_mbuf*>(f->cookie);
      mb->data_len = static_cast<uint16_t>(f->len);
      mb->pkt_len = f->len;
      m[i] = mb;
    }
    const uint16_t done = rte_eth_tx_burst(port_id_, 0, m, n);
    sent = static_cast<uint16_t>(sent + done);
    if (done < n) break;  // ring full: the caller keeps the rest
  }
  return sent;
}

Frame* DpdkPort::alloc_frame() {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return nullptr;
  Frame* f = wrap(m);
  f->len = 0;
  f->cap = rte_pktmbuf_tailroom(m);
  return f;
}

void DpdkPort::free_frame(Frame* f) { rte_pktmbuf_free(static_cast<rte_mbuf*>(f->cookie)); }

DpdkPort::Stats DpdkPort::stats() const {
  rte_eth_stats s{};
  rte_eth_stats_get(port_id_, &s);
  return {s.ipackets, s.opackets, s.imissed, s.ierrors, s.oerrors, s.rx_nombuf};
}

}  // namespace uroce::drivers

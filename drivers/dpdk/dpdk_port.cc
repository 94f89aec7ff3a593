#include "dpdk/dpdk_port.h"

#include <dirent.h>
#include <fcntl.h>
#include <rte_alarm.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <sched.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

namespace uroce::drivers {

namespace {

std::mutex g_eal_mutex;
bool g_eal_up = false;
bool g_eal_huge = false;  // the EAL took hugepages (a PCI NIC), else plain pages
pid_t g_eal_pid = 0;
std::atomic<int> g_ports{0};

/// The process's open file descriptors (from /proc/self/fd).
std::set<int> open_fds() {
  std::set<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return fds;
  const int own = dirfd(d);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own) fds.insert(fd);
  }
  closedir(d);
  return fds;
}

/// DPDK opens sockets, pipes and eventfds without O_CLOEXEC; a program that runs a helper
/// (fork + exec) would hand it our raw packet socket. Marks every descriptor that appeared
/// since `before` close-on-exec.
void cloexec_new_fds(const std::set<int>& before) {
  for (int fd : open_fds()) {
    if (before.count(fd) != 0) continue;
    const int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

/// The descriptor among `fds` (those the PMD opened) whose readiness tells that frames wait:
/// net_af_packet's packet socket (with PACKET_RX_RING, poll() reports POLLIN while the ring
/// holds a frame the PMD has not handed back), or net_tap's /dev/net/tun queue. -1 if none.
int find_wait_fd(const std::set<int>& fds) {
  int tun = -1;
  for (int fd : fds) {
    int domain = 0;
    socklen_t len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_PACKET)
      return fd;
    char target[64] = {0};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    // net_tap opens a keep-alive queue first (detached: no traffic) and the receive queue at
    // queue setup: the last one opened is the one frames arrive on.
    if (readlink(link.c_str(), target, sizeof target - 1) > 0 &&
        std::string_view(target) == "/dev/net/tun")
      tun = fd;
  }
  return tun;
}

/// Inside a port's burst and frame calls, the calling thread takes the EAL main lcore's id.
/// The mbuf pools keep a cache per lcore, but the threads that drive a port (the progress
/// thread, the application's own) are not EAL threads: rte_lcore_id() is LCORE_ID_ANY for
/// them, and every mbuf allocated or freed, by us or inside the PMD, went through the pool's
/// shared ring (a seventh of a memif receiver's time, the ring's compare-and-swap and its
/// cache misses). A port is driven by one thread at a time (the engine's lock), and each port
/// has a pool of its own, so the main lcore's cache of that pool is never used by two threads
/// at once. rte_thread_register() would give only one thread an id, and only for good.
class MainLcore {
 public:
  MainLcore() : saved_(RTE_PER_LCORE(_lcore_id)) { RTE_PER_LCORE(_lcore_id) = rte_get_main_lcore(); }
  ~MainLcore() { RTE_PER_LCORE(_lcore_id) = saved_; }
  MainLcore(const MainLcore&) = delete;
  MainLcore& operator=(const MainLcore&) = delete;

 private:
  unsigned saved_;
};

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

/// A PCI address at the start of `devargs` ("0000:03:00.0" or "03:00.0", options after a
/// comma), written out in full; "" when devargs names a virtual device (net_af_xdp0,...).
std::string pci_address(const std::string& devargs) {
  const std::string head = devargs.substr(0, devargs.find(','));
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  const bool full = std::sscanf(head.c_str(), "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) == 4;
  if (!full) {
    dom = bus = dev = fn = 0;  // the first attempt may have filled some in
    if (std::sscanf(head.c_str(), "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3) return "";
  }
  if (bus > 0xFF || dev > 0x1F || fn > 7 || dom > 0xFFFF) return "";
  char out[16];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return out;
}

/// Free hugepage memory in MiB (the default page size's pool, less the pages other
/// processes have reserved but not yet touched), from /proc/meminfo.
uint64_t free_hugepage_mib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t free_pages = 0, reserved = 0, page_kib = 0, value = 0;
  while (in >> key >> value) {
    if (key == "HugePages_Free:") free_pages = value;
    if (key == "HugePages_Rsvd:") reserved = value;
    if (key == "Hugepagesize:") page_kib = value;
    in.ignore(256, '\n');
  }
  return (free_pages > reserved ? free_pages - reserved : 0) * page_kib / 1024;
}

/// One process per PCI device: with uio (unlike vfio) two processes could both open a NIC and
/// program it at once. Each holds an advisory lock on the device's sysfs config file (global,
/// whatever the network namespace; no file of ours anywhere) until it exits: the EAL keeps
/// the device for the process's life. "" when claimed, else one line naming the problem.
std::string claim_pci(const std::string& addr) {
  static int claimed_fd = -1;  // kept open: the lock lasts until the process ends
  if (claimed_fd >= 0) return "";
  const std::string path = "/sys/bus/pci/devices/" + addr + "/config";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";  // no such device: pci_unusable says so
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return "PCI device " + addr + " is in use by another uroce process: each process needs a "
           "NIC (or a virtual function) of its own";
  }
  claimed_fd = fd;
  return "";
}

/// Why a PCI device cannot be given to DPDK, as one line naming the fix; "" if it can.
std::string pci_unusable(const std::string& addr, uint64_t eal_mib) {
  const std::string dir = "/sys/bus/pci/devices/" + addr;
  if (access(dir.c_str(), F_OK) != 0)
    return "no PCI device " + addr + " (lspci -D lists them)";
  char drv[256] = {0};
  const ssize_t n = readlink((dir + "/driver").c_str(), drv, sizeof drv - 1);
  const std::string driver = n > 0 ? std::string(drv).substr(std::string(drv).rfind('/') + 1) : "";
  if (driver != "vfio-pci" && driver != "uio_pci_generic" && driver != "igb_uio")
    return "PCI device " + addr + " is " +
           (driver.empty() ? std::string("bound to no driver") : "driven by the kernel's " + driver) +
           ": bind it to vfio-pci (dpdk-devbind.py --bind=vfio-pci " + addr +
           ", or uio_pci_generic)";
  if (driver == "vfio-pci") {
    DIR* g = opendir("/sys/kernel/iommu_groups");
    bool groups = false;
    if (g != nullptr) {
      while (dirent* e = readdir(g)) groups = groups || e->d_name[0] != '.';
      closedir(g);
    }
    std::ifstream noiommu("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode");
    char yes = 'N';
    noiommu >> yes;
    if (!groups && yes != 'Y' && yes != '1')
      return "PCI device " + addr + ": no IOMMU, and vfio's no-IOMMU mode is off: echo 1 > "
             "/sys/module/vfio/parameters/enable_unsafe_noiommu_mode (or boot with the IOMMU on)";
  }
  if (free_hugepage_mib() < eal_mib)
    return "PCI device " + addr + " needs " + std::to_string(eal_mib) +
           " MiB of free hugepages for DMA: echo " + std::to_string(eal_mib / 2) +
           " > /proc/sys/vm/nr_hugepages (2 MiB pages)";
  return "";
}

bool start_eal(const DpdkConfig& cfg, std::string* error) {
  std::lock_guard<std::mutex> lock(g_eal_mutex);
  if (g_eal_up && g_eal_pid == getpid()) return true;
  if (g_eal_up) {
    // fork() copied an EAL whose threads stayed in the parent; DPDK cannot start twice.
    *error = "DPDK was started by the parent process before fork(): a child must exec a new "
             "program (or the parent open the device only after forking)";
    return false;
  }
  // rte_eal_init pins the calling thread to its main lcore, and every thread the program
  // makes afterwards would inherit that. The program's CPU placement is not ours to change:
  // run the EAL on a CPU the thread may use already, and give the thread its mask back.
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const bool have_mask = sched_getaffinity(0, sizeof mask, &mask) == 0;
  int lcore = 0;
  while (have_mask && lcore < CPU_SETSIZE - 1 && !CPU_ISSET(lcore, &mask)) ++lcore;
  // Memory: hugepages for a PCI NIC (its DMA needs them), kept in memory only (--in-memory:
  // no files in hugetlbfs); plain pages for the software ports, which need none, so that a
  // program never takes hugepages others may count on. PCI: only the configured device is
  // probed (-a); without one, no PCI scan at all.
  constexpr uint64_t kEalMib = 256;
  const std::string pci = pci_address(cfg.devargs);
  if (!pci.empty()) {
    // Another process's NIC first: it also holds the hugepages the next check counts.
    *error = claim_pci(pci);
    if (error->empty()) *error = pci_unusable(pci, kEalMib);
    if (!error->empty()) return false;
  }
  const bool huge = !pci.empty();  // checked above: enough are free
  std::vector<std::string> args = {"uroce", "-l", std::to_string(lcore), "-m",
                                   std::to_string(kEalMib), "--no-telemetry",
                                   "--file-prefix=uroce-" + std::to_string(getpid()),
                                   "--log-level=lib.eal:error",
                                   "--log-level=pmd.net.af_packet:error"};
  if (huge) {
    args.push_back("--in-memory");
  } else {
    args.push_back("--no-huge");
    args.push_back("--no-shconf");
  }
  // memif's zero-copy client shares the EAL's own memory, which it can only do from one
  // file per memory segment list.
  if (cfg.devargs.rfind("net_memif", 0) == 0 && cfg.devargs.find("zero-copy=yes") != std::string::npos)
    args.push_back("--single-file-segments");
  if (pci.empty()) {
    args.push_back("--no-pci");
  } else {
    args.push_back("-a");
    args.push_back(cfg.devargs);  // the address and its options
  }
  args.insert(args.end(), cfg.eal_args.begin(), cfg.eal_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const std::set<int> fds = open_fds();
  const int rc = rte_eal_init(static_cast<int>(argv.size()), argv.data());
  if (have_mask) sched_setaffinity(0, sizeof mask, &mask);
  cloexec_new_fds(fds);
  if (rc < 0) {
    *error = std::string("DPDK EAL failed to start (") + rte_strerror(rte_errno) +
             "): running as root?";
    return false;
  }
  // With --no-shconf nothing is ever written to the EAL's runtime directory: remove it now,
  // so that no process, however it ends, leaves one behind.
  rmdir(rte_eal_get_runtime_dir());
  // The EAL stays up until the process exits: DPDK cannot be started again after
  // rte_eal_cleanup, and a program may open and close devices any number of times.
  g_eal_up = true;
  g_eal_huge = huge;
  g_eal_pid = getpid();
  return true;
}

}  // namespace

std::unique_ptr<DpdkPort> DpdkPort::open(const DpdkConfig& cfg, std::string* error) {
  // Whatever DPDK opens from here on (the PMD's raw packet socket, /dev/null, ...) is made
  // close-on-exec on the way out, however this returns.
  struct CloexecGuard {
    std::set<int> before = open_fds();
    ~CloexecGuard() { cloexec_new_fds(before); }
  } guard;
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
  const std::string pci = pci_address(devargs);
  const std::string dev_name = !pci.empty() ? pci : devargs.substr(0, devargs.find(','));
  uint16_t existing = 0;
  // A PCI device on the EAL's allow list was probed when the EAL started.
  const bool have = !pci.empty() && rte_eth_dev_get_port_by_name(dev_name.c_str(), &existing) == 0;
  const int probed = have ? 0 : rte_dev_probe(devargs.c_str());
  if (probed < 0 && !pci.empty()) {
    *error = "cannot open PCI device " + pci + " (" + rte_strerror(rte_errno) +
             "): PCI devices must be opened before any virtual one in a process, and only "
             "those of DPDK's drivers uroce links (README) are known";
    return nullptr;
  }
  if (probed < 0) {
    *error = "cannot open DPDK device '" + devargs + "' (" + rte_strerror(rte_errno) + "): " +
             (cfg.iface.empty() ? std::string("check the devargs (DPDK's own lines above say which)")
                                : "does interface '" + cfg.iface + "' exist in this network namespace?");
    return nullptr;
  }
  std::unique_ptr<DpdkPort> p(new DpdkPort());
  if (rte_eth_dev_get_port_by_name(dev_name.c_str(), &p->port_id_) != 0) {
    *error = "DPDK device '" + dev_name + "' probed but has no ethdev port";
    return nullptr;
  }
  p->probed_ = true;
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
  p->started_ = true;
  {
    std::set<int> opened;  // by the PMD, since open() began: its sockets / tap queues
    for (int fd : open_fds())
      if (guard.before.count(fd) == 0) opened.insert(fd);
    p->wait_fd_ = find_wait_fd(opened);
  }
  rte_eth_promiscuous_disable(p->port_id_);
  rte_eth_allmulticast_enable(p->port_id_);  // IPv6 neighbour solicitations are multicast
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
  // What `uroce devinfo` says about the port.
  const std::string driver = info.driver_name != nullptr ? info.driver_name : "?";
  std::string d = driver + " " + dev_name;
  if (!cfg.iface.empty()) {
    d += " on " + cfg.iface + " (interface MTU " + std::to_string(mtu) + "; " +
         (cfg.shared ? "the kernel's transmit path, so other packet sockets see our frames"
                     : "PACKET_QDISC_BYPASS: the interface is ours alone") +
         ")";
  } else {
    d += " (MTU " + std::to_string(mtu) + ")";
  }
  d += "; 1 RX + 1 TX queue of " + std::to_string(cfg.rx_desc) + " / " +
       std::to_string(cfg.tx_desc) + " descriptors; " + std::to_string(cfg.mbufs) +
       " mbufs of " + std::to_string(room) + " B in " +
       (g_eal_huge ? "hugepages (kept in memory only)" : "plain pages (no hugepages needed)") +
       "; " + (p->wait_fd_ >= 0 ? "sleeps on the PMD's descriptor when idle"
                                : "polled (no descriptor to sleep on)");
  p->description_ = d;
  return p;
}

namespace {

// A device's teardown, run where the PMD's own control events run (below).
struct Teardown {
  uint16_t port_id;
  bool started;
  std::atomic<int> claim{0};  // 0 nobody yet, 1 the interrupt thread, 2 the caller
  std::atomic<bool> done{false};
};

void tear_down(Teardown& t) {
  rte_eth_dev_info info{};
  rte_eth_dev_info_get(t.port_id, &info);
  if (t.started) rte_eth_dev_stop(t.port_id);
  rte_eth_dev_close(t.port_id);
  if (info.device != nullptr) rte_dev_remove(info.device);
}

void tear_down_from_alarm(void* arg) {
  auto* t = static_cast<Teardown*>(arg);
  int nobody = 0;
  if (!t->claim.compare_exchange_strong(nobody, 1)) return;  // the caller gave up and did it
  tear_down(*t);
  t->done.store(true, std::memory_order_release);  // the last touch: the caller may now return
}

}  // namespace

DpdkPort::~DpdkPort() {
  if (probed_) {
    // Stop, close, and remove the device itself, so that nothing of it stays behind in a
    // program that opens and closes devices all day (the EAL stays up: see start_eal).
    // It runs on the EAL's interrupt thread (an alarm, as testpmd detaches a removed port),
    // where memif handles its control channel: when the peer disconnects as we close, that
    // thread's memif_disconnect and our rte_eth_dev_stop's would free the same shared-memory
    // regions at once (seen: a SEGV in rte_free under ASan as both pingpong processes ended).
    // The caller waits; if the alarm has not started within 2 s (no interrupt thread, as in a
    // forked child), it cancels it and tears down itself.
    Teardown t{port_id_, started_};
    bool alarmed = rte_eal_alarm_set(1, tear_down_from_alarm, &t) == 0;
    if (alarmed) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (t.claim.load() == 0 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      int nobody = 0;
      if (t.claim.compare_exchange_strong(nobody, 2)) {
        rte_eal_alarm_cancel(tear_down_from_alarm, &t);
        alarmed = false;
      }
    }
    if (alarmed) {
      while (!t.done.load(std::memory_order_acquire))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      tear_down(t);
    }
  }
  if (pool_ != nullptr) rte_mempool_free(pool_);
}

uint16_t DpdkPort::rx_burst(uint64_t, std::span<Frame*> out) {
  MainLcore lcore;
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
  MainLcore lcore;
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
  MainLcore lcore;
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return nullptr;
  Frame* f = wrap(m);
  f->len = 0;
  f->cap = rte_pktmbuf_tailroom(m);
  return f;
}

void DpdkPort::free_frame(Frame* f) {
  MainLcore lcore;
  rte_pktmbuf_free(static_cast<rte_mbuf*>(f->cookie));
}

DpdkPort::Stats DpdkPort::stats() const {
  rte_eth_stats s{};
  rte_eth_stats_get(port_id_, &s);
  return {s.ipackets, s.opackets, s.imissed, s.ierrors, s.oerrors, s.rx_nombuf};
}

}  // namespace uroce::drivers

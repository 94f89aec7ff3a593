// The process-wide runtime: one Runtime per open device (port, engine, progress thread),
// shared by every context on it; the engine pass any thread may run; the clean-up at exit
// and of what killed uroce processes left behind. See docs/threading.md.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dpdk/dpdk_port.h"
#include "fault/fault_injector.h"
#include "packet/packet_port.h"
#include "shm/shm_port.h"
#include "udp/udp_port.h"
#include "trace/pcap_trace.h"
#include "xdp/kernel_shield.h"
#include "xdp/xdp_port.h"
#include "util/sys.h"
#include "verbs/provider.h"
#include "verbs/verbs_trace_file.h"
#include "wire/udp.h"

namespace uroce::verbs {

namespace {

std::mutex g_registry_mu;        // Device::runtime, Runtime::refs, g_live
std::vector<Runtime*>* g_live;   // open runtimes, for the exit hook (never freed)
std::atomic<pid_t> g_live_pid{0};  // the process g_live belongs to (fork copies it)
std::atomic<pid_t> g_self_pid{0};  // this process (getpid() is a system call), kept by fork_child
// In a child after fork: the parent's runtimes, copied with its memory. Never used, never
// freed (they hold the parent's sockets and threads that are not in this process).
std::vector<Runtime*>* g_inherited;
bool g_reaped = false;

/// The Linux kernel sees our UDP 4791 traffic too (the interface is shared with DPDK's
/// af_packet) and would answer every packet with ICMP port unreachable. A socket bound to
/// port 4791 whose filter drops everything makes it keep quiet: the kernel finds a socket,
/// the filter discards the copy, no ICMP. One per family: IPv4 on the device's address,
/// IPv6 on any address (the link-local GID's traffic as well as a global one's). Returns
/// -1 if that is not possible (then the ICMP noise is harmless: the peer ignores it).
int silence_kernel(const config::DeviceConfig& dc, bool ipv6) {
  if (!ipv6 && !dc.ipv4) return -1;
  sock_filter drop_all = {BPF_RET | BPF_K, 0, 0, 0};
  sock_fprog prog = {1, &drop_all};
  const int fd = util::kernel_socket(ipv6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  // A UDP GSO super-frame from a uroce peer (the af_packet port sends them) reaches this
  // socket whole: without UDP_GRO the kernel would cut it into packets just to drop them.
  setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
  int rc = setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
  if (rc == 0 && !ipv6) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(wire::kRoceV2Port);
    std::memcpy(&a.sin_addr, dc.ipv4->data(), 4);
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else if (rc == 0) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(wire::kRoceV2Port);  // in6addr_any
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

constexpr uint32_t kQpnBlock = 0x10000;  // QPNs per process, handed out in rotation
// QPs one process may have at once: a quarter of its block, so that a destroyed QP's number
// waits at least three quarters of a round before it comes back.
constexpr uint32_t kMaxQp = kQpnBlock / 4;

/// Several processes may open the same device (interface); each runs its own engine, so their
/// QPNs must not overlap. Each claims a block of QPNs by binding an abstract-namespace Unix
/// socket named after the interface and the block number: the first free name wins, and the
/// kernel releases it when the socket closes, however the process ends. Abstract names belong
/// to the network namespace, as interfaces do, and leave no file anywhere. Block 0 starts at
/// 0x11 as in rdma_rxe. Returns the first QPN (0x11 if no block can be claimed) and the
/// socket.
uint32_t claim_qpn_block(const config::DeviceConfig& dc, int* claim_fd) {
  std::string key = dc.iface.empty() ? dc.devargs.substr(0, dc.devargs.find(',')) : dc.iface;
  // The udp port: processes that share its address (UdpPort::share) steer by these blocks.
  if (dc.port == config::DeviceConfig::PortKind::kUdp)
    key = "udp-" + (dc.ipv4 ? wire::to_string(*dc.ipv4) : wire::to_string(*dc.ipv6));
  *claim_fd = -1;
  for (uint32_t n = 0; n < 64; ++n) {
    const int fd = util::kernel_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string name = "uroce-qpn-" + key + "-" + std::to_string(n);
    const size_t len = std::min(name.size(), sizeof a.sun_path - 1);
    std::memcpy(a.sun_path + 1, name.data(), len);  // sun_path[0] == 0: the abstract namespace
    const auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), alen) == 0) {
      *claim_fd = fd;
      return 0x11 + n * kQpnBlock;
    }
    close(fd);  // EADDRINUSE: another process has this block
  }
  std::fprintf(stderr, "uroce: %s: no free QPN block (64 processes on it?): using QPNs from "
               "0x11, which may collide with another process\n", key.c_str());
  return 0x11;
}

/// The interface's speed in Mb/s (what the kernel reports in sysfs: veth says 10000), the
/// rate DCQCN starts a QP at; 100000 when it is not known (a DPDK device, no sysfs).
uint32_t link_speed_mbps(const config::DeviceConfig& dc) {
  constexpr uint32_t kUnknown = 100000;
  if (dc.iface.empty()) return kUnknown;
  std::FILE* f = std::fopen(("/sys/class/net/" + dc.iface + "/speed").c_str(), "re");
  if (f == nullptr) return kUnknown;
  long v = -1;
  if (std::fscanf(f, "%ld", &v) != 1) v = -1;
  std::fclose(f);
  return v > 0 && v <= 10'000'000 ? static_cast<uint32_t>(v) : kUnknown;
}

StatsShm* open_stats(const std::string& name, const std::string& device) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  void* p = MAP_FAILED;
  if (ftruncate(fd, sizeof(StatsShm)) == 0)
    p = mmap(nullptr, sizeof(StatsShm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return nullptr;
  }
  auto* st = static_cast<StatsShm*>(p);
  std::memset(st, 0, sizeof *st);
  st->n_counters = static_cast<uint32_t>(Counter::kCount);
  st->n_parse_errors = static_cast<uint32_t>(wire::ParseError::kCount);
  std::snprintf(st->device, sizeof st->device, "%s", device.c_str());
  st->magic = StatsShm::kMagic;
  return st;
}

void close_stats(Runtime* rt) {
  if (rt->stats == nullptr) return;
  munmap(rt->stats, sizeof(StatsShm));
  shm_unlink(rt->stats_name.c_str());
  rt->stats = nullptr;
}

/// Copies the engine's counters to the shared-memory file (emu held), ~10 per s.
void publish_stats(Runtime* rt, uint64_t now) {
  if (rt->stats == nullptr || now < rt->stats_next) return;
  rt->stats_next = now + 100'000'000;
  const Counters& c = rt->engine->counters();
  for (size_t i = 0; i < static_cast<size_t>(Counter::kCount); ++i)
    rt->stats->values[i] = c.get(static_cast<Counter>(i));
  for (size_t i = 0; i < static_cast<size_t>(wire::ParseError::kCount); ++i)
    rt->stats->parse_errors[i] = c.get(static_cast<wire::ParseError>(i));
  if (rt->cm) {
    const cm::ConnectionManager::Stats& m = rt->cm->stats();
    const uint64_t v[] = {m.mads_rx,        m.mads_tx,        m.resent,         m.timeouts,
                          m.drop_malformed, m.drop_unmatched, m.drop_duplicate, m.drop_not_ours,
                          m.rejects_sent,   m.rejects_rcvd,   m.drop_backlog};
    static_assert(std::size(v) == kCmCounters);
    std::copy(std::begin(v), std::end(v), rt->stats->cm);
  }
  if (rt->port_counters) rt->port_counters(rt->stats->port);
  CcQpStats cc[StatsShm::kCcQps];
  const size_t n = rt->engine->cc_limited_qps(cc, StatsShm::kCcQps);
  std::copy(cc, cc + n, rt->stats->cc);
  rt->stats->cc_qps = static_cast<uint32_t>(n);
  rt->stats->line_rate_mbps = static_cast<uint32_t>(rt->engine->line_rate_mbps());
  size_t shown = 0;
  rt->stats->qps_total = static_cast<uint32_t>(
      rt->engine->qp_states(rt->stats->qp, StatsShm::kQps, &shown));
  rt->stats->qps = static_cast<uint32_t>(shown);
  rt->stats->updated_ns = now;
}

/// "uroce-<pid>" followed by end or '-': the pid, else 0.
pid_t owner_pid(const char* name) {
  if (std::strncmp(name, "uroce-", 6) != 0) return 0;
  const char* p = name + 6;
  if (!std::isdigit(static_cast<unsigned char>(*p))) return 0;
  long v = 0;
  while (std::isdigit(static_cast<unsigned char>(*p)) && v < 1'000'000'000) v = v * 10 + (*p++ - '0');
  return (*p == '\0' || *p == '-') ? static_cast<pid_t>(v) : 0;
}

bool is_dead(pid_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

/// What uroce processes that were killed left behind: their counters in /dev/shm and DPDK
/// runtime directories. Done once per process, when its first device opens.
void reap_leftovers() {
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (is_dead(owner_pid(e->d_name))) {
        shm_unlink(("/" + name).c_str());
      } else if (name.starts_with("uroce-qpn-") && name.ends_with(".lock")) {
        // QPN lock files of earlier uroce versions (now abstract sockets): gone once unheld.
        const std::string path = "/dev/shm/" + name;
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) unlink(path.c_str());
        if (fd >= 0) close(fd);
      }
    }
    closedir(d);
  }
  for (const char* base : {"/var/run/dpdk", "/run/dpdk"}) {
    DIR* d = opendir(base);
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      if (!is_dead(owner_pid(e->d_name))) continue;
      const std::string dir = std::string(base) + "/" + e->d_name;
      if (DIR* sub = opendir(dir.c_str())) {  // DPDK's own files, if an older uroce made any
        while (dirent* f = readdir(sub))
          if (f->d_name[0] != '.') unlink((dir + "/" + f->d_name).c_str());
        closedir(sub);
      }
      rmdir(dir.c_str());
    }
    closedir(d);
  }
}

/// The process, or its last context of the device, is leaving (its progress thread already
/// stopped): every rdma_cm connection's peer hears DREQ (a pending request, REJ), as from the
/// kernel's rdma_cm when a process's file is closed, so a peer waiting in rdma_get_cm_event
/// gets DISCONNECTED instead of waiting forever. Each is sent once: nobody is left to resend a
/// lost one. No engine pass runs: received frames could write into registered memory the
/// program has already freed on its way out. An application thread inside a pass is waited
/// for up to 100 ms; one that holds the engine longer is left alone. Last, the port hands on
/// what it holds for other processes (Port::leave): on an address several processes share,
/// the DREQ a peer sent another one before exiting may be waiting at this process's socket.
void say_goodbye(Runtime* rt) {
  if (!rt->engine) return;
  std::unique_lock<std::mutex> lock(rt->emu, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (!lock.owns_lock()) return;
  if (rt->cm) rt->cm->shutdown();
  // Frames the fault injector (UROCE_FAULT) holds back for reordering or delay were on the
  // wire already, as far as the transport knows: they leave now, not with the process, with
  // or without a connection manager. (An ACK that died here left a kernel peer resending
  // its last SEND for ever: rxe never gives up at retry_cnt 7; interop.reorder_srq_pingpong.)
  if (rt->fault) static_cast<drivers::FaultInjector*>(rt->fault.get())->flush(now_ns());
  if (rt->port) rt->port->leave();
}

/// UROCE_FAULT's account, one line on stderr as the device closes: what a test damaged is
/// then known (tools/soak.sh adds it up). Only when the program asked for damage.
void report_faults(Runtime* rt) {
  if (!rt->fault) return;
  const auto c = static_cast<drivers::FaultInjector*>(rt->fault.get())->counters();
  std::fprintf(stderr,
               "uroce: %s: UROCE_FAULT: %llu frames passed, %llu dropped, %llu duplicated, "
               "%llu corrupted, %llu reordered, %llu delayed, %llu CE-marked\n",
               rt->dev->cfg.name.c_str(), static_cast<unsigned long long>(c.sent),
               static_cast<unsigned long long>(c.dropped),
               static_cast<unsigned long long>(c.duplicated),
               static_cast<unsigned long long>(c.corrupted),
               static_cast<unsigned long long>(c.reordered),
               static_cast<unsigned long long>(c.delayed),
               static_cast<unsigned long long>(c.ce_marked));
}

}  // namespace

void Runtime::kernel_membership(const wire::Gid& g, bool join) {
  const bool v4 = wire::is_ipv4_mapped(g);
  auto set = [&](int fd, bool add) {
    if (v4) {
      ip_mreqn m{};
      std::memcpy(&m.imr_multiaddr, g.data() + 12, 4);
      m.imr_ifindex = static_cast<int>(if_nametoindex(link_iface.c_str()));
      return setsockopt(fd, IPPROTO_IP, add ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &m,
                        sizeof m) == 0;
    }
    ipv6_mreq m{};
    std::memcpy(&m.ipv6mr_multiaddr, g.data(), 16);
    m.ipv6mr_interface = if_nametoindex(link_iface.c_str());
    return setsockopt(fd, IPPROTO_IPV6, add ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP, &m,
                      sizeof m) == 0;
  };
  auto held = std::find_if(mc_joined.begin(), mc_joined.end(),
                           [&](const auto& j) { return j.first == g; });
  if (!join) {
    if (held == mc_joined.end()) return;
    set(held->second, false);
    mc_joined.erase(held);
    return;
  }
  if (link_iface.empty() || held != mc_joined.end()) return;
  const int family = v4 ? AF_INET : AF_INET6;
  for (int fd : mc_fds) {  // a socket of the family with room left (ENOBUFS: it is full)
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family == family &&
        set(fd, true)) {
      mc_joined.emplace_back(g, fd);
      return;
    }
  }
  const int fd = util::kernel_socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && set(fd, true)) {
    mc_fds.push_back(fd);
    mc_joined.emplace_back(g, fd);
    return;
  }
  const int e = errno;
  if (fd >= 0) close(fd);
  std::fprintf(stderr,
               "uroce: %s: the kernel could not join multicast group %s on %s (%s): switches "
               "doing IGMP/MLD snooping may not forward it here\n",
               dev->cfg.name.c_str(), wire::to_string(g).c_str(), link_iface.c_str(),
               std::strerror(e));
}

namespace {

/// Stops the runtime's thread and releases everything it holds (registry lock held or the
/// runtime unreachable).
void teardown(Runtime* rt) {
  rt->stop = true;
  rt->kick();
  if (rt->progress_thread.joinable()) rt->progress_thread.join();
  {
    std::lock_guard<std::mutex> lock(rt->emu);
    rt->engine->send_held_acks();  // the last message's ACK, kept for a reply that never came
  }
  say_goodbye(rt);
  report_faults(rt);
  if (rt->quiet_fd >= 0) close(rt->quiet_fd);
  if (rt->quiet6_fd >= 0) close(rt->quiet6_fd);
  for (int fd : rt->mc_fds) close(fd);  // the kernel leaves their groups
  if (rt->qpn_claim_fd >= 0) close(rt->qpn_claim_fd);
  if (rt->link_fd >= 0) close(rt->link_fd);
  if (rt->progress.wake_fd >= 0) close(rt->progress.wake_fd);
  close_stats(rt);
  rt->cm.reset();
  rt->engine.reset();
  rt->verbs_trace.reset();
  rt->fault.reset();
  rt->trace.reset();
  rt->port_counters = nullptr;
  rt->shield.reset();  // the tc program leaves the interface
  rt->port.reset();
  delete rt;
}

/// A port that reads through a packet socket (af_packet, DPDK's net_af_packet): the kernel
/// sees every frame the socket sees, and a tc program keeps our RoCE frames out of its IP
/// layer (on veth that work falls on the sending CPU). What `uroce devinfo` adds about it.
std::string shield(Runtime* rt, const config::DeviceConfig& dc, const std::array<uint8_t, 6>& mac) {
  std::vector<std::array<uint8_t, 16>> mine;
  if (dc.ipv4) mine.push_back(wire::ipv4_mapped_gid(*dc.ipv4));
  if (dc.ipv6) mine.push_back(*dc.ipv6);
  mine.push_back(wire::link_local_gid(mac));
  std::string why;
  rt->shield = drivers::KernelShield::attach(dc.iface, mine, &why);
  return rt->shield != nullptr
             ? "; a tc program at the interface's ingress keeps uroce's RoCE frames from the "
               "kernel's IP layer (it leaves with the process)"
             : "; the kernel's IP layer also processes uroce's RoCE frames (no tc program: " +
                   why + ")";
}

/// Opens the device's port and engine. Null with errno and one line on stderr.
Runtime* open_runtime(Device* d) {
  config::DeviceConfig dc = d->cfg;
  std::string err;
  if (!config::fill_addresses(&dc, &err)) {
    std::fprintf(stderr, "uroce: %s: %s\n", dc.name.c_str(), err.c_str());
    errno = EINVAL;
    return nullptr;
  }
  auto rt = std::make_unique<Runtime>();
  rt->dev = d;
  rt->pid = getpid();
  std::string description;  // how the port is set up, for `uroce devinfo`
  std::vector<uint16_t> udp_source_ports;  // the udp port's sockets' (EngineConfig)
  drivers::UdpPort* udp = nullptr;
  using Kind = config::DeviceConfig::PortKind;
  if (!dc.shm.empty()) {
    drivers::ShmConfig sc;
    sc.path = dc.shm;
    auto sp = drivers::ShmPort::open(sc, &err);
    if (sp) {
      description = sp->describe();
      rt->port_counters = [p = sp.get()](uint64_t* v) {
        const drivers::ShmPort::Stats& s = p->stats();
        const uint64_t all[] = {s.rx_frames, s.tx_frames, s.rx_bad_slot, 0, 0, 0, 0, 0, 0, 0, 0};
        static_assert(std::size(all) == kPortCounters);
        std::copy(std::begin(all), std::end(all), v);
      };
    }
    rt->port = std::move(sp);
  } else if (dc.port == Kind::kUdp) {
    drivers::UdpConfig uc;
    uc.ipv4 = dc.ipv4;
    uc.ipv6 = dc.ipv6;
    uc.gso = dc.gso;
    uc.loopback_auto = !dc.ipv4 && !dc.ipv6;  // on loopback, nothing given (fill_addresses)
    auto up = drivers::UdpPort::open(uc, &err);
    if (up) {
      dc.ipv4 = up->ipv4();  // the one it took, with loopback_auto
      udp_source_ports = up->source_ports();
      udp = up.get();
      description = up->describe();
      rt->port_counters = [p = up.get()](uint64_t* v) {
        const drivers::UdpPort::Stats s = p->stats();
        const uint64_t all[] = {s.rx_frames, s.tx_frames, s.rx_dropped, s.rx_oversize, 0, 0,
                                s.rx_gro,    s.tx_gso,    0,
                                s.rx_forwarded, s.rx_unowned};
        static_assert(std::size(all) == kPortCounters);
        std::copy(std::begin(all), std::end(all), v);
      };
    }
    rt->port = std::move(up);
  } else if (dc.port == Kind::kXdp && dc.devargs.empty()) {
    drivers::XdpConfig xc;
    xc.iface = dc.iface;
    if (dc.ipv4) xc.addresses.push_back(wire::ipv4_mapped_gid(*dc.ipv4));
    if (dc.ipv6) xc.addresses.push_back(*dc.ipv6);
    auto xp = drivers::XdpPort::open(xc, &err);
    if (xp) {
      description = xp->describe();
      rt->port_counters = [p = xp.get()](uint64_t* v) {
        const drivers::XdpPort::Stats s = p->stats();
        const uint64_t all[] = {s.rx_frames, s.tx_frames, s.rx_dropped, s.rx_oversize,
                                s.steered,   s.passed,    0,            0,
                                0,           0,           0};
        static_assert(std::size(all) == kPortCounters);
        std::copy(std::begin(all), std::end(all), v);
      };
    }
    rt->port = std::move(xp);
  } else if (dc.port == Kind::kPacket && dc.devargs.empty()) {
    drivers::PacketConfig pc;
    pc.iface = dc.iface;
    pc.shared = !dc.exclusive;
    pc.gso = dc.gso;
    auto pp = drivers::PacketPort::open(pc, &err);
    if (pp) {
      description = pp->describe() + shield(rt.get(), dc, pp->mac());
      rt->port_counters = [p = pp.get(), sh = rt->shield.get()](uint64_t* v) {
        const drivers::PacketPort::Stats s = p->stats();
        const uint64_t all[] = {s.rx_frames, s.tx_frames, s.rx_dropped, s.rx_oversize,
                                0,           0,           s.rx_super,   s.tx_super,
                                sh != nullptr ? sh->dropped() : 0, 0, 0};
        static_assert(std::size(all) == kPortCounters);
        std::copy(std::begin(all), std::end(all), v);
      };
    }
    rt->port = std::move(pp);
  } else {
    drivers::DpdkConfig pc;
    pc.iface = dc.iface;
    pc.devargs = dc.devargs;
    pc.shared = !dc.exclusive;
    auto dp = drivers::DpdkPort::open(pc, &err);
    if (dp) {
      description = dp->describe();
      // net_af_packet on an interface (no devargs given) reads through a packet socket too.
      if (dc.devargs.empty()) description += shield(rt.get(), dc, dp->mac());
      rt->port_counters = [p = dp.get(), sh = rt->shield.get()](uint64_t* v) {
        const drivers::DpdkPort::Stats s = p->stats();
        const uint64_t all[] = {s.rx_packets, s.tx_packets, s.rx_missed + s.rx_nombuf + s.rx_errors,
                                0, 0, 0, 0, 0, sh != nullptr ? sh->dropped() : 0, 0, 0};
        static_assert(std::size(all) == kPortCounters);
        std::copy(std::begin(all), std::end(all), v);
      };
    }
    rt->port = std::move(dp);
  }
  if (!rt->port) {
    std::fprintf(stderr, "uroce: %s: %s\n", dc.name.c_str(), err.c_str());
    errno = ENODEV;
    return nullptr;
  }
  Port* port = rt->port.get();
  // `uroce devinfo` asks: how the port is set up, before ibv_devinfo's own lines.
  if (const char* v = std::getenv("UROCE_DEVINFO"); v != nullptr && std::strcmp(v, "1") == 0) {
    std::printf("%s: port %s\n", dc.name.c_str(),
                description.c_str());
    std::fflush(stdout);
  }
  if (!dc.pcap.empty()) {
    auto trace = std::make_unique<drivers::PcapTrace>(*port, dc.pcap);
    if (!trace->ok()) {
      std::fprintf(stderr, "uroce: %s: pcap %s: %s\n", dc.name.c_str(), dc.pcap.c_str(),
                   trace->error().c_str());
      errno = EINVAL;
      return nullptr;
    }
    port = trace.get();
    rt->trace = std::move(trace);
    // The verbs side beside it: CAPTURE.verbs (uroce-dissect --ladder draws both).
    rt->verbs_trace = VerbsTraceFile::open(dc.pcap + ".verbs",
                                           dc.ipv4 ? wire::to_string(*dc.ipv4) : "",
                                           dc.ipv6 ? wire::to_string(*dc.ipv6) : "", &err);
    if (!rt->verbs_trace)
      std::fprintf(stderr, "uroce: %s: the verbs trace beside the capture: %s (going on without it)\n",
                   dc.name.c_str(), err.c_str());
  }
  if (dc.fault.enabled) {  // above the trace, so the pcap shows what really crossed the wire
    drivers::FaultConfig fc;
    fc.seed = dc.fault.seed;
    fc.loss = dc.fault.loss;
    fc.duplicate = dc.fault.duplicate;
    fc.corrupt = dc.fault.corrupt;
    fc.ce = dc.fault.ce;
    fc.reorder = dc.fault.reorder;
    fc.reorder_window = dc.fault.reorder_window;
    fc.reorder_hold_ns = dc.fault.reorder_hold_ns;
    fc.delay_ns = dc.fault.delay_ns;
    fc.jitter_ns = dc.fault.jitter_ns;
    fc.tx_side = dc.fault.tx_side;
    fc.rx_side = dc.fault.rx_side;
    fc.spare_dreq = dc.fault.spare_dreq;
    rt->fault = std::make_unique<drivers::FaultInjector>(*port, fc);
    port = rt->fault.get();
  }
  EngineConfig ec;
  ec.ipv4 = dc.ipv4;
  ec.ipv6 = dc.ipv6;
  ec.vlan_id = dc.vlan;
  ec.active_mtu = static_cast<ibv_mtu>(std::countr_zero(dc.mtu) - 7);
  ec.seed = now_ns() ^ (static_cast<uint64_t>(getpid()) << 32);
  ec.node_guid = d->guid;
  ec.first_qpn = claim_qpn_block(dc, &rt->qpn_claim_fd);
  ec.qpn_span = kQpnBlock;
  if (udp != nullptr && !udp->share(ec.first_qpn, kQpnBlock, &err)) {
    std::fprintf(stderr, "uroce: %s: %s\n", dc.name.c_str(), err.c_str());
    errno = ENODEV;
    return nullptr;
  }
  ec.max_qp = kMaxQp;
  ec.cc.ecn = dc.ecn;
  ec.cc.cnp_dscp = dc.cnp_dscp;
  ec.cc.min_time_between_cnps_ns = uint64_t{dc.min_time_between_cnps_us} * 1000;
  ec.cc.dcqcn = dc.dcqcn;
  ec.cc.dcqcn.line_rate_mbps = dc.line_rate_mbps != 0 ? dc.line_rate_mbps : link_speed_mbps(dc);
  ec.cc.pace_at_line_rate = dc.line_rate_mbps != 0;  // a rate given by hand is a real limit
  if (dc.port == Kind::kUdp) {  // the kernel writes the IP and UDP headers (udp_port.h)
    ec.udp_src_ports = udp_source_ports;
    ec.ipv4_ident_zero = true;
    ec.max_mcast_grp = 0;  // its sockets are bound to unicast addresses (docs/udp.md)
  }
  rt->engine = std::make_unique<Engine>(*port, ec);
  rt->engine->set_verbs_tracer(rt->verbs_trace.get());
  rt->engine->on_group_change(
      [r = rt.get()](const wire::Gid& g, bool join) { r->kernel_membership(g, join); });
  rt->engine->poll(now_ns());  // its clock runs from now: what it sends before the progress
                               // thread's first pass (an ARP) is stamped with the right time
  rt->engine_port = port;
  rt->progress.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (dc.port != Kind::kUdp) {  // the udp port's own sockets are the listeners on 4791
    rt->quiet_fd = silence_kernel(dc, false);
    rt->quiet6_fd = silence_kernel(dc, true);
  }
  if (!dc.iface.empty() && dc.iface.size() < IFNAMSIZ) {  // net_tap by devargs: not watched
    rt->link_fd = util::kernel_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    rt->link_iface = dc.iface;
    rt->watch_link(now_ns(), /*initial=*/true);  // no thread runs the engine yet
  }
  rt->stats_name = stats_shm_name(getpid(), dc.name);
  rt->stats = open_stats(rt->stats_name, dc.name);
  rt->progress.policy.set_batch(dc.batch);
  Runtime* r = rt.release();
  r->progress_thread = std::thread(progress_loop, r, dc.progress_poll, dc.progress_cpu);
  return r;
}

/// At exit (also with devices still open): stop the progress threads before anything they
/// use is destroyed, tell every rdma_cm peer (say_goodbye), and remove this process's counters files (by name only: an application
/// thread may still be running a pass that writes to the mapping).
__attribute__((destructor)) void at_exit() {
  if (g_live_pid.load() != getpid()) return;  // a forked child owns nothing (checked unlocked)
  std::lock_guard<std::mutex> lock(g_registry_mu);
  if (g_live == nullptr) return;
  for (Runtime* rt : *g_live) {
    rt->stop = true;
    rt->kick();
    if (rt->progress_thread.joinable()) rt->progress_thread.join();
    say_goodbye(rt);
    if (rt->stats != nullptr) shm_unlink(rt->stats_name.c_str());
  }
}

/// fork() copies every lock in whatever state another thread held it. Around the fork we hold
/// the registry lock and each open device's engine lock, so that no engine pass (the progress
/// thread's, say) is under way at that instant: the child's copies are free and each engine
/// is whole. A child that then calls a verb on a context it inherited gets an answer, not a
/// lock that nobody will ever release (pyverbs' test_multi_process_alloc_dm allocates
/// device memory that way in five children at once); it runs no engine pass (Runtime::pass_locked).
bool g_fork_locked = false;  // fork_prepare took the engine locks (the child's copy says so too)
void fork_prepare() {
  g_registry_mu.lock();
  g_fork_locked = g_live != nullptr && g_live_pid.load() == getpid();
  if (g_fork_locked)
    for (Runtime* rt : *g_live) rt->emu.lock();
}
void fork_release() {
  if (g_fork_locked)
    for (auto it = g_live->rbegin(); it != g_live->rend(); ++it) (*it)->emu.unlock();
  g_fork_locked = false;
  g_registry_mu.unlock();
}
void fork_child() {
  fork_release();  // the child's copies of the same locks, held by this same thread
  g_self_pid.store(getpid());
}
__attribute__((constructor)) void register_fork_handlers() {
  g_self_pid.store(getpid());
  pthread_atfork(fork_prepare, fork_release, fork_child);
}

}  // namespace

Runtime* acquire_runtime(Device* d) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  if (g_live == nullptr || g_live_pid != getpid()) {
    // First device of this process, or of a forked child, whose copied list is not its own.
    g_inherited = g_live;
    g_live = new std::vector<Runtime*>();
    g_live_pid = getpid();
    for (Device* other : devices()) other->runtime = nullptr;
  }
  if (d->runtime != nullptr) {
    ++d->runtime->refs;
    return d->runtime;
  }
  if (!g_reaped) {
    g_reaped = true;
    reap_leftovers();
  }
  Runtime* rt = open_runtime(d);
  if (rt == nullptr) return nullptr;
  rt->refs = 1;
  d->runtime = rt;
  g_live->push_back(rt);
  return rt;
}

void release_runtime(Runtime* rt) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  if (rt->pid != getpid()) return;  // the parent's, copied by fork: nothing here is ours
  if (--rt->refs > 0) return;
  rt->dev->runtime = nullptr;
  std::erase(*g_live, rt);
  teardown(rt);
}

void Runtime::watch_link(uint64_t now, bool initial) {
  if (link_fd < 0 || (now < link_next && !initial)) return;
  link_next = now + 100'000'000;
  ifreq r{};
  std::memcpy(r.ifr_name, link_iface.data(), link_iface.size());
  if (ioctl(link_fd, SIOCGIFFLAGS, &r) != 0) return;  // the interface is gone: nothing to say
  // Up means administratively up with a carrier (a veth whose peer is down is not running).
  engine->set_link_up((r.ifr_flags & IFF_UP) != 0 && (r.ifr_flags & IFF_RUNNING) != 0,
                      !initial);
  if (ioctl(link_fd, SIOCGIFMTU, &r) == 0 && r.ifr_mtu > 0 &&
      static_cast<uint32_t>(r.ifr_mtu) != link_mtu) {
    link_mtu = static_cast<uint32_t>(r.ifr_mtu);
    engine->set_netdev_mtu(link_mtu);
  }
}

bool Runtime::inherited() const { return pid != g_self_pid.load(std::memory_order_relaxed); }

size_t Runtime::pass_locked() {
  // A forked child's copy of its parent's device: its port's socket is the parent's, so a
  // pass here would take the parent's frames and send in its name. It does nothing.
  if (inherited()) return 0;
  const uint64_t now = now_ns();
  // The link watch (an ioctl) and the counters for `uroce stats` run every 100 ms, in
  // whichever thread's pass comes then: in any other pass each is one comparison. They are
  // not left to the progress thread alone: while an application thread busy-polls, it holds
  // the engine nearly all the time, and the progress thread's try-lock would seldom win (a
  // link going down, or a stuck QP in `uroce stats`, would go unseen).
  watch_link(now);
  engine->hold_acks_next_poll(t_ack_hold_ns);
  size_t work = engine->poll(now);
  // ACKs kept for a reply that did not come: this application does not answer at once.
  if (const uint64_t alone = engine->counters()[Counter::acks_held_alone]; alone != acks_alone_seen) {
    acks_alone_seen = alone;
    progress.policy.ack_waited_in_vain();
  }
  if (cm) work += cm->poll();
  deliver_cq_events(this);
  deliver_async_locked();
  publish_stats(this, now);
  return work;
}

void Runtime::deliver_async_locked() {
  AsyncEvent ev;
  while (engine->pop_async_event(&ev)) {
    ibv_async_event out{};
    out.event_type = ev.type;
    ibv_context* owner = nullptr;
    uint32_t id = 0;
    if (ev.qp != nullptr && ev.qp->is_wq && ev.type == IBV_EVENT_WQ_FATAL) {  // its ibv_wq
      out.element.wq = static_cast<ibv_wq*>(ev.qp->ibv.qp_context);
      owner = ev.qp->ibv.context;
      id = ev.qp->qpn;
    } else if (ev.qp != nullptr) {
      out.element.qp = &ev.qp->ibv;
      owner = ev.qp->ibv.context;
      id = ev.qp->qpn;
    } else if (ev.cq != nullptr) {
      out.element.cq = &ev.cq->ibv;
      owner = ev.cq->ibv.context;
      id = ev.cq->handle;
    } else if (ev.srq != nullptr) {
      out.element.srq = &ev.srq->ibv;
      owner = ev.srq->ibv.context;
      id = ev.srq->handle;
    }
    if (owner != nullptr) {
      post_async(state_of(owner), out, id);
    } else {  // a port event: every context on the device hears it
      out.element.port_num = 1;
      std::lock_guard<std::mutex> lock(ctx_mu);
      for (ContextState* s : contexts) post_async(s, out);
    }
  }
}

bool post_async(ContextState* s, const ibv_async_event& ev, uint32_t id) {
  // The write end is non-blocking: a program that never reads its events loses the newest
  // ones instead of stopping the engine. A record is far below PIPE_BUF: written whole.
  const AsyncRecord r{ev, id};
  return write(s->async_pipe[1], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
}

}  // namespace uroce::verbs

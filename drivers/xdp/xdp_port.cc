#include "xdp/xdp_port.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include "common/spin_guard.h"
#include "wire/addr.h"
#include "xdp/bpf_privileges.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>

// Multi-buffer AF_XDP (Linux 6.6); Debian 12's kernel headers predate it.
#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)
#endif
#ifndef XDP_PKT_CONTD
#define XDP_PKT_CONTD (1 << 0)
#endif

namespace uroce::drivers {

extern const unsigned char kSteerProgram[];
extern const size_t kSteerProgramSize;

namespace {

constexpr uint32_t kChunk = 4096;          // umem chunk: the most the kernel takes
constexpr uint32_t kSlot = 2 * kChunk;     // a frame slot: two adjacent chunks
constexpr uint32_t kRing = 2048;           // fill, completion, rx and tx ring entries
constexpr uint32_t kKeepFree = 512;        // slots kept back from the fill ring for sending
constexpr uint32_t kHeadroom = XDP_PACKET_HEADROOM;  // where the kernel puts received data
constexpr const char* kProgName = "uroce_steer";
constexpr uint32_t kMaxQueues = 64;        // the XDP program's xsks_map
constexpr uint32_t kMinFill = 256;         // fill ring slots per queue at least

/// The interface's receive queues (its rx-N entries in sysfs), 1 if it shows none.
uint32_t rx_queue_count(const std::string& ifn) {
  uint32_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net/" + ifn + "/queues", ec))
    if (e.path().filename().string().rfind("rx-", 0) == 0) ++n;
  return std::max<uint32_t>(n, 1);
}

/// The XDP program attached to `ifindex` (0: none) and its name.
uint32_t attached_program(int ifindex, std::string* name) {
  uint32_t id = 0;
  if (bpf_xdp_query_id(ifindex, 0, &id) != 0 || id == 0) return 0;
  const int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) return id;
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) *name = info.name;
  close(fd);
  return id;
}

std::string errno_text(int e) { return std::strerror(e < 0 ? -e : e); }

/// The kernel's neighbour entry for `ip` (4 or 16 bytes) on `ifindex`, if it has a usable one:
/// one RTM_GETNEIGH request for that address.
bool kernel_neighbor(int ifindex, bool v6, const uint8_t* ip, std::array<uint8_t, 6>* mac) {
  const int fd = static_cast<int>(syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (fd < 0) return false;
  const size_t alen = v6 ? 16 : 4;
  alignas(nlmsghdr) uint8_t req[NLMSG_SPACE(sizeof(ndmsg)) + RTA_SPACE(16)] = {};
  auto* h = reinterpret_cast<nlmsghdr*>(req);
  auto* nd = reinterpret_cast<ndmsg*>(req + NLMSG_HDRLEN);
  auto* at = reinterpret_cast<rtattr*>(req + NLMSG_SPACE(sizeof(ndmsg)));
  h->nlmsg_type = RTM_GETNEIGH;
  h->nlmsg_flags = NLM_F_REQUEST;
  h->nlmsg_seq = 1;
  nd->ndm_family = v6 ? AF_INET6 : AF_INET;
  nd->ndm_ifindex = ifindex;
  at->rta_type = NDA_DST;
  at->rta_len = static_cast<unsigned short>(RTA_LENGTH(alen));
  std::memcpy(req + NLMSG_SPACE(sizeof(ndmsg)) + RTA_LENGTH(0), ip, alen);
  h->nlmsg_len = static_cast<uint32_t>(NLMSG_SPACE(sizeof(ndmsg)) + RTA_SPACE(alen));
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  alignas(nlmsghdr) uint8_t buf[2048];
  ssize_t n = -1;
  if (sendto(fd, req, h->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) >= 0)
    n = recv(fd, buf, sizeof buf, 0);
  close(fd);
  const auto* r = reinterpret_cast<const nlmsghdr*>(buf);
  if (n < static_cast<ssize_t>(NLMSG_SPACE(sizeof(ndmsg))) || r->nlmsg_type != RTM_NEWNEIGH ||
      r->nlmsg_len > static_cast<uint32_t>(n))
    return false;
  const auto* rn = reinterpret_cast<const ndmsg*>(buf + NLMSG_HDRLEN);
  constexpr uint16_t kUsable = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT;
  if ((rn->ndm_state & kUsable) == 0) return false;
  for (size_t off = NLMSG_SPACE(sizeof(ndmsg)); off + sizeof(rtattr) <= r->nlmsg_len;) {
    const auto* a = reinterpret_cast<const rtattr*>(buf + off);
    if (a->rta_len < sizeof(rtattr) || off + a->rta_len > r->nlmsg_len) break;
    if (a->rta_type == NDA_LLADDR && a->rta_len == RTA_LENGTH(6)) {
      std::memcpy(mac->data(), buf + off + RTA_LENGTH(0), 6);
      return true;
    }
    off += RTA_ALIGN(a->rta_len);
  }
  return false;
}

/// Makes the kernel resolve `ip`: a zero-length UDP datagram to the discard port (9) sends
/// its own ARP request or neighbour solicitation first (the neighbour answers the datagram
/// with an ICMP port unreachable at most).
void kernel_resolve(int ifindex, bool v6, const uint8_t* ip) {
  const int fd = static_cast<int>(syscall(SYS_socket, v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd < 0) return;
  if (v6) {
    sockaddr_in6 to{};
    to.sin6_family = AF_INET6;
    to.sin6_port = htons(9);
    std::memcpy(&to.sin6_addr, ip, 16);
    if (ip[0] == 0xfe && (ip[1] & 0xc0) == 0x80) to.sin6_scope_id = static_cast<uint32_t>(ifindex);
    sendto(fd, "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof to);
  } else {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(9);
    std::memcpy(&to.sin_addr, ip, 4);
    sendto(fd, "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
  close(fd);
}

/// The ICMPv6 checksum of `icmp` between `src` and `dst` (RFC 4443).
uint16_t icmpv6_checksum(const uint8_t* src, const uint8_t* dst, const uint8_t* icmp, size_t len) {
  uint32_t sum = 0;
  auto add = [&sum](const uint8_t* p, size_t n) {
    for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
    if (n % 2 != 0) sum += static_cast<uint32_t>(p[n - 1] << 8);
  };
  add(src, 16);
  add(dst, 16);
  sum += static_cast<uint32_t>(len) + 58;
  add(icmp, len);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace

/// One receive queue's socket. Every queue's socket shares the one umem, each with a fill and
/// a completion ring of its own; queue 0's also sends (its completions come on its ring).
struct XdpPort::Queue {
  uint32_t id = 0;
  xsk_socket* xsk = nullptr;
  xsk_ring_prod fill{};
  xsk_ring_cons comp{}, rx{};
  int fd = -1;
  uint32_t in_fill = 0;      // slots posted to the fill ring, not yet received
  int64_t partial = -1;      // slot of a frame whose second descriptor has not come yet
  bool partial_bad = false;  // that frame is too long: drop it when it ends
};

struct XdpPort::Impl {
  std::string iface;
  int ifindex = 0;
  int claim_fd = -1;  // abstract socket "uroce-xdp-<iface>": this process owns the hook
  size_t umem_bytes = 0;
  xsk_umem* umem = nullptr;
  std::vector<Queue> queues;  // sized once (the umem keeps pointers to queue 0's rings)
  xsk_ring_prod tx{};         // queue 0's
  int epoll_fd = -1;          // readable when any queue is (or the raw socket)
  bpf_object* obj = nullptr;
  uint32_t prog_id = 0;  // attached by us
  int count_map = -1;
  bool generic = false;  // attached in the kernel's generic (skb) XDP mode

  ~Impl() {
    if (epoll_fd >= 0) close(epoll_fd);
    for (size_t i = queues.size(); i-- > 0;)  // the umem's own (queue 0's) last
      if (queues[i].xsk != nullptr) xsk_socket__delete(queues[i].xsk);
    if (umem != nullptr) xsk_umem__delete(umem);
    if (prog_id != 0) {
      // Take our program off, unless someone replaced it meanwhile.
      std::string name;
      if (attached_program(ifindex, &name) == prog_id)
        bpf_xdp_detach(ifindex, generic ? XDP_FLAGS_SKB_MODE : 0, nullptr);
    }
    if (obj != nullptr) bpf_object__close(obj);
    if (claim_fd >= 0) close(claim_fd);
  }
};

XdpPort::XdpPort(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

XdpPort::~XdpPort() {
  if (raw_fd_ >= 0) close(raw_fd_);
  impl_.reset();  // socket and umem first: the kernel lets go of the pages
  if (umem_ != nullptr) munmap(umem_, size_t{frames_.size()} * kSlot);
}

std::unique_ptr<XdpPort> XdpPort::open(const XdpConfig& cfg, std::string* error) {
  auto im = std::make_unique<Impl>();
  const std::string& ifn = cfg.iface;
  im->iface = ifn;
  im->ifindex = static_cast<int>(if_nametoindex(ifn.c_str()));
  if (ifn.empty() || im->ifindex == 0) {
    *error = "port=af_xdp: no interface '" + ifn + "' in this network namespace (ip link)";
    return nullptr;
  }
  if (const std::string missing = missing_bpf_caps(true); !missing.empty()) {
    *error = "port=af_xdp: this process lacks " + missing +
             ": run it as root (or give the program these capabilities with setcap), or use "
             "port=af_packet";
    return nullptr;
  }
  const QuietLibbpf quiet;  // failures below are reported in *error, once
  // One process per interface. (syscall, not socket(): an LD_PRELOAD'ed socket() may make
  // something else.)
  im->claim_fd = static_cast<int>(syscall(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = "uroce-xdp-" + ifn;
  const size_t nlen = std::min(name.size(), sizeof a.sun_path - 2);
  std::memcpy(a.sun_path + 1, name.data(), nlen);  // sun_path[0] == 0: abstract
  if (im->claim_fd < 0 ||
      bind(im->claim_fd, reinterpret_cast<sockaddr*>(&a),
           static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + nlen)) != 0) {
    *error = "port=af_xdp: interface " + ifn + " is used through AF_XDP by another uroce "
             "process; one process per interface (port=af_packet shares one)";
    return nullptr;
  }
  std::string prog_name;
  if (attached_program(im->ifindex, &prog_name) != 0) {
    if (prog_name != kProgName) {
      *error = "port=af_xdp: interface " + ifn + " already has an XDP program ('" + prog_name +
               "'): take it off (ip link set dev " + ifn + " xdp off) or use port=af_packet";
      return nullptr;
    }
    // Ours, while no live uroce process holds the interface: left by one that was killed.
    if (bpf_xdp_detach(im->ifindex, 0, nullptr) != 0 &&
        bpf_xdp_detach(im->ifindex, XDP_FLAGS_SKB_MODE, nullptr) != 0) {
      *error = "port=af_xdp: cannot take off the XDP program a killed uroce process left on " +
               ifn + ": ip link set dev " + ifn + " xdp off";
      return nullptr;
    }
  }

  // A socket on every receive queue, each with a fill ring of kMinFill slots at least
  // (frames of two chunks: half as many frames), beside the slots kept for sending.
  const uint32_t queues = rx_queue_count(ifn);
  if (queues > kMaxQueues) {
    *error = "port=af_xdp: interface " + ifn + " has " + std::to_string(queues) +
             " receive queues and the port serves " + std::to_string(kMaxQueues) +
             " at most: ethtool -L " + ifn + " combined " + std::to_string(kMaxQueues);
    return nullptr;
  }
  const uint32_t slots = std::max({cfg.slots, 2 * kRing, kKeepFree + queues * kMinFill});
  void* area = mmap(nullptr, size_t{slots} * kSlot, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (area == MAP_FAILED) {
    *error = "port=af_xdp: cannot map " + std::to_string(size_t{slots} * kSlot >> 20) +
             " MiB for the umem: " + errno_text(errno);
    return nullptr;
  }
  const uint32_t nq = queues;
  im->queues.resize(nq);
  std::unique_ptr<XdpPort> p(new XdpPort(std::move(im)));
  Impl& m = *p->impl_;
  // What each fill ring may hold: the slots shared out, a reserve kept for sending.
  p->fill_target_ = std::min(kRing, (slots - kKeepFree) / nq);
  p->umem_ = static_cast<uint8_t*>(area);
  p->frames_.resize(slots);
  p->free_.reserve(slots);
  for (uint32_t s = slots; s-- > 0;) {
    p->frames_[s].cookie = reinterpret_cast<void*>(uintptr_t{s});
    p->free_.push_back(s);
  }

  xsk_umem_config ucfg{};
  ucfg.fill_size = kRing;
  ucfg.comp_size = kRing;
  ucfg.frame_size = kChunk;
  ucfg.frame_headroom = 0;
  ucfg.flags = 0;
  int rc = xsk_umem__create(&m.umem, area, size_t{slots} * kSlot, &m.queues[0].fill,
                            &m.queues[0].comp, &ucfg);
  if (rc != 0) {
    *error = "port=af_xdp: the kernel refused the umem (" + errno_text(rc) +
             "): AF_XDP pins it, which needs CAP_IPC_LOCK or a locked-memory limit (ulimit -l) "
             "of " + std::to_string(size_t{slots} * kSlot >> 10) + " KiB";
    return nullptr;
  }

  // The steering program, from the bytes built into the library.
  m.obj = bpf_object__open_mem(kSteerProgram, kSteerProgramSize, nullptr);
  if (m.obj == nullptr || bpf_object__load(m.obj) != 0) {
    *error = "port=af_xdp: the kernel refused uroce's XDP program (" + errno_text(errno) +
             "): needs CAP_BPF and CAP_NET_ADMIN (root) and Linux 6.6 or later";
    return nullptr;
  }
  bpf_program* prog = bpf_object__find_program_by_name(m.obj, kProgName);
  const int prog_fd = prog != nullptr ? bpf_program__fd(prog) : -1;
  // The driver's own XDP hook where it has one (veth, most NICs), else the generic one.
  rc = bpf_xdp_attach(m.ifindex, prog_fd, XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
  if (rc != 0) {
    rc = bpf_xdp_attach(m.ifindex, prog_fd, XDP_FLAGS_UPDATE_IF_NOEXIST | XDP_FLAGS_SKB_MODE,
                        nullptr);
    m.generic = rc == 0;
  }
  if (rc != 0) {
    *error = "port=af_xdp: cannot attach uroce's XDP program to " + ifn + " (" +
             errno_text(rc) + ")";
    return nullptr;
  }
  bpf_prog_info pinfo{};
  uint32_t plen = sizeof pinfo;
  if (bpf_obj_get_info_by_fd(prog_fd, &pinfo, &plen) == 0) m.prog_id = pinfo.id;

  // A socket on every receive queue: a NIC spreads RoCE over its queues by the UDP source
  // port, which differs from QP to QP. Queue 0's binds the umem (multi-buffer, wakeups); the
  // others share it (the kernel takes those flags from the umem) and only receive.
  xsk_socket_config scfg{};
  scfg.rx_size = kRing;
  scfg.tx_size = kRing;
  scfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  scfg.xdp_flags = 0;
  scfg.bind_flags = XDP_USE_NEED_WAKEUP | XDP_USE_SG;
  const int xsks = bpf_object__find_map_fd_by_name(m.obj, "xsks_map");
  const int addrs = bpf_object__find_map_fd_by_name(m.obj, "uroce_addrs");
  m.count_map = bpf_object__find_map_fd_by_name(m.obj, "uroce_count");
  for (uint32_t i = 0; i < nq; ++i) {
    Queue& q = m.queues[i];
    q.id = i;
    rc = i == 0 ? xsk_socket__create(&q.xsk, ifn.c_str(), 0, m.umem, &q.rx, &m.tx, &scfg)
                : xsk_socket__create_shared(&q.xsk, ifn.c_str(), i, m.umem, &q.rx, nullptr,
                                            &q.fill, &q.comp, &scfg);
    if (rc != 0) {
      *error = "port=af_xdp: cannot bind an AF_XDP socket to " + ifn + " queue " +
               std::to_string(i) + " (" + errno_text(rc) +
               "): multi-buffer AF_XDP needs Linux 6.6 or later";
      return nullptr;
    }
    q.fd = xsk_socket__fd(q.xsk);
    fcntl(q.fd, F_SETFD, FD_CLOEXEC);
    if (xsks < 0 || addrs < 0 || bpf_map_update_elem(xsks, &i, &q.fd, BPF_ANY) != 0) {
      *error = "port=af_xdp: cannot hand the socket to the XDP program (" + errno_text(errno) +
               ")";
      return nullptr;
    }
  }
  p->tx_fd_ = m.queues[0].fd;
  {  // one descriptor to sleep on for all of them (and the raw socket, receive_all)
    m.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    for (const Queue& q : m.queues) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = q.id;
      if (m.epoll_fd < 0 || epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, q.fd, &ev) != 0) {
        *error = "port=af_xdp: cannot wait on " + std::to_string(nq) + " queues (" +
                 errno_text(errno) + ")";
        return nullptr;
      }
    }
    p->fd_ = m.epoll_fd;
  }

  // Ethernet address and MTU: the interface's.
  {
    std::ifstream f("/sys/class/net/" + ifn + "/address");
    std::string text;
    unsigned b[6] = {};
    if (f >> text && std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3],
                                 &b[4], &b[5]) == 6)
      for (int i = 0; i < 6; ++i) p->mac_[i] = static_cast<uint8_t>(b[i]);
  }
  uint32_t mtu = 1500;
  {
    std::ifstream f("/sys/class/net/" + ifn + "/mtu");
    uint32_t v = 0;
    if (f >> v && v >= 576) mtu = v;
  }
  // A received frame is at most two chunks less the kernel's headroom in each.
  p->max_frame_ = std::min(mtu + 18, 2 * (kChunk - kHeadroom));

  std::vector<std::array<uint8_t, 16>> want = cfg.addresses;
  want.push_back(wire::link_local_gid(p->mac_));  // GID 0
  for (const auto& addr : want) {
    const uint8_t one = 1;
    if (bpf_map_update_elem(addrs, addr.data(), &one, BPF_ANY) != 0) {
      *error = "port=af_xdp: cannot give the XDP program an address (" + errno_text(errno) + ")";
      return nullptr;
    }
  }
  for (Queue& q : m.queues) p->refill(q);
  p->description_ = "AF_XDP (uroce's own port) on " + ifn +
                    (nq == 1 ? std::string(" queue 0")
                             : " queues 0-" + std::to_string(nq - 1) + " (one socket each)") +
                    " (interface MTU " +
                    std::to_string(mtu) + "; uroce's XDP program, in the " +
                    (m.generic ? "kernel's generic" : "driver's") + " hook, hands the socket " +
                    "RoCE frames for our " + std::to_string(want.size()) +
                    " addresses only, the kernel keeps all other traffic); " +
                    std::to_string(slots) + " frame slots of 8 KiB, rings of " +
                    std::to_string(kRing) + "; sleeps on the socket" + (nq > 1 ? "s" : "") +
                    " when idle";
  return p;
}

void XdpPort::release_slot(uint32_t slot) {
  SpinGuard g(free_lock_);
  free_.push_back(slot);
}

void XdpPort::refill(Queue& q) {
  if (xsk_ring_prod__needs_wakeup(&q.fill))
    recvfrom(q.fd, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
  if (q.in_fill >= fill_target_ / 2) return;  // refill in batches
  SpinGuard g(free_lock_);
  const uint32_t spare = free_.size() > kKeepFree ? static_cast<uint32_t>(free_.size()) - kKeepFree : 0;
  const uint32_t n = std::min(fill_target_ - q.in_fill, spare);
  uint32_t idx = 0;
  if (n == 0 || xsk_ring_prod__reserve(&q.fill, n, &idx) != n) return;
  for (uint32_t i = 0; i < n; ++i) {
    *xsk_ring_prod__fill_addr(&q.fill, idx + i) = uint64_t{free_.back()} * kSlot;
    free_.pop_back();
  }
  xsk_ring_prod__submit(&q.fill, n);
  q.in_fill += n;
}

void XdpPort::reap_completions() {
  Impl& m = *impl_;
  uint32_t idx = 0;
  xsk_ring_cons& comp = m.queues[0].comp;  // only queue 0 sends
  const uint32_t n = xsk_ring_cons__peek(&comp, kRing, &idx);
  if (n == 0) return;
  {
    SpinGuard g(free_lock_);
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t addr = *xsk_ring_cons__comp_addr(&comp, idx + i);
      // A two-descriptor frame completes twice: the slot is free with its first chunk.
      if (addr % kSlot < kChunk) free_.push_back(static_cast<uint32_t>(addr / kSlot));
    }
  }
  xsk_ring_cons__release(&comp, n);
}

void XdpPort::kick_tx() {
  Impl& m = *impl_;
  // In copy mode the kernel sends only inside sendto(), 32 descriptors per call (EAGAIN:
  // more are left); ENOBUFS / EBUSY: the device is full, the next burst tries again.
  for (int i = 0; i < 64; ++i) {
    if (xsk_prod_nb_free(&m.tx, kRing) == kRing) return;  // all sent
    if (!xsk_ring_prod__needs_wakeup(&m.tx)) return;
    if (sendto(tx_fd_, nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) continue;
    if (errno == EAGAIN) {
      reap_completions();
      continue;
    }
    if (errno != EINTR) return;
  }
}

uint16_t XdpPort::rx_burst(uint64_t now_ns, std::span<Frame*> out) {
  Impl& m = *impl_;
  reap_completions();
  kick_tx();  // frames a full device left in the tx ring
  uint16_t kept = 0;
  if (!queries_.empty()) answer_neighbors(now_ns);
  while (kept < out.size() && !answers_.empty()) {
    out[kept++] = answers_.back();
    answers_.pop_back();
  }
  // Each queue in turn, starting one further each time: a busy queue cannot starve another.
  const size_t nq = m.queues.size();
  for (size_t k = 0; k < nq; ++k) {
    Queue& q = m.queues[(next_queue_ + k) % nq];
    refill(q);
    if (kept < out.size()) kept = static_cast<uint16_t>(kept + receive(q, out.subspan(kept)));
  }
  next_queue_ = (next_queue_ + 1) % nq;
  // Raw-packet QPs' flows: what the kernel got, copied into frames of ours.
  while (raw_fd_ >= 0 && kept < out.size()) {
    Frame* f = alloc_frame();
    if (f == nullptr) break;
    const ssize_t n = recv(raw_fd_, f->data, f->cap, MSG_DONTWAIT | MSG_TRUNC);
    if (n <= 0 || static_cast<size_t>(n) > f->cap) {
      free_frame(f);
      if (n <= 0) break;
      ++rx_oversize_;
      continue;
    }
    f->len = static_cast<uint32_t>(n);
    out[kept++] = f;
  }
  rx_frames_ += kept;
  return kept;
}

bool XdpPort::receive_all(bool on) {
  Impl& m = *impl_;
  if (!on) {
    if (raw_fd_ >= 0) {
      epoll_ctl(m.epoll_fd, EPOLL_CTL_DEL, raw_fd_, nullptr);
      close(raw_fd_);
      raw_fd_ = -1;
    }
    return true;
  }
  if (raw_fd_ >= 0) return true;
  // Protocol 0 until the filter is on: no frame is queued before it.
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  // What the kernel receives, not what this host sends.
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, 0),
      BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFFu),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(code)), code};
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_ALL);
  ll.sll_ifindex = m.ifindex;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = UINT32_MAX;
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&ll), sizeof ll) != 0 ||
      epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    close(fd);
    return false;
  }
  raw_fd_ = fd;
  return true;
}

uint16_t XdpPort::receive(Queue& q, std::span<Frame*> out) {
  uint16_t kept = 0;
  uint32_t idx = 0;
  const uint32_t n = xsk_ring_cons__peek(
      &q.rx, static_cast<uint32_t>(std::min<size_t>(out.size(), 64)), &idx);
  for (uint32_t i = 0; i < n; ++i) {
    const xdp_desc* d = xsk_ring_cons__rx_desc(&q.rx, idx + i);
    const auto slot = static_cast<uint32_t>(d->addr / kSlot);
    --q.in_fill;
    const bool more = (d->options & XDP_PKT_CONTD) != 0;
    if (q.partial < 0) {  // a frame's first (often only) descriptor
      Frame& f = frames_[slot];
      f.data = umem_ + d->addr;
      f.len = d->len;
      f.cap = kSlot - static_cast<uint32_t>(d->addr % kSlot);
      if (!more) {
        out[kept++] = &f;
        continue;
      }
      q.partial = slot;
      // Its second part goes right behind it: the first must fill its chunk exactly.
      q.partial_bad = d->addr % kSlot + d->len != kChunk;
      continue;
    }
    Frame& f = frames_[static_cast<size_t>(q.partial)];
    if (!q.partial_bad && f.len + d->len <= f.cap)
      std::memcpy(f.data + f.len, umem_ + d->addr, d->len);
    else
      q.partial_bad = true;  // three parts or more: longer than we offer
    f.len += d->len;
    release_slot(slot);
    if (more) continue;
    if (q.partial_bad) {
      ++rx_oversize_;
      release_slot(static_cast<uint32_t>(q.partial));
    } else {
      out[kept++] = &f;
    }
    q.partial = -1;
    q.partial_bad = false;
  }
  if (n > 0) xsk_ring_cons__release(&q.rx, n);
  return kept;
}

uint16_t XdpPort::tx_burst(uint64_t now_ns, std::span<Frame* const> frames) {
  Impl& m = *impl_;
  reap_completions();
  uint16_t sent = 0;
  uint32_t descs = 0;
  for (Frame* f : frames) {
    if (take_neighbor_request(f, now_ns)) {
      ++sent;
      continue;
    }
    const auto slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(f->cookie));
    const uint64_t start = static_cast<uint64_t>(f->data - umem_);
    const uint64_t first_room = uint64_t{slot} * kSlot + kChunk - start;
    const uint32_t need = f->len > first_room ? 2 : 1;
    uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&m.tx, need, &idx) != need) break;  // ring full: caller keeps
    xdp_desc* d = xsk_ring_prod__tx_desc(&m.tx, idx);
    d->addr = start;
    d->len = static_cast<uint32_t>(std::min<uint64_t>(f->len, first_room));
    d->options = need == 2 ? XDP_PKT_CONTD : 0;
    if (need == 2) {
      xdp_desc* d2 = xsk_ring_prod__tx_desc(&m.tx, idx + 1);
      d2->addr = uint64_t{slot} * kSlot + kChunk;
      d2->len = f->len - d->len;
      d2->options = 0;
    }
    descs += need;
    ++sent;
  }
  if (descs > 0) {
    xsk_ring_prod__submit(&m.tx, descs);
    kick_tx();
  }
  tx_frames_ += sent;
  return sent;
}

bool XdpPort::take_neighbor_request(Frame* f, uint64_t now_ns) {
  const uint8_t* b = f->data;
  if (f->len < 14) return false;
  NeighborQuery q;
  size_t l3 = 14;
  uint16_t type = static_cast<uint16_t>(b[12] << 8 | b[13]);
  if (type == 0x8100 && f->len >= 18) {
    q.tagged = true;
    std::memcpy(q.vlan_tag.data(), b + 12, 4);
    type = static_cast<uint16_t>(b[16] << 8 | b[17]);
    l3 = 18;
  }
  if (type == 0x0806 && f->len >= l3 + 28 && b[l3 + 6] == 0 && b[l3 + 7] == 1) {  // ARP request
    std::memcpy(q.asker.data(), b + l3 + 14, 4);
    std::memcpy(q.target.data(), b + l3 + 24, 4);
  } else if (type == 0x86DD && f->len >= l3 + 40 + 24 && b[l3 + 6] == 58 && b[l3 + 40] == 135) {
    q.v6 = true;  // neighbour solicitation
    std::memcpy(q.asker.data(), b + l3 + 8, 16);
    std::memcpy(q.target.data(), b + l3 + 40 + 8, 16);
  } else {
    return false;
  }
  free_frame(f);
  for (const NeighborQuery& o : queries_)
    if (o.v6 == q.v6 && o.target == q.target) return true;  // already asked
  // As long as the engine's own resolution would wait (3 tries, 1 s apart).
  q.give_up_ns = now_ns + 3'000'000'000ULL;
  kernel_resolve(impl_->ifindex, q.v6, q.target.data());
  queries_.push_back(q);
  next_query_ns_ = 0;  // look at once: the kernel may know it already
  return true;
}

void XdpPort::answer_neighbors(uint64_t now_ns) {
  if (now_ns < next_query_ns_) return;
  next_query_ns_ = now_ns + 2'000'000;  // every 2 ms while the kernel resolves
  for (size_t i = 0; i < queries_.size();) {
    NeighborQuery& q = queries_[i];
    std::array<uint8_t, 6> peer{};
    const bool known = kernel_neighbor(impl_->ifindex, q.v6, q.target.data(), &peer);
    Frame* f = known ? alloc_frame() : nullptr;
    if (f == nullptr) {
      if (now_ns > q.give_up_ns) {
        queries_.erase(queries_.begin() + static_cast<ptrdiff_t>(i));
        continue;
      }
      ++i;
      continue;
    }
    // The reply the neighbour would have sent, as received from the wire.
    uint8_t* b = f->data;
    std::memcpy(b, mac_.data(), 6);
    std::memcpy(b + 6, peer.data(), 6);
    size_t l3 = 12;
    if (q.tagged) {
      std::memcpy(b + 12, q.vlan_tag.data(), 4);
      l3 = 16;
    }
    if (!q.v6) {
      const uint8_t head[] = {0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 2};
      std::memcpy(b + l3, head, sizeof head);
      uint8_t* a = b + l3 + 2;
      std::memcpy(a + 8, peer.data(), 6);
      std::memcpy(a + 14, q.target.data(), 4);
      std::memcpy(a + 18, mac_.data(), 6);
      std::memcpy(a + 24, q.asker.data(), 4);
      f->len = static_cast<uint32_t>(l3 + 2 + 28);
    } else {
      b[l3] = 0x86;
      b[l3 + 1] = 0xDD;
      uint8_t* ip = b + l3 + 2;
      std::memset(ip, 0, 40 + 32);
      ip[0] = 0x60;
      ip[5] = 32;   // payload length
      ip[6] = 58;   // ICMPv6
      ip[7] = 255;  // hop limit, as neighbour discovery requires
      std::memcpy(ip + 8, q.target.data(), 16);
      std::memcpy(ip + 24, q.asker.data(), 16);
      uint8_t* icmp = ip + 40;
      icmp[0] = 136;   // neighbour advertisement
      icmp[4] = 0x60;  // solicited, override
      std::memcpy(icmp + 8, q.target.data(), 16);
      icmp[24] = 2;  // target link-layer address option
      icmp[25] = 1;
      std::memcpy(icmp + 26, peer.data(), 6);
      const uint16_t sum = icmpv6_checksum(ip + 8, ip + 24, icmp, 32);
      icmp[2] = static_cast<uint8_t>(sum >> 8);
      icmp[3] = static_cast<uint8_t>(sum);
      f->len = static_cast<uint32_t>(l3 + 2 + 40 + 32);
    }
    answers_.push_back(f);
    queries_.erase(queries_.begin() + static_cast<ptrdiff_t>(i));
  }
}

Frame* XdpPort::alloc_frame() {
  uint32_t slot = 0;
  {
    SpinGuard g(free_lock_);
    if (free_.empty()) return nullptr;
    slot = free_.back();
    free_.pop_back();
  }
  Frame& f = frames_[slot];
  f.data = umem_ + size_t{slot} * kSlot + kHeadroom;
  f.len = 0;
  f.cap = kSlot - kHeadroom;
  return &f;
}

void XdpPort::free_frame(Frame* f) {
  release_slot(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(f->cookie)));
}

XdpPort::Stats XdpPort::stats() const {
  Stats s;
  s.rx_frames = rx_frames_;
  s.tx_frames = tx_frames_;
  s.rx_oversize = rx_oversize_;
  for (const Queue& q : impl_->queues) {
    xdp_statistics x{};
    socklen_t len = sizeof x;
    if (getsockopt(q.fd, SOL_XDP, XDP_STATISTICS, &x, &len) == 0)
      s.rx_dropped += x.rx_dropped + x.rx_ring_full + x.rx_fill_ring_empty_descs;
  }
  const int cpus = libbpf_num_possible_cpus();
  if (impl_->count_map >= 0 && cpus > 0) {
    std::vector<uint64_t> v(static_cast<size_t>(cpus));
    for (uint32_t k = 0; k < 2; ++k) {
      if (bpf_map_lookup_elem(impl_->count_map, &k, v.data()) != 0) continue;
      uint64_t sum = 0;
      for (uint64_t c : v) sum += c;
      (k == 0 ? s.steered : s.passed) = sum;
    }
  }
  return s;
}

}  // namespace uroce::drivers

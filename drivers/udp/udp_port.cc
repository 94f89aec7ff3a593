#include "udp/udp_port.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/filter.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "util/sys.h"
#include "wire/arp.h"
#include "wire/icrc.h"
#include "wire/ipv4.h"

namespace uroce::drivers {

namespace {

constexpr uint32_t kPayloadOff = 64;  // where a datagram lands in its buffer: headers in front
constexpr uint32_t kHdr4 = 14 + 20 + 8, kHdr6 = 14 + 40 + 8;
constexpr size_t kMsgs = 32;            // messages per sendmmsg / recvmmsg
constexpr size_t kMaxRun = 64;          // packets per GSO send (the kernel's UDP_MAX_SEGMENTS)
constexpr uint32_t kMaxGsoPayload = 65507;  // a UDP datagram's payload over IPv4
constexpr uint32_t kOverflow = 65536;   // a GRO datagram's bytes past its first buffer
constexpr uint32_t kMaxFrameMtu = 9000;  // the largest interface MTU used (RoCE's is 4096)
constexpr uint16_t kEthIpv4 = 0x0800, kEthIpv6 = 0x86DD, kEthArp = 0x0806, kEthVlan = 0x8100;
constexpr uint8_t kProtoUdp = 17, kProtoIcmpv6 = 58;
#ifndef UDP_NO_CHECK6_RX
constexpr int UDP_NO_CHECK6_RX = 102;
#endif

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void put_be16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

bool link_local(const wire::Ipv6Addr& a) { return a[0] == 0xfe && (a[1] & 0xc0) == 0x80; }

/// What a datagram arrived with, to write in front of it (and of each packet of a GRO run).
struct Meta {
  bool v6 = false;
  std::array<uint8_t, 16> src{}, dst{};  // IPv4 in the first 4 bytes
  uint16_t sport = 0, dport = 0;
  uint8_t tos = 0;  // IPv4 TOS / IPv6 traffic class (DSCP and ECN)
  uint8_t ttl = 64;
};

/// Writes Ethernet, IP and UDP headers in front of the `len` payload bytes at `payload`
/// (kHdr4 / kHdr6 bytes of room before it); returns the first header byte.
uint8_t* write_headers(uint8_t* payload, uint32_t len, const Meta& m, uint16_t ident,
                       const wire::MacAddr& dst_mac) {
  uint8_t* d = payload - (m.v6 ? kHdr6 : kHdr4);
  wire::Gid src_gid{};
  if (m.v6) {
    std::memcpy(src_gid.data(), m.src.data(), 16);
  } else {
    wire::Ipv4Addr a;
    std::memcpy(a.data(), m.src.data(), 4);
    src_gid = wire::ipv4_mapped_gid(a);
  }
  const wire::MacAddr src_mac = UdpPort::mac_for(src_gid);
  std::memcpy(d, dst_mac.data(), 6);
  std::memcpy(d + 6, src_mac.data(), 6);
  uint8_t* ip = d + 14;
  uint8_t* udp;
  if (m.v6) {
    put_be16(d + 12, kEthIpv6);
    ip[0] = static_cast<uint8_t>(0x60 | (m.tos >> 4));
    ip[1] = static_cast<uint8_t>(m.tos << 4);
    ip[2] = ip[3] = 0;  // flow label: not shown by the socket (the ICRC does not cover it)
    put_be16(ip + 4, 8 + len);
    ip[6] = kProtoUdp;
    ip[7] = m.ttl;
    std::memcpy(ip + 8, m.src.data(), 16);
    std::memcpy(ip + 24, m.dst.data(), 16);
    udp = ip + 40;
  } else {
    put_be16(d + 12, kEthIpv4);
    ip[0] = 0x45;
    ip[1] = m.tos;
    put_be16(ip + 2, 28 + len);
    put_be16(ip + 4, ident);
    put_be16(ip + 6, 0x4000);  // DF
    ip[8] = m.ttl;
    ip[9] = kProtoUdp;
    put_be16(ip + 10, 0);
    std::memcpy(ip + 12, m.src.data(), 4);
    std::memcpy(ip + 16, m.dst.data(), 4);
    put_be16(ip + 10, wire::internet_checksum(wire::Bytes(ip, 20)));
    udp = ip + 20;
  }
  put_be16(udp, m.sport);
  put_be16(udp + 2, m.dport);
  put_be16(udp + 4, 8 + len);
  put_be16(udp + 6, 0);
  return d;
}

/// The interface an address is on, and its MTU (0 if none has it).
uint32_t mtu_of(int fd, const UdpConfig& cfg, std::string* name) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return 0;
  uint32_t mtu = 0;
  for (ifaddrs* a = all; a != nullptr && mtu == 0; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    bool match = false;
    if (a->ifa_addr->sa_family == AF_INET && cfg.ipv4) {
      const auto* s = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      match = std::memcmp(&s->sin_addr, cfg.ipv4->data(), 4) == 0;
    } else if (a->ifa_addr->sa_family == AF_INET6 && cfg.ipv6) {
      const auto* s = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      match = std::memcmp(&s->sin6_addr, cfg.ipv6->data(), 16) == 0;
    }
    // 127.0.0.0/8 is loopback's whole (getifaddrs lists 127.0.0.1 only).
    if (!match && a->ifa_addr->sa_family == AF_INET && cfg.ipv4 && (*cfg.ipv4)[0] == 127)
      match = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (!match || std::strlen(a->ifa_name) >= IFNAMSIZ) continue;
    ifreq r{};
    std::memcpy(r.ifr_name, a->ifa_name, std::strlen(a->ifa_name));
    if (ioctl(fd, SIOCGIFMTU, &r) == 0 && r.ifr_mtu > 0) {
      mtu = static_cast<uint32_t>(r.ifr_mtu);
      *name = a->ifa_name;
    }
  }
  freeifaddrs(all);
  return mtu;
}

std::string addr_text(bool v6, const uint8_t* a, uint16_t port) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(v6 ? AF_INET6 : AF_INET, a, buf, sizeof buf);
  std::string s;
  if (v6) s += '[';
  s += buf;
  if (v6) s += ']';
  s += ':';
  s += std::to_string(port);
  return s;
}

}  // namespace

wire::MacAddr UdpPort::mac_for(const wire::Gid& ip) { return wire::socket_port_mac(ip); }

wire::Ipv4Addr UdpPort::loopback_candidate(uint32_t n) {
  if (n < 253) return {127, 0, 0, static_cast<uint8_t>(n + 2)};
  n -= 253;
  return {127, 0, static_cast<uint8_t>(1 + n / 254), static_cast<uint8_t>(1 + n % 254)};
}

std::unique_ptr<UdpPort> UdpPort::open(const UdpConfig& given, std::string* error) {
  const bool pick = given.loopback_auto && !given.ipv4 && !given.ipv6;
  UdpConfig cfg = given;
  if (pick) cfg.ipv4 = loopback_candidate(0);
  if (!cfg.ipv4 && !cfg.ipv6) {
    *error = "the udp port needs an address to bind: set ipv4 (or ipv6), e.g. ipv4 = 127.0.0.2";
    return nullptr;
  }
  if (cfg.ipv6 && link_local(*cfg.ipv6)) {
    *error = "the udp port binds global IPv6 addresses only (" + wire::to_string(*cfg.ipv6) +
             " is link-local): set ipv6 to a global one, or use ipv4";
    return nullptr;
  }
  std::unique_ptr<UdpPort> p(new UdpPort());
  p->gso_ = cfg.gso;
  const int one = 1;
  std::string ifname;
  for (int v6 = 0; v6 < 2; ++v6) {
    if (v6 ? !cfg.ipv6 : !cfg.ipv4) continue;
    const int fd = util::kernel_socket(v6 ? AF_INET6 : AF_INET,
                                       SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const std::string where = addr_text(v6 != 0, v6 ? cfg.ipv6->data() : cfg.ipv4->data(), cfg.udp_port);
    if (fd < 0) {
      *error = "udp socket for " + where + ": " + std::strerror(errno);
      return nullptr;
    }
    p->socks_[p->nsocks_++] = {fd, v6 != 0, cfg.udp_port};
    // DF on every packet, and with it identification 0 (what the engine's ICRC assumes).
    const int df = v6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO;
    bool ok = v6 ? setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0 &&
                       setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &df, sizeof df) == 0 &&
                       setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof one) == 0 &&
                       setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one) == 0 &&
                       setsockopt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &one, sizeof one) == 0
                 : setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df) == 0 &&
                       setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof one) == 0 &&
                       setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one) == 0 &&
                       setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &one, sizeof one) == 0;
    if (!ok) {
      *error = "udp socket for " + where + ": its options: " + std::strerror(errno);
      return nullptr;
    }
    // RNICs may send IPv6 RoCE with a zero UDP checksum (RoCEv2 allows it; the ICRC checks).
    if (v6) setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
    if (cfg.gso) setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one);
    util::size_socket_buffers(fd, 32 << 20, 4 << 20);  // room for a window of packets
    // Other processes of this user may join the address (share()).
    if (cfg.shareable && !pick && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
      *error = "udp socket for " + where + ": SO_REUSEPORT: " + std::strerror(errno);
      return nullptr;
    }
    sockaddr_storage ss{};
    socklen_t sl;
    if (v6) {
      auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
      s->sin6_family = AF_INET6;
      s->sin6_port = htons(cfg.udp_port);
      std::memcpy(&s->sin6_addr, cfg.ipv6->data(), 16);
      sl = sizeof *s;
    } else {
      auto* s = reinterpret_cast<sockaddr_in*>(&ss);
      s->sin_family = AF_INET;
      s->sin_port = htons(cfg.udp_port);
      std::memcpy(&s->sin_addr, cfg.ipv4->data(), 4);
      sl = sizeof *s;
    }
    int rc = bind(fd, reinterpret_cast<sockaddr*>(&ss), sl);
    // Taken by another process: the next candidate (the bind itself is the claim, so two
    // processes starting at once never both get one).
    for (uint32_t n = 1; pick && rc != 0 && errno == EADDRINUSE && n < kLoopbackCandidates; ++n) {
      cfg.ipv4 = loopback_candidate(n);
      std::memcpy(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, cfg.ipv4->data(), 4);
      rc = bind(fd, reinterpret_cast<sockaddr*>(&ss), sl);
    }
    if (rc != 0) {
      const int e = errno;
      if (pick && e == EADDRINUSE) {
        *error = "no free loopback address from 127.0.0.2 to 127.0.15.254 (that many uroce "
                 "processes?): give this one its own with ipv4 = ...";
        return nullptr;
      }
      *error = e == EADDRINUSE
                   ? where + " is taken by a program that does not share it (the kernel's " +
                         "rdma_rxe? another user's uroce?): give this device another address"
               : e == EADDRNOTAVAIL
                   ? std::string(v6 ? "ipv6 " : "ipv4 ") + where.substr(0, where.rfind(':')) +
                         " is no address of this host: set it to one that `ip addr` lists"
                   : "udp socket: bind " + where + ": " + std::strerror(e);
      return nullptr;
    }
  }
  p->cfg_ = cfg;
  p->cfg_.shareable = cfg.shareable && !pick;
  p->open_senders(cfg.source_ports);
  if (p->source_ports_.empty()) p->source_ports_ = {cfg.udp_port};
  p->mtu_ = mtu_of(p->socks_[0].fd, cfg, &ifname);
  if (p->mtu_ == 0) p->mtu_ = 1500;
  p->max_frame_ = std::min(p->mtu_, kMaxFrameMtu) + 14;
  p->mac_ = mac_for(cfg.ipv4 ? wire::ipv4_mapped_gid(*cfg.ipv4) : *cfg.ipv6);
  // Frames: a buffer each, with room for the headers written in front of a datagram.
  p->pool_.init(cfg.frames, kPayloadOff, p->max_frame_);
  p->ready_.reserve(cfg.frames);
  p->spare_.reserve(kMsgs);
  if (cfg.gso) p->overflow_.resize(size_t{kOverflow} * kMsgs);
  // One descriptor to sleep on: the sockets and the answers' eventfd.
  p->answers_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  p->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (p->answers_fd_ < 0 || p->epoll_fd_ < 0) {
    *error = std::string("udp port: its wait set: ") + std::strerror(errno);
    return nullptr;
  }
  for (size_t i = 0; i <= p->nsocks_; ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    const int fd = i < p->nsocks_ ? p->socks_[i].fd : p->answers_fd_;
    ev.data.fd = fd;
    epoll_ctl(p->epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  p->wait_fd_ = p->epoll_fd_;
  std::string bound;
  if (cfg.ipv4) bound += addr_text(false, cfg.ipv4->data(), cfg.udp_port);
  if (cfg.ipv6) bound += (bound.empty() ? "" : " and ") + addr_text(true, cfg.ipv6->data(), cfg.udp_port);
  p->description_ =
      "udp sockets on " + bound + " (no privileges; the kernel writes IP and UDP headers" +
      (ifname.empty() ? "" : "; interface " + ifname + ", MTU " + std::to_string(p->mtu_)) + "); " +
      (cfg.gso ? "runs of packets sent as one UDP GSO send of up to " + std::to_string(kMaxRun) +
                     " packets, received with UDP_GRO"
               : "one packet per datagram (gso = no)") +
      "; " +
      (p->senders_.empty() ? std::string("every packet from port ") + std::to_string(cfg.udp_port)
                           : "QPs spread over " + std::to_string(p->source_ports_.size()) +
                                 " source ports (send-only sockets)") +
      "; " + std::to_string(cfg.frames) + " frames of " + std::to_string(p->max_frame_) +
      " B; Ethernet addresses made up from IP addresses, neighbours answered by the port";
  return p;
}

int UdpPort::open_sender(bool v6, uint16_t port, uint16_t* bound) {
  // Bound to the port's address of that family and `port` (0: the kernel picks a free one),
  // with the receiving socket's DF setting (identification 0); it never receives: a filter
  // drops everything sent to it. -1 and errno on failure.
  static const sock_filter kDropAll[] = {{BPF_RET | BPF_K, 0, 0, 0}};
  const sock_fprog drop{1, const_cast<sock_filter*>(kDropAll)};
  const int one = 1, df = v6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO;
  const int fd = util::kernel_socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t sl;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    std::memcpy(&a->sin6_addr, cfg_.ipv6->data(), 16);
    sl = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    std::memcpy(&a->sin_addr, cfg_.ipv4->data(), 4);
    sl = sizeof *a;
  }
  const bool ok = (v6 ? setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0 &&
                            setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &df, sizeof df) == 0
                      : setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &df, sizeof df) == 0) &&
                  setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &drop, sizeof drop) == 0 &&
                  bind(fd, reinterpret_cast<sockaddr*>(&ss), sl) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0;
  if (!ok) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  util::size_socket_buffers(fd, 4096, 4 << 20);
  *bound = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

void UdpPort::open_senders(uint32_t n) {
  // With both families bound, one port number for a socket of each (the engine picks a QP's
  // port without asking its family): a number the second family finds taken is given back
  // and another tried. Fewer than n (an error): the QPs share the ones there are.
  const bool both = nsocks_ == 2;
  for (uint32_t k = 0, tries = 0; k < n && tries < 4 * n; ++tries) {
    uint16_t port = 0;
    const int a = open_sender(socks_[0].v6, 0, &port);
    if (a < 0) return;
    const int b = both ? open_sender(socks_[1].v6, port, &port) : -1;
    if (both && b < 0) {
      const int e = errno;
      close(a);
      if (e == EADDRINUSE) continue;
      return;
    }
    senders_.push_back({a, socks_[0].v6, port});
    if (b >= 0) senders_.push_back({b, socks_[1].v6, port});
    source_ports_.push_back(port);
    ++k;
  }
}

const UdpPort::Sock* UdpPort::sender(bool v6, uint16_t port) const {
  for (size_t k = 0; k < nsocks_; ++k)
    if (socks_[k].v6 == v6 && socks_[k].port == port) return &socks_[k];
  for (const Sock& s : senders_)
    if (s.port == port && s.v6 == v6) return &s;
  return nullptr;
}

namespace {

/// The abstract Unix name (no file) of the process owning `block` of QPNs on the shared
/// address `where` ("127.0.0.1:4791").
socklen_t share_name(const std::string& where, uint32_t block, sockaddr_un* a) {
  *a = {};
  a->sun_family = AF_UNIX;
  const std::string name = "uroce-udp-share:" + where + ":" + std::to_string(block);
  const size_t len = std::min(name.size(), sizeof a->sun_path - 1);
  std::memcpy(a->sun_path + 1, name.data(), len);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

}  // namespace

bool UdpPort::share(uint32_t first_qpn, uint32_t span, std::string* error) {
  if (!cfg_.shareable || span == 0 || share_fd_ >= 0) return true;
  qpn_span_ = span;
  qpn_base_ = first_qpn % span;
  block_ = first_qpn / span;
  const Sock& main = socks_[0];
  const std::string where =
      addr_text(main.v6, main.v6 ? cfg_.ipv6->data() : cfg_.ipv4->data(), cfg_.udp_port);
  // The group's program: the socket whose index is the destination QP's block. A QPN below
  // the first block's (QP1) wraps to an index past the group: the kernel then picks by hash.
  const sock_filter steer[] = {
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, 4},  // the UDP payload's bytes 4-7: BTH's destination QP
      {BPF_ALU | BPF_AND | BPF_K, 0, 0, 0xFFFFFF},
      {BPF_ALU | BPF_SUB | BPF_K, 0, 0, qpn_base_},
      {BPF_ALU | BPF_DIV | BPF_K, 0, 0, span},
      {BPF_RET | BPF_A, 0, 0, 0},
  };
  const sock_fprog prog{static_cast<unsigned short>(std::size(steer)), const_cast<sock_filter*>(steer)};
  for (size_t k = 0; k < nsocks_; ++k)
    if (setsockopt(socks_[k].fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog) != 0) {
      *error = "udp port: sharing " + where + ": SO_ATTACH_REUSEPORT_CBPF: " + std::strerror(errno);
      return false;
    }
  for (uint32_t b = 0; b < kShareBlocks; ++b) share_name_lens_[b] = share_name(where, b, &share_names_[b]);
  const int fd = util::kernel_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || block_ >= kShareBlocks ||
      bind(fd, reinterpret_cast<const sockaddr*>(&share_names_[block_]), share_name_lens_[block_]) != 0) {
    *error = "udp port: sharing " + where + ": naming QPN block " + std::to_string(block_) + ": " +
             std::strerror(errno);
    if (fd >= 0) close(fd);
    return false;
  }
  util::size_socket_buffers(fd, 4 << 20, 4 << 20);
  waiting_owner_.reserve(cfg_.frames);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  share_fd_ = fd;
  return true;
}

int UdpPort::pass_on(const Frame* f, uint32_t block) {
  if (block >= kShareBlocks || block == block_) return ENOENT;
  if (sendto(share_fd_, f->data, f->len, pass_flags_,
             reinterpret_cast<const sockaddr*>(&share_names_[block]),
             share_name_lens_[block]) == static_cast<ssize_t>(f->len))
    return 0;
  const int e = errno;
  if (e == EAGAIN && pass_flags_ == 0) pass_flags_ = MSG_DONTWAIT;  // leaving: waited once, enough
  return e;
}

void UdpPort::pass_on_later(Frame* f, uint32_t block) {
  // The owner's queue is full (a Unix datagram socket holds a few): kept, and offered again
  // before anything else is received (the engine is kept awake meanwhile).
  const int e = pass_on(f, block);
  if (e == 0) {
    ++rx_forwarded_;
  } else if (e == EAGAIN && waiting_owner_.size() < waiting_owner_.capacity()) {
    waiting_owner_.push_back({f, block});
    signal_ready();
    return;
  } else {
    ++rx_unowned_;  // no process has the block (or it went away)
  }
  free_frame(f);
}

void UdpPort::retry_passing() {
  size_t k = 0;
  for (; k < waiting_owner_.size(); ++k) {
    const auto [f, block] = waiting_owner_[k];
    const int e = pass_on(f, block);
    if (e == EAGAIN) break;  // still full: the rest wait too (in order)
    ++(e == 0 ? rx_forwarded_ : rx_unowned_);
    free_frame(f);
  }
  waiting_owner_.erase(waiting_owner_.begin(), waiting_owner_.begin() + static_cast<std::ptrdiff_t>(k));
  if (!waiting_owner_.empty()) signal_ready();
}

void UdpPort::route(size_t from) {
  // ready_[from..]: just received from the network, on an address other processes share.
  size_t keep = from;
  for (size_t k = from; k < ready_.size(); ++k) {
    Frame* f = ready_[k];
    const uint32_t hdr = f->len >= 14 && be16(f->data + 12) == kEthIpv6 ? kHdr6 : kHdr4;
    if (f->len >= hdr + 8) {
      const uint8_t* bth = f->data + hdr;
      const uint32_t qpn = uint32_t{bth[5]} << 16 | uint32_t{bth[6]} << 8 | bth[7];
      if (qpn < qpn_base_) {  // QP1: the CM's, for whichever process it concerns (resent if lost)
        for (uint32_t b = 0; b < kShareBlocks; ++b) {
          const int e = pass_on(f, b);
          rx_forwarded_ += e == 0;
          if (e != EAGAIN) continue;  // passed on, or no process has block b
          Frame* c = waiting_owner_.size() < waiting_owner_.capacity() ? alloc_frame() : nullptr;
          if (c == nullptr) continue;  // lost, as on a wire: the CM resends
          c->data = SharedPool::buffer(c) + (f->data - SharedPool::buffer(f));
          std::memcpy(c->data, f->data, f->len);
          c->len = f->len;
          waiting_owner_.push_back({c, b});
          signal_ready();
        }
      } else if (const uint32_t owner = (qpn - qpn_base_) / qpn_span_; owner != block_) {
        if (waiting_owner_.empty()) {
          pass_on_later(f, owner);
        } else if (waiting_owner_.size() < waiting_owner_.capacity()) {
          waiting_owner_.push_back({f, owner});  // behind those already waiting, in order
        } else {
          ++rx_unowned_;
          free_frame(f);
        }
        continue;
      }
    }
    ready_[keep++] = f;
  }
  ready_.resize(keep);
}

bool UdpPort::receive_passed() {
  // Frames another process sharing the address passed on: whole, as its port made them.
  bool came = false;
  while (ready_.size() < ready_.capacity()) {
    Frame* f = alloc_frame();
    if (f == nullptr) return came;
    uint8_t* at = SharedPool::buffer(f) + kPayloadOff - kHdr6;
    const ssize_t n = recv(share_fd_, at, max_frame_, MSG_DONTWAIT);
    if (n <= 0) {
      free_frame(f);
      return came;
    }
    came = true;
    f->data = at;
    f->len = static_cast<uint32_t>(n);
    f->cap = max_frame_;
    ready_.push_back(f);
  }
  return came;
}

void UdpPort::leave() {
  if (share_fd_ < 0 || left_) return;
  left_ = true;
  const int fl = fcntl(share_fd_, F_GETFL);
  const timeval most{0, 100 * 1000};
  if (fl >= 0 && fcntl(share_fd_, F_SETFL, fl & ~O_NONBLOCK) == 0 &&
      setsockopt(share_fd_, SOL_SOCKET, SO_SNDTIMEO, &most, sizeof most) == 0)
    pass_flags_ = 0;
  auto drop_own = [this] {  // this process's frames: nobody will take them
    for (size_t k = ready_head_; k < ready_.size(); ++k) free_frame(ready_[k]);
    ready_.clear();
    ready_head_ = 0;
  };
  drop_own();
  retry_passing();
  for (size_t i = 0; i < nsocks_; ++i) {
    while (receive(socks_[i]) > 0) {  // route() passes on what concerns others
      drop_own();
      retry_passing();
    }
    drop_own();
    // Out of the group now (a datagram between the last receive and here is the only loss):
    // the descriptor stays valid for whoever still holds it.
    const int stand_in = util::kernel_socket(socks_[i].v6 ? AF_INET6 : AF_INET,
                                             SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (stand_in >= 0) {
      dup3(stand_in, socks_[i].fd, O_CLOEXEC);
      close(stand_in);
    }
  }
  retry_passing();
  pass_flags_ = MSG_DONTWAIT;
}

UdpPort::~UdpPort() {
  if (share_fd_ >= 0) close(share_fd_);
  for (const Sock& s : senders_) close(s.fd);
  for (size_t i = 0; i < nsocks_; ++i) close(socks_[i].fd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (answers_fd_ >= 0) close(answers_fd_);
}

Frame* UdpPort::alloc_frame() { return pool_.alloc(); }

void UdpPort::free_frame(Frame* f) { pool_.free(f); }

void UdpPort::answer_neighbor(const Frame* f) {
  // An ARP request or an IPv6 neighbour solicitation from the engine: answered as if the
  // asked-for address had the Ethernet address mac_for gives it (the kernel routes the
  // datagrams; the Ethernet addresses only have to be consistent).
  const uint8_t* d = f->data;
  uint32_t l2 = 14;
  if (f->len >= 18 && be16(d + 12) == kEthVlan) l2 = 18;
  const uint16_t type = be16(d + l2 - 2);
  Frame* r = alloc_frame();
  if (r == nullptr) return;
  uint8_t* o = r->data;
  std::memcpy(o, d + 6, 6);  // to the asker
  if (type == kEthArp && f->len >= l2 + wire::ArpView::kLen) {
    wire::ArpRepr a;
    if (wire::ArpRepr::parse(wire::Bytes(d + l2, f->len - l2), a) != wire::ParseError::kOk ||
        a.oper != wire::ArpRepr::kRequest) {
      free_frame(r);
      return;
    }
    wire::ArpRepr reply;
    reply.oper = wire::ArpRepr::kReply;
    reply.sha = mac_for(wire::ipv4_mapped_gid(a.tpa));
    reply.spa = a.tpa;
    reply.tha = a.sha;
    reply.tpa = a.spa;
    std::memcpy(o + 6, reply.sha.data(), 6);
    put_be16(o + 12, kEthArp);
    reply.emit(wire::MutBytes(o + 14, wire::ArpView::kLen));
    r->len = 60;
    std::memset(o + 14 + wire::ArpView::kLen, 0, r->len - 14 - wire::ArpView::kLen);
  } else if (type == kEthIpv6 && f->len >= l2 + 40 + 24 && d[l2 + 6] == kProtoIcmpv6 &&
             d[l2 + 40] == 135) {
    // A neighbour advertisement (RFC 4861 4.4): solicited + override, from the target, with
    // its (made-up) link-layer address.
    wire::Gid target;
    std::memcpy(target.data(), d + l2 + 40 + 8, 16);
    const wire::MacAddr mac = mac_for(target);
    std::memcpy(o + 6, mac.data(), 6);
    put_be16(o + 12, kEthIpv6);
    uint8_t* ip = o + 14;
    constexpr uint32_t kIcmp = 32;
    std::memset(ip, 0, 40 + kIcmp);
    ip[0] = 0x60;
    put_be16(ip + 4, kIcmp);
    ip[6] = kProtoIcmpv6;
    ip[7] = 255;
    std::memcpy(ip + 8, target.data(), 16);
    std::memcpy(ip + 24, d + l2 + 8, 16);  // the solicitation's source
    uint8_t* icmp = ip + 40;
    icmp[0] = 136;
    icmp[4] = 0x60;
    std::memcpy(icmp + 8, target.data(), 16);
    icmp[24] = 2;  // target link-layer address
    icmp[25] = 1;
    std::memcpy(icmp + 26, mac.data(), 6);
    uint8_t pseudo[40 + kIcmp] = {};
    std::memcpy(pseudo, ip + 8, 32);
    pseudo[35] = kIcmp;
    pseudo[39] = kProtoIcmpv6;
    std::memcpy(pseudo + 40, icmp, kIcmp);
    put_be16(icmp + 2, wire::internet_checksum(wire::Bytes(pseudo, sizeof pseudo)));
    r->len = 14 + 40 + kIcmp;
  } else {
    free_frame(r);
    return;
  }
  ++answered_;
  ready_.push_back(r);
  signal_ready();
}

void UdpPort::signal_ready() {
  if (!answers_signalled_) {  // the engine may be about to sleep on wait_fd
    const uint64_t one = 1;
    if (write(answers_fd_, &one, sizeof one) == sizeof one) answers_signalled_ = true;
  }
}

void UdpPort::cut(Frame* head, const uint8_t* overflow, uint32_t len, uint32_t mss, uint32_t hdr) {
  // A GRO datagram of `len` payload bytes: packets of mss bytes (the last shorter), the first
  // in place in `head` (already given its headers for mss bytes), the others copied out of
  // head's buffer past it and the overflow behind it. Packet i gets identification i, as the
  // kernel gives the segments of a UDP GSO send (wire/icrc.h: a peer's others are solved for).
  const uint32_t in_head = max_frame_ - kHdr6;
  Meta m;
  const uint8_t* h = head->data;
  const uint8_t* payload = h + hdr;
  m.v6 = hdr == kHdr6;
  const uint8_t* ip = h + 14;
  if (m.v6) {
    m.tos = static_cast<uint8_t>((ip[0] << 4) | (ip[1] >> 4));
    m.ttl = ip[7];
    std::memcpy(m.src.data(), ip + 8, 16);
    std::memcpy(m.dst.data(), ip + 24, 16);
  } else {
    m.tos = ip[1];
    m.ttl = ip[8];
    std::memcpy(m.src.data(), ip + 12, 4);
    std::memcpy(m.dst.data(), ip + 16, 4);
  }
  const uint8_t* udp = h + hdr - 8;
  m.sport = be16(udp);
  m.dport = be16(udp + 2);
  const uint32_t segs = (len + mss - 1) / mss;
  for (uint32_t i = 1; i < segs; ++i) {
    Frame* g = alloc_frame();
    if (g == nullptr) {
      rx_no_frame_ += segs - i;
      return;
    }
    const uint32_t off = i * mss, n = std::min(mss, len - off);
    uint8_t* dst = SharedPool::buffer(g) + kPayloadOff;
    const uint32_t from_head = off < in_head ? std::min(n, in_head - off) : 0;
    std::memcpy(dst, payload + off, from_head);
    if (n > from_head) std::memcpy(dst + from_head, overflow + (off + from_head - in_head), n - from_head);
    g->data = write_headers(dst, n, m, static_cast<uint16_t>(i), mac_);
    g->len = hdr + n;
    ready_.push_back(g);
  }
}

size_t UdpPort::receive(const Sock& s) {
  mmsghdr msgs[kMsgs];
  iovec iov[kMsgs][2];
  sockaddr_in6 names[kMsgs];
  alignas(cmsghdr) uint8_t ctl[kMsgs][256];
  Frame* fs[kMsgs];
  const uint32_t room = max_frame_ - kHdr6;  // payload bytes a frame takes (either family)
  const size_t from = ready_.size();
  size_t want = 0;
  const size_t asked = std::min<size_t>(kMsgs, ready_.capacity() - ready_.size());
  // Frames stay with the port between calls (spare_): a poll that finds nothing, most of a
  // busy poller's, takes none from the pool and gives none back (each a locked operation).
  for (; want < asked; ++want) {
    Frame* f = nullptr;
    if (!spare_.empty()) {
      f = spare_.back();
      spare_.pop_back();
    } else if ((f = alloc_frame()) == nullptr) {
      break;
    }
    fs[want] = f;
    iov[want][0] = {SharedPool::buffer(f) + kPayloadOff, room};
    if (gso_) iov[want][1] = {overflow_.data() + size_t{kOverflow} * want, kOverflow};
    msgs[want] = {};
    msgs[want].msg_hdr.msg_iov = iov[want];
    msgs[want].msg_hdr.msg_iovlen = gso_ ? 2 : 1;
    msgs[want].msg_hdr.msg_name = &names[want];
    msgs[want].msg_hdr.msg_namelen = sizeof names[want];
    msgs[want].msg_hdr.msg_control = ctl[want];
    msgs[want].msg_hdr.msg_controllen = sizeof ctl[want];
  }
  if (want == 0) return 0;
  const int got = recvmmsg(s.fd, msgs, static_cast<unsigned>(want), MSG_DONTWAIT, nullptr);
  const size_t n = got > 0 ? static_cast<size_t>(got) : 0;
  for (size_t k = want; k > n; --k) spare_.push_back(fs[k - 1]);  // the first unused on top
  for (size_t k = 0; k < n; ++k) {
    Frame* f = fs[k];
    const msghdr& h = msgs[k].msg_hdr;
    const uint32_t len = msgs[k].msg_len;
    Meta m;
    m.v6 = s.v6;
    m.dport = cfg_.udp_port;
    if (s.v6) {
      std::memcpy(m.src.data(), &names[k].sin6_addr, 16);
      m.sport = ntohs(names[k].sin6_port);
      std::memcpy(m.dst.data(), cfg_.ipv6->data(), 16);
    } else {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(&names[k]);
      std::memcpy(m.src.data(), &sin->sin_addr, 4);
      m.sport = ntohs(sin->sin_port);
      std::memcpy(m.dst.data(), cfg_.ipv4->data(), 4);
    }
    uint32_t gro = 0;
    for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c))) {
      const uint8_t* v = CMSG_DATA(c);
      int iv = 0;
      if (c->cmsg_len >= CMSG_LEN(sizeof(int))) std::memcpy(&iv, v, sizeof iv);
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
        m.tos = v[0];
      } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
        m.ttl = static_cast<uint8_t>(iv);
      } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
        in_pktinfo pi;
        std::memcpy(&pi, v, sizeof pi);
        std::memcpy(m.dst.data(), &pi.ipi_addr, 4);
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
        m.tos = static_cast<uint8_t>(iv);
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) {
        m.ttl = static_cast<uint8_t>(iv);
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
        in6_pktinfo pi;
        std::memcpy(&pi, v, sizeof pi);
        std::memcpy(m.dst.data(), &pi.ipi6_addr, 16);
      } else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
        gro = static_cast<uint32_t>(iv);
      } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
        uint32_t drops;
        std::memcpy(&drops, v, sizeof drops);
        kernel_drops_[s.v6 ? 1 : 0].store(drops);  // the socket's count so far
      }
    }
    uint8_t* payload = SharedPool::buffer(f) + kPayloadOff;
    const uint32_t hdr = s.v6 ? kHdr6 : kHdr4;
    const bool run = gro != 0 && len > gro;
    if ((h.msg_flags & MSG_TRUNC) != 0 || len == 0 || (!run && len > room) || (run && gro > room)) {
      ++rx_oversize_;
      free_frame(f);
      continue;
    }
    const uint32_t first = run ? gro : len;
    f->data = write_headers(payload, first, m, 0, mac_);
    f->len = hdr + first;
    f->cap = max_frame_;
    ready_.push_back(f);
    if (run) {
      ++rx_gro_;
      cut(f, overflow_.data() + size_t{kOverflow} * k, len, gro, hdr);
    }
  }
  if (share_fd_ >= 0) route(from);
  return n;
}

uint16_t UdpPort::rx_burst(uint64_t, std::span<Frame*> out) {
  uint16_t n = 0;
  auto take = [&] {
    while (n < out.size() && ready_head_ < ready_.size()) out[n++] = ready_[ready_head_++];
    if (ready_head_ == ready_.size()) {
      ready_.clear();
      ready_head_ = 0;
    }
  };
  if (!waiting_owner_.empty()) retry_passing();
  take();
  if (answers_signalled_ && ready_.empty() && waiting_owner_.empty()) {
    uint64_t v;
    if (read(answers_fd_, &v, sizeof v) == sizeof v) answers_signalled_ = false;
  }
  if (ready_head_ > 0) {  // what is left first, so the queue stays within its reserve
    ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(ready_head_));
    ready_head_ = 0;
  }
  // Each socket once per burst while there is room (a quiet socket costs one system call).
  for (size_t tried = 0; tried < nsocks_ && n + (ready_.size() - ready_head_) < out.size(); ++tried) {
    const Sock& s = socks_[next_sock_];
    next_sock_ = (next_sock_ + 1) % nsocks_;
    receive(s);
  }
  // What others passed on is the exception: looked for every 8th burst (wait_fd stays readable
  // while some waits), and in every burst while some comes.
  if (share_fd_ >= 0 && (passed_came_ || ++share_bursts_ % 8 == 0)) passed_came_ = receive_passed();
  const uint16_t before = n;
  take();
  rx_frames_ += n - before;
  return n;
}

uint16_t UdpPort::tx_burst(uint64_t, std::span<Frame* const> frames) {
  mmsghdr msgs[kMsgs];
  iovec iov[kMsgs * 4];
  sockaddr_in6 names[kMsgs];
  alignas(cmsghdr) uint8_t ctl[kMsgs][CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint16_t))];
  uint16_t members[kMsgs];
  int fds[kMsgs];
  size_t i = 0, m = 0, v = 0, taken = 0;
  // Messages are built for a run of data frames; a frame of anything else (an ARP request,
  // a solicitation, what cannot be sent) is dealt with when it comes first.
  while (i < frames.size() && m < kMsgs) {
    Frame* f = frames[i];
    const uint8_t* d = f->data;
    uint32_t l2 = 14;
    if (f->len >= 18 && be16(d + 12) == kEthVlan) l2 = 18;
    const uint16_t type = f->len >= l2 ? be16(d + l2 - 2) : 0;
    const bool v6 = type == kEthIpv6;
    uint32_t l4 = 0;
    bool data = false;
    if (type == kEthIpv4 && f->len >= l2 + 20 && (d[l2] >> 4) == 4 && d[l2 + 9] == kProtoUdp) {
      l4 = l2 + (d[l2] & 0x0Fu) * 4;
      data = f->len >= l4 + 8;
    } else if (v6 && f->len >= l2 + 48 && d[l2 + 6] == kProtoUdp) {
      l4 = l2 + 40;
      wire::Ipv6Addr dst;
      std::memcpy(dst.data(), d + l2 + 24, 16);
      data = !link_local(dst);
    }
    // The socket bound to the frame's source port (the ICRC covers it).
    const Sock* sock = data ? sender(v6, be16(d + l4)) : nullptr;
    if (sock == nullptr) {
      if (m > 0) break;
      if (type == kEthArp || (v6 && f->len >= l2 + 41 && d[l2 + 6] == kProtoIcmpv6)) {
        answer_neighbor(f);
      } else {
        ++tx_dropped_;
      }
      free_frame(f);
      ++i;
      ++taken;
      continue;
    }
    // The destination, and the DSCP/ECN byte, from the frame.
    const uint8_t tos = v6 ? static_cast<uint8_t>((d[l2] << 4) | (d[l2 + 1] >> 4)) : d[l2 + 1];
    names[m] = {};
    socklen_t nl;
    if (v6) {
      names[m].sin6_family = AF_INET6;
      names[m].sin6_port = htons(be16(d + l4 + 2));
      std::memcpy(&names[m].sin6_addr, d + l2 + 24, 16);
      nl = sizeof(sockaddr_in6);
    } else {
      auto* s = reinterpret_cast<sockaddr_in*>(&names[m]);
      s->sin_family = AF_INET;
      s->sin_port = htons(be16(d + l4 + 2));
      std::memcpy(&s->sin_addr, d + l2 + 16, 4);
      nl = sizeof(sockaddr_in);
    }
    const uint32_t hdr = l4 + 8;
    const uint32_t mss = f->len - hdr;
    size_t run = 1;
    uint32_t payload = mss;
    // A run: the next frames to the same place with the same headers but for lengths,
    // checksums and identification, every one but the last mss long.
    if (gso_) {
      const Frame* prev = f;
      while (i + run < frames.size() && run < kMaxRun && v + run < std::size(iov)) {
        const Frame* g = frames[i + run];
        if (g->len <= hdr || g->len - hdr > mss || prev->len != f->len ||
            payload + (g->len - hdr) > kMaxGsoPayload ||
            std::memcmp(g->data, d, l2) != 0 ||
            (v6 ? std::memcmp(g->data + l2, d + l2, 4) != 0 ||
                      std::memcmp(g->data + l2 + 6, d + l2 + 6, 34) != 0
                : std::memcmp(g->data + l2, d + l2, 2) != 0 ||
                      std::memcmp(g->data + l2 + 6, d + l2 + 6, 4) != 0 ||
                      std::memcmp(g->data + l2 + 12, d + l2 + 12, 8) != 0) ||
            std::memcmp(g->data + l4, d + l4, 4) != 0)
          break;
        payload += g->len - hdr;
        prev = g;
        ++run;
      }
    }
    if (v + run > std::size(iov)) break;
    msgs[m] = {};
    msghdr& mh = msgs[m].msg_hdr;
    mh.msg_name = &names[m];
    mh.msg_namelen = nl;
    mh.msg_iov = &iov[v];
    mh.msg_iovlen = run;
    for (size_t j = 0; j < run; ++j) {
      Frame* g = frames[i + j];
      if (!v6 && j > 0) {
        // Segment j leaves with identification j: patch it into the ICRC (and the header,
        // for whoever reads the frame after us).
        const uint32_t l3_len = g->len - l2 - static_cast<uint32_t>(wire::kIcrcLen);
        if (l3_len != shift_len_) {
          shift_len_ = l3_len;
          shift_ = wire::icrc_shift(l3_len - 6);
        }
        const uint16_t was = be16(g->data + l2 + 4);
        const uint16_t x = static_cast<uint16_t>(was ^ j);
        const uint8_t diff[2] = {static_cast<uint8_t>(x >> 8), static_cast<uint8_t>(x)};
        uint8_t* icrc = g->data + g->len - wire::kIcrcLen;
        wire::store_icrc(icrc, wire::load_icrc(icrc) ^ wire::icrc_delta(wire::Bytes(diff, 2), shift_));
        put_be16(g->data + l2 + 4, static_cast<uint16_t>(j));
      }
      iov[v++] = {g->data + hdr, g->len - hdr};
    }
    mh.msg_control = ctl[m];
    size_t cl = 0;
    cmsghdr* c = reinterpret_cast<cmsghdr*>(ctl[m]);
    c->cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
    c->cmsg_type = v6 ? IPV6_TCLASS : IP_TOS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    const int t = tos;
    std::memcpy(CMSG_DATA(c), &t, sizeof t);
    cl += CMSG_SPACE(sizeof(int));
    if (run > 1) {
      c = reinterpret_cast<cmsghdr*>(ctl[m] + cl);
      c->cmsg_level = IPPROTO_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t seg = static_cast<uint16_t>(mss);
      std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
      cl += CMSG_SPACE(sizeof(uint16_t));
    }
    mh.msg_controllen = cl;
    members[m] = static_cast<uint16_t>(run);
    fds[m] = sock->fd;
    ++m;
    i += run;
  }
  // Consecutive messages on one socket go in one sendmmsg.
  size_t k = 0;
  while (k < m) {
    size_t e = k + 1;
    while (e < m && fds[e] == fds[k]) ++e;
    const int sent = sendmmsg(fds[k], msgs + k, static_cast<unsigned>(e - k), MSG_DONTWAIT);
    size_t done = 0;
    if (sent > 0) {
      done = static_cast<size_t>(sent);
    } else if ((errno == EIO || errno == EINVAL) && members[k] > 1) {
      gso_ = false;  // no UDP GSO on this route (or kernel): one packet per datagram from now
      break;
    } else if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) {
      break;
    } else {
      done = 1;  // no route, refused: this message is lost, as on a wire
      tx_dropped_ += members[k];
    }
    for (size_t j = k; j < k + done; ++j) {
      if (sent > 0) {
        tx_frames_ += members[j];
        if (members[j] > 1) ++tx_gso_;
      }
      for (size_t q = 0; q < members[j]; ++q) free_frame(frames[taken + q]);
      taken += members[j];
    }
    if (k + done < e) break;  // the socket is full: the rest stay with the caller
    k = e;
  }
  return static_cast<uint16_t>(taken);
}

UdpPort::Stats UdpPort::stats() const {
  Stats s;
  s.rx_frames = rx_frames_;
  s.tx_frames = tx_frames_;
  s.rx_dropped = kernel_drops_[0].load() + kernel_drops_[1].load() + rx_no_frame_;
  s.rx_oversize = rx_oversize_;
  s.rx_gro = rx_gro_;
  s.tx_gso = tx_gso_;
  s.tx_dropped = tx_dropped_;
  s.neighbors_answered = answered_;
  s.rx_forwarded = rx_forwarded_;
  s.rx_unowned = rx_unowned_;
  return s;
}

}  // namespace uroce::drivers

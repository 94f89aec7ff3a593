// The scripted side's link (a packet socket on the DUT's link, with a UDP socket on 4791 that
// keeps the kernel from answering the DUT's RoCE with ICMP). Internal to uroce-conform.
#pragma once

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "conform.h"
#include "packet/packet_port.h"
#include "pcap/pcap_file.h"

namespace uroce::conform {

inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

inline std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

class Link {
 public:
  static std::unique_ptr<Link> open(const Options& opt, std::string* error) {
    auto link = std::unique_ptr<Link>(new Link);
    drivers::PacketConfig pc;
    pc.iface = opt.iface;
    pc.gso = false;
    pc.frames = 512;
    link->port_ = drivers::PacketPort::open(pc, error);
    if (!link->port_) return nullptr;
    link->mac_ = link->port_->mac();
    std::string ip = opt.local_ip;
    if (ip.empty()) {
      ifaddrs* ifs = nullptr;
      if (getifaddrs(&ifs) == 0) {
        for (ifaddrs* i = ifs; i; i = i->ifa_next)
          if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && opt.iface == i->ifa_name) {
            char b[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, b, sizeof b);
            ip = b;
            break;
          }
        freeifaddrs(ifs);
      }
    }
    const auto a = wire::parse_ipv4(ip);
    if (!a) {
      *error = opt.iface + " has no IPv4 address: give one with --ip (the DUT's QPs are pointed at it)";
      return nullptr;
    }
    link->ip_ = *a;
    // The kernel sees the DUT's RoCE frames for our address too: a UDP socket on 4791 keeps it
    // from answering them with ICMP port unreachable (what it queues is never read; when full,
    // the kernel drops quietly).
    link->absorb_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(4791);
    memcpy(&sa.sin_addr, a->data(), 4);
    int small = 4096;
    setsockopt(link->absorb_, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    if (bind(link->absorb_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      close(link->absorb_);
      link->absorb_ = -1;  // something else has the port (a RoCE device here): it answers nothing
    }
    return link;
  }
  ~Link() {
    if (absorb_ >= 0) close(absorb_);
  }

  const wire::MacAddr& mac() const { return mac_; }
  const wire::Ipv4Addr& ip() const { return ip_; }
  void record_to(drivers::PcapWriter* w) { pcap_ = w; }

  bool send(std::span<const uint8_t> bytes) {
    Frame* f = port_->alloc_frame();
    if (!f || bytes.size() > f->cap) {
      if (f) port_->free_frame(f);
      return false;
    }
    memcpy(f->data, bytes.data(), bytes.size());
    f->len = static_cast<uint32_t>(bytes.size());
    if (pcap_) pcap_->write(wall_ns(), bytes);
    Frame* one[1] = {f};
    if (port_->tx_burst(now_ns(), one) != 1) {
      port_->free_frame(f);
      return false;
    }
    return true;
  }

  /// The next frame the interface received, until `deadline`; false when none came.
  bool receive(uint64_t deadline, std::vector<uint8_t>* out) {
    for (;;) {
      Frame* f[1];
      if (port_->rx_burst(now_ns(), f) == 1) {
        out->assign(f[0]->data, f[0]->data + f[0]->len);
        port_->free_frame(f[0]);
        if (pcap_) pcap_->write(wall_ns(), *out);
        return true;
      }
      const uint64_t t = now_ns();
      if (t >= deadline) return false;
      pollfd p{port_->wait_fd(), POLLIN, 0};
      const uint64_t left_ms = (deadline - t + 999999) / 1000000;
      poll(&p, 1, static_cast<int>(std::min<uint64_t>(left_ms, 10)));
    }
  }

 private:
  static uint64_t wall_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }
  std::unique_ptr<drivers::PacketPort> port_;
  wire::MacAddr mac_{};
  wire::Ipv4Addr ip_{};
  int absorb_ = -1;
  drivers::PcapWriter* pcap_ = nullptr;
};

}  // namespace uroce::conform

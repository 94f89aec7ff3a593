// A uroce::Port through ordinary UDP sockets bound to address:4791: no capability, no
// kernel module, any interface the kernel routes over (loopback included), and the kernel's
// rxe or a real RNIC on the other side of a real network.
//
// The engine still sees Ethernet frames: on transmit the port takes each frame's IP
// destination, DSCP/ECN and UDP payload (BTH to ICRC) and hands them to the kernel, which
// writes the IP and UDP headers; on receive it writes in front of each datagram the headers
// it arrived with: addresses and ports from the socket, DSCP/ECN and TTL from control
// messages (IP_RECVTOS, so DCQCN sees CE marks), Ethernet addresses made up from the IP
// addresses (mac_for). ARP requests and IPv6 neighbour solicitations the engine sends are
// answered here with those made-up addresses: the kernel resolves the real ones.
//
// The ICRC covers the IP and UDP headers, so the engine builds them as the kernel will write
// them (EngineConfig::udp_src_ports and ipv4_ident_zero): the sending socket's port, and for
// IPv4 DF with identification 0, which Linux gives the DF packets of an unconnected socket
// (IP_PMTUDISC_DO: tests/ports/udp_port_test.cc checks the kernel's headers against this).
// A receiver is not shown the identification: the engine solves for it (wire/icrc.h).
//
// Batching: sendmmsg and recvmmsg, and runs of packets to one destination leave as one UDP
// GSO send (UDP_SEGMENT), which the kernel cuts into the packets wherever it must and which
// crosses loopback and veth whole; segment i carries identification i, which the port
// patches into the ICRC (linear, without reading the payload). Received with UDP_GRO, a run
// arrives as one datagram: its first packet lands in place, the others are copied out.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/shared_pool.h"
#include "uroce/port.h"
#include "wire/addr.h"

namespace uroce::drivers {

struct UdpConfig {
  std::optional<wire::Ipv4Addr> ipv4;  // bound (address:udp_port); at least one of the two
  std::optional<wire::Ipv6Addr> ipv6;  // a global address (link-local ones need a scope)
  // Neither given: take the first free loopback address of loopback_candidate's order (each
  // process on a host its own, with no configuration); ipv4() says which.
  bool loopback_auto = false;
  uint16_t udp_port = 4791;            // RoCEv2's; tests may take another
  bool gso = true;                     // runs of packets as one UDP GSO send; UDP_GRO
  // Send-only sockets on ports the kernel picks, for per-QP source-port entropy (ECMP paths,
  // a receiver's RSS queues): each QP sends from one of them (EngineConfig::udp_src_ports).
  // 0: every packet from udp_port. With both families bound, each port has a socket of each.
  uint32_t source_ports = 8;
  // Other uroce processes of this user may bind the same address and port (SO_REUSEPORT;
  // share() says how datagrams find their process). Not with loopback_auto, where a taken
  // address means: take the next one.
  bool shareable = true;
  uint32_t frames = 4096;              // frame buffers
};

class UdpPort final : public Port {
 public:
  /// nullptr and *error (one line naming the problem and the fix) on failure.
  static std::unique_ptr<UdpPort> open(const UdpConfig& cfg, std::string* error);
  ~UdpPort() override;

  uint16_t rx_burst(uint64_t now_ns, std::span<Frame*> out) override;
  uint16_t tx_burst(uint64_t now_ns, std::span<Frame* const> frames) override;
  Frame* alloc_frame() override;
  void free_frame(Frame* f) override;
  uint32_t max_frame_len() const override { return max_frame_; }
  std::array<uint8_t, 6> mac() const override { return mac_; }
  int wait_fd() const override { return wait_fd_; }
  /// Sharing an address (share()): until its sockets close, the kernel keeps handing them
  /// the address's datagrams, QP1's (the CM's, for every process) among them, and a peer that
  /// sent a DREQ and exited resends nothing. So what waits at the sockets is passed on now
  /// (waiting up to 100 ms for an owner whose queue is full), what is this process's own is
  /// dropped, and the sockets leave the group at once: each descriptor then holds an unbound
  /// socket (the port still sends, from its send-only sockets; it receives nothing more).
  void leave() override;

  /// The Ethernet address the port gives an IP address: wire::socket_port_mac.
  static wire::MacAddr mac_for(const wire::Gid& ip);
  /// The n-th address loopback_auto tries (n < kLoopbackCandidates): 127.0.0.2 ... 127.0.0.254,
  /// then 127.0.1.1 ... 127.0.1.254 and so on (no .0 or .255; 127.0.0.1 stays the host's, the
  /// address programs are told to reach a server at: docs/udp.md).
  static wire::Ipv4Addr loopback_candidate(uint32_t n);
  static constexpr uint32_t kLoopbackCandidates = 253 + 254 * 15;  // up to 127.0.15.254
  /// The IPv4 address bound (the one chosen, with loopback_auto).
  const std::optional<wire::Ipv4Addr>& ipv4() const { return cfg_.ipv4; }
  /// The source ports packets can leave from: the send-only sockets' (source_ports), or
  /// udp_port alone. The engine builds each QP's packets with one of them (the ICRC covers it).
  const std::vector<uint16_t>& source_ports() const { return source_ports_; }
  /// Several processes on one address (shareable): this one owns QPNs [first_qpn,
  /// first_qpn + span), each other one a block of its own (runtime.cc claims them, at most
  /// kShareBlocks). A classic-BPF program on the socket group steers each datagram to the
  /// socket whose index in the group is its destination QP's block; one that lands elsewhere
  /// (the kernel numbers sockets in the order they joined, and renumbers when one leaves) is
  /// passed to its owner over a Unix socket named after the address and block, and QP1's
  /// (the CM's MADs) reach every process. false and *error if that socket cannot be made.
  bool share(uint32_t first_qpn, uint32_t span, std::string* error);
  static constexpr uint32_t kShareBlocks = 64;
  /// The interface MTU the bound address routes over (the largest one of its interface).
  uint32_t mtu() const { return mtu_; }
  /// One line for `uroce devinfo`.
  const std::string& describe() const { return description_; }
  struct Stats {
    uint64_t rx_frames = 0, tx_frames = 0;  // packets (a GSO send or GRO datagram: each)
    uint64_t rx_dropped = 0;   // the kernel's (socket buffer full) and ours (no free frame)
    uint64_t rx_oversize = 0;  // a datagram that is no packet (too long, cannot be cut)
    uint64_t rx_gro = 0, tx_gso = 0;  // runs received as one datagram / sent as one
    uint64_t tx_dropped = 0;   // not IP/UDP, a link-local destination, refused by the kernel
    uint64_t neighbors_answered = 0;  // ARP requests and solicitations answered here
    // Sharing an address (share()): datagrams that landed here for another process's QP (or
    // QP1's, for every other process) and were passed on; those of a block no process has.
    uint64_t rx_forwarded = 0, rx_unowned = 0;
  };
  Stats stats() const;

 private:
  struct Sock {
    int fd = -1;
    bool v6 = false;
    uint16_t port = 0;  // bound
  };
  const Sock* sender(bool v6, uint16_t port) const;
  void open_senders(uint32_t n);
  int open_sender(bool v6, uint16_t port, uint16_t* bound);
  UdpPort() = default;
  void answer_neighbor(const Frame* f);
  size_t receive(const Sock& s);  // datagrams received
  void cut(Frame* head, const uint8_t* overflow, uint32_t len, uint32_t mss, uint32_t hdr);
  void route(size_t from);
  int pass_on(const Frame* f, uint32_t block);  // 0 or an errno
  void pass_on_later(Frame* f, uint32_t block);
  void retry_passing();
  bool receive_passed();  // whether any came
  void signal_ready();  // wait_fd readable until rx_burst finds nothing to do

  SharedPool pool_;
  std::vector<Frame*> ready_;  // frames for the next rx_burst (FIFO): cut runs, answers
  size_t ready_head_ = 0;
  std::vector<Frame*> spare_;  // taken from the pool for a receive that did not need them
  std::vector<uint8_t> overflow_;  // per message of a recvmmsg: a GRO datagram's tail
  std::array<Sock, 2> socks_;
  size_t nsocks_ = 0;
  size_t next_sock_ = 0;
  std::vector<Sock> senders_;  // send-only: per source port but udp_port's, one per family
  std::vector<uint16_t> source_ports_;
  int wait_fd_ = -1;   // a socket, or an epoll set of both and answers_fd_
  int epoll_fd_ = -1;
  int answers_fd_ = -1;  // an eventfd, readable while answers wait in ready_
  bool answers_signalled_ = false;
  UdpConfig cfg_;
  uint32_t max_frame_ = 0;
  uint32_t mtu_ = 0;
  std::array<uint8_t, 6> mac_{};
  bool gso_ = true;
  std::string description_;
  uint64_t rx_frames_ = 0, tx_frames_ = 0, rx_no_frame_ = 0, rx_oversize_ = 0;
  uint64_t rx_gro_ = 0, tx_gso_ = 0, tx_dropped_ = 0, answered_ = 0;
  std::array<std::atomic<uint64_t>, 2> kernel_drops_{};  // SO_RXQ_OVFL, per socket
  uint32_t shift_len_ = 0, shift_ = 0;
  int share_fd_ = -1;  // named for this process's block: what others pass on arrives here
  uint32_t qpn_base_ = 0, qpn_span_ = 0, block_ = 0;
  std::array<sockaddr_un, kShareBlocks> share_names_{};  // each block's owner's
  std::array<socklen_t, kShareBlocks> share_name_lens_{};
  std::vector<std::pair<Frame*, uint32_t>> waiting_owner_;  // to pass on: the owner was full
  uint64_t rx_forwarded_ = 0, rx_unowned_ = 0;
  int pass_flags_ = MSG_DONTWAIT;  // 0 while leaving: wait (SO_SNDTIMEO) for a full owner
  bool left_ = false;
  uint32_t share_bursts_ = 0;
  bool passed_came_ = false;  // icrc_shift cached for the last run's packet length
};

}  // namespace uroce::drivers

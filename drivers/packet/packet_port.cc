#include "packet/packet_port.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "util/sys.h"
#include "wire/ipv4.h"

namespace uroce::drivers {

/// struct virtio_net_hdr (linux/virtio_net.h, whose C++ trouble and age keep it out: its
/// GSO_UDP_L4 came with Linux 6.2), in the host's byte order as packet sockets use it.
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);

/// Where a UDP packet's headers are: l3 and l4 offsets, IPv4 or IPv6.
struct Udp {
  uint32_t l3 = 0, l4 = 0;
  bool v4 = false;
  uint32_t hdr() const { return l4 + 8; }
};

namespace {

constexpr uint32_t kHead = 4;         // room in front of each frame for an 802.1Q tag put back
constexpr uint32_t kRingSlots = 1024;  // receive ring slots (TPACKET_V2)
constexpr uint32_t kOverflow = 65536 + 64;  // a super-frame's bytes past its first packet
constexpr size_t kTxMsgs = 64;        // messages per sendmmsg
constexpr size_t kTxIov = 1024;       // iovecs per sendmmsg
constexpr size_t kMaxRun = 64;        // packets per super-frame
constexpr uint32_t kMaxSegs = kMaxRun;  // packets a received super-frame is cut into, at most
constexpr uint16_t kVlan = 0x8100, kQinQ = 0x88A8, kIpv4 = 0x0800, kIpv6 = 0x86DD;
constexpr uint8_t kUdp = 17;

constexpr uint8_t kNeedsCsum = 1;          // kNeedsCsum
constexpr uint8_t kGsoNone = 0, kGsoUdpL4 = 5, kGsoEcn = 0x80;

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void put_be16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

/// The socket's filter (classic BPF, run by the kernel on every frame of the interface before
/// it is copied to us): ARP, RoCEv2 (UDP to port 4791 over IPv4 without fragments or IPv6),
/// ICMPv6 (neighbour discovery) and frames still carrying an 802.1Q / 802.1ad tag pass; the
/// kernel's own TCP, other UDP and the rest of the interface's traffic do not. A VLAN tag the
/// kernel took off is not in the data the filter sees.
constexpr sock_filter kFilter[] = {
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),                // 0: EtherType
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0806, 16, 0),    // 1: ARP
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kVlan, 15, 0),     // 2: a tag left in the data
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kQinQ, 14, 0),     // 3
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kIpv4, 1, 0),      // 4
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kIpv6, 7, 13),     // 5
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 23),                // 6: IPv4 protocol
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kUdp, 0, 11),      // 7
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 20),                // 8: flags, fragment offset
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1FFF, 9, 0),    // 9: a fragment
    BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 14),               // 10: X = IPv4 header length
    BPF_STMT(BPF_LD | BPF_H | BPF_IND, 16),                // 11: UDP destination port
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4791, 5, 6),       // 12
    BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 20),                // 13: IPv6 next header
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kUdp, 1, 0),       // 14
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 58, 2, 3),         // 15: ICMPv6
    BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 56),                // 16: UDP destination port
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 4791, 0, 1),       // 17
    BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFFu),                // 18: the whole frame
    BPF_STMT(BPF_RET | BPF_K, 0),                          // 19: not ours
};

/// The filter while raw-packet QPs have flows: every frame the interface receives; of those
/// this host sends (the kernel shows a packet socket those too), RoCE's only, as always
/// (another process's uroce on this interface talks to ours that way).
constexpr auto kAllFilter = [] {
  std::array<sock_filter, 3 + std::size(kFilter)> f{};
  f[0] = BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE));
  f[1] = BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, 1, 0);
  f[2] = BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFFu);  // received: the whole frame
  for (size_t i = 0; i < std::size(kFilter); ++i) f[3 + i] = kFilter[i];  // sent: RoCE's
  return f;
}();


/// Parses Ethernet (with any 802.1Q / 802.1ad tags), IPv4 without fragments or IPv6 without
/// extension headers, and UDP, in the first `have` bytes of d.
bool parse_udp(const uint8_t* d, uint32_t have, Udp* u) {
  uint32_t off = 12;
  if (have < off + 2) return false;
  uint16_t type = be16(d + off);
  while ((type == kVlan || type == kQinQ) && have >= off + 6) {
    off += 4;
    type = be16(d + off);
  }
  u->l3 = off + 2;
  if (type == kIpv4) {
    if (have < u->l3 + 20 || (d[u->l3] >> 4) != 4) return false;
    const uint32_t ihl = (d[u->l3] & 0x0Fu) * 4;
    if (ihl < 20 || d[u->l3 + 9] != kUdp || (be16(d + u->l3 + 6) & 0x3FFF) != 0) return false;
    u->l4 = u->l3 + ihl;
    u->v4 = true;
  } else if (type == kIpv6) {
    if (have < u->l3 + 40 || d[u->l3 + 6] != kUdp) return false;
    u->l4 = u->l3 + 40;
    u->v4 = false;
  } else {
    return false;
  }
  return have >= u->hdr();
}

/// Sets the headers of a packet of `payload` UDP payload bytes: IP and UDP lengths, the IPv4
/// identification and header checksum, UDP checksum `check`.
void set_lengths(uint8_t* d, const Udp& u, uint32_t payload, uint16_t ident, uint16_t check) {
  const uint32_t udp_len = 8 + payload;
  if (u.v4) {
    put_be16(d + u.l3 + 2, (u.l4 - u.l3) + udp_len);
    put_be16(d + u.l3 + 4, ident);
    put_be16(d + u.l3 + 10, 0);
    put_be16(d + u.l3 + 10, wire::internet_checksum(wire::Bytes(d + u.l3, u.l4 - u.l3)));
  } else {
    put_be16(d + u.l3 + 4, udp_len);
  }
  put_be16(d + u.l4 + 4, udp_len);
  put_be16(d + u.l4 + 6, check);
}

/// The UDP pseudo-header's sum, folded, not complemented: what a CHECKSUM_PARTIAL packet
/// carries in its checksum field for the kernel (or a NIC) to finish.
uint16_t pseudo_sum(const uint8_t* d, const Udp& u, uint32_t udp_len) {
  uint32_t s = 0;
  const uint32_t addr = u.v4 ? u.l3 + 12 : u.l3 + 8, alen = u.v4 ? 8 : 32;
  for (uint32_t i = 0; i < alen; i += 2) s += be16(d + addr + i);
  s += kUdp;
  s += udp_len >> 16;
  s += udp_len & 0xFFFF;
  while (s >> 16) s = (s & 0xFFFF) + (s >> 16);
  return static_cast<uint16_t>(s);
}

/// Can `g` follow `prev` in a run headed by `head` (parsed as `u`, payload `mss`)? Same
/// headers but for the lengths, identification and checksums; the next identification;
/// `prev` full-sized; no Ethernet padding.
bool joins(const Frame* head, const Udp& u, uint32_t mss, const Frame* prev, const Frame* g) {
  const uint8_t* a = head->data;
  const uint8_t* b = g->data;
  const uint32_t hdr = u.hdr();
  if (g->len <= hdr || g->len - hdr > mss || prev->len - hdr != mss) return false;
  if (u.v4) {
    if (std::memcmp(a, b, u.l3 + 2) != 0 || std::memcmp(a + u.l3 + 6, b + u.l3 + 6, 4) != 0 ||
        std::memcmp(a + u.l3 + 12, b + u.l3 + 12, u.l4 + 4 - (u.l3 + 12)) != 0)
      return false;
    if (be16(b + u.l3 + 2) != g->len - u.l3) return false;
    if (be16(b + u.l3 + 4) != static_cast<uint16_t>(be16(prev->data + u.l3 + 4) + 1)) return false;
  } else {
    if (std::memcmp(a, b, u.l3 + 4) != 0 || std::memcmp(a + u.l3 + 6, b + u.l3 + 6, 38 + 4) != 0)
      return false;
    if (be16(b + u.l3 + 4) != g->len - u.l4) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<PacketPort> PacketPort::open(const PacketConfig& cfg, std::string* error) {
  const std::string& ifn = cfg.iface;
  const unsigned index = if_nametoindex(ifn.c_str());
  if (ifn.empty() || ifn.size() >= IFNAMSIZ || index == 0) {
    *error = "interface '" + ifn + "' does not exist: set iface (or UROCE_IFACE) to one that " +
             "`ip link` lists";
    return nullptr;
  }
  std::unique_ptr<PacketPort> p(new PacketPort());
  // Protocol 0 until bind(): the socket sees no interface's traffic before it is bound to ours.
  p->fd_ = util::kernel_socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (p->fd_ < 0) {
    *error = errno == EPERM || errno == EACCES
                 ? "a packet socket on " + ifn + " needs CAP_NET_RAW: run as root (or give the " +
                       "program cap_net_raw with setcap)"
                 : "packet socket: " + std::string(std::strerror(errno));
    return nullptr;
  }
  const int one = 1;
  const int fd = p->fd_;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one) != 0) {
    *error = "packet socket on " + ifn + ": PACKET_VNET_HDR: " + std::strerror(errno) +
             " (needs Linux 3.16 or later)";
    return nullptr;
  }
  if (!cfg.shared) setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one);
  ifreq r{};
  std::memcpy(r.ifr_name, ifn.data(), ifn.size());
  if (ioctl(fd, SIOCGIFHWADDR, &r) != 0 || r.ifr_hwaddr.sa_family != ARPHRD_ETHER) {
    *error = "interface " + ifn + " is not an Ethernet interface (RoCE runs over Ethernet)";
    return nullptr;
  }
  std::memcpy(p->mac_.data(), r.ifr_hwaddr.sa_data, 6);
  uint32_t mtu = 1500;
  if (ioctl(fd, SIOCGIFMTU, &r) == 0 && r.ifr_mtu >= 576) mtu = static_cast<uint32_t>(r.ifr_mtu);
  p->max_frame_ = mtu + 18;  // Ethernet header and one 802.1Q tag
  // The receive ring: a slot per frame, read in place (no system call while polling). A
  // frame longer than a slot (a super-frame) is queued whole on the socket as well
  // (PACKET_COPY_THRESH) and read from there with recvmsg.
  const int v2 = TPACKET_V2;
  p->ring_slot_ = (p->max_frame_ + 256 + 4095) / 4096 * 4096;
  tpacket_req req{};
  req.tp_block_size = p->ring_slot_;
  req.tp_block_nr = kRingSlots;
  req.tp_frame_size = p->ring_slot_;
  req.tp_frame_nr = kRingSlots;
  if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v2, sizeof v2) != 0 ||
      setsockopt(fd, SOL_PACKET, PACKET_COPY_THRESH, &one, sizeof one) != 0 ||
      setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0) {
    *error = "packet socket on " + ifn + ": receive ring: " + std::strerror(errno);
    return nullptr;
  }
  p->ring_bytes_ = size_t{p->ring_slot_} * kRingSlots;
  void* ring = mmap(nullptr, p->ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ring == MAP_FAILED) {
    *error = "packet socket on " + ifn + ": mapping the receive ring: " + std::strerror(errno);
    return nullptr;
  }
  p->ring_ = static_cast<uint8_t*>(ring);
  madvise(ring, p->ring_bytes_, MADV_DONTFORK);  // a forked child has no use for it
  p->ring_frames_.resize(kRingSlots);
  // Only what the engine takes (before bind: no other frame is queued in between).
  sock_fprog prog{static_cast<unsigned short>(std::size(kFilter)), const_cast<sock_filter*>(kFilter)};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
    *error = "packet socket on " + ifn + ": its filter: " + std::strerror(errno);
    return nullptr;
  }
  util::size_socket_buffers(fd, 32 << 20, 4 << 20);  // room for bursts of super-frames
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_ALL);
  ll.sll_ifindex = static_cast<int>(index);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ll), sizeof ll) != 0) {
    *error = "packet socket on " + ifn + ": bind: " + std::strerror(errno);
    return nullptr;
  }
  // IPv6 neighbour solicitations are multicast; the membership ends with the socket.
  packet_mreq mr{};
  mr.mr_ifindex = static_cast<int>(index);
  mr.mr_type = PACKET_MR_ALLMULTI;
  setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr);
  p->gso_ = cfg.gso;
  p->scatter_ = cfg.scatter;
  p->pool_.init(cfg.frames, kHead, p->max_frame_);
  p->ready_.reserve(cfg.frames);
  p->overflow_ = std::make_unique<uint8_t[]>(kOverflow);
  p->description_ =
      "af_packet socket on " + ifn + " (interface MTU " + std::to_string(mtu) + "; " +
      (cfg.shared ? "the kernel's transmit path, so other packet sockets see our frames"
                  : "PACKET_QDISC_BYPASS: the interface is ours alone") +
      "); " +
      (cfg.gso ? "runs of packets sent as UDP GSO super-frames of up to " +
                     std::to_string(kMaxRun) + " packets"
               : "one packet per write (gso = no)") +
      "; a receive ring of " + std::to_string(kRingSlots) + " slots of " +
      std::to_string(p->ring_slot_) + " B read in place, " + std::to_string(cfg.frames) +
      " frames of " + std::to_string(p->max_frame_) + " B; sleeps on the socket when idle";
  return p;
}

bool PacketPort::receive_all(bool on) {
  sock_fprog prog{};
  if (on) {
    prog = {static_cast<unsigned short>(kAllFilter.size()), const_cast<sock_filter*>(kAllFilter.data())};
  } else {
    prog = {static_cast<unsigned short>(std::size(kFilter)), const_cast<sock_filter*>(kFilter)};
  }
  return setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0;
}

PacketPort::~PacketPort() {
  if (ring_ != nullptr) munmap(ring_, ring_bytes_);
  if (fd_ >= 0) close(fd_);
}

Frame* PacketPort::alloc_frame() { return pool_.alloc(); }

void PacketPort::free_frame(Frame* f) {
  if (f >= ring_frames_.data() && f < ring_frames_.data() + ring_frames_.size()) {
    // A receive ring slot: back to the kernel.
    auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t{ring_slot_} * static_cast<size_t>(f - ring_frames_.data()));
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    return;
  }
  pool_.free(f);
}

uint16_t PacketPort::take_ready(std::span<Frame*> out, uint16_t n) {
  while (n < out.size() && ready_head_ < ready_.size()) out[n++] = ready_[ready_head_++];
  // rx_burst reads another slot only while the queue holds less than its caller asked for,
  // so the queue runs empty (and is cleared here) before it is refilled: it never holds more
  // than one burst and one super-frame, and never grows past its reserve (ports.packet_gso
  // counts the allocations of a long run behind a backlog: none).
  if (ready_head_ == ready_.size()) {
    ready_.clear();
    ready_head_ = 0;
  }
  return n;
}

bool PacketPort::cut(Frame* head, const uint8_t* overflow, uint32_t len, uint32_t mss) {
  Udp u;
  const uint32_t in_head = std::min(len, head->cap);
  if (!parse_udp(head->data, in_head, &u) || mss == 0 || len <= u.hdr() ||
      u.hdr() + mss > in_head)
    return false;
  const uint32_t hdr = u.hdr();
  const uint32_t payload = len - hdr;
  // Byte `off` of the super-frame: in the head frame, then in the overflow buffer.
  auto copy_out = [&](uint8_t* dst, uint32_t off, uint32_t n) {
    if (off < in_head) {
      const uint32_t k = std::min(n, in_head - off);
      std::memcpy(dst, head->data + off, k);
      dst += k;
      off += k;
      n -= k;
    }
    if (n > 0) std::memcpy(dst, overflow + (off - in_head), n);
  };
  // More packets than a uroce run has (kMaxRun): not ours to cut (dropped, counted).
  uint32_t segs = (payload + mss - 1) / mss;
  if (segs > kMaxSegs) return false;
  // The first packet stays where it is; the others are copied out from behind it.
  std::array<Frame*, kMaxSegs> seg;
  seg[0] = head;
  for (uint32_t i = 1; i < segs; ++i) {
    seg[i] = alloc_frame();
    if (seg[i] == nullptr) {
      rx_no_frame_ += segs - i;
      segs = i;
      break;
    }
    copy_out(seg[i]->data + hdr, hdr + i * mss, std::min(mss, payload - i * mss));
  }
  headers_of_cut(std::span<Frame* const>(seg.data(), segs), u, payload, mss);
  return true;
}

void PacketPort::headers_of_cut(std::span<Frame* const> seg, const Udp& u, uint32_t payload,
                                uint32_t mss) {
  // Every header field that differs is rewritten in each packet.
  const uint32_t hdr = u.hdr();
  const uint16_t id0 = u.v4 ? be16(seg[0]->data + u.l3 + 4) : 0;
  for (uint32_t i = 0; i < seg.size(); ++i) {
    Frame* g = seg[i];
    const uint32_t n = std::min(mss, payload - i * mss);
    if (i != 0) std::memcpy(g->data, seg[0]->data, hdr);
    g->len = hdr + n;
    set_lengths(g->data, u, n, static_cast<uint16_t>(id0 + i), 0);
    ready_.push_back(g);
  }
  ++rx_super_;
}

bool PacketPort::receive_scattered(const uint8_t* slot_frame, uint32_t slot_len, uint32_t len) {
  // The ring slot holds the super-frame's start and its virtio_net_hdr: enough to know where
  // each packet's payload begins in it. recvmsg then puts each payload straight into a frame
  // of its own, behind room for the headers: nothing is copied out afterwards.
  VnetHdr vh;
  std::memcpy(&vh, slot_frame - sizeof vh, sizeof vh);
  Udp u;
  if ((vh.gso_type & static_cast<uint8_t>(~kGsoEcn)) != kGsoUdpL4 || vh.gso_size == 0 ||
      !parse_udp(slot_frame, slot_len, &u) || len <= u.hdr())
    return false;
  const uint32_t hdr = u.hdr(), mss = vh.gso_size, payload = len - hdr;
  const uint32_t segs = (payload + mss - 1) / mss;
  if (segs > kMaxSegs || hdr + mss > max_frame_) return false;
  std::array<Frame*, kMaxSegs> seg;
  std::array<iovec, kMaxSegs + 2> iov;
  VnetHdr got_vh{};
  iov[0] = {&got_vh, sizeof got_vh};
  for (uint32_t i = 0; i < segs; ++i) {
    seg[i] = alloc_frame();
    if (seg[i] == nullptr) {  // short of frames: the copying way drops what does not fit
      for (uint32_t k = 0; k < i; ++k) free_frame(seg[k]);
      return false;
    }
    const uint32_t at = i == 0 ? 0 : hdr;
    iov[i + 1] = {seg[i]->data + at, std::min(mss, payload - i * mss) + (i == 0 ? hdr : 0)};
  }
  iov[segs + 1] = {overflow_.get(), kOverflow};  // a frame longer than the slot said: caught below
  msghdr h{};
  h.msg_iov = iov.data();
  h.msg_iovlen = segs + 2;
  ssize_t got = recvmsg(fd_, &h, MSG_DONTWAIT);
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    h.msg_flags = 0;  // a pending socket error first (receive_queued): read again
    got = recvmsg(fd_, &h, MSG_DONTWAIT);
  }
  Udp again;
  if (got != static_cast<ssize_t>(sizeof got_vh + len) || (h.msg_flags & MSG_TRUNC) != 0 ||
      got_vh.gso_size != vh.gso_size || !parse_udp(seg[0]->data, hdr + std::min(mss, payload), &again) ||
      again.hdr() != hdr) {
    // Not the frame the slot described (the socket and the ring disagree): dropped.
    if (got > 0) ++rx_oversize_;
    for (uint32_t k = 0; k < segs; ++k) free_frame(seg[k]);
    return true;
  }
  headers_of_cut(std::span<Frame* const>(seg.data(), segs), u, payload, mss);
  ++rx_scattered_;
  return true;
}

void PacketPort::accept(Frame* f, const VnetHdr& vh, uint32_t len, uint32_t tag,
                        const uint8_t* overflow) {
  const uint8_t gso = vh.gso_type & static_cast<uint8_t>(~kGsoEcn);
  if (gso == kGsoUdpL4) {
    // A super-frame from a uroce peer on this link: cut back into its packets.
    if (!cut(f, overflow, len, vh.gso_size)) {
      ++rx_oversize_;
      free_frame(f);
    }
    return;
  }
  if (len > f->cap) {  // the kernel's own super-frames (TCP): not ours
    if (gso == kGsoNone) ++rx_oversize_;
    free_frame(f);
    return;
  }
  f->len = len;
  // A checksum left for the NIC to finish: RoCEv2 ignores it, so make it plainly zero.
  if ((vh.flags & kNeedsCsum) != 0) {
    const uint32_t at = tag + vh.csum_start + vh.csum_offset;
    if (at + 2 <= len) put_be16(f->data + at, 0);
  }
  ready_.push_back(f);
}

void PacketPort::receive_queued() {
  // The whole frame of a ring slot marked TP_STATUS_COPY, queued on the socket.
  Frame* f = alloc_frame();
  VnetHdr vh{};
  alignas(cmsghdr) uint8_t ctl[CMSG_SPACE(sizeof(tpacket_auxdata))];
  uint8_t discard[64];
  iovec iov[3] = {{&vh, sizeof vh}, {f != nullptr ? f->data : discard, f != nullptr ? f->cap : sizeof discard},
                  {overflow_.get(), kOverflow}};
  msghdr h{};
  h.msg_iov = iov;
  h.msg_iovlen = 3;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  ssize_t got = recvmsg(fd_, &h, MSG_DONTWAIT);
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    // A pending socket error (ENETDOWN, left by the interface going down) is reported, and
    // cleared, before the queue is looked at: read again, or this slot's frame would stay
    // queued and every later slot would read the one before it, a frame behind for good (a
    // transfer whose last super-frame waits there stalls until a retransmission pushes it).
    h.msg_controllen = sizeof ctl;
    h.msg_flags = 0;
    got = recvmsg(fd_, &h, MSG_DONTWAIT);
  }
  if (f == nullptr) {
    if (got > 0) ++rx_no_frame_;
    return;
  }
  if (got < static_cast<ssize_t>(sizeof vh) || (h.msg_flags & MSG_TRUNC) != 0) {
    if (got > 0) ++rx_oversize_;
    free_frame(f);
    return;
  }
  uint32_t len = static_cast<uint32_t>(got) - static_cast<uint32_t>(sizeof vh);
  uint32_t tag = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA) continue;
    tpacket_auxdata aux;
    std::memcpy(&aux, CMSG_DATA(c), sizeof aux);
    if ((aux.tp_status & TP_STATUS_VLAN_VALID) == 0 || len < 12) continue;
    tag = put_tag_back(f, aux.tp_status, aux.tp_vlan_tpid, aux.tp_vlan_tci);
    len += tag;
  }
  accept(f, vh, len, tag, overflow_.get());
}

uint32_t PacketPort::put_tag_back(Frame* f, uint32_t status, uint16_t tpid, uint16_t tci) {
  // The kernel took an 802.1Q tag off (VLAN offload): put it back where it was. There is
  // room in front of every frame (kHead; in a ring slot, the slot's own header).
  std::memmove(f->data - 4, f->data, 12);
  f->data -= 4;
  f->cap += 4;
  put_be16(f->data + 12, (status & TP_STATUS_VLAN_TPID_VALID) ? tpid : kVlan);
  put_be16(f->data + 14, tci);
  return 4;
}

uint16_t PacketPort::rx_burst(uint64_t, std::span<Frame*> out) {
  uint16_t n = take_ready(out, 0);
  // Ring slots in order, while the kernel has handed them over; what they hold goes to ready_
  // (a super-frame as several packets).
  while (ready_.size() - ready_head_ < out.size() - n) {
    auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t{ring_slot_} * ring_head_);
    const uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
    if ((status & TP_STATUS_USER) == 0) break;
    Frame* f = &ring_frames_[ring_head_];
    ring_head_ = (ring_head_ + 1) % kRingSlots;
    uint8_t* base = reinterpret_cast<uint8_t*>(h);
    f->data = base + h->tp_mac;
    f->cap = ring_slot_ - h->tp_mac;
    if ((status & TP_STATUS_COPY) != 0) {  // too long for a slot: read it whole from the socket
      // A uroce super-frame (no 802.1Q tag to put back) goes straight into its packets'
      // frames; anything else is read whole and cut from there.
      const bool scattered = scatter_ && (status & TP_STATUS_VLAN_VALID) == 0 &&
                             receive_scattered(f->data, h->tp_snaplen, h->tp_len);
      free_frame(f);
      if (!scattered) receive_queued();
      continue;
    }
    if (h->tp_snaplen < h->tp_len) {  // too long, and no room on the socket either: lost
      ++rx_oversize_;
      free_frame(f);
      continue;
    }
    VnetHdr vh;
    std::memcpy(&vh, f->data - sizeof vh, sizeof vh);
    uint32_t len = h->tp_len, tag = 0;
    if ((status & TP_STATUS_VLAN_VALID) != 0 && len >= 12) {
      tag = put_tag_back(f, status, h->tp_vlan_tpid, h->tp_vlan_tci);
      len += tag;
    }
    accept(f, vh, len, tag, nullptr);
  }
  const uint16_t before = n;
  n = take_ready(out, n);
  rx_frames_ += n - before;
  return n;
}

uint16_t PacketPort::tx_burst(uint64_t, std::span<Frame* const> frames) {
  mmsghdr msgs[kTxMsgs];
  iovec iov[kTxIov];
  VnetHdr vh[kTxMsgs];
  uint8_t hdrs[kTxMsgs][96];  // a super-frame's headers, lengths rewritten
  uint16_t members[kTxMsgs];
  size_t i = 0, m = 0, v = 0;
  while (i < frames.size() && m < kTxMsgs && v + 2 <= kTxIov) {
    Frame* f = frames[i];
    size_t run = 1;
    Udp u;
    uint32_t mss = 0;
    if (gso_ && f->len <= kMaxSuper && parse_udp(f->data, f->len, &u) && u.hdr() <= sizeof hdrs[m] &&
        f->len > u.hdr() && be16(f->data + 12) != kVlan && be16(f->data + 12) != kQinQ &&
        (u.v4 ? be16(f->data + u.l3 + 2) == f->len - u.l3 : be16(f->data + u.l3 + 4) == f->len - u.l4)) {
      mss = f->len - u.hdr();
      uint32_t payload = mss;
      const uint32_t limit = kMaxSuper - 8 - (u.v4 ? u.l4 - u.l3 : 0);
      while (i + run < frames.size() && run < kMaxRun && v + 2 + run + 1 <= kTxIov) {
        const Frame* g = frames[i + run];
        if (!joins(f, u, mss, frames[i + run - 1], g) || payload + (g->len - u.hdr()) > limit) break;
        payload += g->len - u.hdr();
        ++run;
      }
      if (run > 1) {
        const uint32_t hdr = u.hdr();
        std::memcpy(hdrs[m], f->data, hdr);
        set_lengths(hdrs[m], u, payload, u.v4 ? be16(f->data + u.l3 + 4) : 0,
                    pseudo_sum(hdrs[m], u, 8 + payload));
        vh[m] = {};
        vh[m].flags = kNeedsCsum;
        vh[m].gso_type = kGsoUdpL4;
        vh[m].hdr_len = static_cast<uint16_t>(hdr);
        vh[m].gso_size = static_cast<uint16_t>(mss);
        vh[m].csum_start = static_cast<uint16_t>(u.l4);
        vh[m].csum_offset = 6;
        msgs[m] = {};
        msgs[m].msg_hdr.msg_iov = &iov[v];
        iov[v++] = {&vh[m], sizeof vh[m]};
        iov[v++] = {hdrs[m], hdr};
        for (size_t j = 0; j < run; ++j)
          iov[v++] = {frames[i + j]->data + hdr, frames[i + j]->len - hdr};
        msgs[m].msg_hdr.msg_iovlen = 2 + run;
      }
    }
    if (run == 1) {
      vh[m] = {};
      msgs[m] = {};
      msgs[m].msg_hdr.msg_iov = &iov[v];
      iov[v++] = {&vh[m], sizeof vh[m]};
      iov[v++] = {f->data, f->len};
      msgs[m].msg_hdr.msg_iovlen = 2;
    }
    members[m++] = static_cast<uint16_t>(run);
    i += run;
  }
  if (m == 0) return 0;
  const int sent = sendmmsg(fd_, msgs, static_cast<unsigned>(m), MSG_DONTWAIT);
  size_t done = 0, taken = 0;
  if (sent > 0) {
    done = static_cast<size_t>(sent);
  } else if (errno == EINVAL && members[0] > 1) {
    gso_ = false;  // a kernel without UDP GSO through packet sockets: one packet per write
  } else if (errno != EAGAIN && errno != ENOBUFS && errno != EINTR) {
    done = 1;  // the interface is down or refuses this frame: it is lost, as on a wire
  }
  for (size_t k = 0; k < done; ++k) {
    if (sent > 0) {
      tx_frames_ += members[k];
      if (members[k] > 1) ++tx_super_;
    }
    for (size_t j = 0; j < members[k]; ++j) free_frame(frames[taken + j]);
    taken += members[k];
  }
  return static_cast<uint16_t>(taken);
}

PacketPort::Stats PacketPort::stats() const {
  tpacket_stats ks{};
  socklen_t kl = sizeof ks;
  if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &ks, &kl) == 0) kernel_drops_ += ks.tp_drops;
  Stats s;
  s.rx_frames = rx_frames_;
  s.tx_frames = tx_frames_;
  s.rx_dropped = kernel_drops_.load() + rx_no_frame_;
  s.rx_oversize = rx_oversize_;
  s.rx_super = rx_super_;
  s.tx_super = tx_super_;
  s.rx_scattered = rx_scattered_;
  return s;
}

}  // namespace uroce::drivers

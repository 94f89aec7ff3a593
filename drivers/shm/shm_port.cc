#include "shm/shm_port.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>

namespace uroce::drivers {

namespace {

constexpr uint64_t kMagic = 0x75726f6365736d31ULL;  // "urocesm1"
constexpr uint32_t kVersion = 1;
constexpr size_t kPage = 4096;
constexpr uint64_t kAcceptEveryNs = 1'000'000;  // the listener looks for its peer each ms
// Spare bytes after the last slot. The parser reads a field (an IP length) more than once: a
// peer that rewrites a frame while it is parsed can make a later read run up to 64 KiB past
// the frame (an IP datagram's longest) -- still inside this mapping, never beyond it.
constexpr size_t kOverread = 68 * 1024;

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

/// What the listener sends the connecting side, with the region's descriptor.
struct Hello {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_size;
  uint32_t reserved;
};

/// A Hello with room for one descriptor beside it (SCM_RIGHTS), for sendmsg / recvmsg.
struct HelloMessage {
  Hello h{};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{&h, sizeof h};
  msghdr msg{};
  HelloMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
  }
  HelloMessage(const HelloMessage&) = delete;
  HelloMessage& operator=(const HelloMessage&) = delete;
  /// The descriptor that came with it, or -1.
  int fd() {
    int v = -1;
    if (cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(&v, CMSG_DATA(c), sizeof v);
    return v;
  }
  void attach(int v) {
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &v, sizeof v);
  }
};

/// The region's first page.
struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t slots;
  uint32_t slot_size;
};

}  // namespace

/// A single-producer ring of 64-bit entries, `slots` of them (each slot is in at most one
/// place at a time, so it never overflows, and the producer never needs to know how far the
/// consumer got). head: written by the producer only.
struct ShmPort::Ring {
  alignas(64) std::atomic<uint32_t> head;
  alignas(64) uint64_t entry[1];  // [slots]: slot number << 32 | frame length
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);  // address-free across processes

namespace {

size_t ring_bytes(uint32_t slots) {
  return round_up(offsetof(ShmPort::Ring, entry) + sizeof(uint64_t) * slots, kPage);
}

/// Where direction `d`'s rings and slots are: header, 4 rings (d0 sent, d0 returned, d1 sent,
/// d1 returned), d0's slots, d1's slots.
struct Layout {
  size_t sent[2], returned[2], slots[2], total;
  Layout(uint32_t n, uint32_t slot_size) {
    size_t off = kPage;
    for (int d = 0; d < 2; ++d) {
      sent[d] = off;
      off += ring_bytes(n);
      returned[d] = off;
      off += ring_bytes(n);
    }
    for (int d = 0; d < 2; ++d) {
      slots[d] = off;
      off += round_up(size_t{n} * slot_size, kPage);
    }
    total = off + kOverread;
  }
};

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

}  // namespace

std::unique_ptr<ShmPort> ShmPort::open(const ShmConfig& cfg, std::string* error) {
  sockaddr_un addr{};
  if (cfg.path.empty() || cfg.path.size() >= sizeof addr.sun_path) {
    *error = "shm needs the path of a unix socket both processes name (shorter than " +
             std::to_string(sizeof addr.sun_path) + " bytes), e.g. /run/uroce-a-b";
    return nullptr;
  }
  if (cfg.slots == 0 || (cfg.slots & (cfg.slots - 1)) != 0 || cfg.max_frame < 1518) {
    *error = "shm: slots must be a power of two and frames at least 1518 bytes";
    return nullptr;
  }
  addr = socket_address(cfg.path);
  std::unique_ptr<ShmPort> p(new ShmPort());
  p->cfg_ = cfg;
  p->max_frame_ = cfg.max_frame;
  p->slot_size_ = static_cast<uint32_t>(round_up(cfg.max_frame, 64));
  if (getrandom(p->mac_.data(), p->mac_.size(), 0) != static_cast<ssize_t>(p->mac_.size())) {
    *error = std::string("shm: getrandom: ") + std::strerror(errno);
    return nullptr;
  }
  p->mac_[0] = static_cast<uint8_t>((p->mac_[0] & 0xFE) | 0x02);  // unicast, locally administered

  // The second process: the first one listens. Its hello (and the region) comes from its
  // next poll, within a millisecond or so.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("shm: socket: ") + std::strerror(errno);
      return nullptr;
    }
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      timeval tv{5, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      HelloMessage m;
      const ssize_t n = recvmsg(fd, &m.msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
      const int region_fd = m.fd();
      const Hello& h = m.h;
      if (n != static_cast<ssize_t>(sizeof h) || region_fd < 0 || h.magic != kMagic ||
          h.version != kVersion || h.slots != cfg.slots || h.slot_size != p->slot_size_) {
        if (region_fd >= 0) close(region_fd);
        close(fd);
        *error = "shm: the process listening on " + cfg.path +
                 (n != static_cast<ssize_t>(sizeof h)
                      ? std::string(" did not answer within 5 s: is it a uroce process polling its device?")
                      : std::string(" is set up differently (another uroce version, slots or frame size): "
                                    "give both the same settings"));
        return nullptr;
      }
      p->ctl_fd_ = fd;
      p->mine_ = 1;
      p->map_region(region_fd, false);
      close(region_fd);
      if (p->region_ == nullptr) {
        *error = std::string("shm: cannot map the shared region: ") + std::strerror(errno);
        return nullptr;
      }
      return p;
    }
    const int why = errno;
    close(fd);
    if (why != ENOENT && why != ECONNREFUSED) {
      *error = "shm: cannot connect to " + cfg.path + ": " + std::strerror(why);
      return nullptr;
    }
    // Nobody listens: be the first. A socket file nobody listens on was left by a process
    // that ended without closing: take its place.
    if (why == ECONNREFUSED) {
      struct stat st{};
      if (lstat(cfg.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(cfg.path.c_str());
    }
    const int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0) {
      *error = std::string("shm: socket: ") + std::strerror(errno);
      return nullptr;
    }
    if (bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      const int e = errno;
      close(lfd);
      if (e == EADDRINUSE) continue;  // the peer bound it just now: connect to it
      *error = "shm: cannot listen on " + cfg.path + ": " + std::strerror(e) +
               " (a directory both processes may write to, e.g. /run or /tmp)";
      return nullptr;
    }
    p->listening_path_ = true;
    if (listen(lfd, 1) != 0) {
      *error = std::string("shm: listen: ") + std::strerror(errno);
      close(lfd);
      return nullptr;  // the destructor removes the path
    }
    p->listen_fd_ = lfd;
    const int region_fd = memfd_create("uroce-shm", MFD_CLOEXEC);
    if (region_fd < 0) {
      *error = std::string("shm: memfd_create: ") + std::strerror(errno);
      return nullptr;
    }
    const Layout lay(cfg.slots, p->slot_size_);
    if (ftruncate(region_fd, static_cast<off_t>(lay.total)) != 0) {
      *error = std::string("shm: cannot size the shared region: ") + std::strerror(errno);
      close(region_fd);
      return nullptr;
    }
    p->mine_ = 0;
    p->map_region(region_fd, true);
    if (p->region_ == nullptr) {
      *error = std::string("shm: cannot map the shared region: ") + std::strerror(errno);
      close(region_fd);
      return nullptr;
    }
    p->region_fd_ = region_fd;  // sent to the peer when it comes
    return p;
  }
  *error = "shm: " + cfg.path + " is taken and refuses connections";
  return nullptr;
}

void ShmPort::map_region(int fd, bool create) {
  const Layout lay(cfg_.slots, slot_size_);
  void* m = mmap(nullptr, lay.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) return;
  region_ = static_cast<uint8_t*>(m);
  region_len_ = lay.total;
  auto* hdr = reinterpret_cast<Header*>(region_);
  if (create) {
    hdr->magic = kMagic;
    hdr->version = kVersion;
    hdr->slots = cfg_.slots;
    hdr->slot_size = slot_size_;
  }
  const int other = 1 - mine_;
  tx_sent_ = reinterpret_cast<Ring*>(region_ + lay.sent[mine_]);
  tx_returned_ = reinterpret_cast<Ring*>(region_ + lay.returned[mine_]);
  rx_sent_ = reinterpret_cast<Ring*>(region_ + lay.sent[other]);
  rx_returned_ = reinterpret_cast<Ring*>(region_ + lay.returned[other]);
  tx_slots_ = region_ + lay.slots[mine_];
  rx_slots_ = region_ + lay.slots[other];
  // Our indexes start where the rings stand (zero in a new region).
  tx_head_ = tx_sent_->head.load(std::memory_order_acquire);
  ret_tail_ = tx_returned_->head.load(std::memory_order_acquire);
  rx_tail_ = rx_sent_->head.load(std::memory_order_acquire);
  ret_head_ = rx_returned_->head.load(std::memory_order_acquire);
  const uint32_t n = cfg_.slots;
  tx_frames_.resize(n);
  rx_frames_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    tx_frames_[i].data = tx_slots_ + size_t{i} * slot_size_;
    tx_frames_[i].cap = max_frame_;
    rx_frames_[i].data = rx_slots_ + size_t{i} * slot_size_;
    rx_frames_[i].cap = max_frame_;
  }
  free_.clear();
  for (uint32_t i = n; i-- > 0;) free_.push_back(i);
  tx_with_peer_.assign(n, 0);
  rx_held_.assign(n, 0);
}

ShmPort::~ShmPort() {
  if (listen_fd_ >= 0) close(listen_fd_);
  if (listening_path_) unlink(cfg_.path.c_str());
  if (ctl_fd_ >= 0) close(ctl_fd_);
  if (region_fd_ >= 0) close(region_fd_);
  if (region_ != nullptr) munmap(region_, region_len_);
}

void ShmPort::try_accept() {
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  HelloMessage m;
  m.h = Hello{kMagic, kVersion, cfg_.slots, slot_size_, 0};
  m.attach(region_fd_);
  if (sendmsg(fd, &m.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof m.h)) {
    close(fd);
    return;
  }
  // Paired: nobody else may join, and no file stays behind.
  ctl_fd_ = fd;
  close(listen_fd_);
  listen_fd_ = -1;
  unlink(cfg_.path.c_str());
  listening_path_ = false;
  close(region_fd_);
  region_fd_ = -1;
}

bool ShmPort::peer_gone() {
  if (gone_) return true;
  if (ctl_fd_ < 0) return true;  // not paired yet
  char b;
  const ssize_t n = recv(ctl_fd_, &b, 1, MSG_DONTWAIT | MSG_PEEK);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) gone_ = true;
  return gone_;
}

uint32_t ShmPort::take_returned() {
  const uint32_t n = cfg_.slots;
  const uint32_t head = tx_returned_->head.load(std::memory_order_acquire);
  const uint32_t avail = head - ret_tail_;
  if (avail == 0) return 0;
  if (avail > n) {  // not a ring the peer keeps properly: skip to where it stands
    ++stats_.rx_bad_slot;
    ret_tail_ = head;
    return 0;
  }
  uint32_t got = 0;
  for (; ret_tail_ != head; ++ret_tail_) {
    const uint32_t slot = static_cast<uint32_t>(tx_returned_->entry[ret_tail_ & (n - 1)] >> 32);
    if (slot >= n || !tx_with_peer_[slot]) {
      ++stats_.rx_bad_slot;
      continue;
    }
    tx_with_peer_[slot] = 0;
    free_.push_back(slot);
    ++got;
  }
  return got;
}

uint16_t ShmPort::rx_burst(uint64_t now_ns, std::span<Frame*> out) {
  if (listen_fd_ >= 0) {
    if (now_ns < next_accept_ns_) return 0;
    next_accept_ns_ = now_ns + kAcceptEveryNs;
    try_accept();
    if (listen_fd_ >= 0) return 0;
  }
  // Slots our engine finished with since the last burst go back in one store.
  if (rx_returned_->head.load(std::memory_order_relaxed) != ret_head_)
    rx_returned_->head.store(ret_head_, std::memory_order_release);
  const uint32_t n = cfg_.slots;
  const uint32_t head = rx_sent_->head.load(std::memory_order_acquire);
  const uint32_t avail = head - rx_tail_;
  if (avail == 0) return 0;
  if (avail > n) {
    ++stats_.rx_bad_slot;
    rx_tail_ = head;
    return 0;
  }
  uint16_t got = 0;
  while (rx_tail_ != head && got < out.size()) {
    const uint64_t e = rx_sent_->entry[rx_tail_ & (n - 1)];
    ++rx_tail_;
    const uint32_t slot = static_cast<uint32_t>(e >> 32);
    const uint32_t len = static_cast<uint32_t>(e);
    if (slot >= n || len > max_frame_ || rx_held_[slot]) {
      ++stats_.rx_bad_slot;
      continue;
    }
    rx_held_[slot] = 1;
    Frame& f = rx_frames_[slot];
    f.len = len;
    f.cookie = &f;
    out[got++] = &f;
  }
  stats_.rx_frames += got;
  return got;
}

uint16_t ShmPort::tx_burst(uint64_t, std::span<Frame* const> frames) {
  const uint32_t n = cfg_.slots;
  const bool up = ctl_fd_ >= 0 && !gone_;
  for (Frame* f : frames) {
    if (f >= rx_frames_.data() && f < rx_frames_.data() + rx_frames_.size()) {
      // A received frame sent on (a decorator's doing): its slot is the peer's, so it
      // travels in one of ours.
      Frame* c = alloc_frame();
      if (c != nullptr) {
        std::memcpy(c->data, f->data, f->len);
        c->len = f->len;
      }
      free_frame(f);
      if (c == nullptr) {
        ++stats_.tx_dropped;
        continue;
      }
      f = c;
    }
    const auto slot = static_cast<uint32_t>(f - tx_frames_.data());
    if (!up) {  // nobody to send to: dropped, as on an unplugged cable
      free_.push_back(slot);
      ++stats_.tx_dropped;
      continue;
    }
    tx_with_peer_[slot] = 1;
    tx_sent_->entry[tx_head_ & (n - 1)] = uint64_t{slot} << 32 | std::min(f->len, max_frame_);
    ++tx_head_;
  }
  if (up) {
    tx_sent_->head.store(tx_head_, std::memory_order_release);
    stats_.tx_frames += frames.size();
  }
  return static_cast<uint16_t>(frames.size());
}

Frame* ShmPort::alloc_frame() {
  if (free_.empty() && take_returned() == 0) {
    // Every slot is with the peer. If it has gone, they will never come back: take them.
    if (!peer_gone()) return nullptr;
    for (uint32_t i = 0; i < cfg_.slots; ++i)
      if (tx_with_peer_[i]) {
        tx_with_peer_[i] = 0;
        free_.push_back(i);
      }
    if (free_.empty()) return nullptr;
  }
  const uint32_t slot = free_.back();
  free_.pop_back();
  Frame* f = &tx_frames_[slot];
  f->len = 0;
  f->cookie = f;
  return f;
}

void ShmPort::free_frame(Frame* f) {
  if (f >= rx_frames_.data() && f < rx_frames_.data() + rx_frames_.size()) {
    const auto slot = static_cast<uint32_t>(f - rx_frames_.data());
    rx_held_[slot] = 0;
    rx_returned_->entry[ret_head_ & (cfg_.slots - 1)] = uint64_t{slot} << 32;
    ++ret_head_;  // published by the next rx_burst
    return;
  }
  free_.push_back(static_cast<uint32_t>(f - tx_frames_.data()));
}

std::string ShmPort::describe() const {
  return "shm on " + cfg_.path + " (" +
         (ctl_fd_ >= 0 ? std::string("paired") : std::string("waiting for the peer")) + "; " +
         std::to_string(cfg_.slots) + " slots of " + std::to_string(slot_size_) +
         " B each way in a shared memfd, frames built and parsed in place; polled)";
}

}  // namespace uroce::drivers

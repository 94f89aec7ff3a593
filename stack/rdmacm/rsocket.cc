// rsockets (rsocket(7)): stream sockets carried over RDMA, in uroce's librdmacm.so.1, speaking
// rdma-core's rsocket protocol (librdmacm/docs/rsocket in rdma-core) so that either end may be
// rdma-core's own implementation. rdma-core's librspreload.so (LD_PRELOAD) turns an unmodified
// TCP program's socket calls into these.
//
// The protocol, in short. A connection is an RC QP set up by rdma_cm; the REQ and REP carry
// each side's ConnData: its receive credits, where its "target SGL" lives (an array of two
// Sge, registered for remote write) and the first half of its receive buffer. All traffic is
// RDMA WRITE WITH IMMEDIATE; the immediate's top three bits say what it is (Op below):
//  - data: the bytes went into the peer's current receive-buffer half (the Sge we hold for it),
//    and the low 29 bits are their count; the peer reads them in order;
//  - SGL (credit update): the low bits are the peer's new credit limit (a 16-bit message
//    sequence number). If the write carried 16 bytes, they are an Sge just written into our
//    target SGL: the peer's next free receive-buffer half. Halves are used whole, in turn;
//  - control: disconnect, shutdown (the peer sends no more), keepalive;
//  - iomap SGL: an entry of the peer's iomap (riomap) was written into ours.
// Every message consumes one posted receive (of no bytes), so a sender needs a credit and a
// non-empty target half to send. Four send-queue slots are kept for control messages.
//
// Threads: one mutex per socket; a call that must wait releases it while it sleeps in poll()
// on the CQ's completion channel, the rdma_cm event channel and the socket's wake eventfd.
// Whoever takes an event or a completion another sleeping thread may have been waiting for
// (a reader's data found by a writer's poll, a DISCONNECTED read by either) writes the wake
// fd. No service threads: a connection's CM events (ESTABLISHED, DISCONNECTED) are read
// whenever the socket is used or polled.
//
// Not supported (EOPNOTSUPP): datagram rsockets (SOCK_DGRAM; librspreload then falls back to
// the kernel's UDP), keepalive (SO_KEEPALIVE on), RDMA_ROUTE, AF_IB.
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

// ---- The wire protocol --------------------------------------------------------------------------

enum Op : uint32_t {
  kOpData = 0,
  kOpWrite = 2,  // never sent: marks a direct write's (riowrite) own completion
  kOpSgl = 4,
  kOpIomapSgl = 6,
  kOpCtrl = 7,
};
enum Ctrl : uint32_t { kCtrlDisconnect = 0, kCtrlKeepalive = 1, kCtrlShutdown = 2 };

constexpr uint32_t msg_of(uint32_t op, uint32_t data) { return op << 29 | (data & 0x1FFFFFFF); }
constexpr uint32_t op_of(uint32_t m) { return m >> 29; }
constexpr uint32_t data_of(uint32_t m) { return m & 0x1FFFFFFF; }

/// Where a peer may write: address, R_Key, length. In a ConnData in network order; written
/// into a target SGL or iomap in the receiver's byte order (the sender converts).
struct Sge {
  uint64_t addr;
  uint32_t key;
  uint32_t length;
};
struct IomapEntry {
  uint64_t offset;  // the riomap offset the buffer answers to
  Sge sge;
};
constexpr uint8_t kFlagNet = 1;    // the sender is big-endian
constexpr uint8_t kFlagIomap = 2;  // its iomap follows its target SGL
struct ConnData {
  uint8_t version;  // 1
  uint8_t flags;
  uint16_t credits;  // network order
  uint8_t reserved[3];
  uint8_t iomap_scale;  // iomap entries, scaled (scale_of)
  Sge target_sgl;       // length: entries
  Sge data_buf;         // the first receive-buffer half
};
static_assert(sizeof(Sge) == 16 && sizeof(IomapEntry) == 24 && sizeof(ConnData) == 40);

constexpr bool kBigEndian = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;

// An 8-bit field holds sizes up to 128 exactly and larger ones coarsely (rdma-core's scale).
int scale_of(int v) { return v <= 128 ? v : 128 | (v >> 8); }
int value_of(int s) { return s <= 128 ? s : (s & ~128) << 8; }

// rdma-core's defaults, so that both implementations size a connection alike.
constexpr uint32_t kSndLowat = 2048;      // a send waits for this much send buffer
constexpr uint32_t kFirstTransfer = 2048;  // a send's first write; each next one doubles...
constexpr uint32_t kMaxTransfer = 65536;   // ...up to this
constexpr uint32_t kQpMin = 16, kQpMax = 0xFFFE;
constexpr uint32_t kCtrlSlots = 4;  // send-queue slots kept for control messages
constexpr int kSglEntries = 2;
constexpr uint32_t kDefQueue = 384, kDefInline = 64, kDefMem = 1 << 17;
constexpr uint64_t kRecvWr = 1ull << 63;
constexpr int kResolveMs = 2000;
constexpr uint64_t kSpinNs = 20000;  // a wait polls this long before it sleeps

// ---- State ----------------------------------------------------------------------------------------

// State bits, as rdma-core orders them: passive, opening, connected, over.
enum : int {
  kBound = 0x1,
  kListening = 0x2,
  kOpening = 0x4,
  kConnected = 0x100,
  kWritable = 0x200,
  kReadable = 0x400,
  kConnectRdwr = kConnected | kWritable | kReadable,
  kConnectError = 0x800,
  kDisconnected = 0x1000,
  kError = 0x2000,
};
enum class Phase { kNone, kAddr, kRoute, kConnect };

struct Mapping {  // riomap
  uint64_t offset;
  ibv_mr* mr;
  int index;  // its entry in the peer's iomap; -1: local only
  bool announced;
};

struct Rs {
  int fd = -1;  // the socket's number: its event channel's descriptor
  std::mutex mu;
  int wake_fd = -1;  // eventfd: readable while it holds a wake-up for the threads asleep
  int sleepers = 0;  // threads asleep in poll() on this socket's descriptors
  rdma_event_channel* ch = nullptr;
  rdma_cm_id* id = nullptr;
  int state = 0;
  Phase phase = Phase::kNone;
  int err = 0;  // SO_ERROR
  int fs_flags = 0, fd_flags = 0;
  uint64_t so_opts = 0, tcp_opts = 0, ipv6_opts = 0;
  int ip_tos = 0;
  sockaddr_storage dst{};

  // Sizes, settable until the socket connects.
  uint32_t sq_size = kDefQueue, rq_size = kDefQueue, sq_inline = kDefInline;
  uint32_t sbuf_size = kDefMem, rbuf_size = kDefMem, iomap_size = 0;

  ibv_pd* pd = nullptr;
  ibv_comp_channel* cq_ch = nullptr;
  ibv_cq* cq = nullptr;
  bool armed = false;

  // Sending: a ring of sbuf_size bytes (plus control slots), the peer's receive halves.
  uint8_t* sbuf = nullptr;
  ibv_mr* smr = nullptr;
  uint32_t scur = 0, sbuf_avail = 0;
  int sqe_avail = 0;
  uint16_t sseq_no = 0, sseq_comp = 0;  // data messages sent; the peer's credit limit
  uint32_t ctrl_seqno = 0, ctrl_max = kCtrlSlots;
  Sge target[kSglEntries]{};  // the peer's receive halves we write into, our own copy
  int target_sge = 0;
  std::vector<IomapEntry> target_iomap;  // the peer's iomapped buffers
  Sge remote_sgl{}, remote_iomap{};      // where our announcements go in the peer
  int remote_sge = 1;
  int next_land = 1;  // the target SGL entry the peer writes next (entry 0 came in ConnData)
  bool swap = false;  // the peer's byte order differs

  // Where the peer writes its announcements: kSglEntries Sge, then iomap_size IomapEntry.
  uint8_t* land = nullptr;
  ibv_mr* land_mr = nullptr;

  // Receiving: rbuf_size bytes in two halves; the messages that arrived, in order.
  uint8_t* rbuf = nullptr;
  ibv_mr* rmr = nullptr;
  uint32_t rbuf_offset = 0, rbuf_free_offset = 0, rbuf_avail = 0;
  uint16_t rseq_no = 0, rseq_comp = 0;
  std::vector<uint32_t> rmsg;  // byte counts, a ring of rq_size + 1
  size_t rmsg_head = 0, rmsg_tail = 0;

  std::vector<Mapping> maps;
};

std::mutex g_mu;
auto* g_socks = new std::unordered_map<int, Rs*>;  // never freed: used until the process ends

Rs* lookup(int fd) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_socks->find(fd);
  return it == g_socks->end() ? nullptr : it->second;
}

int fail(int e) {
  errno = e;
  return -1;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

uint8_t* alloc_zeroed(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(n, 1)) != 0) return nullptr;
  std::memset(p, 0, n);
  return static_cast<uint8_t*>(p);
}

Rs* new_rs(const Rs* from) {
  auto* rs = new Rs;
  rs->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (from != nullptr) {  // a listener's sizes go to the sockets it accepts
    rs->sq_size = from->sq_size;
    rs->rq_size = from->rq_size;
    rs->sq_inline = from->sq_inline;
    rs->sbuf_size = from->sbuf_size;
    rs->rbuf_size = from->rbuf_size;
    rs->iomap_size = from->iomap_size;
    rs->fs_flags = from->fs_flags;
    rs->fd_flags = from->fd_flags;
  }
  return rs;
}

void free_rs(Rs* rs) {
  for (Mapping& m : rs->maps) ibv_dereg_mr(m.mr);
  if (rs->id != nullptr && rs->id->qp != nullptr) rdma_destroy_qp(rs->id);
  if (rs->cq != nullptr) ibv_destroy_cq(rs->cq);
  if (rs->cq_ch != nullptr) ibv_destroy_comp_channel(rs->cq_ch);
  for (ibv_mr* mr : {rs->smr, rs->rmr, rs->land_mr})
    if (mr != nullptr) ibv_dereg_mr(mr);
  free(rs->sbuf);
  free(rs->rbuf);
  free(rs->land);
  if (rs->wake_fd >= 0) close(rs->wake_fd);
  if (rs->pd != nullptr) ibv_dealloc_pd(rs->pd);
  if (rs->id != nullptr) rdma_destroy_id(rs->id);
  if (rs->ch != nullptr) {
    // rdma_destroy_event_channel keeps the struct (a program's other thread may still be on
    // its way into rdma_get_cm_event on it); nobody else knows an rsocket's channel.
    rdma_destroy_event_channel(rs->ch);
    delete rs->ch;
  }
  delete rs;
}

int add(Rs* rs) {
  rs->fd = rs->ch->fd;
  std::lock_guard<std::mutex> lock(g_mu);
  (*g_socks)[rs->fd] = rs;
  return rs->fd;
}

// ---- Posting ----------------------------------------------------------------------------------------

int post_write(Rs* rs, ibv_sge* sgl, int n, uint32_t m, bool with_imm, unsigned flags,
               uint64_t addr, uint32_t key) {
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = m;
  wr.sg_list = sgl;
  wr.num_sge = n;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = flags;
  wr.imm_data = htobe32(m);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = key;
  const int r = ibv_post_send(rs->id->qp, &wr, &bad);
  return r == 0 ? 0 : fail(r);
}

/// A message of no bytes (credits, control): addressed to the peer's target SGL, though a
/// write of no bytes is not checked against it.
int post_msg(Rs* rs, uint32_t m) {
  return post_write(rs, nullptr, 0, m, true, 0, rs->remote_sgl.addr, rs->remote_sgl.key);
}

int post_recv(Rs* rs) {
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = kRecvWr;
  const int r = ibv_post_recv(rs->id->qp, &wr, &bad);
  return r == 0 ? 0 : fail(r);
}

Sge to_peer(const Rs* rs, Sge s) {  // in the peer's byte order
  if (rs->swap) {
    s.addr = __builtin_bswap64(s.addr);
    s.key = __builtin_bswap32(s.key);
    s.length = __builtin_bswap32(s.length);
  }
  return s;
}

/// Copies `len` bytes (gathered by `fill`) into the send ring: one or two SGEs.
template <class Fill>
int to_ring(Rs* rs, uint32_t len, ibv_sge sge[2], Fill fill) {
  const uint32_t to_end = rs->sbuf_size - rs->scur;
  sge[0] = {reinterpret_cast<uintptr_t>(rs->sbuf + rs->scur), std::min(len, to_end),
            rs->smr->lkey};
  fill(rs->sbuf + rs->scur, sge[0].length);
  if (len < to_end) {
    rs->scur += len;
    return 1;
  }
  rs->scur = len - to_end;
  if (len == to_end) return 1;
  sge[1] = {reinterpret_cast<uintptr_t>(rs->sbuf), len - to_end, rs->smr->lkey};
  fill(rs->sbuf, sge[1].length);
  return 2;
}

// ---- Credits and completions ---------------------------------------------------------------------

bool ctrl_avail(const Rs* rs) { return rs->ctrl_seqno != rs->ctrl_max; }

/// Gives the peer credits and, when a receive half is free, the half: once half the receive
/// queue was consumed since the last update, or half the buffer is free.
void update_credits(Rs* rs) {
  const uint32_t half = rs->rbuf_size / 2;
  const bool buffer = rs->rbuf_avail >= half;
  if (!(buffer || static_cast<int16_t>(rs->rseq_no - rs->rseq_comp) >= 0) || !ctrl_avail(rs) ||
      !(rs->state & kConnected))
    return;
  ++rs->ctrl_seqno;
  rs->rseq_comp = static_cast<uint16_t>(rs->rseq_no + rs->rq_size / 2);
  const uint32_t m = msg_of(kOpSgl, static_cast<uint32_t>(rs->rseq_no + rs->rq_size));
  if (!buffer) {
    post_msg(rs, m);
    return;
  }
  const Sge s = to_peer(
      rs, Sge{reinterpret_cast<uintptr_t>(rs->rbuf + rs->rbuf_free_offset), rs->rmr->rkey, half});
  ibv_sge sge{};
  unsigned flags = IBV_SEND_INLINE;
  if (rs->sq_inline >= sizeof s) {
    sge = {reinterpret_cast<uintptr_t>(&s), sizeof s, 0};
  } else {  // a control slot after the ring, one per outstanding control message
    uint8_t* slot = rs->sbuf + rs->sbuf_size + sizeof(Sge) * (rs->ctrl_seqno % kCtrlSlots);
    std::memcpy(slot, &s, sizeof s);
    sge = {reinterpret_cast<uintptr_t>(slot), sizeof s, rs->smr->lkey};
    flags = 0;
  }
  post_write(rs, &sge, 1, m, true, flags, rs->remote_sgl.addr + rs->remote_sge * sizeof(Sge),
             rs->remote_sgl.key);
  rs->rbuf_avail -= half;
  rs->rbuf_free_offset = (rs->rbuf_free_offset + half) % rs->rbuf_size;
  rs->remote_sge = (rs->remote_sge + 1) % static_cast<int>(rs->remote_sgl.length);
}

/// The peer wrote a receive half into our target SGL (an SGL message that carried 16 bytes):
/// take it. The peer writes the entries in turn, starting with entry 1 (entry 0 came in its
/// ConnData), so this message wrote `next_land`; its completion is seen only once it is
/// written whole, and the peer writes that entry again only after we filled the half it names.
void take_target(Rs* rs) {
  std::atomic_thread_fence(std::memory_order_acquire);
  const int i = rs->next_land;
  std::memcpy(&rs->target[i], rs->land + i * sizeof(Sge), sizeof(Sge));
  rs->next_land = (i + 1) % kSglEntries;
}

void take_iomap(Rs* rs, uint32_t index) {
  if (index >= rs->target_iomap.size()) return;  // beyond what we offered: ignored
  std::atomic_thread_fence(std::memory_order_acquire);
  std::memcpy(&rs->target_iomap[index], rs->land + kSglEntries * sizeof(Sge) +
                                            index * sizeof(IomapEntry),
              sizeof(IomapEntry));
}

void protocol_error(Rs* rs) {
  rs->state = kError;
  rs->err = EPROTO;
}

void on_message(Rs* rs, uint32_t m, uint32_t byte_len) {
  switch (op_of(m)) {
    case kOpData: {
      // A message is at most a receive half; and never more than the credits let the peer
      // have outstanding: a peer that breaks either rule ends the connection.
      const size_t ring = rs->rmsg.size();
      if (data_of(m) > rs->rbuf_size / 2 || (rs->rmsg_tail + 1) % ring == rs->rmsg_head) {
        protocol_error(rs);
        return;
      }
      rs->rmsg[rs->rmsg_tail] = data_of(m);
      rs->rmsg_tail = (rs->rmsg_tail + 1) % ring;
      return;
    }
    case kOpSgl:
      rs->sseq_comp = static_cast<uint16_t>(data_of(m));
      if (byte_len == sizeof(Sge)) take_target(rs);
      return;
    case kOpIomapSgl: take_iomap(rs, data_of(m) & 0xFFFF); return;
    case kOpCtrl:
      if (data_of(m) == kCtrlDisconnect) {
        rs->state = kDisconnected;
      } else if (data_of(m) == kCtrlShutdown) {
        if (rs->state & kWritable)
          rs->state &= ~kReadable;
        else
          rs->state = kDisconnected;
      }
      return;  // keepalive: nothing to do
    default: return;  // reserved
  }
}

void on_sent(Rs* rs, const ibv_wc& wc) {
  const auto m = static_cast<uint32_t>(wc.wr_id);
  switch (op_of(m)) {
    case kOpSgl: ++rs->ctrl_max; break;
    case kOpCtrl:
      ++rs->ctrl_max;
      if (data_of(m) == kCtrlDisconnect) rs->state = kDisconnected;
      break;
    case kOpIomapSgl:
      ++rs->sqe_avail;
      rs->sbuf_avail += static_cast<uint32_t>(sizeof(IomapEntry));
      break;
    default:  // data, direct writes
      ++rs->sqe_avail;
      rs->sbuf_avail += data_of(m);
      break;
  }
  if (wc.status != IBV_WC_SUCCESS && (rs->state & kConnected)) {
    rs->state = kError;
    rs->err = EIO;
  }
}

/// The completions there are, handled; returns how many.
int poll_cq(Rs* rs) {
  if (rs->cq == nullptr) return 0;
  ibv_wc wc[16];
  int n, received = 0, total = 0;
  while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
    total += n;
    for (int i = 0; i < n; ++i) {
      if (!(wc[i].wr_id & kRecvWr)) {
        on_sent(rs, wc[i]);
      } else if (wc[i].status == IBV_WC_SUCCESS) {
        ++received;
        if (wc[i].wc_flags & IBV_WC_WITH_IMM)
          on_message(rs, be32toh(wc[i].imm_data), wc[i].byte_len);
      }
    }
  }
  if (!(rs->state & kConnected)) return total;
  while (received-- > 0) {
    if (post_recv(rs) != 0) {
      rs->state = kError;
      rs->err = errno;
      break;
    }
  }
  return total;
}

// ---- Setting up a connection --------------------------------------------------------------------

/// The QP, its CQ and the three buffers, and the receives posted.
int create_ep(Rs* rs) {
  ibv_context* verbs = rs->id->verbs;
  ibv_device_attr da{};
  if (ibv_query_device(verbs, &da) != 0) return -1;
  const uint32_t max_q = std::min<uint32_t>(static_cast<uint32_t>(da.max_qp_wr), kQpMax);
  rs->sq_size = std::clamp(rs->sq_size, kQpMin, max_q);
  rs->rq_size = std::clamp(rs->rq_size, kQpMin, max_q);
  rs->pd = ibv_alloc_pd(verbs);
  if (rs->pd == nullptr) return -1;
  rs->cq_ch = ibv_create_comp_channel(verbs);
  if (rs->cq_ch == nullptr) return -1;
  set_nonblock(rs->cq_ch->fd);
  rs->cq = ibv_create_cq(verbs, static_cast<int>(rs->sq_size + rs->rq_size), rs, rs->cq_ch, 0);
  if (rs->cq == nullptr) return -1;
  ibv_qp_init_attr qa{};
  qa.qp_context = rs;
  qa.send_cq = qa.recv_cq = rs->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = rs->sq_size;
  qa.cap.max_recv_wr = rs->rq_size;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = rs->sq_inline;
  if (rdma_create_qp(rs->id, rs->pd, &qa) != 0) return -1;
  rs->sq_inline = qa.cap.max_inline_data;

  const size_t sbytes = rs->sbuf_size + sizeof(Sge) * kCtrlSlots;
  const size_t lbytes = kSglEntries * sizeof(Sge) + rs->iomap_size * sizeof(IomapEntry);
  rs->sbuf = alloc_zeroed(sbytes);
  rs->rbuf = alloc_zeroed(rs->rbuf_size);
  rs->land = alloc_zeroed(lbytes);
  if (rs->sbuf == nullptr || rs->rbuf == nullptr || rs->land == nullptr) return fail(ENOMEM);
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  rs->smr = ibv_reg_mr(rs->pd, rs->sbuf, sbytes, IBV_ACCESS_LOCAL_WRITE);
  rs->rmr = ibv_reg_mr(rs->pd, rs->rbuf, rs->rbuf_size, remote);
  rs->land_mr = ibv_reg_mr(rs->pd, rs->land, lbytes, remote);
  if (rs->smr == nullptr || rs->rmr == nullptr || rs->land_mr == nullptr) return -1;
  rs->target_iomap.assign(rs->iomap_size, IomapEntry{});
  rs->rmsg.assign(rs->rq_size + 1, 0);

  rs->scur = 0;
  rs->sbuf_avail = rs->sbuf_size;
  rs->rbuf_free_offset = rs->rbuf_avail = rs->rbuf_size / 2;
  rs->sqe_avail = static_cast<int>(rs->sq_size - rs->ctrl_max);
  rs->rseq_comp = static_cast<uint16_t>(rs->rq_size / 2);
  for (uint32_t i = 0; i < rs->rq_size; ++i)
    if (post_recv(rs) != 0) return -1;
  return 0;
}

ConnData conn_data(const Rs* rs) {
  ConnData c{};
  c.version = 1;
  c.flags = kFlagIomap | (kBigEndian ? kFlagNet : 0);
  c.credits = htobe16(static_cast<uint16_t>(rs->rq_size));
  c.iomap_scale = static_cast<uint8_t>(scale_of(static_cast<int>(rs->iomap_size)));
  c.target_sgl = {htobe64(reinterpret_cast<uintptr_t>(rs->land)), htobe32(rs->land_mr->rkey),
                  htobe32(kSglEntries)};
  c.data_buf = {htobe64(reinterpret_cast<uintptr_t>(rs->rbuf)), htobe32(rs->rmr->rkey),
                htobe32(rs->rbuf_size / 2)};
  return c;
}

/// The peer's ConnData (a REQ's or REP's private data); false if it is not one.
bool save_conn_data(Rs* rs, const void* pdata, size_t len) {
  ConnData c;
  if (pdata == nullptr || len < sizeof c) return false;
  std::memcpy(&c, pdata, sizeof c);
  if (c.version != 1 || be32toh(c.target_sgl.length) == 0) return false;
  rs->remote_sgl = {be64toh(c.target_sgl.addr), be32toh(c.target_sgl.key),
                    be32toh(c.target_sgl.length)};
  rs->remote_sge = 1 % static_cast<int>(rs->remote_sgl.length);
  rs->swap = ((c.flags & kFlagNet) != 0) != kBigEndian;
  if (c.flags & kFlagIomap)
    rs->remote_iomap = {rs->remote_sgl.addr + sizeof(Sge) * rs->remote_sgl.length,
                        rs->remote_sgl.key, static_cast<uint32_t>(value_of(c.iomap_scale))};
  rs->target[0] = {be64toh(c.data_buf.addr), be32toh(c.data_buf.key), be32toh(c.data_buf.length)};
  rs->target_sge = 0;
  rs->sseq_comp = be16toh(c.credits);
  return true;
}

void connect_failed(Rs* rs, int e) {
  rs->state = kConnectError;
  rs->phase = Phase::kNone;
  rs->err = e;
}

int event_errno(const rdma_cm_event* ev) {
  if (ev->event == RDMA_CM_EVENT_REJECTED) return ECONNREFUSED;
  if (ev->status < 0) return -ev->status;
  return ev->event == RDMA_CM_EVENT_UNREACHABLE ? EHOSTUNREACH : ETIMEDOUT;
}

/// One step of an active open, on the event `ev`.
void connect_step(Rs* rs, const rdma_cm_event* ev) {
  switch (rs->phase) {
    case Phase::kAddr:
      if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED) return connect_failed(rs, event_errno(ev));
      if (rdma_resolve_route(rs->id, kResolveMs) != 0) return connect_failed(rs, errno);
      rs->phase = Phase::kRoute;
      return;
    case Phase::kRoute: {
      if (ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED) return connect_failed(rs, event_errno(ev));
      if (create_ep(rs) != 0) return connect_failed(rs, errno);
      const ConnData c = conn_data(rs);
      rdma_conn_param p{};
      p.private_data = &c;
      p.private_data_len = sizeof c;
      p.flow_control = 1;
      p.retry_count = 7;
      p.rnr_retry_count = 7;  // "infinite": a peer's receives come back as it reads
      if (rdma_connect(rs->id, &p) != 0) return connect_failed(rs, errno);
      rs->phase = Phase::kConnect;
      return;
    }
    case Phase::kConnect:
      if (ev->event != RDMA_CM_EVENT_ESTABLISHED) return connect_failed(rs, event_errno(ev));
      if (!save_conn_data(rs, ev->param.conn.private_data, ev->param.conn.private_data_len))
        return connect_failed(rs, EPROTO);
      rs->state = kConnectRdwr;
      rs->phase = Phase::kNone;
      return;
    case Phase::kNone: return;
  }
}

/// Wakes the threads asleep on the socket: something they may wait for has been taken.
void kick(Rs* rs) {
  if (rs->sleepers == 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t r = write(rs->wake_fd, &one, sizeof one);
}

/// Reads the connection's rdma_cm events (never a listener's: raccept reads those); returns
/// how many.
int handle_cm(Rs* rs) {
  if (rs->state & kListening) return 0;
  int n = 0;
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(rs->ch, &ev) == 0) {
    ++n;
    if (rs->state & kOpening)
      connect_step(rs, ev);
    else if (ev->event == RDMA_CM_EVENT_DISCONNECTED && (rs->state & kConnected))
      rs->state = kDisconnected;
    else if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && (rs->state & kConnected))
      rs->state = kError, rs->err = ENODEV;
    rdma_ack_cm_event(ev);
  }
  return n;
}

void progress(Rs* rs) {
  const int events = handle_cm(rs);
  update_credits(rs);
  const int completions = poll_cq(rs);
  update_credits(rs);
  if (events + completions > 0) kick(rs);
}

/// Takes a completion event if one is there (the channel is non-blocking): true if it did
/// (the CQ must be armed again). Asking also tells uroce's progress thread that the
/// application is about to sleep.
bool take_cq_event(Rs* rs) {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  if (rs->cq_ch == nullptr || ibv_get_cq_event(rs->cq_ch, &cq, &ctx) != 0) return false;
  ibv_ack_cq_events(cq, 1);
  rs->armed = false;
  kick(rs);  // a thread asleep on the CQ will not hear it now
  return true;
}

/// Enters (true) and leaves (false) a sleep on the socket's descriptors, under its lock. The
/// wake fd is emptied by the last sleeper to leave, so that no sleeper misses a wake-up.
void sleeping(Rs* rs, bool enter) {
  if (enter) {
    ++rs->sleepers;
    return;
  }
  if (--rs->sleepers == 0) {
    uint64_t n;
    [[maybe_unused]] const ssize_t r = read(rs->wake_fd, &n, sizeof n);
  }
}

/// Sleeps (the socket's lock released) until its rdma_cm channel, its CQ if armed, or its
/// wake fd has something.
void sleep_on(Rs* rs, std::unique_lock<std::mutex>& lock) {
  if (rs->armed && take_cq_event(rs)) return;  // an event was there: poll and arm again first
  pollfd p[3] = {{rs->ch->fd, POLLIN, 0},
                 {rs->armed ? rs->cq_ch->fd : -1, POLLIN, 0},
                 {rs->wake_fd, POLLIN, 0}};
  sleeping(rs, true);
  lock.unlock();
  ::poll(p, 3, -1);
  lock.lock();
  sleeping(rs, false);
  if (p[1].revents & POLLIN) take_cq_event(rs);
}

/// Makes progress until test(rs), waiting unless `nonblock` (then EWOULDBLOCK).
template <class Test>
int wait_for(Rs* rs, std::unique_lock<std::mutex>& lock, bool nonblock, Test test) {
  uint64_t spin_end = 0;
  for (;;) {
    progress(rs);
    if (test(rs)) return 0;
    if (nonblock) return fail(EWOULDBLOCK);
    const uint64_t t = now_ns();
    if (spin_end == 0) spin_end = t + kSpinNs;
    if (t < spin_end) continue;
    if (rs->cq != nullptr && !rs->armed && (rs->state & kConnected)) {
      ibv_req_notify_cq(rs->cq, 0);
      rs->armed = true;
      continue;  // what completed before the arming is polled once more
    }
    sleep_on(rs, lock);
  }
}

/// Drives an active open; blocks until it ends unless `nonblock` (then EINPROGRESS).
int do_connect(Rs* rs, std::unique_lock<std::mutex>& lock, bool nonblock) {
  if (rs->phase == Phase::kNone && (rs->state & kOpening)) {
    const sockaddr* src = rs->id->route.addr.src_addr.sa_family != 0 ? &rs->id->route.addr.src_addr
                                                                     : nullptr;
    if (rdma_resolve_addr(rs->id, const_cast<sockaddr*>(src),
                          reinterpret_cast<sockaddr*>(&rs->dst), kResolveMs) != 0) {
      connect_failed(rs, errno);
      return fail(rs->err);
    }
    rs->phase = Phase::kAddr;
  }
  for (;;) {
    handle_cm(rs);
    if (!(rs->state & kOpening)) break;
    if (nonblock) return fail(EINPROGRESS);
    sleep_on(rs, lock);
  }
  if (rs->state & kConnected) return 0;
  return fail(rs->err != 0 ? rs->err : ECONNREFUSED);
}

/// A call on a socket still connecting (non-blocking): one more step, EAGAIN if not done.
int finish_connect(Rs* rs, std::unique_lock<std::mutex>& lock, bool nonblock) {
  if (!(rs->state & kOpening)) return 0;
  if (do_connect(rs, lock, nonblock) == 0) return 0;
  if (errno == EINPROGRESS) errno = EAGAIN;
  return -1;
}

bool nonblocking(const Rs* rs, int flags) {
  return (rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

bool can_send(const Rs* rs) {
  return rs->sqe_avail > 0 && rs->sbuf_avail >= kSndLowat && rs->sseq_no != rs->sseq_comp &&
         rs->target[rs->target_sge].length != 0;
}
bool have_rdata(const Rs* rs) { return rs->rmsg_head != rs->rmsg_tail; }

// ---- Moving bytes ----------------------------------------------------------------------------------

/// A position in an iovec array.
struct Iov {
  const iovec* v;
  int n;
  size_t off = 0;
  size_t total() const {
    size_t t = 0;
    for (int i = 0; i < n; ++i) t += v[i].iov_len;
    return t;
  }
  void skip_empty() {
    while (n > 0 && off == v->iov_len) ++v, --n, off = 0;
  }
  const uint8_t* contiguous(size_t len) {  // the next len bytes, if in one piece
    skip_empty();
    return n > 0 && v->iov_len - off >= len ? static_cast<const uint8_t*>(v->iov_base) + off
                                            : nullptr;
  }
  void gather(uint8_t* dst, size_t len) {
    while (len > 0) {
      skip_empty();
      const size_t k = std::min(len, v->iov_len - off);
      std::memcpy(dst, static_cast<const uint8_t*>(v->iov_base) + off, k);
      dst += k, off += k, len -= k;
    }
  }
  void scatter(const uint8_t* src, size_t len) {
    while (len > 0) {
      skip_empty();
      const size_t k = std::min(len, v->iov_len - off);
      std::memcpy(static_cast<uint8_t*>(v->iov_base) + off, src, k);
      src += k, off += k, len -= k;
    }
  }
};

/// Announces the riomap'ed buffers not yet announced (before any data, as rdma-core).
int send_iomaps(Rs* rs, std::unique_lock<std::mutex>& lock, bool nonblock) {
  for (size_t i = 0; i < rs->maps.size(); ++i) {
    if (rs->maps[i].index < 0 || rs->maps[i].announced) continue;
    if (!can_send(rs)) {
      // (the lock is let go meanwhile: riomap/riounmap may change the list)
      if (wait_for(rs, lock, nonblock,
                   [](const Rs* r) { return can_send(r) || !(r->state & kWritable); }) != 0)
        return -1;
      if (!(rs->state & kWritable)) return fail(ECONNRESET);
      --i;  // look at this place again
      continue;
    }
    Mapping& m = rs->maps[i];
    IomapEntry e{m.offset, {reinterpret_cast<uintptr_t>(m.mr->addr), m.mr->rkey,
                            static_cast<uint32_t>(m.mr->length)}};
    if (rs->swap) {
      e.offset = __builtin_bswap64(e.offset);
      e.sge = to_peer(rs, e.sge);
    }
    ++rs->sseq_no;
    --rs->sqe_avail;
    rs->sbuf_avail -= static_cast<uint32_t>(sizeof e);
    ibv_sge sge[2];
    int n = 1;
    unsigned flags = 0;
    if (rs->sq_inline >= sizeof e) {
      sge[0] = {reinterpret_cast<uintptr_t>(&e), sizeof e, 0};
      flags = IBV_SEND_INLINE;
    } else {
      n = to_ring(rs, sizeof e, sge, [&e, done = size_t{0}](uint8_t* dst, size_t k) mutable {
        std::memcpy(dst, reinterpret_cast<const uint8_t*>(&e) + done, k);
        done += k;
      });
    }
    m.announced = true;
    if (post_write(rs, sge, n, msg_of(kOpIomapSgl, static_cast<uint32_t>(m.index)), true, flags,
                   rs->remote_iomap.addr + m.index * sizeof(IomapEntry), rs->remote_iomap.key) != 0)
      return -1;
  }
  return 0;
}

/// The next write's size: 2 KiB, doubling to 64 KiB, within what may be sent now.
uint32_t next_size(const Rs* rs, uint32_t* olen, size_t left, uint64_t limit) {
  uint64_t x = left;
  if (*olen < left) {
    x = *olen;
    if (*olen < kMaxTransfer) *olen <<= 1;
  }
  return static_cast<uint32_t>(std::min<uint64_t>({x, rs->sbuf_avail, limit}));
}

/// rsend/rsendmsg/riowrite: `direct` null sends data into the peer's receive halves, else
/// writes it straight into the peer's iomapped buffer at `offset`.
ssize_t send_common(Rs* rs, Iov iov, int flags, bool direct, off_t offset) {
  std::unique_lock<std::mutex> lock(rs->mu);
  if (finish_connect(rs, lock, nonblocking(rs, flags)) != 0) return -1;
  if (!(rs->state & (kConnected | kDisconnected | kError))) return fail(ENOTCONN);
  const size_t len = iov.total();
  size_t left = len;
  int ret = send_iomaps(rs, lock, nonblocking(rs, flags));
  uint32_t olen = kFirstTransfer;
  while (ret == 0 && left > 0) {
    if (!(rs->state & kWritable)) {
      ret = fail(rs->state & kConnected ? EPIPE : ECONNRESET);
      break;
    }
    const IomapEntry* dest = nullptr;
    if (direct) {
      for (const IomapEntry& e : rs->target_iomap)
        if (static_cast<uint64_t>(offset) >= e.offset &&
            static_cast<uint64_t>(offset) < e.offset + e.sge.length)
          dest = &e;
      if (dest == nullptr) break;  // past every mapping: a short write, as rdma-core's
    }
    if (!can_send(rs)) {
      ret = wait_for(rs, lock, nonblocking(rs, flags),
                     [](const Rs* r) { return can_send(r) || !(r->state & kWritable); });
      continue;
    }
    const uint64_t room = direct ? dest->offset + dest->sge.length - static_cast<uint64_t>(offset)
                                 : rs->target[rs->target_sge].length;
    const uint32_t x = next_size(rs, &olen, left, room);
    ibv_sge sge[2];
    int n = 1;
    unsigned wflags = x <= rs->sq_inline ? IBV_SEND_INLINE : 0;
    if (const uint8_t* p = x <= rs->sq_inline ? iov.contiguous(x) : nullptr) {
      sge[0] = {reinterpret_cast<uintptr_t>(p), x, 0};
      iov.off += x;
    } else {
      n = to_ring(rs, x, sge, [&iov](uint8_t* dst, size_t k) { iov.gather(dst, k); });
    }
    --rs->sqe_avail;
    rs->sbuf_avail -= x;
    if (direct) {
      ret = post_write(rs, sge, n, msg_of(kOpWrite, x), false, wflags,
                       dest->sge.addr + (static_cast<uint64_t>(offset) - dest->offset),
                       dest->sge.key);
      offset += x;
    } else {
      // Our copy of the half moves on before the write is posted: the peer may name the next
      // half as soon as this one is full.
      Sge& t = rs->target[rs->target_sge];
      const uint64_t addr = t.addr;
      const uint32_t key = t.key;
      t.addr += x;
      t.length -= x;
      if (t.length == 0) rs->target_sge = (rs->target_sge + 1) % kSglEntries;
      ++rs->sseq_no;
      ret = post_write(rs, sge, n, msg_of(kOpData, x), true, wflags, addr, key);
    }
    if (ret == 0) left -= x;
  }
  return (ret != 0 && left == len) ? -1 : static_cast<ssize_t>(len - left);
}

/// Copies (or with MSG_PEEK, looks at) up to iov's length of what arrived.
ssize_t recv_common(Rs* rs, Iov iov, int flags) {
  std::unique_lock<std::mutex> lock(rs->mu);
  if (finish_connect(rs, lock, nonblocking(rs, flags)) != 0) return -1;
  if (!(rs->state & (kConnected | kDisconnected | kError))) return fail(ENOTCONN);
  const size_t len = iov.total();
  size_t left = len;
  int ret = 0;
  do {
    if (!have_rdata(rs)) {
      ret = wait_for(rs, lock, nonblocking(rs, flags),
                     [](const Rs* r) { return have_rdata(r) || !(r->state & kReadable); });
      if (ret != 0) break;
    }
    const bool peek = flags & MSG_PEEK;
    size_t head = rs->rmsg_head;
    uint32_t offset = rs->rbuf_offset;
    while (left > 0 && head != rs->rmsg_tail) {
      uint32_t& avail = rs->rmsg[head];
      const auto k = static_cast<uint32_t>(std::min<size_t>(left, avail));
      const uint32_t to_end = rs->rbuf_size - offset;  // a message wraps at most once
      iov.scatter(rs->rbuf + offset, std::min(k, to_end));
      if (k > to_end) iov.scatter(rs->rbuf, k - to_end);
      offset = (offset + k) % rs->rbuf_size;
      left -= k;
      if (peek) {
        if (k == avail) head = (head + 1) % rs->rmsg.size();
        continue;
      }
      rs->rbuf_avail += k;
      avail -= k;
      if (avail == 0) {
        ++rs->rseq_no;
        head = (head + 1) % rs->rmsg.size();
      }
    }
    if (peek) break;
    rs->rmsg_head = head;
    rs->rbuf_offset = offset;
    update_credits(rs);
  } while (left > 0 && (flags & MSG_WAITALL) && (rs->state & kReadable));
  return (ret != 0 && left == len) ? -1 : static_cast<ssize_t>(len - left);
}

// ---- rpoll ------------------------------------------------------------------------------------------

/// What `events` an rsocket has now (after making progress without waiting).
short poll_rs(Rs* rs, short events) {
  std::unique_lock<std::mutex> lock(rs->mu);
  if (rs->state & kListening) {
    pollfd p{rs->ch->fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 ? static_cast<short>(events & POLLIN) : 0;
  }
  if (rs->state & kOpening) do_connect(rs, lock, true);
  if (rs->state & (kConnected | kDisconnected | kError)) {
    progress(rs);
    short rev = 0;
    if ((events & POLLIN) && (have_rdata(rs) || !(rs->state & kReadable))) rev |= POLLIN;
    if ((events & POLLOUT) && can_send(rs) && (rs->state & kWritable)) rev |= POLLOUT;
    // A hang-up shows once what arrived before it was read, as with the kernel's TCP
    // (rdma-core's rsockets report it at once, and rstream -T a then fails its last read).
    if (rs->state & kError)
      rev |= POLLERR;
    else if (!(rs->state & kConnected) && !have_rdata(rs))
      rev |= POLLHUP;
    return rev;
  }
  if (rs->state & kConnectError) return static_cast<short>((events & (POLLIN | POLLOUT)) | POLLERR);
  return 0;
}

int check_all(pollfd* fds, nfds_t n) {
  int cnt = 0;
  for (nfds_t i = 0; i < n; ++i) {
    fds[i].revents = 0;
    if (fds[i].fd < 0) continue;
    if (Rs* rs = lookup(fds[i].fd))
      fds[i].revents = poll_rs(rs, fds[i].events);
    else
      ::poll(&fds[i], 1, 0);
    if (fds[i].revents != 0) ++cnt;
  }
  return cnt;
}

/// An accepted connection's ESTABLISHED (true), or the event that ended it instead.
bool established(Rs* rs) {
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(rs->ch, &ev) != 0) {
      if (errno != EAGAIN) return false;
      pollfd p{rs->ch->fd, POLLIN, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    const rdma_cm_event_type t = ev->event;
    rdma_ack_cm_event(ev);
    return t == RDMA_CM_EVENT_ESTABLISHED;
  }
}

}  // namespace

extern "C" {

int rsocket(int domain, int type, int protocol) {
  const int kind = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
  if ((domain != AF_INET && domain != AF_INET6) || kind != SOCK_STREAM ||
      (protocol != 0 && protocol != IPPROTO_TCP))
    return fail(EOPNOTSUPP);
  Rs* rs = new_rs(nullptr);
  rs->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
  rs->fs_flags = (type & SOCK_NONBLOCK) ? O_NONBLOCK : 0;
  rs->ch = rdma_create_event_channel();
  if (rs->ch == nullptr || rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP) != 0) {
    const int e = errno;
    free_rs(rs);
    return fail(e);
  }
  set_nonblock(rs->ch->fd);
  return add(rs);
}

int rbind(int socket, const sockaddr* addr, socklen_t addrlen) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (addr == nullptr || addrlen < sizeof(sockaddr_in)) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(rs->mu);
  if (rs->state != 0) return fail(EINVAL);
  if (rdma_bind_addr(rs->id, const_cast<sockaddr*>(addr)) != 0) return -1;
  rs->state = kBound;
  return 0;
}

int rlisten(int socket, int backlog) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  std::lock_guard<std::mutex> lock(rs->mu);
  if (rs->state & kListening) return 0;
  if (rs->state & ~kBound) return fail(EINVAL);
  if (rdma_listen(rs->id, backlog) != 0) return -1;
  rs->state = kListening;
  return 0;
}

int raccept(int socket, sockaddr* addr, socklen_t* addrlen) {
  Rs* ls = lookup(socket);
  if (ls == nullptr) return fail(EBADF);
  std::unique_lock<std::mutex> lock(ls->mu);
  if (!(ls->state & kListening)) return fail(EINVAL);
  for (;;) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ls->ch, &ev) != 0) {
      if (errno != EAGAIN) return -1;
      if (ls->fs_flags & O_NONBLOCK) return fail(EAGAIN);
      pollfd p{ls->ch->fd, POLLIN, 0};
      lock.unlock();
      ::poll(&p, 1, -1);
      lock.lock();
      continue;
    }
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(ev);
      continue;
    }
    rdma_cm_id* id = ev->id;
    uint8_t pdata[sizeof(ConnData)] = {};
    const size_t plen = std::min<size_t>(ev->param.conn.private_data_len, sizeof pdata);
    if (ev->param.conn.private_data != nullptr) std::memcpy(pdata, ev->param.conn.private_data, plen);
    const uint8_t resp_res = ev->param.conn.responder_resources;
    const uint8_t init_depth = ev->param.conn.initiator_depth;
    rdma_ack_cm_event(ev);

    Rs* rs = new_rs(ls);
    rs->id = id;
    id->context = rs;
    rs->ch = rdma_create_event_channel();
    bool ok = rs->ch != nullptr && rdma_migrate_id(id, rs->ch) == 0;
    if (ok) set_nonblock(rs->ch->fd);
    ok = ok && save_conn_data(rs, pdata, plen) && create_ep(rs) == 0;
    if (ok) {
      const ConnData c = conn_data(rs);
      rdma_conn_param p{};
      p.private_data = &c;
      p.private_data_len = sizeof c;
      p.responder_resources = resp_res;
      p.initiator_depth = init_depth;
      p.flow_control = 1;
      p.rnr_retry_count = 7;
      ok = rdma_accept(id, &p) == 0;
    }
    if (!ok) {
      rdma_reject(id, nullptr, 0);
      free_rs(rs);
      continue;
    }
    // Until the RTU: the active side's QP takes our first message (credits) only once it
    // is ready to receive, and a retransmission would cost a timeout. (Also on a
    // non-blocking listener: an RTU follows its REP at once. The listener is let go
    // meanwhile: an rpoll on it, or another raccept, need not wait for this one.)
    lock.unlock();
    const bool up = established(rs);
    lock.lock();
    if (!up) {
      free_rs(rs);
      continue;
    }
    rs->state = kConnectRdwr;
    add(rs);
    if (addr != nullptr && addrlen != nullptr) rgetpeername(rs->fd, addr, addrlen);
    return rs->fd;
  }
}

int rconnect(int socket, const sockaddr* addr, socklen_t addrlen) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  std::unique_lock<std::mutex> lock(rs->mu);
  if (rs->state & kOpening) return do_connect(rs, lock, (rs->fs_flags & O_NONBLOCK) != 0);
  if (rs->state & kConnected) return fail(EISCONN);
  if (rs->state & ~kBound) return fail(EINVAL);
  if (addr == nullptr || addrlen < sizeof(sockaddr_in) || addrlen > sizeof rs->dst)
    return fail(EINVAL);
  std::memcpy(&rs->dst, addr, addrlen);
  rs->state = kOpening;
  return do_connect(rs, lock, (rs->fs_flags & O_NONBLOCK) != 0);
}

int rshutdown(int socket, int how) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) return fail(EINVAL);
  std::unique_lock<std::mutex> lock(rs->mu);
  if (!(rs->state & (kConnected | kDisconnected | kError))) return fail(ENOTCONN);
  if (rs->state & kConnected) {
    uint32_t ctrl = kCtrlDisconnect;
    if (how == SHUT_RDWR) {
      rs->state &= ~(kReadable | kWritable);
    } else if (how == SHUT_WR) {
      rs->state &= ~kWritable;
      if (rs->state & kReadable) ctrl = kCtrlShutdown;
    } else {
      rs->state &= ~kReadable;
      if (rs->state & kWritable) return 0;
    }
    if (!ctrl_avail(rs))
      wait_for(rs, lock, false,
               [](const Rs* r) { return ctrl_avail(r) || !(r->state & kConnected); });
    if ((rs->state & kConnected) && ctrl_avail(rs)) {
      ++rs->ctrl_seqno;
      post_msg(rs, msg_of(kOpCtrl, ctrl));
    }
  }
  // Until everything sent was acknowledged (or the connection is gone).
  wait_for(rs, lock, false, [](const Rs* r) {
    return static_cast<int>(r->ctrl_max - r->ctrl_seqno) + r->sqe_avail ==
               static_cast<int>(r->sq_size) ||
           !(r->state & kConnected);
  });
  if ((rs->state & kDisconnected) && rs->id->qp != nullptr) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;  // what is still posted completes (flushed)
    ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
  }
  return 0;
}

int rclose(int socket) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->state & kConnected) rshutdown(socket, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_socks->erase(socket);
  }
  if (rs->id != nullptr && rs->id->qp != nullptr && (rs->state & (kConnected | kDisconnected)))
    rdma_disconnect(rs->id);  // a DREQ: the peer's rdma_cm hears DISCONNECTED
  free_rs(rs);
  return 0;
}

ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  const iovec v{buf, len};
  return recv_common(rs, Iov{&v, 1}, flags);
}

ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src_addr,
                  socklen_t* addrlen) {
  const ssize_t r = rrecv(socket, buf, len, flags);
  if (r > 0 && src_addr != nullptr && addrlen != nullptr) rgetpeername(socket, src_addr, addrlen);
  return r;
}

ssize_t rrecvmsg(int socket, msghdr* msg, int flags) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail(EOPNOTSUPP);
  msg->msg_flags = 0;
  return recv_common(rs, Iov{msg->msg_iov, static_cast<int>(msg->msg_iovlen)}, flags);
}

ssize_t rread(int socket, void* buf, size_t count) { return rrecv(socket, buf, count, 0); }

ssize_t rreadv(int socket, const iovec* iov, int iovcnt) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (iovcnt < 0) return fail(EINVAL);
  return recv_common(rs, Iov{iov, iovcnt}, 0);
}

ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  const iovec v{const_cast<void*>(buf), len};
  return send_common(rs, Iov{&v, 1}, flags, false, 0);
}

ssize_t rsendto(int socket, const void* buf, size_t len, int flags, const sockaddr* dest_addr,
                socklen_t addrlen) {
  (void)addrlen;
  if (dest_addr != nullptr) return fail(EISCONN);  // a stream socket: as the kernel's TCP
  return rsend(socket, buf, len, flags);
}

ssize_t rsendmsg(int socket, const msghdr* msg, int flags) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail(EOPNOTSUPP);
  return send_common(rs, Iov{msg->msg_iov, static_cast<int>(msg->msg_iovlen)}, flags, false, 0);
}

ssize_t rwrite(int socket, const void* buf, size_t count) { return rsend(socket, buf, count, 0); }

ssize_t rwritev(int socket, const iovec* iov, int iovcnt) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (iovcnt < 0) return fail(EINVAL);
  return send_common(rs, Iov{iov, iovcnt}, 0, false, 0);
}

int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  const uint64_t start = now_ns();
  std::vector<pollfd> sleep_fds;
  std::vector<Rs*> asleep;  // the rsockets this thread counts itself a sleeper of
  for (;;) {
    int cnt = check_all(fds, nfds);
    if (cnt != 0 || timeout == 0) return cnt;
    if (now_ns() - start < kSpinNs) continue;
    // Arm every rsocket's CQ, count this thread among its sleepers and look once more, then
    // sleep on what can wake each one. An event left from an earlier arming is taken first
    // (which also tells uroce's progress thread, as ibv_get_cq_event does, that the
    // application is going to sleep).
    sleep_fds.clear();
    asleep.clear();
    for (nfds_t i = 0; i < nfds; ++i) {
      if (fds[i].fd < 0) continue;
      Rs* rs = lookup(fds[i].fd);
      if (rs == nullptr) {
        sleep_fds.push_back({fds[i].fd, fds[i].events, 0});
        continue;
      }
      std::lock_guard<std::mutex> lock(rs->mu);
      if (rs->cq != nullptr && (rs->state & kConnected)) {
        if (rs->armed) take_cq_event(rs);
        if (!rs->armed) {
          ibv_req_notify_cq(rs->cq, 0);
          rs->armed = true;
        }
        sleep_fds.push_back({rs->cq_ch->fd, POLLIN, 0});
      }
      sleep_fds.push_back({rs->ch->fd, POLLIN, 0});
      sleep_fds.push_back({rs->wake_fd, POLLIN, 0});
      sleeping(rs, true);
      asleep.push_back(rs);
    }
    auto wake = [&asleep] {
      for (Rs* rs : asleep) {
        std::lock_guard<std::mutex> lock(rs->mu);
        sleeping(rs, false);
      }
    };
    cnt = check_all(fds, nfds);
    int left = -1;
    if (cnt == 0 && timeout > 0) {
      const auto spent = static_cast<int64_t>((now_ns() - start) / 1000000);
      left = spent >= timeout ? 0 : static_cast<int>(timeout - spent);
    }
    if (cnt != 0 || left == 0) {
      wake();
      return cnt;
    }
    const int r = ::poll(sleep_fds.data(), sleep_fds.size(), left);
    const int e = errno;
    wake();
    if (r < 0) return fail(e);
  }
}

int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) {
  if (nfds < 0 || nfds > FD_SETSIZE) return fail(EINVAL);
  std::vector<pollfd> p;
  for (int fd = 0; fd < nfds; ++fd) {
    short ev = 0;
    if (readfds != nullptr && FD_ISSET(fd, readfds)) ev |= POLLIN;
    if (writefds != nullptr && FD_ISSET(fd, writefds)) ev |= POLLOUT;
    if (exceptfds != nullptr && FD_ISSET(fd, exceptfds)) ev |= POLLPRI;
    if (ev != 0) p.push_back({fd, ev, 0});
  }
  const int ms = timeout == nullptr
                     ? -1
                     : static_cast<int>(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000);
  const int r = rpoll(p.data(), p.size(), ms);
  if (r < 0) return -1;
  for (fd_set* s : {readfds, writefds, exceptfds})
    if (s != nullptr) FD_ZERO(s);
  int cnt = 0;
  for (const pollfd& q : p) {
    if (readfds != nullptr && (q.events & POLLIN) && (q.revents & (POLLIN | POLLHUP | POLLERR)))
      FD_SET(q.fd, readfds), ++cnt;
    if (writefds != nullptr && (q.events & POLLOUT) && (q.revents & (POLLOUT | POLLERR)))
      FD_SET(q.fd, writefds), ++cnt;
    if (exceptfds != nullptr && (q.revents & POLLPRI)) FD_SET(q.fd, exceptfds), ++cnt;
  }
  return cnt;
}

int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (addr == nullptr || addrlen == nullptr) return fail(EFAULT);
  std::lock_guard<std::mutex> lock(rs->mu);
  if (!(rs->state & (kConnected | kDisconnected))) return fail(ENOTCONN);
  const sockaddr* a = rdma_get_peer_addr(rs->id);
  const socklen_t n = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(addr, a, std::min(n, *addrlen));
  *addrlen = n;
  return 0;
}

int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (addr == nullptr || addrlen == nullptr) return fail(EFAULT);
  std::lock_guard<std::mutex> lock(rs->mu);
  const sockaddr* a = rdma_get_local_addr(rs->id);
  const socklen_t n = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(addr, a, std::min(n, *addrlen));
  *addrlen = n;
  return 0;
}

int rsetsockopt(int socket, int level, int optname, const void* optval, socklen_t optlen) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (optval == nullptr || optlen < sizeof(int)) return fail(EINVAL);
  std::lock_guard<std::mutex> lock(rs->mu);
  int v;
  std::memcpy(&v, optval, sizeof v);
  uint64_t* opts = nullptr;
  bool on = v != 0;
  switch (level) {
    case SOL_SOCKET:
      opts = &rs->so_opts;
      switch (optname) {
        case SO_REUSEADDR: break;  // rdma_cm's ports: no TIME_WAIT to reuse
        case SO_RCVBUF:
          if (rs->rbuf == nullptr) rs->rbuf_size = std::max<uint32_t>(2 * static_cast<uint32_t>(v), 2 * kSndLowat);
          break;
        case SO_SNDBUF:
          if (rs->sbuf == nullptr) rs->sbuf_size = std::max<uint32_t>(2 * static_cast<uint32_t>(v), 2 * kSndLowat);
          break;
        case SO_LINGER:
          if (optlen < sizeof(linger)) return fail(EINVAL);
          on = !static_cast<const linger*>(optval)->l_onoff;  // stored inverted: default on
          break;
        case SO_KEEPALIVE:
          if (on) return fail(EOPNOTSUPP);  // no keepalive messages are sent (README)
          break;
        case SO_OOBINLINE: break;
        default: return fail(EOPNOTSUPP);
      }
      break;
    case IPPROTO_IP:
      if (optname != IP_TOS) return fail(EOPNOTSUPP);
      {
        uint8_t tos = static_cast<uint8_t>(v);
        if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) != 0)
          return -1;
        rs->ip_tos = v;
      }
      return 0;
    case IPPROTO_TCP:
      opts = &rs->tcp_opts;
      switch (optname) {
        case TCP_NODELAY:  // every send goes out at once anyway
        case TCP_MAXSEG:
        case TCP_CONGESTION:
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL: break;
        case TCP_KEEPIDLE:
          if (v <= 0) return fail(EINVAL);
          break;
        default: return fail(EOPNOTSUPP);
      }
      break;
    case IPPROTO_IPV6:
      if (optname != IPV6_V6ONLY) return fail(EOPNOTSUPP);
      opts = &rs->ipv6_opts;
      if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v) != 0)
        return -1;
      break;
    case SOL_RDMA:
      if (rs->state >= kOpening) return fail(EINVAL);
      switch (optname) {
        case RDMA_SQSIZE: rs->sq_size = std::min<uint32_t>(static_cast<uint32_t>(v), kQpMax); break;
        case RDMA_RQSIZE: rs->rq_size = std::min<uint32_t>(static_cast<uint32_t>(v), kQpMax); break;
        case RDMA_INLINE: rs->sq_inline = std::min<uint32_t>(static_cast<uint32_t>(v), kQpMax); break;
        case RDMA_IOMAPSIZE:
          rs->iomap_size = static_cast<uint32_t>(value_of(scale_of(std::clamp(v, 0, 255 << 8))));
          break;
        default: return fail(EOPNOTSUPP);  // RDMA_ROUTE: RoCE has no path records to give
      }
      return 0;
    default: return fail(EOPNOTSUPP);
  }
  if (opts != nullptr && optname < 64) {
    if (on)
      *opts |= 1ull << optname;
    else
      *opts &= ~(1ull << optname);
  }
  return 0;
}

int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (optval == nullptr || optlen == nullptr || *optlen < sizeof(int)) return fail(EINVAL);
  std::unique_lock<std::mutex> lock(rs->mu);
  auto put = [optval, optlen](int v) {
    std::memcpy(optval, &v, sizeof v);
    *optlen = sizeof v;
    return 0;
  };
  auto bit = [optname](uint64_t opts) { return optname < 64 && ((opts >> optname) & 1) ? 1 : 0; };
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR:
        case SO_KEEPALIVE:
        case SO_OOBINLINE: return put(bit(rs->so_opts));
        case SO_RCVBUF: return put(static_cast<int>(rs->rbuf_size));
        case SO_SNDBUF: return put(static_cast<int>(rs->sbuf_size));
        case SO_ERROR: {
          if (rs->state & kOpening) do_connect(rs, lock, true);
          const int e = rs->err;
          rs->err = 0;
          return put(e);
        }
        case SO_TYPE: return put(SOCK_STREAM);
        case SO_LINGER: {
          if (*optlen < sizeof(linger)) return fail(EINVAL);
          const linger l{bit(rs->so_opts) ? 0 : 1, 0};
          std::memcpy(optval, &l, sizeof l);
          *optlen = sizeof l;
          return 0;
        }
        default: return fail(EOPNOTSUPP);
      }
    case IPPROTO_IP:
      if (optname != IP_TOS) return fail(EOPNOTSUPP);
      return put(rs->ip_tos);
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_NODELAY: return put(bit(rs->tcp_opts));
        case TCP_MAXSEG: {
          ibv_port_attr pa{};
          int mss = 2048;
          if (rs->id->verbs != nullptr && ibv_query_port(rs->id->verbs, 1, &pa) == 0)
            mss = 128 << pa.active_mtu;
          return put(mss);
        }
        case TCP_INFO: {
          tcp_info ti{};
          ti.tcpi_state = (rs->state & kConnected) ? TCP_ESTABLISHED : TCP_CLOSE;
          ti.tcpi_snd_cwnd = rs->sq_size;
          const socklen_t n = std::min<socklen_t>(*optlen, sizeof ti);
          std::memcpy(optval, &ti, n);
          *optlen = n;
          return 0;
        }
        default: return fail(EOPNOTSUPP);
      }
    case IPPROTO_IPV6:
      if (optname != IPV6_V6ONLY) return fail(EOPNOTSUPP);
      return put(bit(rs->ipv6_opts));
    case SOL_RDMA:
      switch (optname) {
        case RDMA_SQSIZE: return put(static_cast<int>(rs->sq_size));
        case RDMA_RQSIZE: return put(static_cast<int>(rs->rq_size));
        case RDMA_INLINE: return put(static_cast<int>(rs->sq_inline));
        case RDMA_IOMAPSIZE: return put(static_cast<int>(rs->iomap_size));
        default: return fail(EOPNOTSUPP);
      }
    default: return fail(EOPNOTSUPP);
  }
}

int rfcntl(int socket, int cmd, ...) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  va_list args;
  va_start(args, cmd);
  int ret = 0;
  std::lock_guard<std::mutex> lock(rs->mu);
  switch (cmd) {
    case F_GETFL: ret = rs->fs_flags | O_RDWR; break;
    case F_SETFL: rs->fs_flags = va_arg(args, int) & ~O_ACCMODE; break;
    case F_GETFD: ret = rs->fd_flags; break;
    case F_SETFD: rs->fd_flags = va_arg(args, int); break;
    default: ret = fail(EOPNOTSUPP); break;
  }
  va_end(args);
  return ret;
}

off_t riomap(int socket, void* buf, size_t len, int prot, int flags, off_t offset) {
  (void)flags;
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  std::lock_guard<std::mutex> lock(rs->mu);
  if (rs->pd == nullptr || (prot & ~(PROT_WRITE | PROT_NONE))) return fail(EINVAL);
  int index = -1;
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (prot & PROT_WRITE) {  // the next entry of the peer's iomap that is free
    std::vector<bool> used(rs->remote_iomap.length, false);
    for (const Mapping& m : rs->maps)
      if (m.index >= 0) used[static_cast<size_t>(m.index)] = true;
    const auto it = std::find(used.begin(), used.end(), false);
    if (it == used.end()) return fail(ENOMEM);
    index = static_cast<int>(it - used.begin());
    access |= IBV_ACCESS_REMOTE_WRITE;
  }
  ibv_mr* mr = ibv_reg_mr(rs->pd, buf, len, access);
  if (mr == nullptr) return -1;
  if (offset == -1) offset = static_cast<off_t>(reinterpret_cast<uintptr_t>(buf));
  rs->maps.push_back({static_cast<uint64_t>(offset), mr, index, false});
  return offset;
}

int riounmap(int socket, void* buf, size_t len) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  std::lock_guard<std::mutex> lock(rs->mu);
  for (auto it = rs->maps.begin(); it != rs->maps.end(); ++it) {
    if (it->mr->addr != buf || it->mr->length != len) continue;
    ibv_dereg_mr(it->mr);
    rs->maps.erase(it);
    return 0;
  }
  return fail(EINVAL);
}

size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  Rs* rs = lookup(socket);
  if (rs == nullptr) return static_cast<size_t>(fail(EBADF));
  const iovec v{const_cast<void*>(buf), count};
  return static_cast<size_t>(send_common(rs, Iov{&v, 1}, flags, true, offset));
}

}  // extern "C"

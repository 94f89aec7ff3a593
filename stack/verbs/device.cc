// Devices and contexts: the device list from the configuration, opening a device (port,
// engine, progress thread), and the device-level queries.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "dpdk/dpdk_port.h"
#include "fault/fault_injector.h"
#include "trace/pcap_trace.h"
#include "wire/udp.h"
#include "verbs/provider.h"

namespace uroce::verbs {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

namespace {

/// A GUID from the interface's MAC (EUI-64), or from the device name for DPDK devargs.
uint64_t make_guid(const config::DeviceConfig& cfg) {
  std::ifstream f("/sys/class/net/" + cfg.iface + "/address");
  std::string text;
  if (!cfg.iface.empty() && (f >> text)) {
    if (auto mac = wire::parse_mac(text)) {
      const auto& m = *mac;
      return uint64_t{static_cast<uint8_t>(m[0] ^ 0x02)} << 56 | uint64_t{m[1]} << 48 |
             uint64_t{m[2]} << 40 | uint64_t{0xfffe} << 24 | uint64_t{m[3]} << 16 |
             uint64_t{m[4]} << 8 | m[5];
    }
  }
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
  for (char c : cfg.name) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

std::vector<Device*> build_devices() {
  std::vector<Device*> out;
  config::Config cfg;
  std::string err;
  if (!config::load(config::process_env(), &cfg, &err)) {
    std::fprintf(stderr, "uroce: %s\n", err.c_str());
    return out;
  }
  for (const auto& dc : cfg.devices) {
    auto* d = new Device{};  // lives until exit: applications keep ibv_device pointers
    d->cfg = dc;
    d->index = static_cast<int>(out.size());
    d->guid = make_guid(dc);
    d->ibv.node_type = IBV_NODE_CA;
    d->ibv.transport_type = IBV_TRANSPORT_IB;  // RoCE devices report IB; the port says Ethernet
    std::snprintf(d->ibv.name, sizeof d->ibv.name, "%s", dc.name.c_str());
    std::snprintf(d->ibv.dev_name, sizeof d->ibv.dev_name, "uverbs-%s", dc.name.c_str());
    std::snprintf(d->ibv.dev_path, sizeof d->ibv.dev_path, "/sys/class/infiniband_verbs/uverbs-%s",
                  dc.name.c_str());
    std::snprintf(d->ibv.ibdev_path, sizeof d->ibv.ibdev_path, "/sys/class/infiniband/%s",
                  dc.name.c_str());
    out.push_back(d);
  }
  return out;
}

/// The Linux kernel sees our UDP 4791 traffic too (the interface is shared with DPDK's
/// af_packet) and would answer every packet with ICMP port unreachable. A socket bound to
/// port 4791 whose filter drops everything makes it keep quiet: the kernel finds a socket,
/// the filter discards the copy, no ICMP. Returns -1 if that is not possible (then the
/// ICMP noise is harmless: the peer ignores it).
int silence_kernel(const config::DeviceConfig& dc) {
  sock_filter drop_all = {BPF_RET | BPF_K, 0, 0, 0};
  sock_fprog prog = {1, &drop_all};
  const bool v4 = dc.ipv4.has_value();
  const int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  int rc = setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
  if (rc == 0 && v4) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(wire::kRoceV2Port);
    std::memcpy(&a.sin_addr, dc.ipv4->data(), 4);
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else if (rc == 0) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(wire::kRoceV2Port);
    std::memcpy(&a.sin6_addr, dc.ipv6->data(), 16);
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// Several processes may open the same device (interface); each runs its own engine, so their
/// QPNs must not overlap. Each claims a block of QPNs by holding an flock on a file named
/// after the interface and the block number: the first free block wins, and the kernel
/// releases the lock when the process exits however it ends. Block 0 starts at 0x11 as in
/// rdma_rxe. Returns the first QPN (0x11 if no lock file can be made) and the lock's fd.
uint32_t claim_qpn_block(const config::DeviceConfig& dc, int* lock_fd) {
  constexpr uint32_t kBlock = 0x10000;  // QPNs per process (max_qp is 4096)
  std::string key = dc.iface.empty() ? dc.devargs.substr(0, dc.devargs.find(',')) : dc.iface;
  for (char& c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  *lock_fd = -1;
  for (uint32_t n = 0; n < 64; ++n) {
    const std::string path = "/dev/shm/uroce-qpn-" + key + "-" + std::to_string(n) + ".lock";
    // flock needs only a read-only descriptor, so a file another user made works too.
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fd = open(path.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) continue;  // unusable (e.g. created meanwhile and not readable): next block
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      *lock_fd = fd;
      return 0x11 + n * kBlock;
    }
    close(fd);
  }
  std::fprintf(stderr, "uroce: %s: no free QPN block in /dev/shm (64 processes on it?): using "
               "QPNs from 0x11, which may collide with another process\n", key.c_str());
  return 0x11;
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

/// Copies the engine's counters to the shared-memory file (with the lock held), ~10 per s.
void publish_stats(ContextState* s, uint64_t now) {
  if (s->stats == nullptr || now < s->stats_next) return;
  s->stats_next = now + 100'000'000;
  const Counters& c = s->engine->counters();
  for (size_t i = 0; i < static_cast<size_t>(Counter::kCount); ++i)
    s->stats->values[i] = c.get(static_cast<Counter>(i));
  for (size_t i = 0; i < static_cast<size_t>(wire::ParseError::kCount); ++i)
    s->stats->parse_errors[i] = c.get(static_cast<wire::ParseError>(i));
  s->stats->updated_ns = now;
}

void progress_loop(ContextState* s) {
  // Adaptive: poll flat out while there is work; when an application thread is busy-polling
  // its CQ it drives the engine itself, so step aside (sleep) instead of competing for the
  // CPU; when everything is idle, back off to 1 ms sleeps so an idle process costs nothing.
  uint32_t idle = 0;
  while (!s->stop.load(std::memory_order_relaxed)) {
    size_t work;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      const uint64_t now = now_ns();
      work = s->engine->poll(now);
      progress_hook(s);
      publish_stats(s, now);
      AsyncEvent ev;
      while (s->engine->pop_async_event(&ev)) {
        ibv_async_event out{};
        out.event_type = ev.type;
        if (ev.qp != nullptr) out.element.qp = &ev.qp->ibv;
        if (ev.cq != nullptr) out.element.cq = &ev.cq->ibv;
        if (ev.srq != nullptr) out.element.srq = &ev.srq->ibv;
        if (write(s->async_pipe[1], &out, sizeof out) != sizeof out) break;
      }
    }
    const bool app_polling =
        now_ns() - s->last_app_poll.load(std::memory_order_relaxed) < 1'000'000;
    if (work != 0 && !app_polling) {
      idle = 0;
      continue;
    }
    ++idle;
    if (app_polling) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    } else if (idle < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(idle > 20000 ? 1000 : 20));
    }
  }
}

}  // namespace

const std::vector<Device*>& devices() {
  static const std::vector<Device*> list = build_devices();
  return list;
}

}  // namespace uroce::verbs

using namespace uroce;
using namespace uroce::verbs;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  const auto& list = devices();
  auto** out = static_cast<ibv_device**>(calloc(list.size() + 1, sizeof(ibv_device*)));
  if (out == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < list.size(); ++i) out[i] = &list[i]->ibv;
  if (num_devices != nullptr) *num_devices = static_cast<int>(list.size());
  return out;
}

void ibv_free_device_list(ibv_device** list) { free(list); }

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

__be64 ibv_get_device_guid(ibv_device* device) {
  return __builtin_bswap64(to_device(device)->guid);
}

int ibv_get_device_index(ibv_device* device) { return to_device(device)->index; }

ibv_context* ibv_open_device(ibv_device* device) {
  Device* d = to_device(device);
  config::DeviceConfig dc = d->cfg;
  std::string err;
  if (!config::fill_addresses(&dc, &err)) {
    std::fprintf(stderr, "uroce: %s: %s\n", dc.name.c_str(), err.c_str());
    errno = EINVAL;
    return nullptr;
  }
  auto state = std::make_unique<ContextState>();
  drivers::DpdkConfig pc;
  pc.iface = dc.iface;
  pc.devargs = dc.devargs;
  pc.shared = !dc.exclusive;
  state->port = drivers::DpdkPort::open(pc, &err);
  if (!state->port) {
    std::fprintf(stderr, "uroce: %s: %s\n", dc.name.c_str(), err.c_str());
    errno = ENODEV;
    return nullptr;
  }
  Port* port = state->port.get();
  if (!dc.pcap.empty()) {
    auto trace = std::make_unique<drivers::PcapTrace>(*port, dc.pcap);
    if (!trace->ok()) {
      std::fprintf(stderr, "uroce: %s: pcap %s: %s\n", dc.name.c_str(), dc.pcap.c_str(),
                   trace->error().c_str());
      errno = EINVAL;
      return nullptr;
    }
    port = trace.get();
    state->trace = std::move(trace);
  }
  if (dc.fault.enabled) {  // above the trace, so the pcap shows what really crossed the wire
    drivers::FaultConfig fc;
    fc.seed = dc.fault.seed;
    fc.loss = dc.fault.loss;
    fc.duplicate = dc.fault.duplicate;
    fc.corrupt = dc.fault.corrupt;
    fc.reorder = dc.fault.reorder;
    fc.reorder_window = dc.fault.reorder_window;
    fc.delay_ns = dc.fault.delay_ns;
    fc.jitter_ns = dc.fault.jitter_ns;
    fc.tx_side = dc.fault.tx_side;
    fc.rx_side = dc.fault.rx_side;
    state->fault = std::make_unique<drivers::FaultInjector>(*port, fc);
    port = state->fault.get();
  }
  EngineConfig ec;
  ec.ipv4 = dc.ipv4;
  ec.ipv6 = dc.ipv6;
  ec.vlan_id = dc.vlan;
  ec.active_mtu = static_cast<ibv_mtu>(std::countr_zero(dc.mtu) - 7);
  ec.seed = now_ns() ^ (static_cast<uint64_t>(getpid()) << 32);
  ec.node_guid = d->guid;
  ec.first_qpn = claim_qpn_block(dc, &state->qpn_lock_fd);
  state->engine = std::make_unique<Engine>(*port, ec);
  state->quiet_fd = silence_kernel(dc);
  state->stats_name = stats_shm_name(getpid(), dc.name);
  state->stats = open_stats(state->stats_name, dc.name);
  if (pipe2(state->async_pipe, O_CLOEXEC) != 0) {
    errno = EMFILE;
    return nullptr;
  }

  auto* ctx = static_cast<Context*>(calloc(1, sizeof(Context)));
  if (ctx == nullptr) {
    close(state->async_pipe[0]);
    close(state->async_pipe[1]);
    errno = ENOMEM;
    return nullptr;
  }
  ibv_context& c = ctx->vctx.context;
  c.device = device;
  c.cmd_fd = -1;
  c.async_fd = state->async_pipe[0];
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx->vctx.sz = sizeof(verbs_context);
  install_ops(ctx);
  ContextState* s = state.release();
  ctx->state = s;
  s->progress = std::thread(progress_loop, s);
  return &c;
}

int ibv_close_device(ibv_context* context) {
  Context* ctx = to_context(context);
  ContextState* s = ctx->state;
  s->stop = true;
  if (s->progress.joinable()) s->progress.join();
  close(s->async_pipe[0]);
  close(s->async_pipe[1]);
  if (s->quiet_fd >= 0) close(s->quiet_fd);
  if (s->qpn_lock_fd >= 0) close(s->qpn_lock_fd);
  if (s->stats != nullptr) {
    munmap(s->stats, sizeof(StatsShm));
    shm_unlink(s->stats_name.c_str());
  }
  s->engine.reset();
  s->fault.reset();
  s->trace.reset();
  s->port.reset();
  delete s;
  pthread_mutex_destroy(&context->mutex);
  free(ctx);
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  ContextState* s = to_context(context)->state;
  std::lock_guard<std::mutex> lock(s->mu);
  s->engine->query_device(attr);
  return 0;
}

// The exported ibv_query_port takes the old 48-byte port attribute struct (without
// port_cap_flags2); the header's inline calls the context's query_port op when present.
int (ibv_query_port)(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  ibv_port_attr a;
  ContextState* s = to_context(context)->state;
  std::lock_guard<std::mutex> lock(s->mu);
  if (int e = s->engine->query_port(port_num, &a); e != 0) return e;
  std::memcpy(static_cast<void*>(port_attr), &a, offsetof(ibv_port_attr, port_cap_flags2));
  return 0;
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  ContextState* s = to_context(context)->state;
  std::lock_guard<std::mutex> lock(s->mu);
  return s->engine->query_gid(port_num, index, gid) == 0 ? 0 : -1;
}

int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  ContextState* s = to_context(context)->state;
  std::lock_guard<std::mutex> lock(s->mu);
  uint16_t p;
  if (s->engine->query_pkey(port_num, index, &p) != 0) return -1;
  *pkey = __builtin_bswap16(p);
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  __be16 p;
  if (ibv_query_pkey(context, port_num, 0, &p) == 0 && p == pkey) return 0;
  errno = ENOENT;
  return -1;
}

// rdma-core private: the GID type as sysfs reports it (0 IB/RoCE v1, 1 RoCE v2).
int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                       int* type) {
  ibv_gid g;
  if (ibv_query_gid(context, port_num, static_cast<int>(index), &g) != 0) return -1;
  *type = 1;  // every uroce GID is a RoCEv2 GID
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size);

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                      ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  ibv_gid g;
  if (port_num > 255 || gid_index > INT32_MAX ||
      ibv_query_gid(context, static_cast<uint8_t>(port_num), static_cast<int>(gid_index), &g) != 0)
    return EINVAL;
  *entry = ibv_gid_entry{};
  entry->gid = g;
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 0;
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) {
    errno = EINVAL;
    return -EINVAL;
  }
  ContextState* s = to_context(context)->state;
  size_t n;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    n = static_cast<size_t>(s->engine->gid_count());
  }
  if (n > max_entries) return -EINVAL;
  for (size_t i = 0; i < n; ++i) {
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + i * entry_size);
    if (int rc = _ibv_query_gid_ex(context, 1, static_cast<uint32_t>(i), e, 0, entry_size))
      return -rc;
  }
  return static_cast<ssize_t>(n);
}

}  // extern "C"

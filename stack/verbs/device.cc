// Devices and contexts: the device list from the configuration, opening and closing a
// context on a device's shared runtime (runtime.cc), and the device-level queries.
#include <fcntl.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

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

}  // namespace

const std::vector<Device*>& devices() {
  // Never destroyed: applications keep ibv_device pointers until (and during) exit.
  static const auto* list = new std::vector<Device*>(build_devices());
  return *list;
}

namespace {

// Every open context of this process (imported ones too), for ibv_import_device to find by
// its command descriptor's file; the groups' member counts change under the same lock.
std::mutex g_contexts_mu;
std::vector<Context*>* g_contexts = new std::vector<Context*>;  // never destroyed (exit)

/// A context on `d` sharing `shared` (ibv_import_device), or with a state of its own; `cmd_fd`
/// becomes its command descriptor. Null with errno (cmd_fd then stays the caller's).
ibv_context* make_context(Device* d, ContextState* shared, int cmd_fd) {
  auto* ctx = static_cast<Context*>(calloc(1, sizeof(Context)));
  Runtime* rt = ctx != nullptr ? acquire_runtime(d) : nullptr;
  if (rt == nullptr) {
    const int e = ctx == nullptr ? ENOMEM : errno;
    free(ctx);
    errno = e;
    return nullptr;
  }
  ContextState* state = shared;
  if (state == nullptr) {
    auto own = std::make_unique<ContextState>();
    // The async event pipe: the application reads (blocking, as the kernel's async fd); the
    // engine writes without ever blocking.
    struct stat st{};
    if (pipe2(own->async_pipe, O_CLOEXEC) != 0 || fstat(cmd_fd, &st) != 0) {
      const int e = errno;
      if (own->async_pipe[0] >= 0) close(own->async_pipe[0]);
      if (own->async_pipe[1] >= 0) close(own->async_pipe[1]);
      release_runtime(rt);
      free(ctx);
      errno = e;
      return nullptr;
    }
    fcntl(own->async_pipe[1], F_SETFL, O_NONBLOCK);
    own->rt = rt;
    own->cmd_dev = st.st_dev;
    own->cmd_ino = st.st_ino;
    state = own.release();
    std::lock_guard<std::mutex> lock(rt->ctx_mu);
    rt->contexts.push_back(state);
  }
  ibv_context& c = ctx->vctx.context;
  c.device = &d->ibv;
  c.cmd_fd = cmd_fd;
  c.async_fd = state->async_pipe[0];
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx->vctx.sz = sizeof(verbs_context);
  install_ops(ctx);
  ctx->state = state;
  std::lock_guard<std::mutex> lock(g_contexts_mu);
  g_contexts->push_back(ctx);
  return &c;
}

}  // namespace

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
  // There is no kernel command channel; programs still dup() or poll the descriptor, and
  // ibv_import_device finds the context by it: a file of its own (a memfd, no name anywhere).
  const int cmd_fd = memfd_create("uroce-verbs", MFD_CLOEXEC);
  if (cmd_fd < 0) return nullptr;
  ibv_context* c = make_context(to_device(device), nullptr, cmd_fd);
  if (c == nullptr) {
    const int e = errno;
    close(cmd_fd);
    errno = e;
  }
  return c;
}

// ibv_import_device(3): a second context on the verbs file `cmd_fd` names (a dup of an open
// context's cmd_fd), sharing that context's objects: ibv_import_pd / _mr / _dm find them by
// handle. Only within the process that opened it: one engine per process holds the objects,
// so another process's descriptor (passed over a unix socket) is EOPNOTSUPP.
ibv_context* ibv_import_device(int cmd_fd) {
  struct stat st{};
  if (fstat(cmd_fd, &st) != 0) return nullptr;  // EBADF
  ContextState* group = nullptr;
  Device* d = nullptr;
  {
    // Found and joined at once: a close of the group's last other context cannot come between.
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    for (Context* c : *g_contexts)
      if (c->state->cmd_dev == st.st_dev && c->state->cmd_ino == st.st_ino &&
          c->state->rt->pid == getpid()) {
        group = c->state;
        d = to_device(c->vctx.context.device);
      }
    if (group != nullptr) ++group->members;
  }
  if (group == nullptr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_context* c = make_context(d, group, cmd_fd);
  if (c == nullptr) {
    // Out of memory or descriptors. Had every other context of the group been closed
    // meanwhile (each saw this one counted), nobody is left to destroy the group's objects:
    // they stay until exit, as an open context's do.
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    --group->members;
  }
  return c;
}

int ibv_close_device(ibv_context* context) {
  Context* ctx = to_context(context);
  ContextState* s = ctx->state;
  Runtime* rt = s->rt;
  bool last;
  {
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    std::erase(*g_contexts, ctx);
    last = --s->members == 0;
  }
  if (context->cmd_fd >= 0) close(context->cmd_fd);
  context->cmd_fd = -1;
  if (rt->pid != getpid()) {
    // A context inherited through fork(): its engine and threads are the parent's (and its
    // locks may be held by threads that are not here). Only this copy's handles go.
    if (last) {
      close(s->async_pipe[0]);
      close(s->async_pipe[1]);
    }
    return 0;
  }
  if (!last) {
    // Others of its group are open: the objects stay, and with them this structure, which
    // objects made through it name; it goes with the group's last context.
    s->closed_members.push_back(ctx);
    release_runtime(rt);  // (the group's last context holds one too)
    return 0;
  }
  // What the application left is destroyed, as the kernel does when a verbs fd closes.
  destroy_context_objects(s);
  {
    EngineLock lock(rt);  // no engine pass is writing to our pipe
    std::lock_guard<std::mutex> ctx_lock(rt->ctx_mu);
    std::erase(rt->contexts, s);
  }
  release_runtime(rt);
  close(s->async_pipe[0]);
  close(s->async_pipe[1]);
  for (Context* c : s->closed_members) {
    pthread_mutex_destroy(&c->vctx.context.mutex);
    free(c);
  }
  delete s;
  pthread_mutex_destroy(&context->mutex);
  free(ctx);
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  Runtime* rt = runtime_of(context);
  EngineLock lock(rt);
  rt->engine->query_device(attr);
  return 0;
}

// The exported ibv_query_port takes the old 48-byte port attribute struct (without
// port_cap_flags2); the header's inline calls the context's query_port op when present.
int (ibv_query_port)(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  ibv_port_attr a;
  Runtime* rt = runtime_of(context);
  EngineLock lock(rt);
  if (int e = rt->engine->query_port(port_num, &a); e != 0) return e;
  std::memcpy(static_cast<void*>(port_attr), &a, offsetof(ibv_port_attr, port_cap_flags2));
  return 0;
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  Runtime* rt = runtime_of(context);
  EngineLock lock(rt);
  // An empty entry reads as a zero GID, as rdma-core's ibv_query_gid does.
  const int e = rt->engine->query_gid(port_num, index, gid);
  return e == 0 || e == ENODATA ? 0 : -1;
}

int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  Runtime* rt = runtime_of(context);
  EngineLock lock(rt);
  uint16_t p;
  if (rt->engine->query_pkey(port_num, index, &p) != 0) return -1;
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
  if (port_num > 255 || gid_index > INT32_MAX) return EINVAL;
  ibv_gid g;
  {
    Runtime* rt = runtime_of(context);
    EngineLock lock(rt);
    // ENODATA for an empty entry of the table (rdma-core's contract), EINVAL past its end.
    if (int e = rt->engine->query_gid(static_cast<uint8_t>(port_num), static_cast<int>(gid_index), &g);
        e != 0)
      return e;
  }
  *entry = ibv_gid_entry{};
  entry->gid = g;
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  const std::string& iface = to_device(context->device)->cfg.iface;
  entry->ndev_ifindex = iface.empty() ? 0 : if_nametoindex(iface.c_str());
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) {
    errno = EINVAL;
    return -EINVAL;
  }
  Runtime* rt = runtime_of(context);
  size_t n;
  {
    EngineLock lock(rt);
    n = static_cast<size_t>(rt->engine->gid_count());
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

// The connection manager's side of the provider: what the kernel's rdma_ucm does for
// rdma-core's librdmacm. uroce's librdmacm.so.1 (stack/rdmacm) calls these (uroce_cm_abi.h);
// each device's ConnectionManager (stack/cm) runs in its engine passes.
//
// Ports: an id's port is reserved with a kernel socket bound to the same address and port
// (TCP for RDMA_PS_TCP and RDMA_PS_IB, UDP for RDMA_PS_UDP), so that two processes on one
// interface never hand out the same port, and a request for a port nobody holds is
// rejected (REJ "invalid service ID") by whichever process sees it, while one for a port
// another process holds is left to that process.
//
// Locks: a runtime's `emu` (the ConnectionManager lives under it), then g_mu (the ids and
// channels), then a channel's mutex. Nothing takes `emu` while holding g_mu.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cm/cm.h"
#include "cm/rendezvous.h"
#include "verbs/provider.h"
#include "util/sys.h"
#include "verbs/uroce_cm_abi.h"

namespace uroce::verbs {
namespace {

struct Channel {
  int fd = -1;  // the application's descriptor (it polls it); -1 once the channel is destroyed
  // The same eventfd under a number of our own, for uroce_cm_get_event to read: it stays open
  // while any call holds the Channel, so a read that raced rdma_destroy_event_channel reads
  // this eventfd and never whatever the application's number was reused for meanwhile.
  int read_fd = -1;
  std::mutex mu;
  std::deque<uroce_cm_event> q;
  Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel() {
    if (read_fd >= 0) close(read_fd);
  }
};

struct IdRec {
  int ch_fd = -1;
  uint16_t ps = 0;
  ibv_qp_type type = IBV_QPT_RC;
  std::vector<std::pair<Runtime*, ibv_context*>> devs;  // where the id lives (several: wildcard)
  int port_fd = -1;  // the port's reservation
  std::vector<int> named;  // a listener's names in the loopback rendezvous (cm/rendezvous.h)
  sockaddr_storage bound{};
  int tos = -1;          // rdma_set_option values given before the id had a device
  int ack_timeout = -1;
};

std::mutex g_mu;
std::unordered_map<int, std::shared_ptr<Channel>>* g_channels =
    new std::unordered_map<int, std::shared_ptr<Channel>>;  // never freed: used until exit
std::unordered_map<uint64_t, IdRec>* g_ids = new std::unordered_map<uint64_t, IdRec>;
std::atomic<uint64_t> g_next_handle{1};

uint16_t ps_of(int ps) { return static_cast<uint16_t>(ps); }

bool to_endpoint(const sockaddr* sa, cm::Endpoint* ep) {
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    wire::Ipv4Addr a;
    std::memcpy(a.data(), &in->sin_addr, 4);
    ep->ip = wire::ipv4_mapped_gid(a);
    ep->port = ntohs(in->sin_port);
    return true;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    std::memcpy(ep->ip.data(), &in6->sin6_addr, 16);
    ep->port = ntohs(in6->sin6_port);
    return true;
  }
  return false;
}

/// A link-local IPv6 address means nothing without its interface: the index of the one that
/// holds `ip` (what sin6_scope_id must say to bind to it), else 0.
uint32_t link_scope(const wire::Gid& ip) {
  if (ip[0] != 0xFE || (ip[1] & 0xC0) != 0x80) return 0;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t scope = 0;
  for (const ifaddrs* a = list; a != nullptr && scope == 0; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET6) continue;
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
    if (std::memcmp(&in6->sin6_addr, ip.data(), 16) == 0) scope = if_nametoindex(a->ifa_name);
  }
  freeifaddrs(list);
  return scope;
}

void to_sockaddr(const cm::Endpoint& ep, sockaddr_storage* out,
                 const cm::Endpoint* scope_of = nullptr) {
  *out = {};
  if (!ep.ipv6()) {
    auto* in = reinterpret_cast<sockaddr_in*>(out);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, ep.ip.data() + 12, 4);
    in->sin_port = htons(ep.port);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(out);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, ep.ip.data(), 16);
    in6->sin6_port = htons(ep.port);
    // A peer's link-local address is scoped by the local address that reaches it.
    in6->sin6_scope_id = link_scope(scope_of != nullptr ? scope_of->ip : ep.ip);
  }
}

/// A kernel socket holding `ep`'s port (a free one when it is 0: `ep` gets it). The fd, or
/// -errno.
int reserve_port(uint16_t ps, cm::Endpoint* ep) {
  sockaddr_storage ss;
  to_sockaddr(*ep, &ss);
  const bool v6 = ss.ss_family == AF_INET6;
  const int type = ps == wire::kRdmaPsUdp ? SOCK_DGRAM : SOCK_STREAM;
  const int fd = util::kernel_socket(v6 ? AF_INET6 : AF_INET, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  // The kernel's rdma_cm has port spaces of its own, apart from TCP's: a TCP connection that
  // used the port and lingers in TIME_WAIT (a server run over TCP just before, as rsockets
  // users switch) must not hold it. A port another socket listens on stays taken.
  const int one = 1;
  if (type == SOCK_STREAM) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const socklen_t len = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    close(fd);
    return -e;
  }
  if (ep->port == 0) {
    socklen_t l = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l);
    cm::Endpoint got;
    to_endpoint(reinterpret_cast<sockaddr*>(&ss), &got);
    ep->port = got.port;
  }
  return fd;
}

/// Nobody holds `port` on `ip` (no uroce process listens there): a request may be rejected.
/// For a loopback address, nobody on the host may hold it at all: a listener bound to
/// 127.0.0.1 (or the wildcard) takes requests to its process's own 127.0.0.x.
bool port_is_free(uint16_t ps, uint16_t port, const wire::Gid& ip) {
  cm::Endpoint ep{ip, port};
  if (ep.loopback() && !ep.ipv6()) ep.ip = wire::ipv4_mapped_gid({0, 0, 0, 0});
  const int fd = reserve_port(ps, &ep);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// ---- The rendezvous on loopback (cm/rendezvous.h) --------------------------------------

/// The device's IPv4 addresses in 127.0.0.0/8 (the udp port on loopback has one).
std::vector<wire::Ipv4Addr> loopback_ipv4s(Runtime* rt) {
  std::vector<wire::Ipv4Addr> out;
  EngineLock lock(rt);
  for (int g = 0; g < rt->engine->gid_count(); ++g) {
    ibv_gid gid;
    if (rt->engine->query_gid(1, g, &gid) != 0) continue;
    wire::Gid w;
    std::memcpy(w.data(), gid.raw, 16);
    if (wire::is_ipv4_mapped(w) && w[12] == 127) out.push_back({w[12], w[13], w[14], w[15]});
  }
  return out;
}

/// Names a listener on `ps`:`port` bound to a loopback address or the wildcard, once for each
/// loopback address of its devices. The sockets, which hold the names until closed.
std::vector<int> name_listener(uint16_t ps, uint16_t port,
                               const std::vector<std::pair<Runtime*, ibv_context*>>& devs) {
  std::vector<int> fds;
  for (const auto& [rt, ctx] : devs)
    for (const wire::Ipv4Addr& ip : loopback_ipv4s(rt)) {
      const int fd = util::kernel_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      const std::string name = cm::rendezvous_name(ps, port, ip);
      std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
      const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
      if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0)
        fds.push_back(fd);
      else
        close(fd);  // the same name twice in one process (a wildcard and a loopback listener)
    }
  return fds;
}

/// The address of the uroce process listening on `ps`:`port` on loopback, from the names in
/// /proc/net/unix.
std::optional<wire::Ipv4Addr> find_listener(uint16_t ps, uint16_t port) {
  const int fd = open("/proc/net/unix", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[16384];
  for (ssize_t r; (r = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(r));
  close(fd);
  return cm::rendezvous_find(text, ps, port);
}

void deliver(Runtime* rt, const cm::Event& e);

cm::ConnectionManager* cm_of(Runtime* rt) {
  if (!rt->cm) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = now_ns();
    rt->cm = std::make_unique<cm::ConnectionManager>(
        *rt->engine, [rt](const cm::Event& e) { deliver(rt, e); },
        [] { return g_next_handle.fetch_add(1); }, seed, cm::ConnectionManager::Timing{});
    rt->cm->set_unowned(port_is_free);
    rt->cm->set_rendezvous([](uint16_t ps, uint16_t port) -> std::optional<wire::Gid> {
      if (const auto ip = find_listener(ps, port)) return wire::ipv4_mapped_gid(*ip);
      return std::nullopt;
    });
  }
  return rt->cm.get();
}

void deliver(Runtime* rt, const cm::Event& e) {
  uroce_cm_event out{};
  out.handle = e.handle;
  out.listen_handle = e.listen_handle;
  out.event = e.type;
  out.status = e.status;
  out.param = e.param;
  out.ah_attr = e.ah;
  to_sockaddr(e.src, &out.src);
  to_sockaddr(e.dst, &out.dst, &e.src);
  out.private_data_len = e.pdata_len;
  std::memcpy(out.private_data, e.pdata.data(), e.pdata_len);
  const bool request = e.type == cm::kConnectRequest;
  // A connection request nobody will see (its listener or the listener's channel is gone):
  // its id is destroyed, which answers the peer with a REJ at once, as the kernel's rdma_cm
  // does for a listener's undelivered requests; left alone, the peer would wait for its REQ
  // to time out. (The CM does it once this event's delivery has returned.)
  auto refuse = [&] {
    if (request) rt->cm->destroy(e.handle);
  };
  // g_mu is held until the event is queued: a listener destroyed meanwhile
  // (uroce_cm_destroy_id) then finds this request in the queue and refuses it itself.
  std::lock_guard<std::mutex> ids(g_mu);
  {
    auto it = g_ids->find(e.handle);
    if (request) {
      auto l = g_ids->find(e.listen_handle);
      if (l == g_ids->end() || g_channels->find(l->second.ch_fd) == g_channels->end()) {
        refuse();
        return;
      }
      IdRec rec;
      rec.ch_fd = l->second.ch_fd;
      rec.ps = l->second.ps;
      rec.type = l->second.type;
      for (const auto& [r, ctx] : l->second.devs)
        if (r == rt) {
          rec.devs.emplace_back(r, ctx);
          out.verbs = ctx;
        }
      rec.bound = out.src;
      (*g_ids)[e.handle] = rec;
      it = g_ids->find(e.handle);
    }
    if (it == g_ids->end()) return;  // destroyed meanwhile
    auto c = g_channels->find(it->second.ch_fd);
    if (c == g_channels->end()) {
      if (request) g_ids->erase(it);
      refuse();
      return;
    }
    Channel& ch = *c->second;
    std::lock_guard<std::mutex> lock(ch.mu);
    ch.q.push_back(out);
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t r = write(ch.fd, &one, sizeof one);
  }
}

/// Takes the connection requests waiting in `ch` for listener `listener` (every one if 0) out
/// of the queue and forgets their new ids, adding them to `out` (g_mu and ch->mu held).
void take_requests(Channel& ch, uint64_t listener, std::vector<std::pair<uint64_t, IdRec>>* out) {
  for (auto e = ch.q.begin(); e != ch.q.end();) {
    if (e->event == cm::kConnectRequest && (listener == 0 || e->listen_handle == listener)) {
      if (auto it = g_ids->find(e->handle); it != g_ids->end()) {
        out->emplace_back(e->handle, it->second);
        g_ids->erase(it);
      }
      e = ch.q.erase(e);
    } else {
      ++e;
    }
  }
}

/// Destroys the ids of requests nobody will see (take_requests): each peer hears a REJ now,
/// as from the kernel's rdma_cm when a listener goes with requests not yet read. No lock held.
void refuse_requests(const std::vector<std::pair<uint64_t, IdRec>>& reqs) {
  for (const auto& [h, rec] : reqs)
    for (const auto& [rt, ctx] : rec.devs) {
      EngineLock lock(rt);
      cm_of(rt)->destroy(h);
    }
}

/// Creates the id in `c` with the options it was given.
int create_in(cm::ConnectionManager* c, uint64_t h, const IdRec& rec) {
  const int r = c->create(h, rec.ps, rec.type);
  if (r != 0) return r;
  if (rec.tos >= 0) c->set_tos(h, static_cast<uint8_t>(rec.tos));
  if (rec.ack_timeout >= 0) c->set_ack_timeout(h, static_cast<uint8_t>(rec.ack_timeout));
  return 0;
}

/// The id's record (copied), or false.
bool lookup(uint64_t h, IdRec* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_ids->find(h);
  if (it == g_ids->end()) return false;
  *out = it->second;
  return true;
}

/// Runs `f(cm)` on the id's (first) device. EINVAL when it has none yet.
template <typename F>
int on_device(uint64_t h, F f) {
  IdRec rec;
  if (!lookup(h, &rec) || rec.devs.empty()) return EINVAL;
  Runtime* rt = rec.devs.front().first;
  EngineLock lock(rt);
  return f(cm_of(rt));
}

/// The device (and its index in devs) that has `ip` among its GIDs; with `family_of`, the
/// first device with a GID to reach that address from instead. -1: none.
int device_with(ibv_context** devs, int n, const wire::Gid& ip, wire::Gid* src,
                bool for_dest) {
  for (int i = 0; i < n; ++i) {
    Runtime* rt = runtime_of(devs[i]);
    EngineLock lock(rt);
    const Engine& e = *rt->engine;
    if (!for_dest) {
      if (e.gid_index(ip) >= 0) {
        *src = ip;
        return i;
      }
      continue;
    }
    // A source GID for reaching `ip`: IPv4 from the IPv4-mapped GID, a link-local IPv6
    // address from fe80::, another IPv6 address from the global one (else fe80::).
    const bool v4 = wire::is_ipv4_mapped(ip);
    const bool ll = !v4 && ip[0] == 0xfe && (ip[1] & 0xc0) == 0x80;
    int best = -1;
    for (int g = 0; g < e.gid_count(); ++g) {
      ibv_gid gid;
      if (e.query_gid(1, g, &gid) != 0) continue;
      wire::Gid w;
      std::memcpy(w.data(), gid.raw, 16);
      const bool gv4 = wire::is_ipv4_mapped(w);
      const bool gll = !gv4 && w[0] == 0xfe && (w[1] & 0xc0) == 0x80;
      if (v4 && gv4) best = g;
      if (!v4 && ll && gll) best = g;
      if (!v4 && !ll && !gv4 && (!gll || best < 0)) best = g;
      if (best == g && (v4 || ll || !gll)) break;
    }
    if (best >= 0) {
      ibv_gid gid;
      e.query_gid(1, best, &gid);
      std::memcpy(src->data(), gid.raw, 16);
      return i;
    }
  }
  return -1;
}

}  // namespace
}  // namespace uroce::verbs

using namespace uroce;
using namespace uroce::verbs;

extern "C" {

int uroce_cm_channel_create(void) {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return -1;
  auto ch = std::make_shared<Channel>();
  ch->fd = fd;
  ch->read_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (ch->read_fd < 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  (*g_channels)[fd] = ch;
  return fd;
}

void uroce_cm_channel_destroy(int fd) {
  std::shared_ptr<Channel> ch;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_channels->find(fd);
    if (it == g_channels->end()) return;
    ch = it->second;
    g_channels->erase(it);
  }
  // A delivery that found the channel before it left g_channels writes under ch->mu: once
  // fd is -1 nobody writes the number, which the kernel may hand out again after close.
  std::vector<std::pair<uint64_t, IdRec>> reqs;
  {
    std::lock_guard<std::mutex> ids(g_mu);
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->fd = -1;
    close(fd);
    take_requests(*ch, 0, &reqs);
  }
  refuse_requests(reqs);
}

int uroce_cm_get_event(int fd, uroce_cm_event* ev) {
  std::shared_ptr<Channel> ch;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_channels->find(fd);
    if (it == g_channels->end()) return EBADF;  // as a read of a closed descriptor
    ch = it->second;
  }
  for (;;) {
    uint64_t v = 0;
    if (read(ch->read_fd, &v, sizeof v) != sizeof v) {
      if (errno == EINTR) continue;
      return errno;
    }
    std::unique_lock<std::mutex> lock(ch->mu);
    if (ch->q.empty()) {
      // The event that woke us belonged to an id destroyed meanwhile. If the channel is gone
      // too, no event will come again.
      if (ch->fd < 0) return EBADF;  // the caller waits on (see rdma_get_cm_event)
      continue;
    }
    *ev = ch->q.front();
    ch->q.pop_front();
    return 0;
  }
}

uint64_t uroce_cm_create_id(int channel_fd, int ps, int qp_type) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_channels->find(channel_fd) == g_channels->end()) {
    errno = EINVAL;
    return 0;
  }
  const uint64_t h = g_next_handle.fetch_add(1);
  IdRec rec;
  rec.ch_fd = channel_fd;
  rec.ps = ps_of(ps);
  rec.type = static_cast<ibv_qp_type>(qp_type);
  (*g_ids)[h] = rec;
  return h;
}

void uroce_cm_destroy_id(uint64_t h) {
  IdRec rec;
  std::vector<std::pair<uint64_t, IdRec>> reqs;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ids->find(h);
    if (it == g_ids->end()) return;
    rec = it->second;
    g_ids->erase(it);
    auto c = g_channels->find(rec.ch_fd);
    if (c != g_channels->end()) {
      std::lock_guard<std::mutex> cl(c->second->mu);
      std::erase_if(c->second->q, [h](const uroce_cm_event& e) { return e.handle == h; });
      take_requests(*c->second, h, &reqs);  // a listener's requests not yet read
    }
  }
  for (const auto& [rt, ctx] : rec.devs) {
    EngineLock lock(rt);
    cm_of(rt)->destroy(h);
  }
  refuse_requests(reqs);
  if (rec.port_fd >= 0) close(rec.port_fd);
  for (const int fd : rec.named) close(fd);
}

int uroce_cm_migrate_id(uint64_t h, int channel_fd) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_ids->find(h);
  if (it == g_ids->end() || g_channels->find(channel_fd) == g_channels->end()) return EINVAL;
  // Undelivered events move with the id.
  auto from = g_channels->find(it->second.ch_fd);
  auto to = g_channels->find(channel_fd);
  if (from != g_channels->end() && from->second != to->second) {
    std::scoped_lock both(from->second->mu, to->second->mu);
    for (auto e = from->second->q.begin(); e != from->second->q.end();) {
      if (e->handle == h) {
        to->second->q.push_back(*e);
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t r = write(to->second->fd, &one, sizeof one);
        e = from->second->q.erase(e);
      } else {
        ++e;
      }
    }
  }
  it->second.ch_fd = channel_fd;
  return 0;
}

int uroce_cm_bind(uint64_t h, ibv_context** devs, int n, const sockaddr* addr,
                  sockaddr_storage* bound, ibv_context** verbs) {
  cm::Endpoint ep;
  if (!to_endpoint(addr, &ep)) return EAFNOSUPPORT;
  IdRec rec;
  if (!lookup(h, &rec)) return EINVAL;
  if (rec.port_fd >= 0) return EINVAL;  // bound already
  int dev = -1;
  // A loopback address binds no device (id->verbs stays NULL), as with the kernel's rdma_cm:
  // libfabric binds "localhost" to learn that, then takes the devices' own addresses...
  if (!ep.wildcard() && !ep.loopback()) {
    wire::Gid src;
    dev = device_with(devs, n, ep.ip, &src, false);
    if (dev < 0) return EADDRNOTAVAIL;
  } else if (ep.loopback() && !ep.ipv6()) {
    // Unless a device is on loopback (the udp port there, each process its own 127.0.0.x):
    // then 127.0.0.1 is that device, as the kernel's rdma_cm binds a device on lo
    // (docs/udp.md); its listener takes requests to the device's own address.
    for (int i = 0; i < n && dev < 0; ++i)
      if (!loopback_ipv4s(runtime_of(devs[i])).empty()) dev = i;
  }
  const int fd = reserve_port(rec.ps, &ep);
  if (fd < 0) return -fd;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ids->find(h);
    if (it == g_ids->end()) {
      close(fd);
      return EINVAL;
    }
    it->second.port_fd = fd;
    to_sockaddr(ep, &it->second.bound);
    if (dev >= 0) it->second.devs = {{runtime_of(devs[dev]), devs[dev]}};
    *bound = it->second.bound;
  }
  *verbs = dev >= 0 ? devs[dev] : nullptr;
  if (dev >= 0) {
    Runtime* rt = runtime_of(devs[dev]);
    EngineLock lock(rt);
    cm::ConnectionManager* c = cm_of(rt);
    const int r = create_in(c, h, rec);
    if (r != 0) return r;
    return c->bind(h, ep);
  }
  return 0;
}

int uroce_cm_resolve_addr(uint64_t h, ibv_context** devs, int n, const sockaddr* src,
                          const sockaddr* dst, int timeout_ms, sockaddr_storage* bound,
                          ibv_context** verbs) {
  cm::Endpoint d, s;
  if (!to_endpoint(dst, &d)) return EAFNOSUPPORT;
  IdRec rec;
  if (!lookup(h, &rec)) return EINVAL;
  bool have_src = src != nullptr && to_endpoint(src, &s) && !s.wildcard();
  int dev = -1;
  if (have_src) {
    wire::Gid g;
    dev = device_with(devs, n, s.ip, &g, false);
    // From 127.0.0.1 to a loopback address (rdma-core's tests take the address of the
    // device's interface, lo): on the udp port on loopback the source is the process's own
    // 127.0.0.x, as the destination is the server's (docs/udp.md).
    if (dev < 0 && s.loopback() && d.loopback()) have_src = false;
  }
  if (!have_src) {
    dev = device_with(devs, n, d.ip, &s.ip, true);
    if (src != nullptr) {
      cm::Endpoint given;
      to_endpoint(src, &given);
      s.port = given.port;
    }
  }
  if (dev < 0) return EADDRNOTAVAIL;
  if (s.ipv6() != d.ipv6()) return EAFNOSUPPORT;
  if (rec.port_fd < 0) {
    const int fd = reserve_port(rec.ps, &s);
    if (fd < 0) return -fd;
    rec.port_fd = fd;
  } else {
    cm::Endpoint b;
    to_endpoint(reinterpret_cast<const sockaddr*>(&rec.bound), &b);
    s.port = b.port;
  }
  Runtime* rt = runtime_of(devs[dev]);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ids->find(h);
    if (it == g_ids->end()) return EINVAL;
    it->second.port_fd = rec.port_fd;
    to_sockaddr(s, &it->second.bound);
    it->second.devs = {{rt, devs[dev]}};
    *bound = it->second.bound;
  }
  *verbs = devs[dev];
  EngineLock lock(rt);
  cm::ConnectionManager* c = cm_of(rt);
  if (c->state(h) == cm::State::kClosed) {
    const int r = create_in(c, h, rec);
    if (r != 0) return r;
  }
  return c->resolve_addr(h, s, d, timeout_ms);
}

int uroce_cm_resolve_route(uint64_t h) {
  return on_device(h, [h](cm::ConnectionManager* c) { return c->resolve_route(h); });
}

int uroce_cm_join_multicast(uint64_t h, const sockaddr* group) {
  cm::Endpoint g;
  if (!to_endpoint(group, &g)) return EAFNOSUPPORT;
  return on_device(h, [&](cm::ConnectionManager* c) { return c->join_multicast(h, g.ip); });
}

namespace {
int listen_on(uint64_t h, ibv_context** devs, int n, int backlog) {
  IdRec rec;
  if (!lookup(h, &rec) || rec.port_fd < 0) return EINVAL;
  cm::Endpoint ep;
  to_endpoint(reinterpret_cast<const sockaddr*>(&rec.bound), &ep);
  if (rec.devs.empty()) {
    // A wildcard address: listen on every device.
    std::vector<std::pair<Runtime*, ibv_context*>> all;
    for (int i = 0; i < n; ++i) all.emplace_back(runtime_of(devs[i]), devs[i]);
    {
      std::lock_guard<std::mutex> lock(g_mu);
      auto it = g_ids->find(h);
      if (it == g_ids->end()) return EINVAL;
      it->second.devs = all;
    }
    for (const auto& [rt, ctx] : all) {
      EngineLock lock(rt);
      cm::ConnectionManager* c = cm_of(rt);
      if (c->state(h) == cm::State::kClosed) {
        create_in(c, h, rec);
        c->bind(h, ep);
      }
      if (const int r = c->listen(h, backlog); r != 0) return r;
    }
    return 0;
  }
  return on_device(h, [&](cm::ConnectionManager* c) { return c->listen(h, backlog); });
}
}  // namespace

int uroce_cm_listen(uint64_t h, ibv_context** devs, int n, int backlog) {
  IdRec rec;
  if (!lookup(h, &rec)) return EINVAL;
  // Bound to 127.0.0.1 or the wildcard: clients on this host that connect to 127.0.0.1 find
  // this process's own loopback address in the rendezvous. Named before the port is seen to
  // listen, so that a client which waits for that (`ss -ltn`) finds the name.
  cm::Endpoint ep;
  std::vector<int> named;
  if (rec.named.empty() && rec.port_fd >= 0 &&
      to_endpoint(reinterpret_cast<const sockaddr*>(&rec.bound), &ep) &&
      (ep.loopback() || ep.wildcard())) {
    std::vector<std::pair<Runtime*, ibv_context*>> where = rec.devs;
    if (where.empty())
      for (int i = 0; i < n; ++i) where.emplace_back(runtime_of(devs[i]), devs[i]);
    named = name_listener(rec.ps, ep.port, where);
  }
  auto unname = [&named] {
    for (const int fd : named) close(fd);
    named.clear();
  };
  // The reservation listens too (TCP port spaces): `ss -ltn` then shows who has the port, and
  // of two processes bound to one port (SO_REUSEADDR, reserve_port) only one may listen.
  if (rec.ps != wire::kRdmaPsUdp && rec.port_fd >= 0 && listen(rec.port_fd, 1) != 0) {
    const int e = errno;
    unname();
    return e;
  }
  if (const int r = listen_on(h, devs, n, backlog); r != 0) {
    unname();
    return r;
  }
  if (named.empty()) return 0;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_ids->find(h);
  if (it == g_ids->end() || !it->second.named.empty()) {
    unname();
    return 0;
  }
  it->second.named = std::move(named);
  return 0;
}

int uroce_cm_connect(uint64_t h, const uroce_cm_param* p, const void* pdata, uint8_t len) {
  const cm::ConnParam c = p != nullptr ? *p : cm::ConnParam{};
  return on_device(h, [&](cm::ConnectionManager* m) {
    return m->connect(h, c, static_cast<const uint8_t*>(pdata), len);
  });
}

int uroce_cm_accept(uint64_t h, const uroce_cm_param* p, const void* pdata, uint8_t len) {
  const cm::ConnParam c = p != nullptr ? *p : cm::ConnParam{};
  return on_device(h, [&](cm::ConnectionManager* m) {
    return m->accept(h, c, static_cast<const uint8_t*>(pdata), len);
  });
}

int uroce_cm_reject(uint64_t h, const void* pdata, uint8_t len) {
  return on_device(h, [&](cm::ConnectionManager* m) {
    return m->reject(h, static_cast<const uint8_t*>(pdata), len);
  });
}

int uroce_cm_establish(uint64_t h) {
  return on_device(h, [h](cm::ConnectionManager* m) { return m->establish(h); });
}

int uroce_cm_disconnect(uint64_t h) {
  return on_device(h, [h](cm::ConnectionManager* m) { return m->disconnect(h); });
}

int uroce_cm_notify(uint64_t h, int ibv_event) {
  if (ibv_event != IBV_EVENT_COMM_EST) return 0;
  return on_device(h, [h](cm::ConnectionManager* m) { return m->notify_established(h); });
}

int uroce_cm_init_qp_attr(uint64_t h, ibv_qp_attr* attr, int* mask) {
  return on_device(h, [&](cm::ConnectionManager* m) { return m->init_qp_attr(h, attr, mask); });
}

int uroce_cm_set_option(uint64_t h, int name, uint8_t value) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ids->find(h);
    if (it == g_ids->end()) return EINVAL;
    if (name == 0) it->second.tos = value;
    if (name == 3) it->second.ack_timeout = value;
    if (it->second.devs.empty()) return 0;
  }
  return on_device(h, [&](cm::ConnectionManager* m) {
    if (name == 0) m->set_tos(h, value);
    if (name == 3) m->set_ack_timeout(h, value);
    return 0;
  });
}

int uroce_cm_sgid_index(uint64_t h) {
  int idx = -1;
  on_device(h, [&](cm::ConnectionManager* m) {
    idx = m->sgid_index(h);
    return 0;
  });
  return idx;
}

}  // extern "C"

// uroce's libibverbs.so.1: the objects behind the verbs handles an application holds.
//
// The application sees rdma-core's structs (ibv_device, ibv_context, ...); each is the first
// member (or, for ibv_context, the last member of a verbs_context that is itself first) of
// ours, so a handle converts back with a cast. The C++ state lives behind a pointer.
//
// Process model (docs/threading.md): DPDK's EAL starts once per process, at the first
// ibv_open_device, and stays up until exit. Each device (one interface) has one Runtime in
// the process — its port, its engine, its progress thread — shared by every context opened
// on it and released when the last one closes. A context owns the objects made through it
// and ibv_close_device destroys whatever the application left.
#pragma once

#include <infiniband/verbs.h>

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "cm/cm.h"
#include "config/config.h"
#include "engine/engine.h"
#include "engine/stats_shm.h"
#include "verbs/progress.h"
#include "xdp/kernel_shield.h"

namespace uroce::verbs {

struct Runtime;

struct Device {
  ibv_device ibv;
  uint8_t reserved[64];  // provider libraries (libmlx5, libefa) peek just past ibv_device
  config::DeviceConfig cfg;
  uint64_t guid = 0;  // host order
  int index = 0;
  Runtime* runtime = nullptr;  // while at least one context is open (under the registry lock)
};

struct ContextState;

struct Context {
  verbs_context vctx;  // first; vctx.context (its last member) is the ibv_context handed out
  ContextState* state;
};

inline Context* to_context(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
}
inline Device* to_device(ibv_device* d) { return reinterpret_cast<Device*>(d); }

/// One device in this process: the port, the engine and the thread that keeps it moving.
///
/// Locks, outermost first: `emu` (the engine: control verbs and engine passes), then the
/// per-queue locks inside the engine (Qp::sq_mu / rq_mu, Srq::mu, Cq::mu) and `notify_mu`
/// (armed CQs) / `ctx_mu` (open contexts). Data-path calls never wait for `emu`: they try it,
/// and whoever wins runs the engine for everyone (drive()).
struct Runtime {
  Device* dev = nullptr;
  pid_t pid = 0;  // the process that opened it (a forked child's copy is not its own)
  int refs = 0;   // open contexts (under the registry lock)
  std::unique_ptr<Port> port;
  std::unique_ptr<Port> trace;  // PcapTrace around `port` when the config asks for it
  std::unique_ptr<VerbsTracer> verbs_trace;  // its .verbs file beside it (verbs_trace_file.h)
  std::unique_ptr<Port> fault;  // FaultInjector on top when the config asks for it
  std::unique_ptr<drivers::KernelShield> shield;  // af_packet: the tc program (kernel_shield.h)
  std::unique_ptr<Engine> engine;
  std::unique_ptr<cm::ConnectionManager> cm;  // made by librdmacm's first use (under emu)
  std::mutex emu;
  std::thread progress_thread;  // progress_loop (progress.cc)
  ProgressState progress;       // the progress policy's state (progress.h)
  std::atomic<bool> stop{false};
  Port* engine_port = nullptr;  // the port the engine uses (the top decorator)
  int quiet_fd = -1;           // UDP 4791 socket that keeps the kernel from answering our traffic
  int quiet6_fd = -1;          // the same for IPv6 (link-local and global GIDs)
  int qpn_claim_fd = -1;       // abstract Unix socket naming this process's QPN block
  // The interface's state and MTU, looked at every 100 ms from an engine pass (under emu).
  int link_fd = -1;            // a datagram socket for the SIOCGIF* ioctls (-1: not watched)
  std::string link_iface;
  uint64_t link_next = 0;
  uint32_t link_mtu = 0;
  StatsShm* stats = nullptr;   // published counters (uroce stats), or null
  std::string stats_name;
  uint64_t stats_next = 0;     // under emu
  // Fills kPortCounters values with the port's own counters (under emu).
  std::function<void(uint64_t*)> port_counters;
  std::atomic<uint64_t> dm_in_use{0};  // bytes of device memory allocated (ibv_alloc_dm)
  std::mutex notify_mu;
  std::vector<Cq*> armed;      // CQs armed with ibv_req_notify_cq (under notify_mu)
  std::mutex ctx_mu;
  std::vector<ContextState*> contexts;  // open contexts (port events go to each)

  /// Tells the engine when the interface went down or up, or changed its MTU (under emu).
  /// `initial`: at open, the state as it is, no event.
  void watch_link(uint64_t now, bool initial = false);
  /// Joins (or leaves) multicast group `g` on the interface through the kernel, as rdma_rxe
  /// has the kernel do: the kernel sends the IGMP / MLD reports that tell switches doing
  /// IGMP snooping to forward the group here (the port itself takes every multicast frame).
  /// On UDP sockets of its own (`mc_fds`; Linux allows 20 IPv4 groups per socket), under
  /// emu: the engine calls it. Nothing without a Linux interface (devargs ports).
  void kernel_membership(const wire::Gid& g, bool join);
  std::vector<int> mc_fds;                        // sockets holding memberships (IPv4, IPv6)
  std::vector<std::pair<wire::Gid, int>> mc_joined;  // each joined group and its socket
  /// Runs one engine pass unless another thread is running one: returns false then. With
  /// `posted`, new work is waiting: if the engine is busy, its holder runs another pass
  /// before letting go, so the work is never left behind.
  bool drive(bool posted, size_t* work = nullptr);
  /// One pass with `emu` held: engine poll, completion-channel and async events, counters.
  size_t pass_locked();
  uint64_t acks_alone_seen = 0;  // the engine's acks_held_alone when a pass last looked (emu)
  /// A copy fork() made of the parent's device (its engine runs no pass, its threads are
  /// not here: fork_prepare in runtime.cc).
  bool inherited() const;
  /// Async events the engine raised, to their contexts' pipes (emu held).
  void deliver_async_locked();
  /// After `emu` is released by a thread that changed the engine: wakes the parked progress
  /// thread if the engine now needs a pass (at `deadline`) before the thread would wake.
  void wake_if_needed(uint64_t deadline_ns);
  /// Wakes the progress thread from park (or makes its next park return at once).
  void kick();
  /// When the engine next needs a pass: a timer, the link watch, the counters (emu held).
  uint64_t deadline_locked() const;
};

/// The engine lock for a control verb (ibv_modify_qp, ibv_create_*, ...): taken, it first
/// sends posts that were batched (the verb sees the device as if each post had been sent at
/// once: ibv_resize_cq counts their completions); released, it wakes the progress thread if
/// the verb left the engine something to do soon (a flush, an ARP retry, a timer).
class EngineLock {
 public:
  explicit EngineLock(Runtime* rt) : rt_(rt) {
    rt_->emu.lock();
    if (rt_->progress.policy.pass_takes_batch(0, false)) {
      rt_->progress.pending.store(false);
      rt_->pass_locked();
    }
    // ACKs kept for a reply (its reply window) leave before the verb changes anything: a QP
    // destroyed, or the device closed, right after its last message still acknowledges it.
    rt_->engine->send_held_acks();
  }
  ~EngineLock() {
    const bool check = rt_->progress.parked.load();
    const uint64_t d = check ? rt_->deadline_locked() : 0;
    rt_->emu.unlock();
    if (check) rt_->wake_if_needed(d);
    // A post whose try-lock failed while this verb held the engine left its work to us.
    if (rt_->progress.pending.load()) rt_->drive(false);
  }
  EngineLock(const EngineLock&) = delete;
  EngineLock& operator=(const EngineLock&) = delete;

 private:
  Runtime* rt_;
};

/// An object the application made through a context: what ibv_close_device must destroy if
/// the application did not.
struct UPd;
struct UMr;
struct UMw;
struct UDm;
struct UChannel;
struct UFlow;
struct UWq;
struct UTable;

/// An XRC domain as ibv_open_xrcd(3) shares it: one per file (inode) among this context's
/// opens, counted; or private (fd -1).
struct XrcdRec {
  Xrcd* xrcd = nullptr;
  bool keyed = false;
  dev_t dev = 0;
  ino_t ino = 0;
  int opens = 0;
};

/// Per open context: its async event pipe and the objects made through it. A context made by
/// ibv_import_device shares the state of the one whose command descriptor it was given (as
/// the kernel's contexts on one verbs file share their objects): the objects live until the
/// last context of the group closes, and so do the closed ones' ibv_context structures
/// (objects made through them still name them).
struct ContextState {
  Runtime* rt = nullptr;
  int async_pipe[2] = {-1, -1};
  dev_t cmd_dev = 0;  // the command descriptor's file (a memfd of its own): what import finds
  ino_t cmd_ino = 0;
  int members = 1;  // open contexts of the group (under g_contexts_mu, device.cc)
  std::vector<Context*> closed_members;
  std::mutex obj_mu;  // the sets below
  std::unordered_set<UPd*> pds;
  std::unordered_set<UMr*> mrs;
  std::unordered_set<UMw*> mws;
  std::unordered_set<UDm*> dms;
  std::unordered_set<UChannel*> channels;
  std::unordered_set<Cq*> cqs;
  std::unordered_set<Srq*> srqs;
  std::unordered_set<Ah*> ahs;
  std::unordered_set<Qp*> qps;
  std::unordered_set<Qp*> opened_qps;  // ibv_open_qp's handles (xrc.cc)
  std::unordered_set<UFlow*> flows;  // ibv_create_flow's rules (raw-packet QPs)
  std::unordered_set<UWq*> wqs;      // receive work queues (RSS)
  std::unordered_set<UTable*> rwq_tables;  // their indirection tables
  std::vector<XrcdRec> xrcds;  // xrc.cc
};


/// Object creation shared by the plain and the extended verbs (objects.cc): an XRC target QP
/// takes `xrcd` and no PD; an XRC SRQ takes `xrcd` and the CQ its receives complete on.
ibv_qp* create_qp_in(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr* attr, Xrcd* xrcd);
ibv_srq* create_srq_in(ibv_pd* pd, ibv_srq_init_attr* attr, Xrcd* xrcd, ibv_cq* cq,
                       const ibv_tm_cap* tm = nullptr);
/// XRC (xrc.cc): the context ops, and ibv_close_device's closing of the domains left open.
void install_xrc_ops(Context* ctx);
/// ibv_destroy_qp of a handle ibv_open_qp made (xrc.cc): 0 or EINVAL.
int close_opened_qp(Qp* handle);
/// Destroys a QP the engine has (its handles closed, its events acknowledged).
void free_qp(Runtime* rt, Qp* q);
void close_context_xrcds(ContextState* s);

/// Monotonic time in ns: the engine's clock in production.
uint64_t now_ns();

/// The device list (built once, from the configuration; lives until exit).
const std::vector<Device*>& devices();

/// The runtime of an open device (runtime.cc): made by the first open, shared by the next
/// ones; released when its last context closes. Null with errno and one line on stderr.
Runtime* acquire_runtime(Device* d);
void release_runtime(Runtime* rt);

/// Fills the context's op table and extended ops (abi.cc, objects.cc); the data path's ops
/// (datapath.cc).
void install_ops(Context* ctx);
void install_data_ops(ibv_context_ops* ops);
/// Device memory and ibv_advise_mr (objects.cc).
void install_memory_ops(Context* ctx);
/// ibv_create_qp_ex with IBV_QP_INIT_ATTR_IND_TABLE and _RX_HASH: a receive-only raw-packet
/// QP spreading its flows' frames over the table's WQs (objects.cc).
ibv_qp* create_rss_qp_in(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
/// Device memory a uroce device offers (ibv_alloc_dm), emulated in host memory: the
/// ConnectX-6's 256 KiB.
inline constexpr uint64_t kDeviceMemoryBytes = 256 * 1024;
/// create_cq_ex / create_qp_ex (ext.cc), and the ibv_wr_* builder a QP may own.
void install_ext_ops(Context* ctx);
void free_qp_ext(void* ext);
/// ibv_alloc_parent_domain (objects.cc), and whether a PD handle is one.
ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr);
/// ibv_alloc_mw / ibv_dealloc_mw (objects.cc).
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
bool is_parent_domain(ibv_pd* pd);
/// Completion-channel events for armed CQs that got a completion (objects.cc; emu held).
void deliver_cq_events(Runtime* rt);
/// Set by ibv_poll_cq around the passes it drives: how long the engine may keep ACKs that
/// would leave alone (the reply window; 0: not at all). pass_locked hands it to the engine.
inline thread_local uint64_t t_ack_hold_ns = 0;
/// Runs an engine pass (Runtime::drive) whose ACKs wait `hold_ns` for the reply.
inline bool drive_holding_acks(Runtime* rt, uint64_t hold_ns) {
  t_ack_hold_ns = hold_ns;
  const bool ran = rt->drive(false);
  t_ack_hold_ns = 0;
  return ran;
}
/// Destroys every object the application left in the context (objects.cc; at close).
void destroy_context_objects(ContextState* s);
/// What the async pipe carries: the event and the number of the object it names (QPN, or the
/// CQ's / SRQ's handle), so that an event about a destroyed object is never taken for one
/// about a new object that got the same address.
struct AsyncRecord {
  ibv_async_event ev;
  uint32_t id;
};
/// Writes an async event to a context's pipe (never blocks; dropped if the reader is gone).
bool post_async(ContextState* s, const ibv_async_event& ev, uint32_t id = 0);

/// Which object an async event of this type names (IBV_EVENT_* -> element).
enum class EventObject { kNone, kQp, kCq, kSrq, kWq };
EventObject event_object(ibv_event_type type);

/// For ibv_get_async_event: counts an event the application read against its object (what
/// its destruction waits to see acknowledged); false if the object is gone (objects.cc).
bool count_async_read(ibv_context* c, const ibv_async_event& ev, uint32_t id);

inline ContextState* state_of(ibv_context* c) { return to_context(c)->state; }
inline Runtime* runtime_of(ibv_context* c) { return to_context(c)->state->rt; }

}  // namespace uroce::verbs

// uroce's libibverbs.so.1: the objects behind the verbs handles an application holds.
//
// The application sees rdma-core's structs (ibv_device, ibv_context, ...); each is the first
// member (or, for ibv_context, the last member of a verbs_context that is itself first) of
// ours, so a handle converts back with a cast. The C++ state lives behind a pointer.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "config/config.h"
#include "engine/engine.h"
#include "engine/stats_shm.h"

namespace uroce::verbs {

struct Device {
  ibv_device ibv;
  uint8_t reserved[64];  // provider libraries (libmlx5, libefa) peek just past ibv_device
  config::DeviceConfig cfg;
  uint64_t guid = 0;  // host order
  int index = 0;
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

/// Per open device: the port, the engine, the lock that serializes every engine call, and
/// the progress thread that polls the engine while the application is busy elsewhere.
struct ContextState {
  std::unique_ptr<Port> port;
  std::unique_ptr<Port> trace;  // PcapTrace around `port` when the config asks for it
  std::unique_ptr<Port> fault;  // FaultInjector on top when the config asks for it
  std::unique_ptr<Engine> engine;
  std::mutex mu;
  std::thread progress;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> last_app_poll{0};  // when an application thread last polled a CQ
  int async_pipe[2] = {-1, -1};
  int quiet_fd = -1;  // UDP 4791 socket that keeps the kernel from answering our traffic
  StatsShm* stats = nullptr;  // published counters (uroce stats), or null
  std::string stats_name;
  int qpn_lock_fd = -1;  // flock held on this process's QPN block of the interface
  uint64_t stats_next = 0;
  std::vector<Cq*> armed;  // CQs armed with ibv_req_notify_cq (under mu)
};

/// Monotonic time in ns: the engine's clock in production.
uint64_t now_ns();

/// The device list (built once, from the configuration; lives until exit).
const std::vector<Device*>& devices();

/// Fills the context's op table and extended ops (abi.cc, objects.cc).
void install_ops(Context* ctx);
void install_data_ops(ibv_context_ops* ops);
/// create_cq_ex / create_qp_ex (ext.cc), and the ibv_wr_* builder a QP may own.
void install_ext_ops(Context* ctx);
void free_qp_ext(void* ext);
/// Called by the progress thread after each engine poll, with the lock held.
void progress_hook(ContextState* s);

}  // namespace uroce::verbs

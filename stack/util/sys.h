// System calls uroce's libraries make for themselves, past any interposer.
#pragma once

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace uroce::util {

/// socket(2) without the libc symbol: rdma-core's librspreload.so (LD_PRELOAD) replaces
/// socket() with one that makes an rsocket, and uroce's own sockets (the CM's port
/// reservations, the runtime's quiet and multicast sockets) must stay kernel sockets.
inline int kernel_socket(int domain, int type, int protocol) {
  return static_cast<int>(syscall(SYS_socket, domain, type, protocol));
}

}  // namespace uroce::util

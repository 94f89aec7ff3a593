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

/// A socket's receive and send buffers: `rcv` and `snd` bytes as root (past net.core.rmem_max
/// and wmem_max), else as much of them as those limits allow.
inline void size_socket_buffers(int fd, int rcv, int snd) {
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof snd) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
}

}  // namespace uroce::util

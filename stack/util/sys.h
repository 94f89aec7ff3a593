// System calls uroce's libraries make for themselves, past any interposer.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

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

/// Writes `text` to an existing file in one write (a /proc file: uid_map, setgroups). True
/// if all of it was taken.
inline bool write_file(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

}  // namespace uroce::util

/* What rdma_verify.c and rdma_soak.c share: plain C helpers for a test program that sets up
 * its QPs over a TCP connection, as perftest and the pingpongs do. Each program defines
 * PROG_FAIL(...) (print and exit) before including this. */
#ifndef UROCE_PROG_COMMON_H
#define UROCE_PROG_COMMON_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* -m's argument in bytes as an ibv_mtu. */
static enum ibv_mtu mtu_of_bytes(int bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: PROG_FAIL("-m must be 256, 512, 1024, 2048 or 4096");
  }
  return IBV_MTU_1024;
}

/* Opens the device named `name` (NULL: the first one); *list is to be freed at the end. */
static struct ibv_context *open_named_device(const char *name, struct ibv_device ***list) {
  *list = ibv_get_device_list(NULL);
  struct ibv_device *dev = NULL;
  for (int i = 0; *list && (*list)[i]; ++i)
    if (!name || !strcmp(ibv_get_device_name((*list)[i]), name)) { dev = (*list)[i]; break; }
  if (!dev) PROG_FAIL("no RDMA device%s%s", name ? " named " : "", name ? name : "");
  struct ibv_context *ctx = ibv_open_device(dev);
  if (!ctx) PROG_FAIL("ibv_open_device failed");
  return ctx;
}

/* The client's side of the exchange: tries for 10 s while the server starts. */
static int tcp_connect(const char *host, int port) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res)) PROG_FAIL("cannot resolve %s", host);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  for (int tries = 0; connect(fd, res->ai_addr, res->ai_addrlen) != 0; ++tries) {
    if (tries == 100) PROG_FAIL("cannot connect to %s:%d: %s", host, port, strerror(errno));
    usleep(100000);
  }
  freeaddrinfo(res);
  return fd;
}

/* The server's side: one connection on `port`. */
static int tcp_accept(int port) {
  int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1)) PROG_FAIL("cannot listen on port %d", port);
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  close(lfd);
  return fd;
}

/* Sends ours, reads all of theirs. */
static void xfer(int fd, const void *mine, void *theirs, size_t n) {
  if (write(fd, mine, n) != (ssize_t)n) PROG_FAIL("TCP write failed");
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)theirs + got, n - got);
    if (r <= 0) PROG_FAIL("TCP read failed");
    got += (size_t)r;
  }
}

#endif

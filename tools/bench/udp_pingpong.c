// A busy-polling UDP ping-pong: the floor any RoCE stack over the kernel's UDP sockets stands
// on. Both sides spin on a non-blocking recv, as perftest's latency tests spin on their CQ
// (qperf's udp_lat sleeps in recv instead, and pays a wake-up each way).
//
//   udp_pingpong -s ADDR [-p PORT] [-n ITERS] [-l LEN]            server: echoes ITERS messages
//   udp_pingpong ADDR [-p PORT] [-n ITERS] [-l LEN] [-b LOCAL]   client
//
// The client prints "typical_us average_us": half the round trip (perftest's and qperf's
// one-way figure), the median and the mean over ITERS round trips after 100 warm-up ones.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void* a, const void* b) {
  const uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

/// Spins until a datagram arrives (the peer's address into *from if given).
static ssize_t spin_recv(int fd, char* buf, size_t len, struct sockaddr_in* from) {
  socklen_t fl = sizeof *from;
  for (;;) {
    const ssize_t n = recvfrom(fd, buf, len, MSG_DONTWAIT, (struct sockaddr*)from, from ? &fl : NULL);
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) return n;
  }
}

static void usage(void) {
  fprintf(stderr, "usage: udp_pingpong -s ADDR | ADDR [-p PORT] [-n ITERS] [-l LEN] [-b LOCAL]\n");
  exit(2);
}

int main(int argc, char** argv) {
  const char* addr = NULL;
  const char* local = NULL;
  int server = 0, port = 18900, iters = 10000, len = 8;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-s") == 0) server = 1;
    else if (strcmp(argv[i], "-p") == 0 && i + 1 < argc) port = atoi(argv[++i]);
    else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "-l") == 0 && i + 1 < argc) len = atoi(argv[++i]);
    else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) local = argv[++i];
    else if (argv[i][0] != '-' && addr == NULL) addr = argv[i];
    else usage();
  }
  if (addr == NULL || iters <= 0 || len <= 0 || len > 65000) usage();
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (fd < 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1) usage();
  char* buf = calloc(1, (size_t)len);
  const int warm = 100, total = iters + warm;
  if (server) {
    if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0) {
      perror("udp_pingpong: bind");
      return 1;
    }
    struct sockaddr_in peer;
    for (int i = 0; i < total; ++i) {
      const ssize_t n = spin_recv(fd, buf, (size_t)len, &peer);
      if (n < 0 || sendto(fd, buf, (size_t)n, 0, (struct sockaddr*)&peer, sizeof peer) != n) {
        perror("udp_pingpong: server");
        return 1;
      }
    }
    return 0;
  }
  if (local != NULL) {
    struct sockaddr_in l = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, local, &l.sin_addr) != 1 || bind(fd, (struct sockaddr*)&l, sizeof l) != 0)
      usage();
  }
  if (connect(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    perror("udp_pingpong: connect");
    return 1;
  }
  uint64_t* rtt = calloc((size_t)iters, sizeof *rtt);
  for (int i = 0; i < total; ++i) {
    const uint64_t t0 = now_ns();
    if (send(fd, buf, (size_t)len, 0) != len || spin_recv(fd, buf, (size_t)len, NULL) != len) {
      perror("udp_pingpong: client");
      return 1;
    }
    if (i >= warm) rtt[i - warm] = now_ns() - t0;
  }
  uint64_t sum = 0;
  for (int i = 0; i < iters; ++i) sum += rtt[i];
  qsort(rtt, (size_t)iters, sizeof *rtt, cmp_u64);
  printf("%.2f %.2f\n", (double)rtt[iters / 2] / 2000.0, (double)sum / iters / 2000.0);
  free(rtt);
  free(buf);
  return 0;
}

// An MPI ping-pong that checks every byte, for tests/verbs/middleware.sh: two ranks, message
// sizes from 1 byte to 4 MiB (eager and rendezvous). Rank 0 sends a pattern that depends on
// the size, the round and the byte's place; rank 1 checks it and answers with the pattern of
// the next round, which rank 0 checks. Prints the half round-trip time for each size and, at
// the end, "verified N bytes each way" (rank 0). The first wrong byte aborts both ranks.
// With an argument N (tools/bench/side_by_side.sh), each size is also timed over N further
// round trips (N / 10, at least 10, from 1 MiB) that neither fill nor check the buffer, and
// that time is the one printed: the checks' own cost stays out of the figures.
// Build: mpicc (Open MPI's or MPICH's); run with exactly two ranks.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(size_t size, int round, size_t i) {
  return (unsigned char)(i * 131u + (size_t)round * 17u + size * 7u + (i >> 8));
}

static void fill(unsigned char *b, size_t size, int round) {
  for (size_t i = 0; i < size; ++i) b[i] = pattern(size, round, i);
}

static int check(const unsigned char *b, size_t size, int round, int rank) {
  for (size_t i = 0; i < size; ++i) {
    if (b[i] != pattern(size, round, i)) {
      fprintf(stderr, "rank %d: size %zu round %d: byte %zu is 0x%02x, expected 0x%02x\n", rank,
              size, round, i, b[i], pattern(size, round, i));
      MPI_Abort(MPI_COMM_WORLD, 1);  // the peer is blocked in a receive: end both
      return 0;
    }
  }
  return 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs exactly 2 ranks, got %d\n", ranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int timed = argc > 1 ? atoi(argv[1]) : 0;
  const size_t max = (size_t)4 << 20;
  unsigned char *buf = malloc(max);
  if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);
  const int peer = 1 - rank;
  uint64_t verified = 0;
  int ok = 1;
  for (size_t size = 1; size <= max && ok; size *= 4) {
    const int rounds = size >= ((size_t)1 << 20) ? 10 : 50;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int r = 0; r < rounds && ok; ++r) {
      if (rank == 0) {
        fill(buf, size, 2 * r);
        MPI_Send(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD);
        memset(buf, 0, size);
        MPI_Recv(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ok = check(buf, size, 2 * r + 1, rank);
      } else {
        memset(buf, 0, size);
        MPI_Recv(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ok = check(buf, size, 2 * r, rank);
        fill(buf, size, 2 * r + 1);
        MPI_Send(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD);
      }
      verified += size;
    }
    double half_rtt = (MPI_Wtime() - t0) / rounds / 2;
    if (timed > 0 && ok) {
      const int n = size >= ((size_t)1 << 20) ? (timed / 10 > 10 ? timed / 10 : 10) : timed;
      MPI_Barrier(MPI_COMM_WORLD);
      const double t1 = MPI_Wtime();
      for (int r = 0; r < n; ++r) {
        if (rank == 0) {
          MPI_Send(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD);
          MPI_Recv(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD);
        }
      }
      half_rtt = (MPI_Wtime() - t1) / n / 2;
    }
    if (rank == 0 && ok)
      printf("%8zu bytes: %9.2f us, %8.2f MB/s\n", size, half_rtt * 1e6, size / half_rtt / 1e6);
  }
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank == 0 && all) printf("verified %llu bytes each way\n", (unsigned long long)verified);
  free(buf);
  MPI_Finalize();
  return all ? 0 : 1;
}

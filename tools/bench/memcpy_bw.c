/* What one core can copy: memcpy of 64 KiB blocks (perftest's message size in the bandwidth
 * rows) walking through two 64 MiB buffers, so that the copies come from and go to memory
 * rather than the caches, as a transfer between two processes' buffers does. Prints the
 * median of 5 one-second runs in MB/s, the yardstick for the shared-memory (memif) rows of
 * side_by_side.sh.
 *
 * Usage: memcpy_bw */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(void) {
  const size_t span = (size_t)64 << 20, block = (size_t)64 << 10;
  unsigned char* src = malloc(span);
  unsigned char* dst = malloc(span);
  if (src == NULL || dst == NULL) return 1;
  memset(src, 0x5a, span);
  memset(dst, 0, span);  /* every page touched before timing */
  double runs[5];
  for (int r = 0; r < 5; ++r) {
    size_t bytes = 0, off = 0;
    const double t0 = now_s();
    double t = t0;
    while (t - t0 < 1.0) {
      for (int i = 0; i < 256; ++i) {
        memcpy(dst + off, src + off, block);
        off = (off + block) % span;
      }
      bytes += 256 * block;
      t = now_s();
    }
    runs[r] = (double)bytes / (t - t0) / 1e6;
  }
  qsort(runs, 5, sizeof runs[0], by_value);
  printf("memcpy_MBps %.0f (dst[1] %d)\n", runs[2], dst[1]);
  free(src);
  free(dst);
  return 0;
}

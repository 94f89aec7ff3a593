/* What one core can copy, and what two cores can pass each other through shared memory.
 *
 *   memcpy_bw          memcpy of 64 KiB blocks (perftest's message size in the bandwidth rows)
 *                      walking through two 64 MiB buffers, so that the copies come from and go
 *                      to memory rather than the caches, as a transfer between two processes'
 *                      buffers does: the yardstick for the shared-memory (memif) rows of
 *                      side_by_side.sh.
 *   memcpy_bw cross    the ceiling of a shared-memory port such as memif: one thread copies
 *                      4 KiB frames from a 64 MiB buffer into a ring of 1024 slots, another
 *                      (on another CPU, wherever the scheduler puts it, as it does the two
 *                      uroce processes) copies each out into its own 64 MiB buffer, as memif's
 *                      sender and receiver do. Every byte crosses from one core's cache to the
 *                      other's. A uroce receiver does more per frame (the ICRC, the headers, a
 *                      second copy into the MR) but its first touch of the data is this one.
 *
 *   memcpy_bw hog      copies 16 MiB blocks between two 256 MiB buffers until killed: the
 *                      memory-bandwidth hog that side_by_side.sh (HOG=1) runs beside the
 *                      figures, at the idle scheduling class, so that it takes the memory
 *                      bandwidth of whatever CPU time the figures leave and not their CPUs.
 *
 * Prints the median of 5 one-second runs in MB/s. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
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

enum { kFrame = 4096, kSlots = 1024 };
static const size_t kSpan = (size_t)64 << 20;

/* The ring: slot i holds frame number seq[i] once written (a frame n goes to slot n % kSlots). */
struct ring {
  unsigned char* slots;
  _Atomic unsigned long seq[kSlots];
  _Atomic unsigned long consumed; /* frames the reader has copied out */
  _Atomic int stop;
  unsigned char* src;
};

static void* producer(void* arg) {
  struct ring* r = arg;
  size_t off = 0;
  for (unsigned long n = 1; !atomic_load_explicit(&r->stop, memory_order_relaxed); ++n) {
    while (n - atomic_load_explicit(&r->consumed, memory_order_acquire) > kSlots)
      if (atomic_load_explicit(&r->stop, memory_order_relaxed)) return NULL;
    const size_t slot = n % kSlots;
    memcpy(r->slots + slot * kFrame, r->src + off, kFrame);
    off = (off + kFrame) % kSpan;
    atomic_store_explicit(&r->seq[slot], n, memory_order_release);
  }
  return NULL;
}

static double cross_run(struct ring* r, unsigned char* dst, unsigned long* next) {
  size_t off = 0, bytes = 0;
  const double t0 = now_s();
  double t = t0;
  while (t - t0 < 1.0) {
    for (int i = 0; i < 256; ++i) {
      const unsigned long n = *next;
      const size_t slot = n % kSlots;
      while (atomic_load_explicit(&r->seq[slot], memory_order_acquire) != n) {
      }
      memcpy(dst + off, r->slots + slot * kFrame, kFrame);
      off = (off + kFrame) % kSpan;
      atomic_store_explicit(&r->consumed, n, memory_order_release);
      ++*next;
    }
    bytes += 256 * kFrame;
    t = now_s();
  }
  return (double)bytes / (t - t0) / 1e6;
}

static int cross(void) {
  static struct ring r;
  r.slots = malloc((size_t)kSlots * kFrame);
  r.src = malloc(kSpan);
  unsigned char* dst = malloc(kSpan);
  if (r.slots == NULL || r.src == NULL || dst == NULL) return 1;
  memset(r.src, 0x5a, kSpan);
  memset(dst, 0, kSpan);
  memset(r.slots, 0, (size_t)kSlots * kFrame);
  pthread_t p;
  if (pthread_create(&p, NULL, producer, &r) != 0) return 1;
  unsigned long next = 1;
  double runs[5];
  for (int k = 0; k < 5; ++k) runs[k] = cross_run(&r, dst, &next);
  atomic_store(&r.stop, 1);
  pthread_join(p, NULL);
  qsort(runs, 5, sizeof runs[0], by_value);
  printf("cross_core_MBps %.0f (dst[1] %d)\n", runs[2], dst[1]);
  free(r.slots);
  free(r.src);
  free(dst);
  return 0;
}

unsigned char* volatile hog_sink;

static int hog(void) {
  const size_t span = (size_t)256 << 20, block = (size_t)16 << 20;
  unsigned char* src = malloc(span);
  unsigned char* dst = malloc(span);
  if (src == NULL || dst == NULL) return 1;
  memset(src, 0x5a, span);
  memset(dst, 0, span);
  hog_sink = dst; /* dst escapes: its copies cannot be optimised away */
  for (size_t off = 0;; off = (off + block) % span) memcpy(dst + off, src + off, block);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "cross") == 0) return cross();
  if (argc > 1 && strcmp(argv[1], "hog") == 0) return hog();
  const size_t block = (size_t)64 << 10;
  unsigned char* src = malloc(kSpan);
  unsigned char* dst = malloc(kSpan);
  if (src == NULL || dst == NULL) return 1;
  memset(src, 0x5a, kSpan);
  memset(dst, 0, kSpan); /* every page touched before timing */
  double runs[5];
  for (int r = 0; r < 5; ++r) {
    size_t bytes = 0, off = 0;
    const double t0 = now_s();
    double t = t0;
    while (t - t0 < 1.0) {
      for (int i = 0; i < 256; ++i) {
        memcpy(dst + off, src + off, block);
        off = (off + block) % kSpan;
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

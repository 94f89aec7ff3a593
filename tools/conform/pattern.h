/* The bytes a conformance case's payloads and memory checks are made of: byte i of pattern
 * `seed` is pattern_byte(seed, i). Shared by uroce-conform (which sends and expects them) and
 * uroce-conform-agent (which fills and reads registered memory with them), so that a case
 * names a payload by one number. Seed 0 is all zeros. */
#ifndef UROCE_CONFORM_PATTERN_H
#define UROCE_CONFORM_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define PATTERN_CAST(T, v) static_cast<T>(v)
#else
#define PATTERN_CAST(T, v) ((T)(v))
#endif

static inline uint8_t pattern_byte(uint32_t seed, size_t i) {
  if (seed == 0) return 0;
  uint32_t x = seed * 2654435761u + PATTERN_CAST(uint32_t, i) * 40503u;
  x ^= x >> 13;
  return PATTERN_CAST(uint8_t, x ^ (x >> 7));
}

#endif

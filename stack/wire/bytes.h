// Big-endian field access without packed-struct casts or bitfields.
//
// Every header view in stack/wire reads and writes its fields through these helpers:
// memcpy into a native integer, then swap if the host is little-endian. Compilers turn this
// into a single load + bswap (or movbe).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace uroce::wire {

using Bytes = std::span<const uint8_t>;
using MutBytes = std::span<uint8_t>;

namespace detail {
template <typename T>
constexpr T byteswap(T v) {
  if constexpr (sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(v));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(v));
  } else {
    return static_cast<T>(__builtin_bswap64(v));
  }
}
template <typename T>
inline T load_be(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::little) v = byteswap(v);
  return v;
}
template <typename T>
inline void store_be(uint8_t* p, T v) {
  if constexpr (std::endian::native == std::endian::little) v = byteswap(v);
  std::memcpy(p, &v, sizeof v);
}
}  // namespace detail

inline uint16_t load_be16(const uint8_t* p) { return detail::load_be<uint16_t>(p); }
inline uint32_t load_be32(const uint8_t* p) { return detail::load_be<uint32_t>(p); }
inline uint64_t load_be64(const uint8_t* p) { return detail::load_be<uint64_t>(p); }
/// 24-bit big-endian field (QPN, PSN, MSN, DETH source QP).
inline uint32_t load_be24(const uint8_t* p) {
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | uint32_t{p[2]};
}

inline void store_be16(uint8_t* p, uint16_t v) { detail::store_be(p, v); }
inline void store_be32(uint8_t* p, uint32_t v) { detail::store_be(p, v); }
inline void store_be64(uint8_t* p, uint64_t v) { detail::store_be(p, v); }
inline void store_be24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}

}  // namespace uroce::wire

/* The kernel's fixed-width type names rdma-core's headers use (linux/types.h), for a C library
 * without the kernel's headers: emscripten's, when the engine is built for WebAssembly. */
#ifndef UROCE_LAB_LINUX_TYPES_H
#define UROCE_LAB_LINUX_TYPES_H
#include <stdint.h>
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int8_t __s8;
typedef int16_t __s16;
typedef int32_t __s32;
typedef int64_t __s64;
typedef uint16_t __be16;
typedef uint32_t __be32;
typedef uint64_t __be64;
typedef uint16_t __le16;
typedef uint32_t __le32;
typedef uint64_t __le64;
typedef uint16_t __sum16;
typedef uint32_t __wsum;
#define __aligned_u64 uint64_t __attribute__((aligned(8)))
#endif

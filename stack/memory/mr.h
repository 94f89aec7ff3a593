// Protection domains and memory regions: the tables that every L_Key / R_Key check goes
// through before a single byte of registered memory is read or written.
//
// Keys: a key is (table index << 12) | 12 random bits. The index finds the slot in O(1);
// the random part (re-drawn at every registration, never 0, never the slot's previous one)
// makes a key hard to guess and makes a stale key (of a deregistered and re-used slot) fail
// the check. Index 0 is never used, so key 0 is always invalid. L_Key and R_Key are the same
// value.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <random>
#include <vector>

namespace uroce::mem {

struct Pd {
  uint32_t handle = 0;
  uint32_t users = 0;  // MRs, QPs, SRQs, AHs holding it
};

struct Mr {
  uint32_t key = 0;          // L_Key == R_Key; 0 while the slot is free
  Pd* pd = nullptr;
  uint8_t* host = nullptr;   // where iova maps in our address space
  uint64_t iova = 0;         // the address the peer uses (ibv_reg_mr: == host address)
  uint64_t length = 0;
  int access = 0;            // IBV_ACCESS_* flags
};

/// Why an access was refused; each maps to a NAK or completion status in the transport.
enum class AccessError : uint8_t {
  kOk,
  kBadKey,        // no MR with this key (never registered, deregistered, or guessed)
  kPdMismatch,    // MR belongs to another protection domain than the QP
  kNoPermission,  // MR lacks the access right this operation needs
  kOutOfBounds,   // [va, va+len) not inside the MR
  kMisaligned,    // atomic target not 8-byte aligned
};

class MrTable {
 public:
  static constexpr unsigned kRandomBits = 12;

  explicit MrTable(uint32_t max_mrs, uint64_t seed);

  /// Registers [addr, addr+length) at `iova`. Returns nullptr and sets errno like
  /// ibv_reg_mr: EINVAL (bad access combination / null), ENOMEM (table full).
  Mr* reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access);
  /// Changes a registered MR in place (ibv_rereg_mr): same checks as reg, same key.
  /// Returns 0 or EINVAL.
  int modify(Mr* mr, Pd* pd, void* addr, uint64_t length, uint64_t iova, int access);
  /// Invalidates the key at once. Returns 0 or EINVAL.
  int dereg(Mr* mr);
  /// Invalidates the MR named by `key` (SEND with invalidate). 0, or EINVAL if no such MR.
  int invalidate(uint32_t key);

  /// Finds the MR for `key` and checks that `pd` owns it, that it grants `need`
  /// (IBV_ACCESS_* bits; 0 for local read), and that [va, va+len) lies inside it. On success
  /// `*host` points at va in our address space.
  AccessError check(uint32_t key, const Pd* pd, uint64_t va, uint64_t len, int need,
                    uint8_t** host) const;

  Mr* find(uint32_t key);
  uint32_t max_mrs() const { return static_cast<uint32_t>(slots_.size() - 1); }
  uint32_t in_use() const { return in_use_; }

 private:
  std::vector<Mr> slots_;           // [0] unused
  std::vector<uint16_t> last_rnd_;  // per slot: the random part of its latest key
  std::vector<uint32_t> free_;      // free slot indexes
  std::mt19937_64 rng_;
  uint32_t in_use_ = 0;
};

/// The IBV_ACCESS_* bit a remote operation needs.
inline constexpr int kNeedRemoteWrite = IBV_ACCESS_REMOTE_WRITE;
inline constexpr int kNeedRemoteRead = IBV_ACCESS_REMOTE_READ;
inline constexpr int kNeedRemoteAtomic = IBV_ACCESS_REMOTE_ATOMIC;
inline constexpr int kNeedLocalWrite = IBV_ACCESS_LOCAL_WRITE;

}  // namespace uroce::mem

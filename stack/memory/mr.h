// Protection domains and memory regions: the tables that every L_Key / R_Key check goes
// through before a single byte of registered memory is read or written.
//
// Keys: every key is 32 bits drawn from the operating system's random source (getrandom),
// so a peer that guesses has one chance in about four billion per try; nothing in a key says
// where its MR lives. A hash index (open addressing, load at most 1/2) finds the MR in O(1)
// without a scan. A key is never issued twice while a peer could still hold it: keys in use
// and the last kRetiredKeys deregistered ones are refused by the draw. Keys 0 and
// 0xFFFFFFFF are never issued. L_Key and R_Key are the same value.
//
// Registration checks the range as the kernel pins it: a range that wraps the address space
// is EINVAL, one with a page that is unmapped or lacks the access EFAULT.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <deque>
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

/// 0, or the errno ibv_reg_mr gives for [addr, addr+length): EINVAL if it wraps around the
/// address space, EFAULT if a page of it is not mapped in this process, or not readable, or
/// (`write`) not writable. Faults every page in, as the kernel's pinning does.
int host_range_errno(const void* addr, uint64_t length, bool write);

class MrTable {
 public:
  /// Deregistered keys the draw keeps refusing (besides every key in use).
  static constexpr size_t kRetiredKeys = 65536;

  /// `seed` 0: keys from getrandom (production). Otherwise a seeded generator, so that a
  /// test's keys are the same at every run.
  MrTable(uint32_t max_mrs, uint64_t seed);

  /// Registers [addr, addr+length) at `iova`. Returns nullptr and sets errno like
  /// ibv_reg_mr: EINVAL (bad access combination / null / wrapping range), EFAULT (unmapped
  /// page), ENOMEM (table full).
  Mr* reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access);
  /// Changes a registered MR in place (ibv_rereg_mr): same checks as reg, same key.
  /// Returns 0 or the errno.
  int modify(Mr* mr, Pd* pd, void* addr, uint64_t length, uint64_t iova, int access);
  /// Invalidates the key at once. Returns 0 or EINVAL.
  int dereg(Mr* mr);

  /// Finds the MR for `key` and checks that `pd` owns it, that it grants `need`
  /// (IBV_ACCESS_* bits; 0 for local read), and that [va, va+len) lies inside it. On success
  /// `*host` points at va in our address space.
  AccessError check(uint32_t key, const Pd* pd, uint64_t va, uint64_t len, int need,
                    uint8_t** host) const;

  Mr* find(uint32_t key);
  const Mr* find(uint32_t key) const;
  uint32_t max_mrs() const { return max_mrs_; }
  uint32_t in_use() const { return in_use_; }

 private:
  struct Entry {
    uint32_t key = 0;    // 0: empty
    Mr* mr = nullptr;    // nullptr: a retired key (refused by the draw, finds nothing)
  };
  size_t home(uint32_t key) const;
  size_t position(uint32_t key) const;  // of key's entry, or of the empty entry ending its run
  void insert(uint32_t key, Mr* mr);
  void erase(uint32_t key);
  void retire(uint32_t key);
  uint32_t draw();

  uint32_t max_mrs_;
  std::deque<Mr> slots_;         // grows at registration; an Mr never moves
  std::vector<Mr*> free_;        // slots free for the next registration
  std::vector<Entry> index_;     // power-of-two size, at most half full
  size_t index_used_ = 0;
  std::deque<uint32_t> retired_;  // the newest kRetiredKeys deregistered keys, oldest first
  uint64_t seed_;                 // 0: getrandom
  std::array<uint32_t, 64> pool_{};
  size_t pool_left_ = 0;
  uint32_t in_use_ = 0;
};

/// The IBV_ACCESS_* bit a remote operation needs.
inline constexpr int kNeedRemoteWrite = IBV_ACCESS_REMOTE_WRITE;
inline constexpr int kNeedRemoteRead = IBV_ACCESS_REMOTE_READ;
inline constexpr int kNeedRemoteAtomic = IBV_ACCESS_REMOTE_ATOMIC;
inline constexpr int kNeedLocalWrite = IBV_ACCESS_LOCAL_WRITE;

}  // namespace uroce::mem

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
// is EINVAL, one with a page that is unmapped or lacks the access EFAULT. An on-demand MR
// (IBV_ACCESS_ON_DEMAND) is not checked then but at every access, as an RNIC's page fault
// does; (NULL, SIZE_MAX) with it is the implicit MR, the whole address space. The check and
// the copy are not atomic: a range the application unmaps while a transfer runs is its race.
//
// Memory windows (IBA 10.6.7) share the key space. A window's R_Key keeps bits 31..8 for its
// whole life (they name it; the index is keyed on them, for MRs too) and takes new bits 7..0
// at every bind (ibv_inc_rkey), so that a peer holding the previous binding's key is refused.
// A type 1 window is bound with ibv_bind_mw and belongs to its PD; a type 2 window is bound
// with an IBV_WR_BIND_MW work request and belongs to that QP alone, which is also the only
// QP whose peer may invalidate it (SEND with invalidate). Only type 2 windows can be
// invalidated, locally or remotely: an MR never is (uroce has no fast-registration MRs).
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
  uint32_t windows = 0;      // memory windows bound to it: it cannot be deregistered
};

/// A memory window: a remote view of part of an MR, with its own R_Key and rights.
struct Mw {
  uint32_t key = 0;          // the current R_Key; 0 while the slot is free
  Pd* pd = nullptr;
  ibv_mw_type type = IBV_MW_TYPE_1;
  Mr* mr = nullptr;          // the MR it is bound to; nullptr while unbound (type 2: free)
  uint64_t base = 0;         // the peer's address of its first byte (0 when zero-based)
  uint8_t* host = nullptr;   // where that byte is in our address space
  uint64_t length = 0;
  int access = 0;            // remote rights (IBV_ACCESS_REMOTE_*, IBV_ACCESS_ZERO_BASED)
  uint32_t qpn = 0;          // type 2: the QP it is bound to
};

/// A bind request as the send queue carries it to the engine (IBV_WR_BIND_MW, ibv_bind_mw).
struct BindRequest {
  uint32_t mw_key = 0;   // the window's key when posted (bits 31..8 name it)
  uint32_t new_key = 0;  // the R_Key it gets: same bits 31..8
  uint32_t mr_key = 0;   // the MR (0: unbind a type 1 window)
  uint64_t addr = 0;     // in the MR's iova space
  uint64_t length = 0;
  int access = 0;
  bool type1 = false;    // posted by ibv_bind_mw (the only way to bind a type 1 window)
};
/// Why an access was refused; each maps to a NAK or completion status in the transport.
enum class AccessError : uint8_t {
  kOk,
  kBadKey,        // no MR with this key (never registered, deregistered, or guessed)
  kPdMismatch,    // MR belongs to another protection domain than the QP
  kNoPermission,  // MR lacks the access right this operation needs
  kOutOfBounds,   // [va, va+len) not inside the MR
  kMisaligned,    // atomic target not 8-byte aligned
  kWrongQp,       // a type 2 window bound to another QP
};

/// 0, or the errno ibv_reg_mr gives for [addr, addr+length): EINVAL if it wraps around the
/// address space, EFAULT if a page of it is not mapped in this process, or not readable, or
/// (`write`) not writable. Faults every page in, as the kernel's pinning does.
int host_range_errno(const void* addr, uint64_t length, bool write);
/// Whether [addr, addr+length) lies in shared mappings of files, without a gap: what an MR
/// with IBV_ACCESS_FLUSH_PERSISTENT must be (a FLUSH for persistence msyncs it).
bool shared_file_range(const void* addr, uint64_t length);

/// Whether registration faults the region's pages in (kCheck), or the caller already did,
/// with region_errno, before taking the device lock (kChecked): a GiB is a quarter of a
/// million page faults, and every QP's traffic waits for that lock meanwhile.
enum class Pages : uint8_t { kCheck, kChecked };

/// 0, or the errno ibv_reg_mr gives for registering [addr, addr+length) with `access` in
/// `pd`: the access combination (remote write or atomic needs local write), a null or
/// wrapping range, and (kCheck) every page faulted in with the access the MR needs.
int region_errno(const Pd* pd, const void* addr, uint64_t length, int access,
                 Pages pages = Pages::kCheck);

/// Whether on-demand MRs can be offered: each access must be able to fault its pages in and
/// learn their protection (MADV_POPULATE_READ/WRITE, Linux 5.14).
bool odp_supported();

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
  Mr* reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access,
          Pages pages = Pages::kCheck);
  /// Changes a registered MR in place (ibv_rereg_mr): same checks as reg, same key.
  /// Returns 0 or the errno.
  int modify(Mr* mr, Pd* pd, void* addr, uint64_t length, uint64_t iova, int access,
             Pages pages = Pages::kCheck);
  /// Invalidates the key at once. Returns 0, EINVAL, or EBUSY while windows are bound to it.
  int dereg(Mr* mr);

  /// A window of `type` in `pd`, unbound. Nullptr with errno EINVAL / ENOMEM.
  Mw* alloc_mw(Pd* pd, ibv_mw_type type);
  /// Unbinds and frees it; its key is retired like an MR's. Returns 0 or EINVAL.
  int dealloc_mw(Mw* mw);
  /// Carries out a bind posted on a QP of `pd` numbered `qpn`, with the IBA's checks (10.6.7:
  /// state, PD, the MR's MW_BIND right, a writable window on a locally writable MR, the range
  /// inside the MR). False if any fails: the work request completes with IBV_WC_MW_BIND_ERR.
  bool bind(const BindRequest& b, const Pd* pd, uint32_t qpn);
  /// Invalidates the type 2 window whose current key is `key`: LOCAL_INV posted on a QP of
  /// `pd` (`qpn` 0), or a SEND with invalidate received by QP `qpn` (its window only).
  /// False if `key` names no such window (an MR, a type 1 window, a stale key).
  bool invalidate(uint32_t key, const Pd* pd, uint32_t qpn);
  /// A QP is destroyed: the type 2 windows bound to it are invalidated.
  void release_qp(uint32_t qpn);
  const Mw* find_mw(uint32_t key) const;

  /// Finds the MR for `key` and checks that `pd` owns it, that it grants `need`
  /// (IBV_ACCESS_* bits; 0 for local read), and that [va, va+len) lies inside it. On success
  /// `*host` points at va in our address space. An on-demand MR's range is faulted in too,
  /// unless `fault_in` is false (a whole message's range checked up front: its packets are
  /// faulted in one by one, as an RNIC faults only the pages it touches).
  AccessError check(uint32_t key, const Pd* pd, uint64_t va, uint64_t len, int need,
                    uint8_t** host, bool fault_in = true) const;
  /// The same for an R_Key a peer sent to QP `qpn`: an MR's, or a bound window's (for a type
  /// 2 window only through the QP it is bound to; a zero-based window's va is an offset).
  AccessError check_remote(uint32_t key, const Pd* pd, uint32_t qpn, uint64_t va, uint64_t len,
                           int need, uint8_t** host, bool fault_in = true) const;

  Mr* find(uint32_t key);
  const Mr* find(uint32_t key) const;
  uint32_t max_mrs() const { return max_mrs_; }
  uint32_t in_use() const { return in_use_; }
  uint32_t windows_in_use() const { return mws_in_use_; }

 private:
  struct Entry {
    uint32_t key = 0;    // 0: empty; otherwise bits 31..8 are never 0
    Mr* mr = nullptr;    // the MR, or
    Mw* mw = nullptr;    // the window; both nullptr: a retired key (refused by the draw)
  };
  size_t home(uint32_t key) const;
  // Of the entry whose key has key's bits 31..8, or of the empty entry ending its run.
  size_t position(uint32_t key) const;
  void insert(const Entry& e);
  void erase(uint32_t key);
  void retire(uint32_t key);
  uint32_t draw();

  uint32_t max_mrs_;
  std::deque<Mr> slots_;         // grows at registration; an Mr never moves
  std::vector<Mr*> free_;        // slots free for the next registration
  std::deque<Mw> mw_slots_;      // the same for windows
  std::vector<Mw*> mw_free_;
  std::vector<Entry> index_;     // power-of-two size, at most half full
  size_t index_used_ = 0;
  std::deque<uint32_t> retired_;  // the newest kRetiredKeys deregistered keys, oldest first
  uint64_t seed_;                 // 0: getrandom
  std::array<uint32_t, 64> pool_{};
  size_t pool_left_ = 0;
  uint32_t in_use_ = 0;
  uint32_t mws_in_use_ = 0;
};

/// The IBV_ACCESS_* bit a remote operation needs.
inline constexpr int kNeedRemoteWrite = IBV_ACCESS_REMOTE_WRITE;
inline constexpr int kNeedRemoteRead = IBV_ACCESS_REMOTE_READ;
inline constexpr int kNeedRemoteAtomic = IBV_ACCESS_REMOTE_ATOMIC;
inline constexpr int kNeedLocalWrite = IBV_ACCESS_LOCAL_WRITE;

}  // namespace uroce::mem

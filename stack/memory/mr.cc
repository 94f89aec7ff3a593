#include "memory/mr.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <random>

#include "uroce/verbs_compat.h"

// A C library that does not name them (emscripten's, for the lab in the browser) has no
// kernel behind it to pin pages either.
#if !defined(MADV_POPULATE_READ) || !defined(MADV_POPULATE_WRITE)
#define UROCE_NO_MADV_POPULATE 1
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

namespace uroce::mem {

namespace {
/// Whether this kernel knows MADV_POPULATE_READ/WRITE (5.14+): asked once, on a page of
/// this function's own stack.
bool populate_supported() {
#ifdef UROCE_NO_MADV_POPULATE
  return false;
#endif
  static const bool yes = [] {
    unsigned char probe[1] = {0};
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    void* p = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(probe) & ~(page - 1));
    return madvise(p, page, MADV_POPULATE_READ) == 0;
  }();
  return yes;
}
}  // namespace

bool odp_supported() { return populate_supported(); }

bool shared_file_range(const void* addr, uint64_t length) {
  // /proc/self/maps lists the mappings in address order: "start-end perms offset dev inode
  // path". The range must be covered without a gap by shared ('s') mappings of a file
  // (inode not 0): there msync() writes the pages back to where the file lives.
  const auto start = reinterpret_cast<uintptr_t>(addr);
  if (length == 0 || start + length < start) return false;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return false;
  uintptr_t covered = start;
  const uintptr_t end = start + length;
  char line[512];
  while (covered < end && std::fgets(line, sizeof line, f) != nullptr) {
    uintptr_t lo = 0, hi = 0;
    char perms[8] = {};
    unsigned long long inode = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %llu", &lo, &hi, perms,
                    &inode) != 4)
      continue;
    if (hi <= covered) continue;
    if (lo > covered || perms[3] != 's' || inode == 0) break;  // a gap, or not such a mapping
    covered = hi;
  }
  std::fclose(f);
  return covered >= end;
}

int host_range_errno(const void* addr, uint64_t length, bool write) {
  if (length == 0) return 0;
  const auto start = reinterpret_cast<uintptr_t>(addr);
  if (start + length < start) return EINVAL;  // wraps around the address space
#ifdef __EMSCRIPTEN__
  // WebAssembly (the lab): one linear memory, every byte of it there and writable.
  (void)write;
  return 0;
#endif
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = start & ~(page - 1);
  const uintptr_t end = start + length;
  // As the kernel pins an MR: every page faulted in, writable when the MR may be written (by
  // the peer or by us). An unmapped page (ENOMEM), or one the MR's access cannot have
  // (PROT_NONE, read-only for a writable MR: EFAULT), fails as ibv_reg_mr does through the
  // kernel; registered, it would let a peer's WRITE or READ kill the process.
  if (populate_supported()) {
    // EINTR / EAGAIN (a signal, a page being migrated) are worth a few more tries.
    for (int tries = 0; tries < 4; ++tries) {
      if (madvise(reinterpret_cast<void*>(first), end - first,
                  write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
        return 0;
      if (errno != EINTR && errno != EAGAIN) break;
    }
    // ENOMEM: unmapped; EINVAL: a mapping without the access (or device memory, which the
    // kernel does not pin either); EFAULT: a page that would fault (a file's hole past EOF).
    return errno == EINTR || errno == EAGAIN ? EAGAIN : EFAULT;
  }
  // A kernel before 5.14: at least every page must be mapped, which mincore() checks (it
  // fails with ENOMEM where one is not); the pages' protection goes unchecked.
  unsigned char vec[4096];
  for (uintptr_t p = first; p < end;) {
    const uintptr_t chunk = std::min<uintptr_t>(end - p, sizeof vec * page);
    if (mincore(reinterpret_cast<void*>(p), chunk, vec) != 0) return EFAULT;
    p += chunk;
  }
  return 0;
}

MrTable::MrTable(uint32_t max_mrs, uint64_t seed)
    : max_mrs_(max_mrs), index_(64), seed_(seed) {}

namespace {
/// Whether an MR with these rights may be written (the kernel's ib_access_writable).
bool writable(int access) {
  return (access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                    IBV_ACCESS_MW_BIND)) != 0;
}
}  // namespace

int region_errno(const Pd* pd, const void* addr, uint64_t length, int access, Pages pages) {
  // IBA: remote write or remote atomic access requires local write access.
  const bool needs_local_write =
      (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  if (pd == nullptr || (needs_local_write && !(access & IBV_ACCESS_LOCAL_WRITE))) return EINVAL;
  // Durability only where msync() gives it (as rxe allows persistence on pmem pages only).
  // Checked with the pages (kCheck, before the engine lock): reading /proc/self/maps takes
  // the kernel's mmap lock.
  if ((access & UROCE_ACCESS_FLUSH_PERSISTENT) && pages != Pages::kChecked &&
      !shared_file_range(addr, length))
    return EINVAL;
  if (access & IBV_ACCESS_ON_DEMAND) {
    // On-demand paging: nothing is pinned or faulted in now; each access checks its pages
    // (MrTable::check). Only a range that wraps is refused, and the implicit MR (NULL,
    // SIZE_MAX) is the whole address space. Without MADV_POPULATE (before Linux 5.14) an
    // access could not be checked for the pages' protection: not offered there.
    if (!odp_supported()) return EOPNOTSUPP;
    if (addr == nullptr && length == SIZE_MAX) return 0;  // its iova must be 0 (reg)
    if (addr == nullptr && length != 0) return EINVAL;
    const auto start = reinterpret_cast<uintptr_t>(addr);
    return start + length < start ? EINVAL : 0;
  }
  if (addr == nullptr && length != 0) return EINVAL;
  return pages == Pages::kChecked ? 0 : host_range_errno(addr, length, writable(access));
}

namespace {

/// `base` + `offset` as a pointer, without pointer arithmetic on a null base (the implicit
/// on-demand MR's host address is null: its iova is the address itself).
uint8_t* at(uint8_t* base, uint64_t offset) {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(base) + offset);
}

/// For an on-demand MR: faults [host, host+len) in with the access `need` asks for, as an
/// RNIC's page fault does; false where a page is unmapped or lacks that access (the access
/// then fails as one out of bounds would: a NAK for a peer, a protection error locally).
bool odp_present(const Mr& mr, uint8_t* host, uint64_t len, int need, bool fault_in) {
  if (!fault_in || !(mr.access & IBV_ACCESS_ON_DEMAND)) return true;  // pinned at registration
  const bool write = (need & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  return host_range_errno(host, len, write) == 0;
}
}  // namespace

// ---- The key index: linear probing, backward-shift deletion ------------------------------

size_t MrTable::home(uint32_t key) const {
  // Keys are random already; the multiply spreads a seeded test's keys just as well. Bits
  // 7..0 are left out: a window keeps its place when a bind changes them.
  return static_cast<size_t>((uint64_t{key >> 8} * 0x9E3779B97F4A7C15ull) >> 32) &
         (index_.size() - 1);
}

size_t MrTable::position(uint32_t key) const {
  size_t i = home(key);
  while (index_[i].key != 0 && (index_[i].key >> 8) != (key >> 8))
    i = (i + 1) & (index_.size() - 1);
  return i;
}

void MrTable::insert(const Entry& entry) {
  if ((index_used_ + 1) * 2 > index_.size()) {  // keep the load at most 1/2
    std::vector<Entry> old(index_.size() * 2);
    old.swap(index_);
    for (const Entry& e : old)
      if (e.key != 0) index_[position(e.key)] = e;
  }
  Entry& e = index_[position(entry.key)];
  if (e.key == 0) ++index_used_;
  e = entry;
}

void MrTable::erase(uint32_t key) {
  const size_t mask = index_.size() - 1;
  size_t hole = position(key);
  if (index_[hole].key == 0) return;
  // Move later entries of the run back into the hole when their home allows it, so that
  // every lookup still finds its key before an empty entry.
  for (size_t j = (hole + 1) & mask; index_[j].key != 0; j = (j + 1) & mask) {
    const size_t h = home(index_[j].key);
    // j's entry may move to `hole` unless its home lies cyclically in (hole, j].
    const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (!stays) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole] = Entry{};
  --index_used_;
}

void MrTable::retire(uint32_t key) {
  Entry& e = index_[position(key)];
  e.mr = nullptr;  // stays in the index: the draw keeps refusing it
  e.mw = nullptr;
  retired_.push_back(key);
  if (retired_.size() > kRetiredKeys) {
    erase(retired_.front());
    retired_.pop_front();
  }
}

uint32_t MrTable::draw() {
  for (;;) {
    uint32_t k;
    if (seed_ != 0) {  // splitmix64
      uint64_t z = (seed_ += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      k = static_cast<uint32_t>(z ^ (z >> 31));
      if (seed_ == 0) seed_ = 1;  // stay seeded
    } else {
      if (pool_left_ == 0) {
        ssize_t got = -1;
#ifndef __EMSCRIPTEN__  // (no getrandom there: the C++ library's source below)
        do {
          got = getrandom(pool_.data(), sizeof pool_, 0);
        } while (got < 0 && errno == EINTR);
#endif
        if (got != static_cast<ssize_t>(sizeof pool_)) {  // no getrandom: the C++ library's
          std::random_device rd;
          for (uint32_t& v : pool_) v = rd();
        }
        pool_left_ = pool_.size();
      }
      k = pool_[--pool_left_];
    }
    // Bits 31..8 never 0 or all ones (so the key is never 0 or ~0, which tools use for "no
    // key"), and never those of a key in use or deregistered recently.
    if ((k >> 8) != 0 && (k >> 8) != 0xFFFFFFu && index_[position(k)].key == 0) return k;
  }
}

// ---- Registration ---------------------------------------------------------------------------

int MrTable::modify(Mr* mr, Pd* pd, void* addr, uint64_t length, uint64_t iova, int access,
                    Pages pages) {
  if (mr == nullptr || mr->key == 0) return EINVAL;
  if (mr->windows != 0) return EBUSY;  // the windows' translations would go stale
  if (int e = region_errno(pd, addr, length, access, pages); e != 0) return e;
  --mr->pd->users;
  ++pd->users;
  mr->pd = pd;
  mr->host = static_cast<uint8_t*>(addr);
  mr->iova = iova;
  mr->length = length;
  mr->access = access;
  return 0;
}

Mr* MrTable::reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access,
                 Pages pages) {
  int e = region_errno(pd, addr, length, access, pages);
  if (e == 0 && addr == nullptr && length == SIZE_MAX && iova != 0) e = EINVAL;  // implicit
  if (e == 0 && in_use_ >= max_mrs_) e = ENOMEM;
  if (e != 0) {
    errno = e;
    return nullptr;
  }
  Mr* slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = &slots_.emplace_back();
  }
  Mr& mr = *slot;
  mr.key = draw();
  insert(Entry{mr.key, slot, nullptr});
  mr.pd = pd;
  mr.host = static_cast<uint8_t*>(addr);
  mr.iova = iova;
  mr.length = length;
  mr.access = access;
  ++pd->users;
  ++in_use_;
  return &mr;
}

int MrTable::dereg(Mr* mr) {
  if (mr == nullptr || mr->key == 0 || find(mr->key) != mr) return EINVAL;
  if (mr->windows != 0) return EBUSY;
  --mr->pd->users;
  free_.push_back(mr);
  retire(mr->key);
  *mr = Mr{};
  --in_use_;
  return 0;
}

const Mr* MrTable::find(uint32_t key) const {
  if ((key >> 8) == 0) return nullptr;
  const Entry& e = index_[position(key)];
  return e.key == key ? e.mr : nullptr;
}

const Mw* MrTable::find_mw(uint32_t key) const {
  if ((key >> 8) == 0) return nullptr;
  const Entry& e = index_[position(key)];
  return e.key == key ? e.mw : nullptr;
}

Mr* MrTable::find(uint32_t key) {
  return const_cast<Mr*>(static_cast<const MrTable*>(this)->find(key));
}

AccessError MrTable::check(uint32_t key, const Pd* pd, uint64_t va, uint64_t len, int need,
                           uint8_t** host, bool fault_in) const {
  const Mr* found = find(key);
  if (found == nullptr) return AccessError::kBadKey;
  const Mr& mr = *found;
  if (mr.pd != pd) return AccessError::kPdMismatch;
  if ((mr.access & need) != need) return AccessError::kNoPermission;
  // [va, va+len) inside [iova, iova+length), written so that nothing can overflow.
  if (va < mr.iova || va - mr.iova > mr.length || len > mr.length - (va - mr.iova))
    return AccessError::kOutOfBounds;
  uint8_t* h = at(mr.host, va - mr.iova);
  if (!odp_present(mr, h, len, need, fault_in)) return AccessError::kOutOfBounds;
  *host = h;
  return AccessError::kOk;
}

AccessError MrTable::check_remote(uint32_t key, const Pd* pd, uint32_t qpn, uint64_t va,
                                  uint64_t len, int need, uint8_t** host, bool fault_in) const {
  if ((key >> 8) == 0) return AccessError::kBadKey;
  const Entry& e = index_[position(key)];
  if (e.key != key || (e.mr == nullptr && e.mw == nullptr)) return AccessError::kBadKey;
  if (e.mr != nullptr) return check(key, pd, va, len, need, host, fault_in);
  const Mw& w = *e.mw;
  if (w.mr == nullptr) return AccessError::kBadKey;  // unbound, or invalidated
  if (w.pd != pd) return AccessError::kPdMismatch;
  if (w.type == IBV_MW_TYPE_2 && w.qpn != qpn) return AccessError::kWrongQp;
  if ((w.access & need) != need) return AccessError::kNoPermission;
  if (va < w.base || va - w.base > w.length || len > w.length - (va - w.base))
    return AccessError::kOutOfBounds;
  uint8_t* h = at(w.host, va - w.base);
  if (!odp_present(*w.mr, h, len, need, fault_in)) return AccessError::kOutOfBounds;
  *host = h;
  return AccessError::kOk;
}

// ---- Memory windows ------------------------------------------------------------------------

Mw* MrTable::alloc_mw(Pd* pd, ibv_mw_type type) {
  if (pd == nullptr || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
    errno = EINVAL;
    return nullptr;
  }
  if (mws_in_use_ >= max_mrs_) {
    errno = ENOMEM;
    return nullptr;
  }
  Mw* slot;
  if (!mw_free_.empty()) {
    slot = mw_free_.back();
    mw_free_.pop_back();
  } else {
    slot = &mw_slots_.emplace_back();
  }
  *slot = Mw{};
  slot->key = draw();
  slot->pd = pd;
  slot->type = type;
  insert(Entry{slot->key, nullptr, slot});
  ++pd->users;
  ++mws_in_use_;
  return slot;
}

namespace {
void unbind(Mw& w) {
  if (w.mr != nullptr) --w.mr->windows;
  w.mr = nullptr;
  w.base = 0;
  w.host = nullptr;
  w.length = 0;
  w.access = 0;
  w.qpn = 0;
}
}  // namespace

int MrTable::dealloc_mw(Mw* mw) {
  if (mw == nullptr || mw->key == 0 || find_mw(mw->key) != mw) return EINVAL;
  unbind(*mw);
  --mw->pd->users;
  --mws_in_use_;
  retire(mw->key);
  *mw = Mw{};
  mw_free_.push_back(mw);
  return 0;
}

bool MrTable::bind(const BindRequest& b, const Pd* pd, uint32_t qpn) {
  if ((b.mw_key >> 8) == 0) return false;
  Entry& e = index_[position(b.mw_key)];
  if (e.key == 0 || e.mw == nullptr || (e.key >> 8) != (b.new_key >> 8)) return false;
  Mw& w = *e.mw;
  if ((w.type == IBV_MW_TYPE_1) != b.type1) return false;  // each type has its own verb
  const bool zero_based = (b.access & IBV_ACCESS_ZERO_BASED) != 0;
  Mr* mr = b.mr_key != 0 ? find(b.mr_key) : nullptr;
  if (b.mr_key != 0 && mr == nullptr) return false;
  if (w.type == IBV_MW_TYPE_1) {
    if (zero_based) return false;  // type 1 windows are addressed by virtual address
    if (w.pd != pd) return false;
  } else {
    // A type 2 window binds when free (invalidated first), on a QP of its PD, to an MR.
    if (w.mr != nullptr || w.pd != pd || mr == nullptr || b.length == 0) return false;
  }
  if (mr != nullptr) {
    if (mr->pd != w.pd || !(mr->access & IBV_ACCESS_MW_BIND)) return false;
    if ((b.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(mr->access & IBV_ACCESS_LOCAL_WRITE))
      return false;
    // Persistence only where the MR has it (its memory is a shared file mapping).
    if ((b.access & UROCE_ACCESS_FLUSH_PERSISTENT) && !(mr->access & UROCE_ACCESS_FLUSH_PERSISTENT))
      return false;
    // [addr, addr+length) inside the MR, without overflow.
    if (b.addr < mr->iova || b.addr - mr->iova > mr->length ||
        b.length > mr->length - (b.addr - mr->iova))
      return false;
  }
  unbind(w);
  if (mr != nullptr && b.length != 0) {  // a type 1 bind to no MR or no bytes unbinds
    w.mr = mr;
    ++mr->windows;
    w.base = zero_based ? 0 : b.addr;
    w.host = at(mr->host, b.addr - mr->iova);
    w.length = b.length;
    w.access = b.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED |
                           UROCE_ACCESS_FLUSH_GLOBAL | UROCE_ACCESS_FLUSH_PERSISTENT);
    w.qpn = w.type == IBV_MW_TYPE_2 ? qpn : 0;
  }
  w.key = b.new_key;
  e.key = b.new_key;
  return true;
}

bool MrTable::invalidate(uint32_t key, const Pd* pd, uint32_t qpn) {
  if ((key >> 8) == 0) return false;
  Entry& e = index_[position(key)];
  if (e.key != key || e.mw == nullptr) return false;
  Mw& w = *e.mw;
  if (w.type != IBV_MW_TYPE_2 || w.mr == nullptr || w.pd != pd) return false;
  if (qpn != 0 && w.qpn != qpn) return false;  // a peer invalidates its own QP's window only
  unbind(w);
  return true;
}

void MrTable::release_qp(uint32_t qpn) {
  for (Mw& w : mw_slots_)
    if (w.key != 0 && w.type == IBV_MW_TYPE_2 && w.mr != nullptr && w.qpn == qpn) unbind(w);
}

}  // namespace uroce::mem

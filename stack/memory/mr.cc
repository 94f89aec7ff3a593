#include "memory/mr.h"

#include <cerrno>

namespace uroce::mem {

MrTable::MrTable(uint32_t max_mrs, uint64_t seed)
    : slots_(size_t{max_mrs} + 1), last_rnd_(size_t{max_mrs} + 1, 0), rng_(seed) {
  free_.reserve(max_mrs);
  for (uint32_t i = max_mrs; i >= 1; --i) free_.push_back(i);
}

namespace {
bool valid_region(const Pd* pd, const void* addr, uint64_t length, int access) {
  // IBA: remote write or remote atomic access requires local write access.
  const bool needs_local_write =
      (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0;
  return pd != nullptr && (addr != nullptr || length == 0) &&
         (!needs_local_write || (access & IBV_ACCESS_LOCAL_WRITE));
}
}  // namespace

int MrTable::modify(Mr* mr, Pd* pd, void* addr, uint64_t length, uint64_t iova, int access) {
  if (mr == nullptr || mr->key == 0 || !valid_region(pd, addr, length, access)) return EINVAL;
  --mr->pd->users;
  ++pd->users;
  mr->pd = pd;
  mr->host = static_cast<uint8_t*>(addr);
  mr->iova = iova;
  mr->length = length;
  mr->access = access;
  return 0;
}

Mr* MrTable::reg(Pd* pd, void* addr, uint64_t length, uint64_t iova, int access) {
  if (!valid_region(pd, addr, length, access)) {
    errno = EINVAL;
    return nullptr;
  }
  if (free_.empty()) {
    errno = ENOMEM;
    return nullptr;
  }
  const uint32_t idx = free_.back();
  free_.pop_back();
  uint32_t rnd;
  do {
    rnd = static_cast<uint32_t>(rng_()) & ((1u << kRandomBits) - 1);
  } while (rnd == 0 || rnd == last_rnd_[idx]);  // never re-issue the slot's previous key
  last_rnd_[idx] = static_cast<uint16_t>(rnd);
  Mr& mr = slots_[idx];
  mr.key = (idx << kRandomBits) | rnd;
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
  if (mr == nullptr || mr->key == 0) return EINVAL;
  --mr->pd->users;
  const uint32_t idx = mr->key >> kRandomBits;
  *mr = Mr{};
  free_.push_back(idx);
  --in_use_;
  return 0;
}

int MrTable::invalidate(uint32_t key) {
  Mr* mr = find(key);
  return mr == nullptr ? EINVAL : dereg(mr);
}

Mr* MrTable::find(uint32_t key) {
  const uint32_t idx = key >> kRandomBits;
  if (idx == 0 || idx >= slots_.size() || slots_[idx].key != key) return nullptr;
  return &slots_[idx];
}

AccessError MrTable::check(uint32_t key, const Pd* pd, uint64_t va, uint64_t len, int need,
                           uint8_t** host) const {
  const uint32_t idx = key >> kRandomBits;
  if (idx == 0 || idx >= slots_.size() || slots_[idx].key != key) return AccessError::kBadKey;
  const Mr& mr = slots_[idx];
  if (mr.pd != pd) return AccessError::kPdMismatch;
  if ((mr.access & need) != need) return AccessError::kNoPermission;
  // [va, va+len) inside [iova, iova+length), written so that nothing can overflow.
  if (va < mr.iova || va - mr.iova > mr.length || len > mr.length - (va - mr.iova))
    return AccessError::kOutOfBounds;
  *host = mr.host + (va - mr.iova);
  return AccessError::kOk;
}

}  // namespace uroce::mem

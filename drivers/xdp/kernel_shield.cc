#include "xdp/kernel_shield.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "xdp/bpf_privileges.h"

namespace uroce::drivers {

extern const unsigned char kShieldProgram[];
extern const size_t kShieldProgramSize;

namespace {
// The tcx ingress hook (Linux 6.6); older uapi headers do not name it.
constexpr int kTcxIngress = 46;
}  // namespace

std::unique_ptr<KernelShield> KernelShield::attach(
    const std::string& iface, const std::vector<std::array<uint8_t, 16>>& addresses,
    std::string* why_not) {
  const int ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
  if (ifindex == 0) {
    *why_not = "no interface " + iface;
    return nullptr;
  }
  if (const std::string missing = missing_bpf_caps(false); !missing.empty()) {
    *why_not = "needs " + missing;
    return nullptr;
  }
  std::unique_ptr<KernelShield> s(new KernelShield());
  int loaded = -1, load_errno = 0;
  {
    const QuietLibbpf quiet;
    s->obj_ = bpf_object__open_mem(kShieldProgram, kShieldProgramSize, nullptr);
    loaded = s->obj_ != nullptr ? bpf_object__load(s->obj_) : -1;
    load_errno = errno;
  }
  if (loaded != 0) {
    *why_not = std::string("the kernel refused the program (") + std::strerror(load_errno) + ")";
    return nullptr;
  }
  const int addrs = bpf_object__find_map_fd_by_name(s->obj_, "uroce_addrs");
  s->count_fd_ = bpf_object__find_map_fd_by_name(s->obj_, "uroce_count");
  for (const auto& a : addresses) {
    const uint8_t one = 1;
    if (addrs < 0 || bpf_map_update_elem(addrs, a.data(), &one, BPF_ANY) != 0) {
      *why_not = std::string("cannot give the program an address (") + std::strerror(errno) + ")";
      return nullptr;
    }
  }
  bpf_program* prog = bpf_object__find_program_by_name(s->obj_, "uroce_shield");
  const int prog_fd = prog != nullptr ? bpf_program__fd(prog) : -1;
  s->link_fd_ = bpf_link_create(prog_fd, ifindex, static_cast<bpf_attach_type>(kTcxIngress), nullptr);
  if (s->link_fd_ < 0) {
    *why_not = std::string("cannot attach it at tc ingress (") + std::strerror(errno) +
               "; tcx links need Linux 6.6 or later)";
    return nullptr;
  }
  return s;
}

KernelShield::~KernelShield() {
  if (link_fd_ >= 0) close(link_fd_);  // the program leaves the interface
  if (obj_ != nullptr) bpf_object__close(obj_);
}

uint64_t KernelShield::dropped() const {
  const int cpus = libbpf_num_possible_cpus();
  if (count_fd_ < 0 || cpus <= 0) return 0;
  std::vector<uint64_t> per(static_cast<size_t>(cpus));
  const uint32_t key = 0;
  if (bpf_map_lookup_elem(count_fd_, &key, per.data()) != 0) return 0;
  uint64_t sum = 0;
  for (uint64_t v : per) sum += v;
  return sum;
}

}  // namespace uroce::drivers

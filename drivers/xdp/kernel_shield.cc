#include "xdp/kernel_shield.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>

namespace uroce::drivers {

extern const unsigned char kShieldProgram[];
extern const size_t kShieldProgramSize;

namespace {
// The tcx ingress hook (Linux 6.6); older uapi headers do not name it.
constexpr int kTcxIngress = 46;
constexpr int kCapBpf = 39;  // CAP_BPF (Linux 5.8), also missing from older headers

/// Can this process load and attach the program? Asked before libbpf is called at all, so
/// that a program without the privileges sees no libbpf messages on its stderr and libbpf
/// does not try to raise its RLIMIT_MEMLOCK.
bool privileged() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (syscall(SYS_capget, &h, d) != 0) return false;
  const auto has = [&d](int cap) { return (d[cap / 32].effective >> (cap % 32)) & 1u; };
  return has(CAP_NET_ADMIN) && (has(kCapBpf) || has(CAP_SYS_ADMIN));
}

// libbpf's messages are for BPF developers; ours are the one line in `uroce devinfo`.
int quiet(libbpf_print_level, const char*, va_list) { return 0; }
}  // namespace

std::unique_ptr<KernelShield> KernelShield::attach(
    const std::string& iface, const std::vector<std::array<uint8_t, 16>>& addresses,
    std::string* why_not) {
  const int ifindex = static_cast<int>(if_nametoindex(iface.c_str()));
  if (ifindex == 0) {
    *why_not = "no interface " + iface;
    return nullptr;
  }
  if (!privileged()) {
    *why_not = "needs CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN";
    return nullptr;
  }
  std::unique_ptr<KernelShield> s(new KernelShield());
  // libbpf's print hook is process-wide: ours only while we load, the program's back after.
  const libbpf_print_fn_t before = libbpf_set_print(quiet);
  s->obj_ = bpf_object__open_mem(kShieldProgram, kShieldProgramSize, nullptr);
  const int loaded = s->obj_ != nullptr ? bpf_object__load(s->obj_) : -1;
  const int load_errno = errno;
  libbpf_set_print(before);
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

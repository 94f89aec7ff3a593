#include "xdp/bpf_privileges.h"

#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>

namespace uroce::drivers {

namespace {
constexpr int kCapBpf = 39;  // CAP_BPF (Linux 5.8), missing from older headers

int quiet(libbpf_print_level, const char*, va_list) { return 0; }
}  // namespace

std::string missing_bpf_caps(bool af_xdp) {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (syscall(SYS_capget, &h, d) != 0) return "capabilities unknown (capget failed)";
  const auto has = [&d](int cap) { return ((d[cap / 32].effective >> (cap % 32)) & 1u) != 0; };
  std::string missing;
  const auto add = [&missing](const char* what) {
    missing += missing.empty() ? "" : ", ";
    missing += what;
  };
  if (!has(kCapBpf) && !has(CAP_SYS_ADMIN)) add("CAP_BPF (or CAP_SYS_ADMIN)");
  if (!has(CAP_NET_ADMIN)) add("CAP_NET_ADMIN");
  if (af_xdp && !has(CAP_NET_RAW)) add("CAP_NET_RAW");
  return missing;
}

QuietLibbpf::QuietLibbpf() : before_(reinterpret_cast<void*>(libbpf_set_print(quiet))) {}

QuietLibbpf::~QuietLibbpf() { libbpf_set_print(reinterpret_cast<libbpf_print_fn_t>(before_)); }

}  // namespace uroce::drivers

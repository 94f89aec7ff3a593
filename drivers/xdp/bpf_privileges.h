// What loading uroce's BPF programs takes, asked before libbpf is called at all: a process
// without the privileges then sees no libbpf messages on its stderr, libbpf does not try to
// raise its RLIMIT_MEMLOCK, and the error names what is missing.
#pragma once

#include <string>

namespace uroce::drivers {

/// The capabilities this process lacks (effective set) to load a BPF program and attach it
/// to an interface: CAP_NET_ADMIN, and CAP_BPF or CAP_SYS_ADMIN; with `af_xdp` also
/// CAP_NET_RAW (an AF_XDP socket is a raw socket). "" when it has them all.
std::string missing_bpf_caps(bool af_xdp);

/// libbpf's messages are for BPF developers; ours are one line each. libbpf's print hook is
/// process-wide: this swaps in a silent one while it lives, the program's own back after.
class QuietLibbpf {
 public:
  QuietLibbpf();
  ~QuietLibbpf();
  QuietLibbpf(const QuietLibbpf&) = delete;
  QuietLibbpf& operator=(const QuietLibbpf&) = delete;

 private:
  void* before_;
};

}  // namespace uroce::drivers

// `uroce doctor` (doctor.cc): which ports can work here, and why not, each with the fix.
#pragma once

namespace uroce::doctor {

/// Prints one row per port and what else matters (device view, rdma_cm on loopback, the
/// configuration, the interfaces). 0 if the udp or the af_packet port can work, else 1.
int run();

}  // namespace uroce::doctor

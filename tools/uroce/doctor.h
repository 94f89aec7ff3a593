// `uroce doctor` (doctor.cc): which ports can work here, and why not, each with the fix.
#pragma once

namespace uroce::doctor {

/// Prints one row per port and what else matters (device view, rdma_cm on loopback, the
/// configuration, the interfaces). 0 if the udp or the af_packet port can work, else 1.
int run();

/// Whether this process may make the device view root's way (overlays, a device node):
/// CAP_SYS_ADMIN and CAP_MKNOD in effect. Root in a container usually has neither; it then
/// takes the way an ordinary user does (a user namespace of its own).
bool can_mount_and_mknod();

}  // namespace uroce::doctor

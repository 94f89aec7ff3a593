// The rdma_cm rendezvous on loopback: how a client that connects to 127.0.0.1 finds the
// server when every process on the udp port on loopback has a 127.0.0.x of its own
// (docs/udp.md, "One machine, no configuration").
//
// A listener bound to a loopback address or the wildcard names itself in the abstract unix
// socket namespace: one socket bound to "uroce-cm:<port space, hex>:<port>:<its IPv4
// address>" for as long as it listens (the kernel drops the name with the socket, so a
// process that dies leaves nothing behind). A client resolving a loopback address that no
// listener has reads the names from /proc/net/unix and takes the address of the listener on
// its port. The names live in the network namespace, as the loopback addresses do; nothing
// here needs a privilege.
//
// Here the text of it (pure functions, tested in tests/cm); the sockets are the verbs
// provider's (stack/verbs/ucma.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "wire/addr.h"

namespace uroce::cm {

/// "uroce-cm:106:18515:127.0.0.5" (no leading NUL: the caller puts the name in the abstract
/// namespace).
std::string rendezvous_name(uint16_t ps, uint16_t port, const wire::Ipv4Addr& ip);

/// In the text of /proc/net/unix, the address of the (first) listener on (ps, port) that has
/// a name there.
std::optional<wire::Ipv4Addr> rendezvous_find(std::string_view proc_net_unix, uint16_t ps,
                                              uint16_t port);

}  // namespace uroce::cm

// A connection's numbers (rdma_conn_param / rdma_ud_param without the private data) in the one
// form they travel in: from librdmacm's rdma_connect / rdma_accept (stack/rdmacm/cma.cc)
// through the provider's private interface (stack/verbs/uroce_cm_abi.h) into the connection
// manager's ids, and back out in its events. Nothing copies them field by field on the way.
// C++ (both libraries are); the struct has a C name because that interface is extern "C".
#pragma once

#include <cstdint>

struct uroce_cm_param {
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t flow_control = 0;
  uint8_t retry_count = 7;  // 3-bit counts: 7, as rdma_connect without a conn_param
  uint8_t rnr_retry_count = 7;
  uint8_t srq = 0;
  uint32_t qp_num = 0;
  uint32_t qkey = 0;  // UD
};

namespace uroce::cm {
using ConnParam = uroce_cm_param;
}  // namespace uroce::cm

// Names for the CM MAD codecs (wire/cm_mad.h).
#include "wire/cm_mad.h"

namespace uroce::wire {

std::string_view cm_attr_name(uint16_t attr_id) {
  switch (attr_id) {
    case cm_attr::kClassPortInfo: return "ClassPortInfo";
    case cm_attr::kReq: return "REQ";
    case cm_attr::kMra: return "MRA";
    case cm_attr::kRej: return "REJ";
    case cm_attr::kRep: return "REP";
    case cm_attr::kRtu: return "RTU";
    case cm_attr::kDreq: return "DREQ";
    case cm_attr::kDrep: return "DREP";
    case cm_attr::kSidrReq: return "SIDR_REQ";
    case cm_attr::kSidrRep: return "SIDR_REP";
    case cm_attr::kLap: return "LAP";
    case cm_attr::kApr: return "APR";
    default: return "";
  }
}

std::string_view to_string(CmRejReason r) {
  switch (r) {
    case CmRejReason::kNoQp: return "no QP";
    case CmRejReason::kNoEec: return "no EEC";
    case CmRejReason::kNoResources: return "no resources";
    case CmRejReason::kTimeout: return "timeout";
    case CmRejReason::kUnsupported: return "unsupported request";
    case CmRejReason::kInvalidCommId: return "invalid comm ID";
    case CmRejReason::kInvalidCommInstance: return "invalid comm instance";
    case CmRejReason::kInvalidServiceId: return "invalid service ID";
    case CmRejReason::kInvalidTransportType: return "invalid transport type";
    case CmRejReason::kStaleConn: return "stale connection";
    case CmRejReason::kRdcNotExist: return "RDC does not exist";
    case CmRejReason::kInvalidGid: return "invalid GID";
    case CmRejReason::kInvalidLid: return "invalid LID";
    case CmRejReason::kInvalidSl: return "invalid SL";
    case CmRejReason::kInvalidTrafficClass: return "invalid traffic class";
    case CmRejReason::kInvalidHopLimit: return "invalid hop limit";
    case CmRejReason::kInvalidPacketRate: return "invalid packet rate";
    case CmRejReason::kInvalidAltGid: return "invalid alternate GID";
    case CmRejReason::kInvalidAltLid: return "invalid alternate LID";
    case CmRejReason::kInvalidAltSl: return "invalid alternate SL";
    case CmRejReason::kInvalidAltTrafficClass: return "invalid alternate traffic class";
    case CmRejReason::kInvalidAltHopLimit: return "invalid alternate hop limit";
    case CmRejReason::kInvalidAltPacketRate: return "invalid alternate packet rate";
    case CmRejReason::kPortCmRedirect: return "port and CM redirect";
    case CmRejReason::kPortRedirect: return "port redirect";
    case CmRejReason::kInvalidMtu: return "invalid path MTU";
    case CmRejReason::kInsufficientRespResources: return "insufficient responder resources";
    case CmRejReason::kConsumerReject: return "consumer reject";
    case CmRejReason::kInvalidRnrRetry: return "RNR retry count reject";
    case CmRejReason::kDuplicateLocalCommId: return "duplicate local comm ID";
    case CmRejReason::kInvalidClassVersion: return "unsupported class version";
    case CmRejReason::kInvalidFlowLabel: return "invalid flow label";
    case CmRejReason::kInvalidAltFlowLabel: return "invalid alternate flow label";
    case CmRejReason::kVendorOptionNotSupported: return "vendor option not supported";
  }
  return "reserved reason";
}

std::string_view to_string(CmMsgResponse m) {
  switch (m) {
    case CmMsgResponse::kReq: return "REQ";
    case CmMsgResponse::kRep: return "REP";
    case CmMsgResponse::kOther: return "other";
  }
  return "reserved";
}

std::string_view to_string(SidrStatus s) {
  switch (s) {
    case SidrStatus::kValid: return "valid";
    case SidrStatus::kServiceIdNotSupported: return "service ID not supported";
    case SidrStatus::kRejected: return "rejected";
    case SidrStatus::kNoQp: return "no QP";
    case SidrStatus::kRedirect: return "redirect";
    case SidrStatus::kUnsupportedClassVersion: return "unsupported class version";
  }
  return "reserved status";
}

std::string_view rdma_ps_name(uint16_t ps) {
  switch (ps) {
    case kRdmaPsIpoib: return "IPoIB";
    case kRdmaPsTcp: return "TCP";
    case kRdmaPsUdp: return "UDP";
    case kRdmaPsIb: return "IB";
    default: return "";
  }
}

}  // namespace uroce::wire

// Names for ErrorCode, used in logs and by server/errors.cpp.
#include "core/result.h"

namespace flint {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kInvalidFile:
      return "invalid_file";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kOutOfMemory:
      return "out_of_memory";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kNetwork:
      return "network";
    case ErrorCode::kPermissionDenied:
      return "permission_denied";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace flint

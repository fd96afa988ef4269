// ErrorCode -> HTTP status and OpenAI/vLLM error JSON.
#include "server/errors.h"

#include <nlohmann/json.hpp>

namespace flint::server {
namespace {

const char* error_type(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 403:
      return "PermissionDeniedError";
    case 404:
      return "NotFoundError";
    case 413:
      return "BadRequestError";
    case 501:
      return "NotImplementedError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return "InternalServerError";
  }
}

}  // namespace

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kInvalidFile:
    case ErrorCode::kUnsupported:
      return 400;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kPermissionDenied:
      return 401;
    case ErrorCode::kUnavailable:
    case ErrorCode::kOutOfMemory:
      return 503;
    case ErrorCode::kCancelled:
      return 499;
    case ErrorCode::kIo:
    case ErrorCode::kNetwork:
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

std::string error_json(const Error& error, std::string_view param) {
  const int status = http_status(error.code);
  nlohmann::ordered_json body = {
      {"error",
       {{"message", error.message},
        {"type", error_type(status)},
        {"param", param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param)},
        {"code", status}}}};
  // Messages may quote client bytes: never let invalid UTF-8 make dump() throw.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

HttpError to_http_error(const Error& error, std::string_view param) {
  return HttpError{http_status(error.code), error_json(error, param)};
}

}  // namespace flint::server

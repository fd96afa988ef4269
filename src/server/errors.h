// The one place that maps flint::ErrorCode to an HTTP status and the OpenAI error envelope
// {"error": {"message", "type", "param", "code"}} (vLLM's shape: code is the HTTP status).
// Test: tests/unit/server/openai_types_test.cpp
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"

namespace flint::server {

struct HttpError {
  int status = 500;
  std::string body;  // the JSON envelope
};

int http_status(ErrorCode code);
// `param` names the offending request field ("" for none: JSON null).
HttpError to_http_error(const Error& error, std::string_view param = "");
// The envelope as it appears inside an SSE `data:` frame after the stream started.
std::string error_json(const Error& error, std::string_view param = "");

}  // namespace flint::server

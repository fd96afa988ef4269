// SSE framing.
#include "server/sse.h"

namespace flint::server {

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_event_raw(std::string_view json_text) {
  std::string out = "data: ";
  out.append(json_text);
  out.append("\n\n");
  return out;
}

std::string sse_event(const nlohmann::ordered_json& data) { return sse_event_raw(dump_json(data)); }

}  // namespace flint::server

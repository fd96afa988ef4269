// Python-compatible JSON text for tool-call arguments.
#include "server/py_json.h"

#include <cmath>

#include "tokenizer/jinja/value.h"

namespace flint::server {

std::string py_json_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  tokenizer::jinja::append_json_string(out, std::string(s), /*ensure_ascii=*/false);
  return out;
}

std::string py_json_dumps(const nlohmann::ordered_json& j) {
  if (j.is_string()) return py_json_string(j.get_ref<const std::string&>());
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      out += py_json_dumps(j[i]);
    }
    return out + "]";
  }
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += py_json_string(it.key()) + ": " + py_json_dumps(it.value());
    }
    return out + "}";
  }
  if (j.is_number_float()) {
    double d = j.get<double>();
    std::string s = j.dump();
    // Python writes floats with a fractional part or exponent (3.0, not 3).
    if (s.find_first_of(".eE") == std::string::npos && std::isfinite(d)) s += ".0";
    return s;
  }
  return j.dump();
}

std::string py_typed_literal(std::string_view stripped) {
  if (stripped == "True") return "true";
  if (stripped == "False") return "false";
  if (stripped == "None") return "null";
  // ordered_json keeps key order, as Python dicts do.
  nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(stripped, nullptr,
                                                                /*allow_exceptions=*/false);
  if (!parsed.is_discarded()) return py_json_dumps(parsed);
  return py_json_string(stripped);
}

}  // namespace flint::server

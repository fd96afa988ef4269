// JSON text exactly as Python's json.dumps(..., ensure_ascii=False) writes it (", " and ": "
// separators), which is what vLLM puts in tool-call arguments. Test:
// tests/unit/server/py_json_test.cpp
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace flint::server {

// A JSON string literal for `s` (quotes included); non-ASCII text passes through unchanged,
// invalid UTF-8 becomes U+FFFD.
std::string py_json_string(std::string_view s);
// json.dumps of a parsed value.
std::string py_json_dumps(const nlohmann::ordered_json& j);
// A stripped argument value typed like vLLM: JSON if it parses, else a Python literal
// (True/False/None), else a string.
std::string py_typed_literal(std::string_view stripped);

}  // namespace flint::server

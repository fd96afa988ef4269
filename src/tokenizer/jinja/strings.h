// Python str operations by code point (strip, split, replace, case mapping, find, format) used by
// methods.cpp and builtins.cpp. Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace flint::tokenizer::jinja {

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right);
std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_split_ws(const std::string& s, int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::vector<std::string> py_chars(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s,
                       int64_t count);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_title(const std::string& s);       // str.title()
std::string py_capitalize(const std::string& s);  // str.capitalize()
std::string jinja_title(const std::string& s);    // the |title filter
int64_t py_count(const std::string& s, const std::string& sub);
int64_t py_find(const std::string& s, const std::string& sub, bool from_right);  // code points
bool py_is(const std::string& s, const std::string& which);  // isdigit, isalpha, ...
std::string py_pad(const std::string& s, int64_t width, const std::string& fill,
                   const std::string& how);  // center, ljust, rjust
std::string py_zfill(const std::string& s, int64_t width);
Result<Value> py_format(const std::string& s, const CallArgs& args);  // str.format
std::string html_escape(const std::string& s);
bool truthy_or(const Value* v);       // truthy(*v), false when null
size_t py_len(const std::string& s);  // code points

}  // namespace flint::tokenizer::jinja

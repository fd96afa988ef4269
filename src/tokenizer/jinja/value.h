// Jinja values with Python semantics: truthiness, equality, ordering, str()/repr() and json.dumps.
// Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace flint::tokenizer::jinja {

struct Value;
struct CallArgs;
class Renderer;

using ValueList = std::vector<Value>;
using NativeFn = std::function<Result<Value>(Renderer&, CallArgs&)>;

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kCallable,
  kNamespace
};

struct ListData {
  ValueList items;
  bool is_tuple = false;
  // Non-empty for Python iterators and views that only look like lists: "generator" (what select,
  // map, unique, items, batch return), "list_reverseiterator", "dict_items", "dict_keys",
  // "dict_values". They iterate like lists, but cannot be indexed or serialised, and generators
  // have no len() and are always true.
  std::string view;
  int depth = 1;  // nesting depth, 1 + the deepest item (bounded so destruction cannot overflow)
};
struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, like a Python dict
  int depth = 1;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);
};
struct CallableData {
  std::string name;
  NativeFn fn;
};
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;
  int depth = 1;
};

// Immutable except for NamespaceData (what `{% set ns.x = ... %}` changes). Copies are cheap.
struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // kString; for kUndefined: a hint for error messages
  std::shared_ptr<const ListData> list;
  std::shared_ptr<const DictData> dict;
  std::shared_ptr<const CallableData> fn;
  std::shared_ptr<NamespaceData> ns;

  static Value undefined(std::string hint = "");
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(ValueList items, bool is_tuple = false);
  static Value make_view(ValueList items, std::string view);
  static Value make_dict(std::shared_ptr<const DictData> d);
  static Value callable(std::string name, NativeFn fn);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_plain_list() const { return kind == Kind::kList && list->view.empty(); }
  bool is_generator() const {
    return kind == Kind::kList && !list->view.empty() && list->view.rfind("dict_", 0) != 0;
  }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  bool is_integral() const { return kind == Kind::kInt || kind == Kind::kBool; }
  const std::string& str() const { return *s; }
  int64_t as_int() const { return kind == Kind::kBool ? (b ? 1 : 0) : i; }
  double as_float() const { return kind == Kind::kFloat ? f : static_cast<double>(as_int()); }
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;
  // The positional argument `idx` or the keyword `name`; nullptr when neither was given.
  const Value* get(size_t idx, const std::string& name) const;
};

int value_depth(const Value& v);  // 0 for scalars
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);  // Python ==
// Python <: numbers, strings (by code point), sequences. Error for other combinations.
Result<bool> less(const Value& a, const Value& b);
std::string type_name(const Value& v);  // Python's type name: 'str', 'dict', ...
std::string to_str(const Value& v);     // Python str(); Undefined is ""
std::string repr(const Value& v);       // Python repr()
std::string python_float_repr(double d);
std::string python_str_repr(const std::string& s);

struct JsonOptions {
  bool ensure_ascii = false;
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// Python json.dumps. Errors on values JSON cannot hold (Undefined, callables, namespaces).
Result<std::string> to_json(const Value& v, const JsonOptions& options);
// Appends `s` as a JSON string literal (quotes included) as json.dumps writes it; invalid UTF-8
// becomes U+FFFD. Also the server's tool-call arguments (server/py_json.h).
void append_json_string(std::string& out, const std::string& s, bool ensure_ascii);

// UTF-8 helpers: strings are indexed by code point, as in Python.
std::vector<uint32_t> decode_utf8(const std::string& s);
void append_utf8(std::string& out, uint32_t cp);
std::string encode_utf8(const std::vector<uint32_t>& cps, size_t begin, size_t end);
bool is_ascii(const std::string& s);
bool is_py_space(uint32_t cp);

}  // namespace flint::tokenizer::jinja

// Value construction, Python comparisons, str()/repr(), json.dumps and UTF-8 helpers.
// Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace flint::tokenizer::jinja {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::make_shared<const std::string>(std::move(x));
  return v;
}
int value_depth(const Value& v) {
  switch (v.kind) {
    case Kind::kList:
      return v.list->depth;
    case Kind::kDict:
      return v.dict->depth;
    case Kind::kNamespace:
      return v.ns->depth;
    default:
      return 0;
  }
}

Value Value::make_list(ValueList items, bool is_tuple) {
  Value v;
  v.kind = Kind::kList;
  auto d = std::make_shared<ListData>();
  for (const auto& item : items) d->depth = std::max(d->depth, 1 + value_depth(item));
  d->items = std::move(items);
  d->is_tuple = is_tuple;
  v.list = std::move(d);
  return v;
}
Value Value::make_view(ValueList items, std::string view) {
  Value v = make_list(std::move(items));
  std::const_pointer_cast<ListData>(v.list)->view = std::move(view);
  return v;
}
Value Value::make_dict(std::shared_ptr<const DictData> d) {
  int depth = 1;
  for (const auto& [k, x] : d->items)
    depth = std::max({depth, 1 + value_depth(k), 1 + value_depth(x)});
  if (depth != d->depth) std::const_pointer_cast<DictData>(d)->depth = depth;
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::move(d);
  return v;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::kCallable;
  auto d = std::make_shared<CallableData>();
  d->name = std::move(name);
  d->fn = std::move(fn);
  v.fn = std::move(d);
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
      return none();
    case T::boolean:
      return boolean(j.get<bool>());
    case T::number_integer:
      return integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return number(static_cast<double>(u));
      return integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return number(j.get<double>());
    case T::string:
      return string(j.get<std::string>());
    case T::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return make_list(std::move(items));
    }
    case T::object: {
      auto d = std::make_shared<DictData>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d->items.emplace_back(string(it.key()), from_json(it.value()));
      }
      return make_dict(std::move(d));
    }
    default:
      return none();
  }
}

const Value* CallArgs::get(size_t idx, const std::string& name) const {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  if (idx < args.size()) return &args[idx];
  return nullptr;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0.0;
    case Kind::kString:
      return !v.s->empty();
    case Kind::kList:
      return v.is_generator() || !v.list->items.empty();
    case Kind::kDict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::kFloat || b.kind == Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return *a.s == *b.s;
    case Kind::kList: {
      if (a.list == b.list) return true;
      if (!a.list->view.empty() || !b.list->view.empty()) return false;
      if (a.list->is_tuple != b.list->is_tuple || a.list->items.size() != b.list->items.size()) {
        return false;
      }
      for (size_t k = 0; k < a.list->items.size(); ++k) {
        if (!equals(a.list->items[k], b.list->items[k])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict == b.dict) return true;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return a.fn == b.fn;
    case Kind::kNamespace:
      return a.ns == b.ns;
    default:
      return false;
  }
}

Result<bool> less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::kFloat || b.kind == Kind::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return *a.s < *b.s;  // UTF-8 byte order is code point order
  if (a.is_plain_list() && b.is_plain_list() && a.list->is_tuple == b.list->is_tuple) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equals(x[k], y[k])) continue;
      return less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "'<' not supported between instances of '{}' and '{}'", type_name(a),
                    type_name(b));
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return !v.list->view.empty() ? v.list->view : v.list->is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kCallable:
      return "function";
    case Kind::kNamespace:
      return "Namespace";
  }
  return "object";
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci looks like "-1.2345e+05": split into sign, digits and exponent.
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t k = 0; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  std::string out = neg ? "-" : "";
  int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (exp + 1 >= n) {
      out += digits + std::string(static_cast<size_t>(exp + 1 - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." +
             digits.substr(static_cast<size_t>(exp + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  out += exp < 0 ? "e-" : "e+";
  std::string ex = std::to_string(exp < 0 ? -exp : exp);
  if (ex.size() < 2) ex = "0" + ex;
  return out + ex;
}

bool is_ascii(const std::string& s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t k = 0;
  while (k < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || k + static_cast<size_t>(len) > s.size()) {
      out.push_back(0xFFFD);
      ++k;
      continue;
    }
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int m = 1; m < len; ++m) {
      unsigned char cc = static_cast<unsigned char>(s[k + static_cast<size_t>(m)]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++k;
      continue;
    }
    out.push_back(cp);
    k += static_cast<size_t>(len);
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end && k < cps.size(); ++k) append_utf8(out, cps[k]);
  return out;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

// Python's str.isprintable() for the code points templates meet (categories C* and Z* except ' ').
bool py_printable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0)) return false;
  if (cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
      (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 ||
      cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || (cp >= 0xD800 && cp <= 0xF8FF) ||
      (cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E ||
      cp >= 0xF0000 || (cp >= 0xE0000 && cp <= 0xE007F)) {
    return false;
  }
  return true;
}

}  // namespace

std::string repr_inner(const Value& v);

std::string python_str_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (uint32_t cp : decode_utf8(s)) {
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!py_printable(cp)) {
      out += cp < 0x100     ? fmt::format("\\x{:02x}", cp)
             : cp < 0x10000 ? fmt::format("\\u{:04x}", cp)
                            : fmt::format("\\U{:08x}", cp);
    } else {
      append_utf8(out, cp);
    }
  }
  out += q;
  return out;
}

std::string repr(const Value& v) {
  // Namespaces can contain themselves; Python prints such a cycle as "...".
  thread_local int depth = 0;
  if (depth > 300) return "...";
  ++depth;
  std::string out = repr_inner(v);
  --depth;
  return out;
}

std::string repr_inner(const Value& v) {
  switch (v.kind) {
    case Kind::kString:
      return python_str_repr(*v.s);
    case Kind::kList: {
      if (v.is_generator()) return "<" + v.list->view + " object>";
      std::string out = v.list->is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += ", ";
        out += repr(v.list->items[k]);
      }
      if (v.list->is_tuple && v.list->items.size() == 1) out += ",";
      out += v.list->is_tuple ? ")" : "]";
      return v.list->view.empty() ? out : v.list->view + "(" + out + ")";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(val);
      }
      return out + "}";
    }
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.b ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.i);
    case Kind::kFloat:
      return python_float_repr(v.f);
    case Kind::kString:
      return *v.s;
    case Kind::kList:
    case Kind::kDict:
      return repr(v);
    case Kind::kCallable:
      return "<function " + v.fn->name + ">";
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      for (size_t k = 0; k < v.ns->attrs.size(); ++k) {
        if (k) out += ", ";
        const Value& x = v.ns->attrs[k].second;
        out += python_str_repr(v.ns->attrs[k].first) + ": " +
               (x.kind == Kind::kNamespace && x.ns == v.ns ? "<Namespace {...}>" : repr(x));
      }
      return out + "}>";
    }
  }
  return "";
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (uint32_t cp : decode_utf8(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            uint32_t x = cp - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (x >> 10), 0xDC00 + (x & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", cp);
          }
        } else {
          append_utf8(out, cp);
        }
    }
  }
  out += '"';
}

namespace {

Status json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > 512) return make_error(ErrorCode::kInvalidArgument, "tojson: nesting too deep");
  auto newline = [&](int d) {
    if (!o.has_indent) return;
    out += '\n';
    for (int k = 0; k < d; ++k) out += o.indent;
  };
  switch (v.kind) {
    case Kind::kNone:
      out += "null";
      return ok();
    case Kind::kBool:
      out += v.b ? "true" : "false";
      return ok();
    case Kind::kInt:
      out += std::to_string(v.i);
      return ok();
    case Kind::kFloat:
      if (std::isnan(v.f))
        out += "NaN";
      else if (std::isinf(v.f))
        out += v.f < 0 ? "-Infinity" : "Infinity";
      else
        out += python_float_repr(v.f);
      return ok();
    case Kind::kString:
      append_json_string(out, *v.s, o.ensure_ascii);
      return ok();
    case Kind::kList: {
      if (!v.list->view.empty()) {
        return make_error(ErrorCode::kInvalidArgument, "Object of type {} is not JSON serializable",
                          v.list->view);
      }
      if (v.list->items.empty()) {
        out += "[]";
        return ok();
      }
      out += '[';
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += o.item_sep;
        newline(depth + 1);
        FLINT_TRY(json_value(out, v.list->items[k], o, depth + 1));
      }
      newline(depth);
      out += ']';
      return ok();
    }
    case Kind::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return ok();
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, val] : v.dict->items) {
        std::string key;
        if (k.is_string())
          key = *k.s;
        else if (k.kind == Kind::kBool)
          key = k.b ? "true" : "false";
        else if (k.kind == Kind::kNone)
          key = "null";
        else if (k.kind == Kind::kInt || k.kind == Kind::kFloat)
          key = to_str(k);
        else
          return make_error(ErrorCode::kInvalidArgument,
                            "tojson: keys must be str, int, float, bool or None, not {}",
                            type_name(k));
        items.emplace_back(std::move(key), &val);
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += o.item_sep;
        newline(depth + 1);
        append_json_string(out, items[k].first, o.ensure_ascii);
        out += o.key_sep;
        FLINT_TRY(json_value(out, *items[k].second, o, depth + 1));
      }
      newline(depth);
      out += '}';
      return ok();
    }
    default:
      return make_error(ErrorCode::kInvalidArgument, "Object of type {} is not JSON serializable",
                        type_name(v));
  }
}

}  // namespace

Result<std::string> to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  FLINT_TRY(json_value(out, v, options, 0));
  return out;
}

}  // namespace flint::tokenizer::jinja

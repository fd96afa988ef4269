// Python operators and the str/dict/list methods templates call (.strip(), .split(), .get(), ...),
// with ImmutableSandboxedEnvironment's rule that mutating methods are unsafe.
// Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#include <cmath>

#include "tokenizer/jinja/renderer.h"
#include "tokenizer/jinja/strings.h"

namespace flint::tokenizer::jinja {
namespace {

Error runtime(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, "{}", msg); }

Result<Value> checked_int(__int128 v) {
  if (v > INT64_MAX || v < INT64_MIN) return runtime("integer overflow");
  return Value::integer(static_cast<int64_t>(v));
}

// Python's printf-style `str % args`.
Result<Value> percent_format(const std::string& fmt_s, const Value& args, size_t max_bytes) {
  ValueList items;
  if (args.is_list() && args.list->is_tuple)
    items = args.list->items;
  else
    items.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt_s.size(); ++k) {
    char c = fmt_s[k];
    if (c != '%') {
      out += c;
      continue;
    }
    if (++k >= fmt_s.size()) return runtime("incomplete format");
    std::string spec = "%";
    const Value* arg = nullptr;
    if (fmt_s[k] == '(') {
      size_t e = fmt_s.find(')', k);
      if (e == std::string::npos || !args.is_dict()) return runtime("format requires a mapping");
      arg = args.dict->find(Value::string(fmt_s.substr(k + 1, e - k - 1)));
      if (!arg) return runtime("format key not found");
      k = e + 1;
    }
    while (k < fmt_s.size() && std::string("-+ #0123456789.").find(fmt_s[k]) != std::string::npos) {
      spec += fmt_s[k++];
    }
    if (k >= fmt_s.size()) return runtime("incomplete format");
    char conv = fmt_s[k];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!arg) {
      if (next >= items.size()) return runtime("not enough arguments for format string");
      arg = &items[next++];
    }
    char buf[512];
    switch (conv) {
      case 's':
        out += to_str(*arg);
        break;
      case 'r':
        out += repr(*arg);
        break;
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o':
        if (!arg->is_number()) return runtime("%d format: a real number is required");
        snprintf(
            buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(),
            static_cast<long long>(arg->kind == Kind::kFloat ? std::trunc(arg->f) : arg->as_int()));
        out += buf;
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!arg->is_number()) return runtime("must be real number");
        snprintf(buf, sizeof(buf), (spec + conv).c_str(), arg->as_float());
        out += buf;
        break;
      default:
        return runtime(fmt::format("unsupported format character '{}'", conv));
    }
    if (out.size() > max_bytes) return runtime("string too long");
  }
  if (next < items.size() && !args.is_dict()) {
    return runtime("not all arguments converted during string formatting");
  }
  return Value::string(std::move(out));
}

double py_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  auto unsupported = [&]() {
    return runtime(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op,
                               type_name(a), type_name(b)));
  };
  if (a.is_number() && b.is_number()) {
    bool fl = a.kind == Kind::kFloat || b.kind == Kind::kFloat;
    __int128 x = a.as_int(), y = b.as_int();
    double fx = a.as_float(), fy = b.as_float();
    if (op == "+") return fl ? Value::number(fx + fy) : checked_int(x + y);
    if (op == "-") return fl ? Value::number(fx - fy) : checked_int(x - y);
    if (op == "*") return fl ? Value::number(fx * fy) : checked_int(x * y);
    if (op == "/") {
      if (fy == 0) return runtime("division by zero");
      return Value::number(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (fl ? fy == 0 : y == 0) return runtime("integer division or modulo by zero");
      if (fl) {
        if (op == "%") return Value::number(py_mod(fx, fy));
        return Value::number(std::floor(fx / fy));
      }
      __int128 q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      if (op == "//") return checked_int(q);
      return checked_int(x - q * y);
    }
    if (op == "**") {
      if (!fl && y >= 0) {
        __int128 r = 1;
        for (__int128 k = 0; k < y; ++k) {
          r *= x;
          if (r > INT64_MAX || r < INT64_MIN) return runtime("integer overflow");
          if (r == 0 || r == 1) break;
        }
        return checked_int(r);
      }
      return Value::number(std::pow(fx, fy));
    }
    return unsupported();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.str().size() + b.str().size() > max_bytes) return runtime("string too long");
      return Value::string(a.str() + b.str());
    }
    if (a.is_plain_list() && b.is_plain_list() && a.list->is_tuple == b.list->is_tuple) {
      ValueList items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return Value::make_list(std::move(items), a.list->is_tuple);
    }
    return unsupported();
  }
  if (op == "*") {
    const Value& seq = a.is_integral() ? b : a;
    const Value& times = a.is_integral() ? a : b;
    if (!times.is_integral() || !(seq.is_string() || seq.is_plain_list())) return unsupported();
    int64_t n = std::max<int64_t>(0, times.as_int());
    size_t unit = seq.is_string() ? seq.str().size() : seq.list->items.size() * 16;
    if (unit != 0 && static_cast<uint64_t>(n) > max_bytes / unit)
      return runtime("result too large");
    if (seq.is_string()) {
      std::string out;
      for (int64_t k = 0; k < n; ++k) out += seq.str();
      return Value::string(std::move(out));
    }
    ValueList items;
    for (int64_t k = 0; k < n; ++k) {
      items.insert(items.end(), seq.list->items.begin(), seq.list->items.end());
    }
    return Value::make_list(std::move(items), seq.list->is_tuple);
  }
  if (op == "%" && a.is_string()) return percent_format(a.str(), b, max_bytes);
  return unsupported();
}

namespace {

Result<std::string> str_arg(const CallArgs& args, size_t idx, const char* name,
                            const char* method) {
  const Value* v = args.get(idx, name);
  if (!v) return runtime(fmt::format("{}() missing argument '{}'", method, name));
  if (!v->is_string()) {
    return runtime(fmt::format("{}() argument must be str, not {}", method, type_name(*v)));
  }
  return v->str();
}

// Optional chars argument of strip(): nullopt means whitespace.
Result<std::optional<std::string>> chars_arg(const CallArgs& args) {
  const Value* v = args.get(0, "chars");
  if (!v || v->is_none()) return std::optional<std::string>();
  if (!v->is_string()) return runtime("strip arg must be None or str");
  return std::optional<std::string>(v->str());
}

int64_t int_arg(const CallArgs& args, size_t idx, const char* name, int64_t dflt) {
  const Value* v = args.get(idx, name);
  return v && v->is_integral() ? v->as_int() : dflt;
}

Value split_result(const std::vector<std::string>& parts) {
  ValueList items;
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::make_list(std::move(items));
}

Result<Value> str_method(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    FLINT_ASSIGN_OR_RETURN(auto chars, chars_arg(a));
    return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.get(0, "prefix");
    if (!p) return runtime(fmt::format("{}() takes at least 1 argument", name));
    ValueList options = p->is_list() && p->list->is_tuple ? p->list->items : ValueList{*p};
    for (const auto& o : options) {
      if (!o.is_string()) {
        return runtime(fmt::format("{} first arg must be str or a tuple of str", name));
      }
      const std::string& x = o.str();
      bool hit = name == "startswith"
                     ? s.compare(0, x.size(), x) == 0
                     : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = a.get(0, "sep");
    int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
    if (sep && !sep->is_none()) {
      if (!sep->is_string()) return runtime("must be str or None");
      if (sep->str().empty()) return runtime("empty separator");
      return split_result(py_split(s, sep->str(), maxsplit, name == "rsplit"));
    }
    return split_result(py_split_ws(s, maxsplit, name == "rsplit"));
  }
  if (name == "replace") {
    FLINT_ASSIGN_OR_RETURN(std::string old_s, str_arg(a, 0, "old", "replace"));
    FLINT_ASSIGN_OR_RETURN(std::string new_s, str_arg(a, 1, "new", "replace"));
    return Value::string(py_replace(s, old_s, new_s, int_arg(a, 2, "count", -1)));
  }
  if (name == "upper") return Value::string(py_upper(s));
  if (name == "lower") return Value::string(py_lower(s));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    FLINT_ASSIGN_OR_RETURN(std::string sub, str_arg(a, 0, "sub", name.c_str()));
    if (name == "count") return Value::integer(py_count(s, sub));
    int64_t idx = py_find(s, sub, name[0] == 'r');
    if (idx < 0 && (name == "index" || name == "rindex")) return runtime("substring not found");
    return Value::integer(idx);
  }
  if (name == "join") {
    const Value* it = a.get(0, "iterable");
    if (!it || !(it->is_list() || it->is_string() || it->is_dict())) {
      return runtime("can only join an iterable");
    }
    ValueList items;
    if (it->is_list())
      items = it->list->items;
    else if (it->is_dict())
      for (const auto& kv : it->dict->items) items.push_back(kv.first);
    else
      for (const auto& ch : py_chars(it->str())) items.push_back(Value::string(ch));
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      if (!items[k].is_string()) {
        return runtime(fmt::format("sequence item {}: expected str instance, {} found", k,
                                   type_name(items[k])));
      }
      if (k) out += s;
      out += items[k].str();
    }
    return Value::string(std::move(out));
  }
  if (name == "splitlines") return split_result(py_splitlines(s, truthy_or(a.get(0, "keepends"))));
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower" || name == "isnumeric" || name == "isdecimal") {
    return Value::boolean(py_is(s, name));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    int64_t width = int_arg(a, 0, "width", 0);
    const Value* fill = a.get(1, "fillchar");
    std::string f = fill && fill->is_string() ? fill->str() : " ";
    return Value::string(py_pad(s, width, f, name));
  }
  if (name == "zfill") return Value::string(py_zfill(s, int_arg(a, 0, "width", 0)));
  if (name == "removeprefix" || name == "removesuffix") {
    FLINT_ASSIGN_OR_RETURN(std::string x, str_arg(a, 0, "prefix", name.c_str()));
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
      return Value::string(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::string(s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  if (name == "partition" || name == "rpartition") {
    FLINT_ASSIGN_OR_RETURN(std::string sep, str_arg(a, 0, "sep", name.c_str()));
    if (sep.empty()) return runtime("empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return name == "partition"
                 ? Value::make_list({Value::string(s), Value::string(""), Value::string("")}, true)
                 : Value::make_list({Value::string(""), Value::string(""), Value::string(s)}, true);
    }
    return Value::make_list({Value::string(s.substr(0, p)), Value::string(sep),
                             Value::string(s.substr(p + sep.size()))},
                            true);
  }
  if (name == "format") return py_format(s, a);
  return runtime(fmt::format("'str' object has no attribute '{}'", name));
}

const char* const kStrMethods[] = {
    "strip",      "lstrip",       "rstrip",       "startswith", "endswith",   "split",
    "rsplit",     "replace",      "upper",        "lower",      "title",      "capitalize",
    "find",       "rfind",        "index",        "rindex",     "count",      "join",
    "splitlines", "isdigit",      "isalpha",      "isalnum",    "isspace",    "isupper",
    "islower",    "isnumeric",    "isdecimal",    "center",     "ljust",      "rjust",
    "zfill",      "removeprefix", "removesuffix", "partition",  "rpartition", "format"};
const char* const kUnsafeDict[] = {"pop", "popitem", "setdefault", "update", "clear"};
const char* const kUnsafeList[] = {"append", "extend",  "insert", "pop",
                                   "remove", "reverse", "sort",   "clear"};

Value items_of(const Value& d) {
  ValueList items;
  for (const auto& [k, v] : d.dict->items) items.push_back(Value::make_list({k, v}, true));
  return Value::make_view(std::move(items), "dict_items");
}

}  // namespace

Value bound_method(const Value& self, const std::string& name) {
  auto method = [&](NativeFn fn) { return Value::callable(name, std::move(fn)); };
  if (self.is_string()) {
    for (const char* m : kStrMethods) {
      if (name == m) {
        return method([self, name](Renderer& r, CallArgs& a) -> Result<Value> {
          FLINT_ASSIGN_OR_RETURN(Value v, str_method(self.str(), name, a));
          if (v.is_string()) FLINT_TRY(r.check_size(v.str().size()));
          return v;
        });
      }
    }
    return Value::undefined();
  }
  if (self.is_dict()) {
    if (name == "items")
      return method([self](Renderer&, CallArgs&) -> Result<Value> { return items_of(self); });
    if (name == "keys" || name == "values") {
      bool keys = name == "keys";
      return method([self, keys](Renderer&, CallArgs&) -> Result<Value> {
        ValueList out;
        for (const auto& [k, v] : self.dict->items) out.push_back(keys ? k : v);
        return Value::make_view(std::move(out), keys ? "dict_keys" : "dict_values");
      });
    }
    if (name == "get")
      return method([self](Renderer&, CallArgs& a) -> Result<Value> {
        const Value* key = a.get(0, "key");
        if (!key) return runtime("get expected at least 1 argument, got 0");
        if (const Value* v = self.dict->find(*key)) return *v;
        const Value* d = a.get(1, "default");
        return d ? *d : Value::none();
      });
    if (name == "copy")
      return method([self](Renderer&, CallArgs&) -> Result<Value> { return self; });
    for (const char* m : kUnsafeDict) {
      if (name == m) {
        return Value::undefined(
            fmt::format("access to attribute '{}' of 'dict' object is unsafe.", name));
      }
    }
    return Value::undefined();
  }
  if (self.is_plain_list()) {
    if (name == "index" || name == "count") {
      bool is_count = name == "count";
      return method([self, is_count](Renderer&, CallArgs& a) -> Result<Value> {
        if (a.args.empty()) return runtime("expected 1 argument");
        int64_t n = 0;
        for (size_t k = 0; k < self.list->items.size(); ++k) {
          if (!equals(self.list->items[k], a.args[0])) continue;
          if (!is_count) return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
        if (!is_count) return runtime("x not in list");
        return Value::integer(n);
      });
    }
    if (name == "copy" && !self.list->is_tuple) {
      return method([self](Renderer&, CallArgs&) -> Result<Value> { return self; });
    }
    for (const char* m : kUnsafeList) {
      if (name == m && !self.list->is_tuple) {
        return Value::undefined(
            fmt::format("access to attribute '{}' of 'list' object is unsafe.", name));
      }
    }
    return Value::undefined();
  }
  return Value::undefined();
}

}  // namespace flint::tokenizer::jinja

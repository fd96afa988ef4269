// Jinja filters and tests as Jinja2 3.1 defines them, Hugging Face's tojson, and the globals
// (range, namespace, dict, raise_exception, strftime_now). Test partner: tests/python/tokenizer/.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "tokenizer/jinja/renderer.h"
#include "tokenizer/jinja/strings.h"

namespace flint::tokenizer::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE

Error runtime(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, "{}", msg); }

const Value* arg(const CallArgs& a, size_t idx, const char* name) { return a.get(idx, name); }

Result<int64_t> len_of(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(py_len(v.str()));
    case Kind::kList:
      if (v.is_generator())
        return runtime(fmt::format("object of type '{}' has no len()", v.list->view));
      return static_cast<int64_t>(v.list->items.size());
    case Kind::kDict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      return runtime(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

// Case-insensitive sort/unique key: lower() for strings, unchanged otherwise.
Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.str()));
  return v;
}

Status sort_values(ValueList& items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t k = 0; k < items.size(); ++k) keyed.emplace_back(key(items[k]), k);
  std::optional<Error> err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto r = reverse ? less(y.first, x.first) : less(x.first, y.first);
    if (!r) {
      if (!err) err = r.error();
      return false;
    }
    return *r;
  });
  if (err) return *err;
  ValueList out;
  for (const auto& kv : keyed) out.push_back(items[kv.second]);
  items = std::move(out);
  return ok();
}

// Jinja's attribute lookup for filters: "a.b.0" walks attributes/items.
Result<Value> attr_path(Renderer& r, const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
    FLINT_ASSIGN_OR_RETURN(cur, numeric ? r.get_item(cur, Value::integer(std::stoll(part)))
                                        : r.get_item(cur, Value::string(part)));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// select/reject/selectattr/rejectattr: arguments after `first` name the test and its args.
Result<Value> select(Renderer& r, const Value& input, CallArgs& a, bool by_attr, bool want) {
  FLINT_ASSIGN_OR_RETURN(ValueList items, r.iterate(input));
  size_t k = 0;
  std::string attr;
  if (by_attr) {
    if (a.args.empty() || !a.args[0].is_string()) return runtime("selectattr: missing attribute");
    attr = a.args[0].str();
    k = 1;
  }
  std::string test;
  CallArgs test_args;
  if (k < a.args.size()) {
    if (!a.args[k].is_string()) return runtime("select: test name must be a string");
    test = a.args[k].str();
    test_args.args.assign(a.args.begin() + static_cast<long>(k) + 1, a.args.end());
  }
  ValueList out;
  for (const auto& item : items) {
    Value v = item;
    if (by_attr) {
      FLINT_ASSIGN_OR_RETURN(v, attr_path(r, item, attr));
    }
    bool pass = false;
    if (test.empty()) {
      pass = truthy(v);
    } else {
      CallArgs ta = test_args;
      FLINT_ASSIGN_OR_RETURN(pass, r.apply_test(test, v, ta));
    }
    if (pass == want) out.push_back(item);
  }
  return Value::make_view(std::move(out), "generator");
}

Result<Value> map_filter(Renderer& r, const Value& input, CallArgs& a) {
  FLINT_ASSIGN_OR_RETURN(ValueList items, r.iterate(input));
  ValueList out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, v] : a.kwargs) {
    if (k == "attribute") attribute = &v;
    if (k == "default") dflt = &v;
  }
  if (attribute) {
    if (!attribute->is_string()) return runtime("map: attribute must be a string");
    for (const auto& item : items) {
      FLINT_ASSIGN_OR_RETURN(Value v, attr_path(r, item, attribute->str()));
      if (v.is_undefined() && dflt) v = *dflt;
      out.push_back(std::move(v));
    }
    return Value::make_view(std::move(out), "generator");
  }
  if (a.args.empty() || !a.args[0].is_string()) return runtime("map requires a filter argument");
  std::string name = a.args[0].str();
  CallArgs fa;
  fa.args.assign(a.args.begin() + 1, a.args.end());
  fa.kwargs = a.kwargs;
  for (const auto& item : items) {
    CallArgs args = fa;
    FLINT_ASSIGN_OR_RETURN(Value v, r.apply_filter(name, item, args));
    out.push_back(std::move(v));
  }
  return Value::make_view(std::move(out), "generator");
}

Result<Value> tojson_filter(const Value& input, CallArgs& a) {
  JsonOptions o;
  if (const Value* v = arg(a, 0, "ensure_ascii")) o.ensure_ascii = truthy(*v);
  if (const Value* v = arg(a, 1, "indent"); v && !v->is_none()) {
    o.has_indent = true;
    if (v->is_integral())
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, v->as_int())), ' ');
    else if (v->is_string())
      o.indent = v->str();
    else
      return runtime("tojson: indent must be an int or a string");
    o.item_sep = ",";
  }
  if (const Value* v = arg(a, 2, "separators"); v && !v->is_none()) {
    if (!v->is_list() || v->list->items.size() != 2 || !v->list->items[0].is_string() ||
        !v->list->items[1].is_string()) {
      return runtime("tojson: separators must be a pair of strings");
    }
    o.item_sep = v->list->items[0].str();
    o.key_sep = v->list->items[1].str();
  }
  if (const Value* v = arg(a, 3, "sort_keys")) o.sort_keys = truthy(*v);
  FLINT_ASSIGN_OR_RETURN(std::string s, to_json(input, o));
  return Value::string(std::move(s));
}

Result<Value> dictsort(const Value& input, CallArgs& a) {
  if (!input.is_dict()) {
    return runtime(input.is_undefined() ? "'Undefined' has no attribute 'items'"
                                        : "dictsort: expected a mapping");
  }
  bool case_sensitive = truthy_or(arg(a, 0, "case_sensitive"));
  const Value* by = arg(a, 1, "by");
  bool by_value = by && by->is_string() && by->str() == "value";
  if (by && !(by->is_string() && (by->str() == "key" || by->str() == "value"))) {
    return runtime("You can only sort by either \"key\" or \"value\"");
  }
  ValueList items;
  for (const auto& [k, v] : input.dict->items) items.push_back(Value::make_list({k, v}, true));
  FLINT_TRY(sort_values(
      items,
      [&](const Value& kv) {
        return ignore_case(kv.list->items[by_value ? 1 : 0], case_sensitive);
      },
      truthy_or(arg(a, 2, "reverse"))));
  return Value::make_list(std::move(items));
}

Result<Value> indent_filter(const Value& input, CallArgs& a) {
  std::string s = to_str(input);
  std::string ind = "    ";
  if (const Value* w = arg(a, 0, "width")) {
    if (w->is_string())
      ind = w->str();
    else if (w->is_integral())
      ind = std::string(static_cast<size_t>(std::clamp<int64_t>(w->as_int(), 0, 1 << 16)), ' ');
  }
  bool first = truthy_or(arg(a, 1, "first"));
  bool blank = truthy_or(arg(a, 2, "blank"));
  s += "\n";
  auto lines = py_splitlines(s, false);
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k) out += "\n";
    if (k > 0 && (blank || !lines[k].empty())) out += ind;
    out += lines[k];
  }
  if (first) out.insert(0, ind);
  return Value::string(std::move(out));
}

double py_round(double x, int64_t digits) {
  double p = std::pow(10.0, static_cast<double>(digits));
  double y = x * p;
  double r = std::nearbyint(y);  // ties to even, like Python's round()
  return r / p;
}

}  // namespace

Result<Value> Renderer::apply_filter(const std::string& name, const Value& in, CallArgs& a) {
  if (name == "tojson") return tojson_filter(in, a);
  if (name == "trim") {
    const Value* c = arg(a, 0, "chars");
    std::optional<std::string> chars;
    if (c && c->is_string()) chars = c->str();
    return Value::string(py_strip(to_str(in), chars, true, true));
  }
  if (name == "length" || name == "count") {
    FLINT_ASSIGN_OR_RETURN(int64_t n, len_of(in));
    return Value::integer(n);
  }
  if (name == "string") return Value::string(to_str(in));
  if (name == "safe") return Value::string(to_str(in));
  if (name == "escape" || name == "e") return Value::string(html_escape(to_str(in)));
  if (name == "upper") return Value::string(py_upper(to_str(in)));
  if (name == "lower") return Value::string(py_lower(to_str(in)));
  if (name == "title") return Value::string(jinja_title(to_str(in)));
  if (name == "capitalize") return Value::string(py_capitalize(to_str(in)));
  if (name == "default" || name == "d") {
    bool boolean = truthy_or(arg(a, 1, "boolean"));
    if (in.is_undefined() || (boolean && !truthy(in))) {
      const Value* d = arg(a, 0, "default_value");
      return d ? *d : Value::string("");
    }
    return in;
  }
  if (name == "replace") {
    const Value* o = arg(a, 0, "old");
    const Value* n = arg(a, 1, "new");
    if (!o || !n) return runtime("replace: missing arguments");
    const Value* c = arg(a, 2, "count");
    int64_t count = c && c->is_integral() ? c->as_int() : -1;
    std::string out = py_replace(to_str(in), to_str(*o), to_str(*n), count);
    FLINT_TRY(check_size(out.size()));
    return Value::string(std::move(out));
  }
  if (name == "items") {
    if (in.is_undefined()) return Value::make_list({});
    if (!in.is_dict()) return runtime("can only get item pairs from a mapping.");
    ValueList items;
    for (const auto& [k, v] : in.dict->items) items.push_back(Value::make_list({k, v}, true));
    return Value::make_view(std::move(items), "generator");
  }
  if (name == "dictsort") return dictsort(in, a);
  if (name == "list") {
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    return Value::make_list(std::move(items));
  }
  if (name == "first") {
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    if (in.is_undefined() || in.is_generator()) {
      return runtime(fmt::format("'{}' object is not reversible", type_name(in)));
    }
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "reverse") {
    if (in.is_string()) {
      auto cps = decode_utf8(in.str());
      std::reverse(cps.begin(), cps.end());
      return Value::string(encode_utf8(cps, 0, cps.size()));
    }
    if (in.is_generator() || !(in.is_list() || in.is_dict())) {
      return runtime(
          fmt::format("argument to reversed() must be a sequence, not {}", type_name(in)));
    }
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    std::reverse(items.begin(), items.end());
    return Value::make_view(std::move(items),
                            in.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
  }
  if (name == "join") {
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    const Value* d = arg(a, 0, "d");
    const Value* attribute = arg(a, 1, "attribute");
    std::string sep = d ? to_str(*d) : "";
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      Value v = items[k];
      if (attribute) {
        FLINT_ASSIGN_OR_RETURN(v, attr_path(*this, v, to_str(*attribute)));
      }
      if (k) out += sep;
      out += to_str(v);
      FLINT_TRY(check_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (name == "select" || name == "reject") return select(*this, in, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") {
    return select(*this, in, a, true, name == "selectattr");
  }
  if (name == "map") return map_filter(*this, in, a);
  if (name == "int") {
    const Value* d = arg(a, 0, "default");
    Value dflt = d ? *d : Value::integer(0);
    if (in.is_integral()) return Value::integer(in.as_int());
    if (in.kind == Kind::kFloat) {
      if (!std::isfinite(in.f) || std::fabs(in.f) > 9.2e18) return dflt;
      return Value::integer(static_cast<int64_t>(std::trunc(in.f)));
    }
    if (in.is_string()) {
      std::string s = py_strip(in.str(), std::nullopt, true, true);
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return Value::integer(v);
      double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(f) && std::fabs(f) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(std::trunc(f)));
      }
    }
    return dflt;
  }
  if (name == "float") {
    const Value* d = arg(a, 0, "default");
    Value dflt = d ? *d : Value::number(0.0);
    if (in.is_number()) return Value::number(in.as_float());
    if (in.is_string()) {
      std::string s = py_strip(in.str(), std::nullopt, true, true);
      char* end = nullptr;
      double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return Value::number(f);
    }
    return dflt;
  }
  if (name == "abs") {
    if (!in.is_number())
      return runtime(fmt::format("bad operand type for abs(): '{}'", type_name(in)));
    if (in.kind == Kind::kFloat) return Value::number(std::fabs(in.f));
    return Value::integer(std::llabs(in.as_int()));
  }
  if (name == "round") {
    const Value* p = arg(a, 0, "precision");
    int64_t precision = p && p->is_integral() ? p->as_int() : 0;
    const Value* m = arg(a, 1, "method");
    std::string method = m && m->is_string() ? m->str() : "common";
    if (!in.is_number()) return runtime("round: expected a number");
    double x = in.as_float();
    double p10 = std::pow(10.0, static_cast<double>(precision));
    if (method == "common") return Value::number(py_round(x, precision));
    if (method == "floor") return Value::number(std::floor(x * p10) / p10);
    if (method == "ceil") return Value::number(std::ceil(x * p10) / p10);
    return runtime("method must be common, ceil or floor");
  }
  if (name == "unique" || name == "sort" || name == "min" || name == "max") {
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    bool case_sensitive = truthy_or(arg(a, name == "sort" ? 1 : 0, "case_sensitive"));
    const Value* attribute = arg(a, name == "sort" ? 2 : 1, "attribute");
    std::optional<Error> err;
    auto key = [&](const Value& v) {
      Value k = v;
      if (attribute) {
        auto r = attr_path(*this, v, to_str(*attribute));
        if (!r) {
          if (!err) err = r.error();
        } else {
          k = *r;
        }
      }
      return ignore_case(k, case_sensitive);
    };
    if (name == "unique") {
      ValueList out, seen;
      for (const auto& v : items) {
        Value k = key(v);
        if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); }))
          continue;
        seen.push_back(k);
        out.push_back(v);
      }
      if (err) return *err;
      return Value::make_view(std::move(out), "generator");
    }
    FLINT_TRY(sort_values(items, key, name == "sort" && truthy_or(arg(a, 0, "reverse"))));
    if (err) return *err;
    if (name == "sort") return Value::make_list(std::move(items));
    if (items.empty())
      return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
    return name == "min" ? items.front() : items.back();
  }
  if (name == "sum") {
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    const Value* attribute = arg(a, 0, "attribute");
    const Value* start = arg(a, 1, "start");
    Value total = start ? *start : Value::integer(0);
    for (const auto& v : items) {
      Value x = v;
      if (attribute) {
        FLINT_ASSIGN_OR_RETURN(x, attr_path(*this, v, to_str(*attribute)));
      }
      FLINT_ASSIGN_OR_RETURN(total, arithmetic("+", total, x, limits_.max_output_bytes));
    }
    return total;
  }
  if (name == "batch") {
    FLINT_ASSIGN_OR_RETURN(ValueList items, iterate(in));
    const Value* n = arg(a, 0, "linecount");
    if (!n || !n->is_integral() || n->as_int() <= 0) return runtime("batch: linecount must be > 0");
    const Value* fill = arg(a, 1, "fill_with");
    ValueList out, cur;
    for (const auto& v : items) {
      cur.push_back(v);
      if (static_cast<int64_t>(cur.size()) == n->as_int()) {
        out.push_back(Value::make_list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none())
        while (static_cast<int64_t>(cur.size()) < n->as_int()) cur.push_back(*fill);
      out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_view(std::move(out), "generator");
  }
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (uint32_t cp : decode_utf8(to_str(in))) {
      bool w = cp == '_' || (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') ||
               (cp >= 'A' && cp <= 'Z') || (cp >= 0x80 && !is_py_space(cp));
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "indent") return indent_filter(in, a);
  if (name == "center") {
    const Value* w = arg(a, 0, "width");
    return Value::string(
        py_pad(to_str(in), w && w->is_integral() ? w->as_int() : 80, " ", "center"));
  }
  if (name == "attr") {
    const Value* n = arg(a, 0, "name");
    if (!n || !n->is_string()) return runtime("attr: name must be a string");
    return get_attr(in, n->str());
  }
  if (name == "format") {
    ValueList items = a.args;
    Value args = Value::make_list(std::move(items), true);
    return arithmetic("%", Value::string(to_str(in)), args, limits_.max_output_bytes);
  }
  return runtime(fmt::format("no filter named '{}'", name));
}

Result<bool> Renderer::apply_test(const std::string& name, const Value& v, CallArgs& a) {
  const Value* other = a.args.empty() ? nullptr : &a.args[0];
  auto need_other = [&]() -> Status {
    if (!other) return runtime(fmt::format("test '{}' needs an argument", name));
    return ok();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") {
    return v.is_string() || v.is_plain_list() || v.is_dict() || v.is_undefined();
  }
  if (name == "callable") return v.kind == Kind::kCallable;
  if (name == "lower") return v.is_string() && py_lower(v.str()) == v.str();
  if (name == "upper") return v.is_string() && py_upper(v.str()) == v.str();
  if (name == "escaped") return false;
  if (name == "even" || name == "odd") {
    if (!v.is_integral()) return runtime(fmt::format("test '{}' needs an integer", name));
    int64_t m = v.as_int() % 2;
    return name == "even" ? m == 0 : m != 0;
  }
  if (name == "divisibleby") {
    FLINT_TRY(need_other());
    FLINT_ASSIGN_OR_RETURN(Value m, arithmetic("%", v, *other, limits_.max_output_bytes));
    return equals(m, Value::integer(0));
  }
  if (name == "eq" || name == "equalto" || name == "==") {
    FLINT_TRY(need_other());
    return equals(v, *other);
  }
  if (name == "ne" || name == "!=") {
    FLINT_TRY(need_other());
    return !equals(v, *other);
  }
  if (name == "lt" || name == "lessthan" || name == "<" || name == "gt" || name == "greaterthan" ||
      name == ">" || name == "le" || name == "<=" || name == "ge" || name == ">=") {
    FLINT_TRY(need_other());
    bool gt_family = name[0] == 'g' || name[0] == '>';
    bool inclusive = name == "le" || name == "<=" || name == "ge" || name == ">=";
    const Value& x = gt_family ? *other : v;
    const Value& y = gt_family ? v : *other;
    if (inclusive) {
      FLINT_ASSIGN_OR_RETURN(bool r, less(y, x));
      return !r;
    }
    return less(x, y);
  }
  if (name == "in") {
    FLINT_TRY(need_other());
    if (other->is_string()) {
      if (!v.is_string()) return runtime("'in <string>' requires string as left operand");
      return other->str().find(v.str()) != std::string::npos;
    }
    if (other->is_list()) {
      return std::any_of(other->list->items.begin(), other->list->items.end(),
                         [&](const Value& x) { return equals(x, v); });
    }
    if (other->is_dict()) return other->dict->find(v) != nullptr;
    if (other->is_undefined()) return false;
    return runtime(fmt::format("argument of type '{}' is not iterable", type_name(*other)));
  }
  if (name == "sameas") {
    FLINT_TRY(need_other());
    if (v.kind != other->kind) return false;
    switch (v.kind) {
      case Kind::kList:
        return v.list == other->list;
      case Kind::kDict:
        return v.dict == other->dict;
      case Kind::kString:
        return v.s == other->s;
      default:
        return equals(v, *other);
    }
  }
  if (name == "filter" || name == "test") {
    if (!v.is_string()) return false;
    static const char* kFilters[] = {
        "tojson",  "trim",   "length",    "count",      "string",     "safe",    "escape",
        "e",       "upper",  "lower",     "title",      "capitalize", "default", "d",
        "replace", "items",  "dictsort",  "list",       "first",      "last",    "reverse",
        "join",    "select", "reject",    "selectattr", "rejectattr", "map",     "int",
        "float",   "abs",    "round",     "unique",     "sort",       "min",     "max",
        "sum",     "batch",  "wordcount", "indent",     "center",     "attr",    "format"};
    static const char* kTests[] = {
        "defined", "undefined", "none",    "string",   "number",   "integer",     "float",
        "boolean", "true",      "false",   "mapping",  "iterable", "sequence",    "callable",
        "lower",   "upper",     "escaped", "even",     "odd",      "divisibleby", "eq",
        "equalto", "ne",        "lt",      "lessthan", "gt",       "greaterthan", "le",
        "ge",      "in",        "sameas",  "filter",   "test",     "==",          "!=",
        "<",       ">",         "<=",      ">="};
    if (name == "filter") {
      return std::any_of(std::begin(kFilters), std::end(kFilters),
                         [&](const char* f) { return v.str() == f; });
    }
    return std::any_of(std::begin(kTests), std::end(kTests),
                       [&](const char* t) { return v.str() == t; });
  }
  return runtime(fmt::format("no test named '{}'", name));
}

Value make_globals(const RenderLimits& limits) {
  auto g = std::make_shared<DictData>();
  auto def = [&](const char* name, NativeFn fn) {
    g->items.emplace_back(Value::string(name), Value::callable(name, std::move(fn)));
  };
  def("range", [](Renderer& r, CallArgs& a) -> Result<Value> {
    if (a.args.empty() || a.args.size() > 3) return runtime("range expected 1 to 3 arguments");
    for (const auto& v : a.args) {
      if (!v.is_integral())
        return runtime(
            fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
    }
    int64_t start = 0, stop = 0, step = 1;
    if (a.args.size() == 1)
      stop = a.args[0].as_int();
    else {
      start = a.args[0].as_int();
      stop = a.args[1].as_int();
      if (a.args.size() == 3) step = a.args[2].as_int();
    }
    if (step == 0) return runtime("range() arg 3 must not be zero");
    __int128 n = step > 0 ? (stop > start ? ((__int128)stop - start + step - 1) / step : 0)
                          : (start > stop ? ((__int128)start - stop - step - 1) / -step : 0);
    if (n > kMaxRange)
      return runtime(fmt::format(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange));
    FLINT_TRY(r.charge(static_cast<int64_t>(n)));
    ValueList out;
    for (int64_t k = 0; k < static_cast<int64_t>(n); ++k)
      out.push_back(Value::integer(start + k * step));
    return Value::make_list(std::move(out));
  });
  def("namespace", [](Renderer& r, CallArgs& a) -> Result<Value> {
    Value v;
    v.kind = Kind::kNamespace;
    v.ns = std::make_shared<NamespaceData>();
    auto put = [&](const std::string& k, const Value& x) {
      for (auto& [name, val] : v.ns->attrs) {
        if (name == k) {
          val = x;
          return;
        }
      }
      v.ns->attrs.emplace_back(k, x);
    };
    for (const auto& p : a.args) {
      if (!p.is_dict()) return runtime("namespace() positional argument must be a mapping");
      for (const auto& [k, x] : p.dict->items) put(to_str(k), x);
    }
    for (const auto& [k, x] : a.kwargs) put(k, x);
    for (const auto& [k, x] : v.ns->attrs) v.ns->depth = std::max(v.ns->depth, 1 + value_depth(x));
    r.namespaces.push_back(v.ns);
    return v;
  });
  def("dict", [](Renderer&, CallArgs& a) -> Result<Value> {
    auto d = std::make_shared<DictData>();
    for (const auto& p : a.args) {
      if (!p.is_dict()) return runtime("dict() positional argument must be a mapping");
      for (const auto& [k, x] : p.dict->items) d->set(k, x);
    }
    for (const auto& [k, x] : a.kwargs) d->set(Value::string(k), x);
    return Value::make_dict(std::move(d));
  });
  def("raise_exception", [](Renderer& r, CallArgs& a) -> Result<Value> {
    r.raised = true;
    return make_error(ErrorCode::kInvalidArgument, "{}", a.args.empty() ? "" : to_str(a.args[0]));
  });
  int64_t now = limits.now_unix_seconds;
  def("strftime_now", [now](Renderer&, CallArgs& a) -> Result<Value> {
    if (a.args.empty() || !a.args[0].is_string())
      return runtime("strftime_now expects a format string");
    std::time_t t = static_cast<std::time_t>(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    const std::string& f = a.args[0].str();
    if (f.empty()) return Value::string("");
    std::string buf(f.size() * 8 + 64, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
    if (n == 0) return runtime("strftime_now: format produced no output");
    buf.resize(n);
    return Value::string(std::move(buf));
  });
  return Value::make_dict(std::move(g));
}

}  // namespace flint::tokenizer::jinja

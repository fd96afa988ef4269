// Renderer: scopes, statements (if/for/set/macro/call/filter), expressions, with capped steps.
// Test partner: tests/unit/tokenizer/chat_template_test.cpp, tests/python/tokenizer/.
#include "tokenizer/jinja/renderer.h"

namespace flint::tokenizer::jinja {
namespace {

constexpr int kMaxCallDepth = 200;

Error runtime(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, "{}", msg); }

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    for (const auto& [k, v] : s->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, val] : vars) {
    if (k == name) {
      val = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

Result<std::string> render_template(const Template& tmpl, const Value& context,
                                    const RenderLimits& limits) {
  Renderer r(limits);
  return r.run(tmpl, context);
}

Result<std::string> Renderer::run(const Template& tmpl, const Value& context) {
  globals_ = make_globals(limits_);
  auto root = std::make_shared<Scope>();
  if (context.is_dict()) {
    for (const auto& [k, v] : context.dict->items) {
      if (k.is_string()) root->set(k.str(), v);
    }
  }
  std::string out;
  out_ = &out;
  auto flow = exec(tmpl.body, root);
  out_ = nullptr;
  for (auto& w : namespaces) {
    if (auto ns = w.lock()) ns->attrs.clear();
  }
  if (!flow) return flow.error();
  return out;
}

Status Renderer::step() {
  if (++steps_ > limits_.max_steps) {
    return runtime(fmt::format("template exceeded {} steps", limits_.max_steps));
  }
  return ok();
}

Status Renderer::charge(int64_t steps) {
  steps_ += steps;
  return step();
}

Status Renderer::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return runtime(fmt::format("template output exceeded {} bytes", limits_.max_output_bytes));
  }
  return ok();
}

Status Renderer::emit(const std::string& text) {
  FLINT_TRY(check_size(out_->size() + text.size()));
  out_->append(text);
  return ok();
}

Error Renderer::at(const Expr& e, Error err) const {
  if (raised || err.message.rfind("line ", 0) == 0) return err;
  err.message = fmt::format("line {}, column {}: {}", e.line, e.col, err.message);
  return err;
}

Result<std::string> Renderer::capture(const Body& body, const ScopePtr& scope) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  auto flow = exec(body, scope);
  out_ = saved;
  if (!flow) return flow.error();
  return buf;
}

Result<Flow> Renderer::exec(const Body& body, const ScopePtr& scope) {
  for (const auto& s : body) {
    FLINT_ASSIGN_OR_RETURN(Flow f, exec_stmt(*s, scope));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Result<Flow> Renderer::exec_stmt(const Stmt& s, const ScopePtr& scope) {
  FLINT_TRY(step());
  switch (s.kind) {
    case StmtKind::kText:
      FLINT_TRY(emit(s.text));
      return Flow::kNormal;
    case StmtKind::kPrint: {
      FLINT_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
      FLINT_TRY(emit(to_str(v)));
      return Flow::kNormal;
    }
    case StmtKind::kIf: {
      for (size_t k = 0; k < s.conds.size(); ++k) {
        FLINT_ASSIGN_OR_RETURN(Value c, eval(*s.conds[k], scope));
        if (truthy(c)) return exec(s.bodies[k], scope);
      }
      return exec(s.else_body, scope);
    }
    case StmtKind::kFor:
      return exec_for(s, scope);
    case StmtKind::kSet:
      FLINT_TRY(exec_set(s, scope));
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      FLINT_ASSIGN_OR_RETURN(std::string text, capture(s.body, scope));
      Value v = Value::string(std::move(text));
      if (s.filters) {
        // The chain's innermost input is null: bind the captured text to a hidden name.
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        inner->set(" block", v);
        FLINT_ASSIGN_OR_RETURN(v, eval(*s.filters, inner));
      }
      scope->set(s.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->set(s.name, make_macro(s, scope));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Stmt* self = &s;
      std::weak_ptr<Scope> weak = scope;
      Value caller =
          Value::callable("caller", [this, self, weak](Renderer&, CallArgs& args) -> Result<Value> {
            auto closure = weak.lock();
            if (!closure) return runtime("caller() used outside of its call block");
            auto local = std::make_shared<Scope>();
            local->parent = closure;
            for (size_t k = 0; k < self->params.size(); ++k) {
              const Value* a = args.get(k, self->params[k].name);
              local->set(self->params[k].name, a ? *a : Value::undefined());
            }
            FLINT_ASSIGN_OR_RETURN(std::string text, capture(self->body, local));
            return Value::string(std::move(text));
          });
      const Expr& callexpr = *s.expr;
      FLINT_ASSIGN_OR_RETURN(Value callee, eval(*callexpr.children[0], scope));
      CallArgs args;
      FLINT_TRY(eval_args(callexpr, 1, scope, args));
      args.kwargs.emplace_back("caller", caller);
      auto r = call(callee, args);
      if (!r) return at(callexpr, r.error());
      FLINT_TRY(emit(to_str(*r)));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      FLINT_ASSIGN_OR_RETURN(std::string text, capture(s.body, scope));
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      inner->set(" block", Value::string(std::move(text)));
      FLINT_ASSIGN_OR_RETURN(Value v, eval(*s.filters, inner));
      FLINT_TRY(emit(to_str(v)));
      return Flow::kNormal;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScopeBlock:
      return exec(s.body, scope);
  }
  return Flow::kNormal;
}

namespace {

Status bind_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
  if (targets.size() == 1) {
    scope.set(targets[0], v);
    return ok();
  }
  if (!v.is_list() && !v.is_string()) {
    return runtime(fmt::format("cannot unpack non-iterable {} object", type_name(v)));
  }
  ValueList items;
  if (v.is_list()) {
    items = v.list->items;
  } else {
    for (uint32_t cp : decode_utf8(v.str())) {
      std::string ch;
      append_utf8(ch, cp);
      items.push_back(Value::string(std::move(ch)));
    }
  }
  if (items.size() != targets.size()) {
    return runtime(
        fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  }
  for (size_t k = 0; k < targets.size(); ++k) scope.set(targets[k], items[k]);
  return ok();
}

}  // namespace

Result<ValueList> Renderer::iterate(const Value& v) {
  if (v.is_list()) FLINT_TRY(charge(static_cast<int64_t>(v.list->items.size())));
  if (v.is_dict()) FLINT_TRY(charge(static_cast<int64_t>(v.dict->items.size())));
  if (v.is_string()) FLINT_TRY(charge(static_cast<int64_t>(v.str().size())));
  switch (v.kind) {
    case Kind::kUndefined:
      return ValueList{};
    case Kind::kList:
      return v.list->items;
    case Kind::kDict: {
      ValueList keys;
      for (const auto& [k, val] : v.dict->items) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      ValueList chars;
      for (uint32_t cp : decode_utf8(v.str())) {
        std::string ch;
        append_utf8(ch, cp);
        chars.push_back(Value::string(std::move(ch)));
      }
      return chars;
    }
    default:
      return runtime(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

Result<Flow> Renderer::exec_for(const Stmt& s, const ScopePtr& scope) {
  FLINT_ASSIGN_OR_RETURN(Value seq, eval(*s.expr, scope));
  auto items_r = iterate(seq);
  if (!items_r) return at(*s.expr, items_r.error());
  ValueList items = std::move(*items_r);
  if (s.cond) {
    ValueList kept;
    for (const auto& item : items) {
      auto local = std::make_shared<Scope>();
      local->parent = scope;
      FLINT_TRY(bind_targets(s.targets, item, *local));
      FLINT_ASSIGN_OR_RETURN(Value c, eval(*s.cond, local));
      if (truthy(c)) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.else_body, scope);
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    FLINT_TRY(step());
    auto local = std::make_shared<Scope>();
    local->parent = scope;
    auto loop = std::make_shared<DictData>();
    auto put = [&](const char* key, Value v) { loop->items.emplace_back(Value::string(key), v); };
    put("index0", Value::integer(k));
    put("index", Value::integer(k + 1));
    put("revindex0", Value::integer(n - k - 1));
    put("revindex", Value::integer(n - k));
    put("first", Value::boolean(k == 0));
    put("last", Value::boolean(k == n - 1));
    put("length", Value::integer(n));
    put("depth", Value::integer(1));
    put("depth0", Value::integer(0));
    if (k > 0) put("previtem", items[static_cast<size_t>(k - 1)]);
    if (k + 1 < n) put("nextitem", items[static_cast<size_t>(k + 1)]);
    put("cycle", Value::callable("cycle", [k](Renderer&, CallArgs& a) -> Result<Value> {
          if (a.args.empty()) return runtime("no items for cycling given");
          return a.args[static_cast<size_t>(k) % a.args.size()];
        }));
    local->set("loop", Value::make_dict(std::move(loop)));
    FLINT_TRY(bind_targets(s.targets, items[static_cast<size_t>(k)], *local));
    FLINT_ASSIGN_OR_RETURN(Flow f, exec(s.body, local));
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Status Renderer::exec_set(const Stmt& s, const ScopePtr& scope) {
  FLINT_ASSIGN_OR_RETURN(Value v, eval(*s.expr, scope));
  if (!s.attr.empty()) {
    const Value* target = scope->find(s.targets[0]);
    if (!target || target->kind != Kind::kNamespace) {
      return runtime(
          fmt::format("line {}: cannot assign attribute on non-namespace object", s.line));
    }
    target->ns->depth = std::max(target->ns->depth, 1 + std::min(value_depth(v), kMaxValueDepth));
    if (target->ns->depth > kMaxValueDepth) {
      return runtime(
          fmt::format("line {}: value nested deeper than {} levels", s.line, kMaxValueDepth));
    }
    for (auto& [k, val] : target->ns->attrs) {
      if (k == s.attr) {
        val = std::move(v);
        return ok();
      }
    }
    target->ns->attrs.emplace_back(s.attr, std::move(v));
    return ok();
  }
  auto st = bind_targets(s.targets, v, *scope);
  if (!st) return runtime(fmt::format("line {}: {}", s.line, st.error().message));
  return ok();
}

Value Renderer::make_macro(const Stmt& s, const ScopePtr& scope) {
  const Stmt* self = &s;
  std::weak_ptr<Scope> weak = scope;
  return Value::callable(s.name, [self, weak](Renderer& r, CallArgs& args) -> Result<Value> {
    auto closure = weak.lock();
    if (!closure) return runtime(fmt::format("macro '{}' used outside of its scope", self->name));
    if (r.call_depth_ >= kMaxCallDepth) return runtime("macro recursion too deep");
    if (args.args.size() > self->params.size() && !self->catch_varargs) {
      return runtime(fmt::format("macro '{}' takes not more than {} argument(s)", self->name,
                                 self->params.size()));
    }
    auto local = std::make_shared<Scope>();
    local->parent = closure;
    ValueList varargs;
    for (size_t k = self->params.size(); k < args.args.size(); ++k) varargs.push_back(args.args[k]);
    auto kw = std::make_shared<DictData>();
    for (const auto& [name, v] : args.kwargs) {
      bool known = name == "caller";
      for (const auto& p : self->params) known = known || p.name == name;
      if (!known && !self->catch_kwargs) {
        return runtime(fmt::format("macro '{}' takes no keyword argument '{}'", self->name, name));
      }
      if (!known) kw->items.emplace_back(Value::string(name), v);
    }
    for (size_t k = 0; k < self->params.size(); ++k) {
      const MacroParam& p = self->params[k];
      const Value* a = args.get(k, p.name);
      if (a) {
        local->set(p.name, *a);
      } else if (p.default_value) {
        FLINT_ASSIGN_OR_RETURN(Value d, r.eval(*p.default_value, local));
        local->set(p.name, std::move(d));
      } else {
        local->set(p.name,
                   Value::undefined(fmt::format("parameter '{}' was not provided", p.name)));
      }
    }
    for (const auto& [name, v] : args.kwargs) {
      if (name == "caller") local->set("caller", v);
    }
    local->set("varargs", Value::make_list(std::move(varargs), true));
    local->set("kwargs", Value::make_dict(std::move(kw)));
    ++r.call_depth_;
    auto text = r.capture(self->body, local);
    --r.call_depth_;
    if (!text) return text.error();
    return Value::string(std::move(*text));
  });
}

Result<Value> Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.kind == Kind::kCallable) return callee.fn->fn(*this, args);
  if (callee.is_undefined()) {
    const std::string& hint = *callee.s;
    return runtime(hint.empty() ? "'Undefined' object is not callable" : hint);
  }
  return runtime(fmt::format("'{}' object is not callable", type_name(callee)));
}

Status Renderer::eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& args) {
  for (size_t k = first; k < e.children.size(); ++k) {
    FLINT_ASSIGN_OR_RETURN(Value v, eval(*e.children[k], scope));
    args.args.push_back(std::move(v));
  }
  for (const auto& [name, ex] : e.kwargs) {
    FLINT_ASSIGN_OR_RETURN(Value v, eval(*ex, scope));
    args.kwargs.emplace_back(name, std::move(v));
  }
  return ok();
}

Result<Value> Renderer::eval(const Expr& e, const ScopePtr& scope) {
  FLINT_TRY(step());
  auto r = eval_inner(e, scope);
  if (!r) return at(e, r.error());
  if (value_depth(*r) > kMaxValueDepth) {
    return at(e, runtime(fmt::format("value nested deeper than {} levels", kMaxValueDepth)));
  }
  return r;
}

Result<Value> Renderer::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName: {
      if (const Value* v = scope->find(e.name)) return *v;
      if (const Value* g = globals_.dict->find(Value::string(e.name))) return *g;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const auto& c : e.children) {
        FLINT_ASSIGN_OR_RETURN(Value v, eval(*c, scope));
        items.push_back(std::move(v));
      }
      return Value::make_list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<DictData>();
      for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
        FLINT_ASSIGN_OR_RETURN(Value key, eval(*e.children[k], scope));
        FLINT_ASSIGN_OR_RETURN(Value val, eval(*e.children[k + 1], scope));
        if (key.kind == Kind::kList && !key.list->is_tuple)
          return runtime("unhashable type: 'list'");
        if (key.kind == Kind::kDict) return runtime("unhashable type: 'dict'");
        d->set(std::move(key), std::move(val));
      }
      return Value::make_dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      FLINT_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0], scope));
      return get_attr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      FLINT_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0], scope));
      FLINT_ASSIGN_OR_RETURN(Value key, eval(*e.children[1], scope));
      return get_item(obj, key);
    }
    case ExprKind::kSlice:
      return eval_slice(e, scope);
    case ExprKind::kCall: {
      FLINT_ASSIGN_OR_RETURN(Value callee, eval(*e.children[0], scope));
      CallArgs args;
      FLINT_TRY(eval_args(e, 1, scope, args));
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      Value input;
      if (e.children[0]) {
        FLINT_ASSIGN_OR_RETURN(input, eval(*e.children[0], scope));
      } else {
        const Value* block = scope->find(" block");
        if (block) input = *block;
      }
      CallArgs args;
      FLINT_TRY(eval_args(e, 1, scope, args));
      return apply_filter(e.name, input, args);
    }
    case ExprKind::kTest: {
      FLINT_ASSIGN_OR_RETURN(Value input, eval(*e.children[0], scope));
      CallArgs args;
      FLINT_TRY(eval_args(e, 1, scope, args));
      FLINT_ASSIGN_OR_RETURN(bool r, apply_test(e.name, input, args));
      return Value::boolean(r != e.negated);
    }
    case ExprKind::kUnary: {
      FLINT_ASSIGN_OR_RETURN(Value v, eval(*e.children[0], scope));
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (!v.is_number()) {
        return runtime(fmt::format("bad operand type for unary {}: '{}'", e.name, type_name(v)));
      }
      if (e.name == "+") return v.kind == Kind::kBool ? Value::integer(v.as_int()) : v;
      if (v.kind == Kind::kFloat) return Value::number(-v.f);
      if (v.as_int() == INT64_MIN) return runtime("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kBinary:
      return eval_binary(e, scope);
    case ExprKind::kCompare:
      return eval_compare(e, scope);
    case ExprKind::kCondExpr: {
      FLINT_ASSIGN_OR_RETURN(Value c, eval(*e.children[0], scope));
      if (truthy(c)) return eval(*e.children[1], scope);
      if (e.children[2]) return eval(*e.children[2], scope);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section "
          "was defined");
    }
  }
  return Value::undefined();
}

Result<Value> Renderer::eval_binary(const Expr& e, const ScopePtr& scope) {
  FLINT_ASSIGN_OR_RETURN(Value a, eval(*e.children[0], scope));
  if (e.name == "and") return truthy(a) ? eval(*e.children[1], scope) : Result<Value>(a);
  if (e.name == "or") return truthy(a) ? Result<Value>(a) : eval(*e.children[1], scope);
  FLINT_ASSIGN_OR_RETURN(Value b, eval(*e.children[1], scope));
  if (e.name == "~") {
    std::string s = to_str(a);
    std::string t = to_str(b);
    FLINT_TRY(check_size(s.size() + t.size()));
    return Value::string(s + t);
  }
  for (const Value* v : {&a, &b}) {
    if (v->is_undefined()) {
      return runtime(v->s->empty() ? "'Undefined' used in arithmetic" : *v->s);
    }
  }
  return arithmetic(e.name, a, b, limits_.max_output_bytes);
}

namespace {

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string()) {
        return runtime(
            fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const auto& v : container.list->items) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      return container.dict->find(item) != nullptr;
    case Kind::kNamespace:
      if (!item.is_string()) return false;
      for (const auto& [k, v] : container.ns->attrs) {
        if (k == item.str()) return true;
      }
      return false;
    default:
      return runtime(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

}  // namespace

Result<Value> Renderer::eval_compare(const Expr& e, const ScopePtr& scope) {
  FLINT_ASSIGN_OR_RETURN(Value left, eval(*e.children[0], scope));
  for (size_t k = 0; k < e.ops.size(); ++k) {
    FLINT_ASSIGN_OR_RETURN(Value right, eval(*e.children[k + 1], scope));
    const std::string& op = e.ops[k];
    bool r = false;
    if (op == "==") {
      r = equals(left, right);
    } else if (op == "!=") {
      r = !equals(left, right);
    } else if (op == "in" || op == "notin") {
      FLINT_ASSIGN_OR_RETURN(bool c, contains(right, left));
      r = (op == "in") == c;
    } else {
      if (left.is_undefined() || right.is_undefined()) {
        const Value& u = left.is_undefined() ? left : right;
        return runtime(u.s->empty() ? "'Undefined' used in a comparison" : *u.s);
      }
      if (op == "<") {
        FLINT_ASSIGN_OR_RETURN(r, less(left, right));
      } else if (op == ">") {
        FLINT_ASSIGN_OR_RETURN(r, less(right, left));
      } else if (op == "<=") {
        FLINT_ASSIGN_OR_RETURN(bool gt, less(right, left));
        r = !gt;
      } else {
        FLINT_ASSIGN_OR_RETURN(bool lt, less(left, right));
        r = !lt;
      }
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Result<Value> Renderer::eval_slice(const Expr& e, const ScopePtr& scope) {
  FLINT_ASSIGN_OR_RETURN(Value obj, eval(*e.children[0], scope));
  std::optional<int64_t> parts[3];
  for (int k = 0; k < 3; ++k) {
    const auto& c = e.children[static_cast<size_t>(k) + 1];
    if (!c) continue;
    FLINT_ASSIGN_OR_RETURN(Value v, eval(*c, scope));
    if (v.is_none()) continue;
    if (!v.is_integral()) {
      return runtime("slice indices must be integers or None");
    }
    parts[k] = v.as_int();
  }
  int64_t step = parts[2].value_or(1);
  if (step == 0) return runtime("slice step cannot be zero");
  bool is_str = obj.is_string();
  std::vector<uint32_t> cps;
  int64_t n = 0;
  if (is_str) {
    cps = decode_utf8(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_plain_list()) {
    n = static_cast<int64_t>(obj.list->items.size());
  } else if (obj.is_undefined()) {
    return runtime(obj.s->empty() ? "'Undefined' is not subscriptable" : *obj.s);
  } else {
    return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt, bool is_stop) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    (void)is_stop;
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t start = clamp(parts[0], step > 0 ? 0 : n - 1, false);
  int64_t stop = clamp(parts[1], step > 0 ? n : -1, true);
  std::string s;
  ValueList items;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    if (is_str)
      append_utf8(s, cps[static_cast<size_t>(k)]);
    else
      items.push_back(obj.list->items[static_cast<size_t>(k)]);
  }
  if (is_str) return Value::string(std::move(s));
  return Value::make_list(std::move(items), obj.list->is_tuple);
}

Result<Value> Renderer::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::kUndefined:
      return runtime(obj.s->empty() ? fmt::format("'Undefined' has no attribute '{}'", name)
                                    : *obj.s);
    case Kind::kDict: {
      Value m = bound_method(obj, name);
      if (!m.is_undefined() || !m.s->empty()) return m;
      if (const Value* v = obj.dict->find(Value::string(name))) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    case Kind::kNamespace:
      for (const auto& [k, v] : obj.ns->attrs) {
        if (k == name) return v;
      }
      return Value::undefined(fmt::format("'Namespace' object has no attribute '{}'", name));
    default: {
      Value m = bound_method(obj, name);
      if (!m.is_undefined() || !m.s->empty()) return m;
      return Value::undefined(
          fmt::format("'{}' object has no attribute '{}'", type_name(obj), name));
    }
  }
}

Result<Value> Renderer::get_item(const Value& obj, const Value& key) {
  switch (obj.kind) {
    case Kind::kUndefined:
      return runtime(obj.s->empty() ? "'Undefined' is not subscriptable" : *obj.s);
    case Kind::kDict:
      if (const Value* v = obj.dict->find(key)) return *v;
      break;
    case Kind::kList:
    case Kind::kString: {
      if (!key.is_integral() || (obj.is_list() && !obj.list->view.empty())) break;
      int64_t idx = key.as_int();
      if (obj.is_list()) {
        int64_t n = static_cast<int64_t>(obj.list->items.size());
        if (idx < 0) idx += n;
        if (idx < 0 || idx >= n) return Value::undefined("list index out of range");
        return obj.list->items[static_cast<size_t>(idx)];
      }
      auto cps = decode_utf8(obj.str());
      int64_t n = static_cast<int64_t>(cps.size());
      if (idx < 0) idx += n;
      if (idx < 0 || idx >= n) return Value::undefined("string index out of range");
      std::string ch;
      append_utf8(ch, cps[static_cast<size_t>(idx)]);
      return Value::string(std::move(ch));
    }
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), repr(key)));
}

}  // namespace flint::tokenizer::jinja

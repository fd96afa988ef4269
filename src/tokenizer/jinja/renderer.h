// Tree-walking renderer for parsed templates: scopes, statements, expressions, with step and size
// caps. Filters, tests, methods and globals live in builtins.cpp. One Renderer per render call.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace flint::tokenizer::jinja {

struct RenderLimits {
  int64_t max_steps = 5'000'000;
  size_t max_output_bytes = 64u << 20;
  int64_t now_unix_seconds = 0;
};

// Renders `tmpl` with the entries of `context` (a dict) as top-level variables.
Result<std::string> render_template(const Template& tmpl, const Value& context,
                                    const RenderLimits& limits);

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const RenderLimits& limits) : limits_(limits) {}

  Result<std::string> run(const Template& tmpl, const Value& context);

  Result<Value> eval(const Expr& e, const ScopePtr& scope);
  Result<Flow> exec(const Body& body, const ScopePtr& scope);
  Result<Value> call(const Value& callee, CallArgs& args);

  // Python-level operations shared with builtins.
  Result<Value> get_attr(const Value& obj, const std::string& name);
  Result<Value> get_item(const Value& obj, const Value& key);
  Result<Value> apply_filter(const std::string& name, const Value& input, CallArgs& args);
  Result<bool> apply_test(const std::string& name, const Value& input, CallArgs& args);
  Result<ValueList> iterate(const Value& v);  // Python iter(): dict keys, string chars
  Status check_size(size_t bytes) const;
  Status step();
  Status charge(int64_t steps);  // work proportional to a container's size
  const RenderLimits& limits() const { return limits_; }
  bool raised = false;  // the error came from raise_exception()

 private:
  Result<Value> eval_inner(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_binary(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_compare(const Expr& e, const ScopePtr& scope);
  Result<Value> eval_slice(const Expr& e, const ScopePtr& scope);
  Status eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& args);
  Result<Flow> exec_stmt(const Stmt& s, const ScopePtr& scope);
  Result<Flow> exec_for(const Stmt& s, const ScopePtr& scope);
  Status exec_set(const Stmt& s, const ScopePtr& scope);
  Value make_macro(const Stmt& s, const ScopePtr& scope);
  Result<std::string> capture(const Body& body, const ScopePtr& scope);
  Status emit(const std::string& text);
  Error at(const Expr& e, Error err) const;

  RenderLimits limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  std::string* out_ = nullptr;
  Value globals_;

 public:
  // Namespaces made during this render; their attributes are cleared at the end so that a
  // namespace stored in itself does not leak.
  std::vector<std::weak_ptr<NamespaceData>> namespaces;
};

constexpr int kMaxValueDepth = 256;

// Binary arithmetic with Python semantics ("+", "-", "*", "/", "//", "%", "**").
Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b, size_t max_bytes);
// Global functions: range, namespace, dict, raise_exception, strftime_now, cycler, joiner.
Value make_globals(const RenderLimits& limits);
// Bound methods of str, dict and list values; Undefined when `name` is no such method.
Value bound_method(const Value& self, const std::string& name);

}  // namespace flint::tokenizer::jinja

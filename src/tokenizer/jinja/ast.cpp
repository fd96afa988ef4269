// Queries over parsed templates.
#include "tokenizer/jinja/ast.h"

namespace flint::tokenizer::jinja {
namespace {

bool mentions(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == ExprKind::kName && e->name == name) return true;
  for (const auto& c : e->children) {
    if (mentions(c.get(), name)) return true;
  }
  for (const auto& kv : e->kwargs) {
    if (mentions(kv.second.get(), name)) return true;
  }
  return false;
}

}  // namespace

bool body_mentions(const Body& body, const std::string& name) {
  for (const auto& s : body) {
    if (mentions(s->expr.get(), name) || mentions(s->cond.get(), name) ||
        mentions(s->filters.get(), name) || body_mentions(s->body, name) ||
        body_mentions(s->else_body, name)) {
      return true;
    }
    for (const auto& c : s->conds) {
      if (mentions(c.get(), name)) return true;
    }
    for (const auto& b : s->bodies) {
      if (body_mentions(b, name)) return true;
    }
    for (const auto& p : s->params) {
      if (mentions(p.default_value.get(), name)) return true;
    }
  }
  return false;
}

}  // namespace flint::tokenizer::jinja

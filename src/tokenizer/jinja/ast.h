// The parsed template: expression and statement nodes, built by parser.cpp, run by renderer.cpp.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace flint::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // children
  kTuple,     // children
  kDict,      // children: key, value, key, value, ...
  kGetAttr,   // children[0] . name
  kGetItem,   // children[0] [ children[1] ]
  kSlice,     // children[0] [ children[1] : children[2] : children[3] ] (null parts allowed)
  kCall,      // children[0] ( children[1..] , kwargs )
  kFilter,    // name; children[0] input (null inside a filter block), children[1..] args, kwargs
  kTest,      // name; children[0] input, children[1..] args; negated
  kUnary,     // op ("-", "+", "not"); children[0]
  kBinary,    // op; children[0], children[1] ("and"/"or" short-circuit)
  kCompare,   // children[0] then (ops[k], children[k+1]) chained like Python
  kCondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int col = 0;
  Value value;
  std::string name;  // name, attribute, filter/test name, or operator
  std::vector<std::string> ops;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,      // text
  kPrint,     // expr
  kIf,        // conds[k] -> bodies[k]; else_body
  kFor,       // targets in expr [if cond]: body; else_body
  kSet,       // targets = expr, or ns.attr = expr (attr non-empty)
  kSetBlock,  // targets[0] = rendered body, piped through filters (a kFilter chain, innermost null)
  kMacro,     // name(params = defaults): body
  kCallBlock,    // call expr with caller(params): body
  kFilterBlock,  // filters applied to rendered body
  kBreak,
  kContinue,
  kScopeBlock,  // generation blocks: body rendered in place
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  int col = 0;
  std::string text;
  std::string name;
  std::string attr;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr filters;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<MacroParam> params;
  bool catch_varargs = false;  // the macro body mentions `varargs`: extra positionals allowed
  bool catch_kwargs = false;   // the macro body mentions `kwargs`: unknown keywords allowed
};

struct Template {
  std::string source;
  Body body;
};

// Whether any expression in `body` (nested blocks included) reads the variable `name`.
bool body_mentions(const Body& body, const std::string& name);

// Parses normalised-or-not Jinja source into a Template; errors carry "line L, column C".
Result<std::unique_ptr<Template>> parse_template(std::string source);

}  // namespace flint::tokenizer::jinja

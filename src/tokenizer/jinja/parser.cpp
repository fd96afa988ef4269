// Jinja parser: statements and expressions with Jinja2's grammar and operator precedence.
// Test partner: tests/unit/tokenizer/chat_template_test.cpp.
#include <set>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace flint::tokenizer::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and blocks; deeper is an error

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<Body> parse_all() {
    Body body;
    std::string end;
    FLINT_TRY(parse_body(body, {}, end));
    if (!error_.message.empty()) return error_;
    return body;
  }

 private:
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokType::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokType::kName && cur().text == n; }

  Error fail_at(const Token& t, const std::string& msg) const {
    return make_error(ErrorCode::kInvalidArgument, "line {}, column {}: {}", t.line, t.col, msg);
  }
  Error fail(const std::string& msg) const { return fail_at(cur(), msg); }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokType::kEof:
        return "end of template";
      case TokType::kBlockEnd:
        return "end of statement block";
      case TokType::kVarEnd:
        return "end of print statement";
      case TokType::kData:
        return "template data";
      case TokType::kString:
        return "string";
      default:
        return "'" + t.text + "'";
    }
  }
  Status expect_op(const char* op) {
    if (!is_op(op)) return fail(fmt::format("expected '{}', got {}", op, describe(cur())));
    advance();
    return ok();
  }
  Status expect_block_end() {
    if (cur().type != TokType::kBlockEnd) {
      return fail(fmt::format("expected end of statement block, got {}", describe(cur())));
    }
    advance();
    return ok();
  }
  Result<std::string> expect_name() {
    if (cur().type != TokType::kName) {
      return fail(fmt::format("expected a name, got {}", describe(cur())));
    }
    std::string n = cur().text;
    advance();
    return n;
  }

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // Parses statements until a block whose keyword is in `ends`; leaves `end` set to that keyword
  // with the stream positioned after it (the block's remaining tokens are the caller's).
  Status parse_body(Body& body, const std::set<std::string>& ends, std::string& end) {
    if (++depth_ > kMaxDepth) return fail("blocks nested too deeply");
    while (true) {
      const Token& t = cur();
      if (t.type == TokType::kEof) {
        if (!ends.empty()) {
          std::string want;
          for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
          return fail(fmt::format("unexpected end of template, expected {}", want));
        }
        --depth_;
        return ok();
      }
      if (t.type == TokType::kData) {
        auto s = stmt(StmtKind::kText, t);
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokType::kVarBegin) {
        auto s = stmt(StmtKind::kPrint, t);
        advance();
        FLINT_ASSIGN_OR_RETURN(s->expr, parse_tuple(true));
        if (cur().type != TokType::kVarEnd) {
          return fail(fmt::format("expected end of print statement, got {}", describe(cur())));
        }
        advance();
        body.push_back(std::move(s));
      } else if (t.type == TokType::kBlockBegin) {
        advance();
        const Token& kw = cur();
        if (kw.type != TokType::kName) return fail("expected a statement name");
        if (ends.count(kw.text)) {
          end = kw.text;
          advance();
          --depth_;
          return ok();
        }
        FLINT_ASSIGN_OR_RETURN(StmtPtr s, parse_statement());
        body.push_back(std::move(s));
      } else {
        return fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  Result<StmtPtr> parse_statement() {
    const Token kw = cur();
    const std::string& k = kw.text;
    if (k == "if") return parse_if(kw);
    if (k == "for") return parse_for(kw);
    if (k == "set") return parse_set(kw);
    if (k == "macro") return parse_macro(kw);
    if (k == "call") return parse_call_block(kw);
    if (k == "filter") return parse_filter_block(kw);
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) return fail(fmt::format("'{}' outside of a loop", k));
      advance();
      FLINT_TRY(expect_block_end());
      return stmt(k == "break" ? StmtKind::kBreak : StmtKind::kContinue, kw);
    }
    if (k == "generation") {
      advance();
      FLINT_TRY(expect_block_end());
      auto s = stmt(StmtKind::kScopeBlock, kw);
      std::string end;
      FLINT_TRY(parse_body(s->body, {"endgeneration"}, end));
      FLINT_TRY(expect_block_end());
      return s;
    }
    return fail(fmt::format("encountered unknown tag '{}'", k));
  }

  Result<StmtPtr> parse_if(const Token& kw) {
    auto s = stmt(StmtKind::kIf, kw);
    advance();
    while (true) {
      FLINT_ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(false));
      FLINT_TRY(expect_block_end());
      Body body;
      std::string end;
      FLINT_TRY(parse_body(body, {"elif", "else", "endif"}, end));
      s->conds.push_back(std::move(cond));
      s->bodies.push_back(std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        FLINT_TRY(expect_block_end());
        FLINT_TRY(parse_body(s->else_body, {"endif"}, end));
      }
      FLINT_TRY(expect_block_end());
      return s;
    }
  }

  Result<std::vector<std::string>> parse_targets() {
    std::vector<std::string> names;
    bool paren = is_op("(");
    if (paren) advance();
    while (true) {
      FLINT_ASSIGN_OR_RETURN(std::string n, expect_name());
      names.push_back(std::move(n));
      if (!is_op(",")) break;
      advance();
      if (cur().type != TokType::kName) break;
    }
    if (paren) FLINT_TRY(expect_op(")"));
    return names;
  }

  Result<StmtPtr> parse_for(const Token& kw) {
    auto s = stmt(StmtKind::kFor, kw);
    advance();
    FLINT_ASSIGN_OR_RETURN(s->targets, parse_targets());
    if (!is_name("in")) return fail(fmt::format("expected 'in', got {}", describe(cur())));
    advance();
    FLINT_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, /*for_iter=*/true));
    if (is_name("if")) {
      advance();
      FLINT_ASSIGN_OR_RETURN(s->cond, parse_expression(true));
    }
    if (is_name("recursive")) return fail("recursive loops are not supported");
    FLINT_TRY(expect_block_end());
    ++loop_depth_;
    std::string end;
    FLINT_TRY(parse_body(s->body, {"else", "endfor"}, end));
    --loop_depth_;
    if (end == "else") {
      FLINT_TRY(expect_block_end());
      FLINT_TRY(parse_body(s->else_body, {"endfor"}, end));
    }
    FLINT_TRY(expect_block_end());
    return s;
  }

  Result<StmtPtr> parse_set(const Token& kw) {
    advance();
    if (cur().type == TokType::kName && peek().type == TokType::kOp && peek().text == "." &&
        peek(2).type == TokType::kName) {
      auto s = stmt(StmtKind::kSet, kw);
      s->targets.push_back(cur().text);
      s->attr = peek(2).text;
      advance();
      advance();
      advance();
      FLINT_TRY(expect_op("="));
      FLINT_ASSIGN_OR_RETURN(s->expr, parse_tuple(true));
      FLINT_TRY(expect_block_end());
      return s;
    }
    FLINT_ASSIGN_OR_RETURN(auto targets, parse_targets());
    if (is_op("=")) {
      advance();
      auto s = stmt(StmtKind::kSet, kw);
      s->targets = std::move(targets);
      FLINT_ASSIGN_OR_RETURN(s->expr, parse_tuple(true));
      FLINT_TRY(expect_block_end());
      return s;
    }
    if (targets.size() != 1) return fail("a block set takes one name");
    auto s = stmt(StmtKind::kSetBlock, kw);
    s->targets = std::move(targets);
    if (is_op("|")) {
      FLINT_ASSIGN_OR_RETURN(s->filters, parse_filters(nullptr));
    }
    FLINT_TRY(expect_block_end());
    std::string end;
    FLINT_TRY(parse_body(s->body, {"endset"}, end));
    FLINT_TRY(expect_block_end());
    return s;
  }

  Status parse_params(std::vector<MacroParam>& params) {
    FLINT_TRY(expect_op("("));
    while (!is_op(")")) {
      if (!params.empty()) FLINT_TRY(expect_op(","));
      if (is_op(")")) break;
      MacroParam p;
      FLINT_ASSIGN_OR_RETURN(p.name, expect_name());
      if (is_op("=")) {
        advance();
        FLINT_ASSIGN_OR_RETURN(p.default_value, parse_expression(true));
      }
      params.push_back(std::move(p));
    }
    advance();
    return ok();
  }

  Result<StmtPtr> parse_macro(const Token& kw) {
    auto s = stmt(StmtKind::kMacro, kw);
    advance();
    FLINT_ASSIGN_OR_RETURN(s->name, expect_name());
    FLINT_TRY(parse_params(s->params));
    FLINT_TRY(expect_block_end());
    int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    FLINT_TRY(parse_body(s->body, {"endmacro"}, end));
    loop_depth_ = saved;
    s->catch_varargs = body_mentions(s->body, "varargs");
    s->catch_kwargs = body_mentions(s->body, "kwargs");
    if (cur().type == TokType::kName) advance();  // {% endmacro name %}
    FLINT_TRY(expect_block_end());
    return s;
  }

  Result<StmtPtr> parse_call_block(const Token& kw) {
    auto s = stmt(StmtKind::kCallBlock, kw);
    advance();
    if (is_op("(")) FLINT_TRY(parse_params(s->params));
    FLINT_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
    if (s->expr->kind != ExprKind::kCall) return fail("expected a call after 'call'");
    FLINT_TRY(expect_block_end());
    int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    FLINT_TRY(parse_body(s->body, {"endcall"}, end));
    loop_depth_ = saved;
    FLINT_TRY(expect_block_end());
    return s;
  }

  Result<StmtPtr> parse_filter_block(const Token& kw) {
    auto s = stmt(StmtKind::kFilterBlock, kw);
    advance();
    FLINT_ASSIGN_OR_RETURN(s->filters, parse_filters(nullptr, /*first_without_pipe=*/true));
    FLINT_TRY(expect_block_end());
    std::string end;
    FLINT_TRY(parse_body(s->body, {"endfilter"}, end));
    FLINT_TRY(expect_block_end());
    return s;
  }

  // ---- expressions ----

  bool at_tuple_end(bool for_iter) const {
    if (cur().type == TokType::kVarEnd || cur().type == TokType::kBlockEnd ||
        cur().type == TokType::kEof) {
      return true;
    }
    if (cur().type == TokType::kOp &&
        (cur().text == ")" || cur().text == "]" || cur().text == "}" || cur().text == "=")) {
      return true;
    }
    return for_iter && (is_name("if") || is_name("recursive"));
  }

  // A comma-separated tuple, or a single expression when there is no comma.
  Result<ExprPtr> parse_tuple(bool with_condexpr, bool for_iter = false) {
    const Token start = cur();
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        advance();
        comma = true;
      }
      if (at_tuple_end(for_iter) && !items.empty()) break;
      FLINT_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
      items.push_back(std::move(e));
    }
    if (!comma && items.size() == 1) return std::move(items[0]);
    auto t = node(ExprKind::kTuple, start);
    t->children = std::move(items);
    return t;
  }

  Result<ExprPtr> parse_expression(bool with_condexpr) {
    if (++depth_ > kMaxDepth) return fail("expression nested too deeply");
    Result<ExprPtr> r = with_condexpr ? parse_condexpr() : parse_or();
    --depth_;
    return r;
  }

  Result<ExprPtr> parse_condexpr() {
    const Token start = cur();
    FLINT_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
    while (is_name("if")) {
      advance();
      FLINT_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
      ExprPtr expr3;
      if (is_name("else")) {
        advance();
        FLINT_ASSIGN_OR_RETURN(expr3, parse_condexpr());
      }
      auto c = node(ExprKind::kCondExpr, start);
      c->children.push_back(std::move(test));
      c->children.push_back(std::move(expr1));
      c->children.push_back(std::move(expr3));
      expr1 = std::move(c);
    }
    return expr1;
  }

  ExprPtr binary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto b = node(ExprKind::kBinary, at);
    b->name = std::move(op);
    b->children.push_back(std::move(l));
    b->children.push_back(std::move(r));
    return b;
  }

  // One left-associative level of binary operators: operands from `operand()`, an operator
  // (named by its token's text) wherever `at_op()` holds.
  template <typename Operand, typename AtOp>
  Result<ExprPtr> binary_level(Operand operand, AtOp at_op) {
    FLINT_ASSIGN_OR_RETURN(ExprPtr left, operand());
    while (at_op()) {
      const Token at = cur();
      advance();
      FLINT_ASSIGN_OR_RETURN(ExprPtr right, operand());
      left = binary(at, at.text, std::move(left), std::move(right));
    }
    return left;
  }

  Result<ExprPtr> parse_or() {
    return binary_level([&] { return parse_and(); }, [&] { return is_name("or"); });
  }

  Result<ExprPtr> parse_and() {
    return binary_level([&] { return parse_not(); }, [&] { return is_name("and"); });
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      const Token at = cur();
      advance();
      if (++depth_ > kMaxDepth) return fail("expression nested too deeply");
      FLINT_ASSIGN_OR_RETURN(ExprPtr inner, parse_not());
      --depth_;
      auto u = node(ExprKind::kUnary, at);
      u->name = "not";
      u->children.push_back(std::move(inner));
      return u;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    const Token start = cur();
    FLINT_ASSIGN_OR_RETURN(ExprPtr expr, parse_math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokType::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == TokType::kName && peek().text == "in") {
        op = "notin";
        advance();
        advance();
      } else {
        break;
      }
      FLINT_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
      if (!cmp) {
        cmp = node(ExprKind::kCompare, start);
        cmp->children.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(std::move(rhs));
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  Result<ExprPtr> parse_math1() {
    return binary_level([&] { return parse_concat(); }, [&] { return is_op("+") || is_op("-"); });
  }

  Result<ExprPtr> parse_concat() {
    return binary_level([&] { return parse_math2(); }, [&] { return is_op("~"); });
  }

  Result<ExprPtr> parse_math2() {
    return binary_level([&] { return parse_pow(); },
                        [&] { return is_op("*") || is_op("/") || is_op("//") || is_op("%"); });
  }

  Result<ExprPtr> parse_pow() {
    return binary_level([&] { return parse_unary(true); }, [&] { return is_op("**"); });
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    if (++depth_ > kMaxDepth) return fail("expression nested too deeply");
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token at = cur();
      advance();
      FLINT_ASSIGN_OR_RETURN(ExprPtr inner, parse_unary(false));
      e = node(ExprKind::kUnary, at);
      e->name = at.text;
      e->children.push_back(std::move(inner));
    } else {
      FLINT_ASSIGN_OR_RETURN(e, parse_primary());
    }
    FLINT_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) {
      FLINT_ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e)));
    }
    --depth_;
    return e;
  }

  Result<ExprPtr> parse_primary() {
    const Token t = cur();
    if (t.type == TokType::kName) {
      advance();
      auto e = node(ExprKind::kLiteral, t);
      if (t.text == "true" || t.text == "True")
        e->value = Value::boolean(true);
      else if (t.text == "false" || t.text == "False")
        e->value = Value::boolean(false);
      else if (t.text == "none" || t.text == "None")
        e->value = Value::none();
      else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      return e;
    }
    if (t.type == TokType::kString) {
      std::string s;
      while (cur().type == TokType::kString) {
        s += cur().text;
        advance();
      }
      auto e = node(ExprKind::kLiteral, t);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == TokType::kInt) {
      advance();
      auto e = node(ExprKind::kLiteral, t);
      errno = 0;
      char* endp = nullptr;
      long long v = std::strtoll(t.text.c_str(), &endp, 10);
      if (errno == ERANGE) return fail_at(t, "integer literal too large");
      e->value = Value::integer(v);
      return e;
    }
    if (t.type == TokType::kFloat) {
      advance();
      auto e = node(ExprKind::kLiteral, t);
      e->value = Value::number(std::strtod(t.text.c_str(), nullptr));
      return e;
    }
    if (is_op("(")) {
      advance();
      if (is_op(")")) {
        advance();
        return node(ExprKind::kTuple, t);
      }
      FLINT_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true));
      FLINT_TRY(expect_op(")"));
      return e;
    }
    if (is_op("[")) {
      advance();
      auto e = node(ExprKind::kList, t);
      while (!is_op("]")) {
        if (!e->children.empty()) FLINT_TRY(expect_op(","));
        if (is_op("]")) break;
        FLINT_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
        e->children.push_back(std::move(item));
      }
      advance();
      return e;
    }
    if (is_op("{")) {
      advance();
      auto e = node(ExprKind::kDict, t);
      while (!is_op("}")) {
        if (!e->children.empty()) FLINT_TRY(expect_op(","));
        if (is_op("}")) break;
        FLINT_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
        FLINT_TRY(expect_op(":"));
        FLINT_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
        e->children.push_back(std::move(key));
        e->children.push_back(std::move(value));
      }
      advance();
      return e;
    }
    return fail(fmt::format("unexpected {}", describe(t)));
  }

  Result<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      const Token at = cur();
      if (is_op(".")) {
        advance();
        if (cur().type == TokType::kName) {
          auto g = node(ExprKind::kGetAttr, at);
          g->name = cur().text;
          g->children.push_back(std::move(e));
          advance();
          e = std::move(g);
        } else if (cur().type == TokType::kInt) {
          auto g = node(ExprKind::kGetItem, at);
          g->children.push_back(std::move(e));
          auto idx = node(ExprKind::kLiteral, cur());
          idx->value = Value::integer(std::strtoll(cur().text.c_str(), nullptr, 10));
          g->children.push_back(std::move(idx));
          advance();
          e = std::move(g);
        } else {
          return fail("expected a name after '.'");
        }
      } else if (is_op("[")) {
        advance();
        FLINT_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e), at));
      } else if (is_op("(")) {
        FLINT_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr target, const Token& at) {
    std::vector<ExprPtr> parts(3);
    int colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++colons > 2) return fail("too many ':' in a slice");
        advance();
        continue;
      }
      if (parts[static_cast<size_t>(colons)]) return fail("expected ']'");
      FLINT_ASSIGN_OR_RETURN(parts[static_cast<size_t>(colons)], parse_expression(true));
      if (is_op(",")) return fail("tuple subscripts are not supported");
    }
    advance();
    if (colons == 0) {
      if (!parts[0]) return fail_at(at, "expected a subscript");
      auto g = node(ExprKind::kGetItem, at);
      g->children.push_back(std::move(target));
      g->children.push_back(std::move(parts[0]));
      return g;
    }
    auto s = node(ExprKind::kSlice, at);
    s->children.push_back(std::move(target));
    for (auto& p : parts) s->children.push_back(std::move(p));
    return s;
  }

  Status parse_call_args(Expr& e) {
    FLINT_TRY(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) FLINT_TRY(expect_op(","));
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) return fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokType::kName && peek().type == TokType::kOp && peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        FLINT_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        e.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e.kwargs.empty()) return fail("positional argument after keyword argument");
        FLINT_ASSIGN_OR_RETURN(ExprPtr v, parse_expression(true));
        e.children.push_back(std::move(v));
      }
    }
    advance();
    return ok();
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    auto c = node(ExprKind::kCall, cur());
    c->children.push_back(std::move(callee));
    FLINT_TRY(parse_call_args(*c));
    return c;
  }

  // A chain of `| name(args)`; `input` is null inside filter blocks.
  Result<ExprPtr> parse_filters(ExprPtr input, bool first_without_pipe = false) {
    bool first = true;
    while (is_op("|") || (first && first_without_pipe)) {
      if (is_op("|")) advance();
      first = false;
      const Token at = cur();
      FLINT_ASSIGN_OR_RETURN(std::string name, expect_name());
      while (is_op(".")) {
        advance();
        FLINT_ASSIGN_OR_RETURN(std::string part, expect_name());
        name += "." + part;
      }
      auto f = node(ExprKind::kFilter, at);
      f->name = std::move(name);
      f->children.push_back(std::move(input));
      if (is_op("(")) FLINT_TRY(parse_call_args(*f));
      input = std::move(f);
    }
    return input;
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        FLINT_ASSIGN_OR_RETURN(e, parse_filters(std::move(e)));
      } else if (is_name("is")) {
        const Token at = cur();
        advance();
        auto t = node(ExprKind::kTest, at);
        if (is_name("not")) {
          t->negated = true;
          advance();
        }
        FLINT_ASSIGN_OR_RETURN(t->name, expect_name());
        while (is_op(".")) {
          advance();
          FLINT_ASSIGN_OR_RETURN(std::string part, expect_name());
          t->name += "." + part;
        }
        t->children.push_back(std::move(e));
        const Token& c = cur();
        if (is_op("(")) {
          FLINT_TRY(parse_call_args(*t));
        } else if ((c.type == TokType::kName || c.type == TokType::kString ||
                    c.type == TokType::kInt || c.type == TokType::kFloat || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) return fail("you cannot chain multiple tests with is");
          FLINT_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
          FLINT_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
          t->children.push_back(std::move(arg));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        FLINT_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  Error error_;
};

}  // namespace

Result<std::unique_ptr<Template>> parse_template(std::string source) {
  auto t = std::make_unique<Template>();
  t->source = std::move(source);
  FLINT_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(normalize_source(t->source)));
  Parser p(std::move(tokens));
  FLINT_ASSIGN_OR_RETURN(t->body, p.parse_all());
  return t;
}

}  // namespace flint::tokenizer::jinja

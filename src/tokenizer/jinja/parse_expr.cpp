// Jinja expressions, parsed as jinja2's Parser does (see parser.h for the precedence).
#include <fmt/format.h>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/parser_state.h"

namespace lt::jinja {

namespace {
bool is_compare_op(const Token& t) {
  if (t.kind != TokKind::Op) return false;
  return t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=";
}
}  // namespace

ExprPtr Parser::node(Expr::Kind k, int line) const {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_tuple(bool with_condexpr, bool explicit_parens, std::initializer_list<std::string_view> end_names) {
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  auto at_end = [&] {
    TokKind k = cur().kind;
    if (k == TokKind::VarEnd || k == TokKind::BlockEnd || k == TokKind::Eof || at_op(")")) return true;
    for (std::string_view n : end_names)
      if (at_name(n)) return true;
    return false;
  };
  while (true) {
    if (!args.empty()) expect_op(",");
    if (at_end()) break;
    args.push_back(parse_expression(with_condexpr));
    if (at_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) error(fmt::format("expected an expression, got {}", describe(cur())));
  }
  ExprPtr t = node(Expr::Kind::Tuple, line);
  t->items = std::move(args);
  return t;
}

ExprPtr Parser::parse_condexpr() {
  ExprPtr e = parse_or();
  while (at_name("if")) {
    const int line = next().line;
    ExprPtr c = node(Expr::Kind::Cond, line);
    c->a = std::move(e);
    c->b = parse_or();
    if (skip_name("else")) c->c = parse_condexpr();
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (at_name("or")) {
    ExprPtr b = node(Expr::Kind::Binary, next().line);
    b->name = "or";
    b->a = std::move(left);
    b->b = parse_and();
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (at_name("and")) {
    ExprPtr b = node(Expr::Kind::Binary, next().line);
    b->name = "and";
    b->a = std::move(left);
    b->b = parse_not();
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (!at_name("not")) return parse_compare();
  DepthGuard guard(*this);
  ExprPtr u = node(Expr::Kind::Unary, next().line);
  u->name = "not";
  u->a = parse_not();
  return u;
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  ExprPtr c = node(Expr::Kind::Compare, line);
  while (true) {
    if (is_compare_op(cur())) {
      c->ops.push_back(next().text);
    } else if (at_name("in")) {
      next();
      c->ops.push_back("in");
    } else if (at_name("not") && peek().kind == TokKind::Name && peek().text == "in") {
      next();
      next();
      c->ops.push_back("notin");
    } else {
      break;
    }
    c->items.push_back(parse_math1());
  }
  if (c->ops.empty()) return first;
  c->items.insert(c->items.begin(), std::move(first));
  return c;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (at_op("+") || at_op("-")) {
    ExprPtr b = node(Expr::Kind::Binary, cur().line);
    b->name = next().text;
    b->a = std::move(left);
    b->b = parse_concat();
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  ExprPtr left = parse_math2();
  while (at_op("~")) {
    ExprPtr b = node(Expr::Kind::Binary, next().line);
    b->name = "~";
    b->a = std::move(left);
    b->b = parse_math2();
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    ExprPtr b = node(Expr::Kind::Binary, cur().line);
    b->name = next().text;
    b->a = std::move(left);
    b->b = parse_pow();
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (at_op("**")) {
    ExprPtr b = node(Expr::Kind::Binary, next().line);
    b->name = "**";
    b->a = std::move(left);
    b->b = parse_unary(true);
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr n;
  if (at_op("-") || at_op("+")) {
    n = node(Expr::Kind::Unary, cur().line);
    n->name = next().text;
    n->a = parse_unary(false);
  } else {
    n = parse_primary();
  }
  n = parse_postfix(std::move(n));
  return with_filter ? parse_filter_expr(std::move(n)) : std::move(n);
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  if (t.kind == TokKind::Name) {
    ExprPtr n = node(Expr::Kind::Const, t.line);
    if (t.text == "true" || t.text == "True") n->value = true;
    else if (t.text == "false" || t.text == "False") n->value = false;
    else if (t.text == "none" || t.text == "None") n->value = None{};
    else {
      n->kind = Expr::Kind::Name;
      n->name = t.text;
    }
    next();
    return n;
  }
  if (t.kind == TokKind::String) {
    ExprPtr n = node(Expr::Kind::Const, t.line);
    std::string s;
    while (cur().kind == TokKind::String) s += next().text;  // adjacent literals join
    n->value = std::move(s);
    return n;
  }
  if (t.kind == TokKind::Int || t.kind == TokKind::Float) {
    ExprPtr n = node(Expr::Kind::Const, t.line);
    n->value = t.kind == TokKind::Int ? Value(t.ival) : Value(t.fval);
    next();
    return n;
  }
  if (at_op("(")) {
    next();
    ExprPtr n = parse_tuple(true, true);
    expect_op(")");
    return n;
  }
  if (at_op("[") || at_op("{")) return parse_list_or_dict();
  error(fmt::format("unexpected {}", describe(t)));
}

ExprPtr Parser::parse_list_or_dict() {
  const bool list = at_op("[");
  ExprPtr n = node(list ? Expr::Kind::List : Expr::Kind::Dict, next().line);
  const char* close = list ? "]" : "}";
  while (!at_op(close)) {
    if (!n->items.empty()) {
      expect_op(",");
      if (at_op(close)) break;  // trailing comma
    }
    n->items.push_back(parse_expression());
    if (!list) {
      expect_op(":");
      n->items.push_back(parse_expression());
    }
  }
  expect_op(close);
  return n;
}

ExprPtr Parser::parse_postfix(ExprPtr n) {
  while (true) {
    if (at_op(".") || at_op("[")) {
      n = parse_subscript(std::move(n));
    } else if (at_op("(")) {
      ExprPtr c = node(Expr::Kind::Call, cur().line);
      c->a = std::move(n);
      parse_call_args(c->items, c->kwargs);
      n = std::move(c);
    } else {
      return n;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr n) {
  while (true) {
    if (at_op("|")) {
      n = parse_filter(std::move(n));
    } else if (at_name("is")) {
      n = parse_test(std::move(n));
    } else if (at_op("(")) {
      ExprPtr c = node(Expr::Kind::Call, cur().line);
      c->a = std::move(n);
      parse_call_args(c->items, c->kwargs);
      n = std::move(c);
    } else {
      return n;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj) {
  const int line = cur().line;
  if (skip_op(".")) {
    if (cur().kind == TokKind::Name) {
      ExprPtr g = node(Expr::Kind::GetAttr, line);
      g->a = std::move(obj);
      g->name = next().text;
      return g;
    }
    if (cur().kind != TokKind::Int) error(fmt::format("expected a name after '.', got {}", describe(cur())));
    ExprPtr g = node(Expr::Kind::GetItem, line);
    g->a = std::move(obj);
    g->b = node(Expr::Kind::Const, line);
    g->b->value = next().ival;
    return g;
  }
  expect_op("[");
  std::vector<ExprPtr> args;
  while (!at_op("]")) {
    if (!args.empty()) {
      expect_op(",");
      if (at_op("]")) break;
    }
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.empty()) error("expected a subscript inside []");
  ExprPtr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    key = node(Expr::Kind::Tuple, line);
    key->items = std::move(args);
  }
  if (key->kind == Expr::Kind::Slice) {
    key->a = std::move(obj);
    return key;
  }
  ExprPtr g = node(Expr::Kind::GetItem, line);
  g->a = std::move(obj);
  g->b = std::move(key);
  return g;
}

// One subscript: an expression, or a slice start:stop:step (its object is set by the caller).
ExprPtr Parser::parse_subscribed() {
  const int line = cur().line;
  ExprPtr start;
  if (!at_op(":")) {
    start = parse_expression();
    if (!at_op(":")) return start;
  }
  next();  // ':'
  ExprPtr s = node(Expr::Kind::Slice, line);
  s->items.push_back(std::move(start));
  auto optional_expr = [&]() -> ExprPtr {
    if (at_op("]") || at_op(",") || at_op(":")) return nullptr;
    return parse_expression();
  };
  s->items.push_back(optional_expr());
  s->items.push_back(skip_op(":") ? optional_expr() : nullptr);
  return s;
}

void Parser::parse_call_args(std::vector<ExprPtr>& pos, KwArgs& kw) {
  expect_op("(");
  bool first = true;
  while (!at_op(")")) {
    if (!first) {
      expect_op(",");
      if (at_op(")")) break;
    }
    first = false;
    if (at_op("*") || at_op("**")) error("*args and **kwargs in calls are not supported");
    if (cur().kind == TokKind::Name && peek().kind == TokKind::Op && peek().text == "=") {
      std::string key = next().text;
      next();
      kw.emplace_back(std::move(key), parse_expression());
    } else {
      if (!kw.empty()) error("a positional argument follows a keyword argument");
      pos.push_back(parse_expression());
    }
  }
  expect_op(")");
}

ExprPtr Parser::parse_filter(ExprPtr input) {
  if (input) expect_op("|");
  const int line = cur().line;
  std::string name = expect_name("a filter name");
  while (at_op(".") && peek().kind == TokKind::Name) {
    next();
    name += "." + next().text;
  }
  if (!is_known_filter(name)) throw Failure(fmt::format("no filter named '{}' (not supported)", name), line);
  ExprPtr f = node(Expr::Kind::Filter, line);
  f->a = std::move(input);
  f->name = std::move(name);
  if (at_op("(")) parse_call_args(f->items, f->kwargs);
  return f;
}

ExprPtr Parser::parse_test(ExprPtr input) {
  const int line = next().line;  // 'is'
  ExprPtr t = node(Expr::Kind::Test, line);
  t->negate = skip_name("not");
  t->name = expect_name("a test name");
  if (!is_known_test(t->name)) throw Failure(fmt::format("no test named '{}' (not supported)", t->name), line);
  t->a = std::move(input);
  const Token& c = cur();
  const bool arg_start = c.kind == TokKind::Name || c.kind == TokKind::String || c.kind == TokKind::Int ||
                         c.kind == TokKind::Float || at_op("[") || at_op("{");
  if (at_op("(")) {
    parse_call_args(t->items, t->kwargs);
  } else if (arg_start && !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) error("you cannot chain multiple tests with is");
    t->items.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace lt::jinja

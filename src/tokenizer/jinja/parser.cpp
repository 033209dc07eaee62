// Jinja statements (tags) and the token-stream helpers; expressions are in parse_expr.cpp.
#include "tokenizer/jinja/parser.h"

#include <fmt/format.h>

#include "tokenizer/jinja/parser_state.h"

namespace lt::jinja {

bool Parser::skip_op(std::string_view op) {
  if (!at_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view n) {
  if (!at_name(n)) return false;
  next();
  return true;
}

void Parser::expect_op(std::string_view op) {
  if (!skip_op(op)) error(fmt::format("expected '{}', got {}", op, describe(cur())));
}

std::string Parser::expect_name(std::string_view what) {
  if (cur().kind != TokKind::Name) error(fmt::format("expected {}, got {}", what, describe(cur())));
  return next().text;
}

void Parser::expect_block_end() {
  if (cur().kind != TokKind::BlockEnd) error(fmt::format("expected the end of the tag (%}}), got {}", describe(cur())));
  next();
}

std::string Parser::describe(const Token& t) const {
  switch (t.kind) {
    case TokKind::Eof: return "the end of the template";
    case TokKind::BlockEnd: return "the end of the tag (%})";
    case TokKind::VarEnd: return "the end of the print statement (}})";
    case TokKind::String: return "a string";
    case TokKind::Int: case TokKind::Float: return fmt::format("the number {}", t.text);
    case TokKind::Text: return "template text";
    default: return "'" + t.text + "'";
  }
}

void Parser::error(const std::string& msg) const { throw Failure(msg, cur().line); }

Parser::DepthGuard::DepthGuard(Parser& parser) : p(parser) {
  if (++p.depth_ > kMaxDepth) {
    --p.depth_;
    p.error(fmt::format("the template nests deeper than {} levels", kMaxDepth));
  }
}

Body Parser::parse_template() { return subparse({}); }

// Statements up to one of `end_names` (left at that name, after its {%), or to the end.
Body Parser::subparse(std::initializer_list<std::string_view> end_names) {
  DepthGuard guard(*this);
  Body body;
  while (cur().kind != TokKind::Eof) {
    const Token& t = cur();
    if (t.kind == TokKind::Text) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::Text;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.kind == TokKind::VarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::Output;
      s->line = next().line;
      s->expr = parse_tuple();
      if (cur().kind != TokKind::VarEnd) error(fmt::format("expected the end of the print statement (}}}}), got {}", describe(cur())));
      next();
      body.push_back(std::move(s));
    } else if (t.kind == TokKind::BlockBegin) {
      next();
      for (std::string_view n : end_names)
        if (at_name(n)) return body;
      body.push_back(parse_statement());
    } else {
      error(fmt::format("unexpected {}", describe(t)));
    }
  }
  if (end_names.size() > 0) {
    std::string want;
    for (std::string_view n : end_names) want += (want.empty() ? "'" : " or '") + std::string(n) + "'";
    error(fmt::format("unexpected end of template: expected {}", want));
  }
  return body;
}

StmtPtr Parser::parse_statement() {
  if (cur().kind != TokKind::Name) error(fmt::format("expected a tag name, got {}", describe(cur())));
  const std::string name = cur().text;
  if (name == "if") return parse_if();
  if (name == "for") return parse_for();
  if (name == "set") return parse_set();
  if (name == "macro") return parse_macro();
  if (name == "call") return parse_call_block();
  if (name == "filter") return parse_filter_block();
  if (name == "with") return parse_with();
  if (name == "break" || name == "continue" || name == "generation") {
    auto s = std::make_unique<Stmt>();
    s->line = next().line;
    s->kind = name == "break" ? Stmt::Kind::Break : name == "continue" ? Stmt::Kind::Continue : Stmt::Kind::Generation;
    if (name != "generation" && loop_depth_ == 0) error(fmt::format("'{}' outside of a for loop", name));
    expect_block_end();
    if (name == "generation") {
      s->body = subparse({"endgeneration"});
      end_tag("endgeneration");
    }
    return s;
  }
  static const char* unsupported[] = {"include", "import", "from", "extends", "block", "autoescape", "do", "trans", "print"};
  for (const char* u : unsupported)
    if (name == u) error(fmt::format("the '{}' tag is not supported in chat templates", name));
  if (name.rfind("end", 0) == 0 || name == "elif" || name == "else")
    error(fmt::format("unexpected '{}': no open tag it closes", name));
  error(fmt::format("unknown tag '{}'", name));
}

void Parser::end_tag(std::string_view name) {
  if (!skip_name(name)) error(fmt::format("expected '{}', got {}", name, describe(cur())));
  expect_block_end();
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::If;
  s->line = next().line;
  ExprPtr cond = parse_tuple(false);
  while (true) {
    expect_block_end();
    Body body = subparse({"elif", "else", "endif"});
    s->branches.emplace_back(std::move(cond), std::move(body));
    if (skip_name("elif")) {
      cond = parse_tuple(false);
      continue;
    }
    if (skip_name("else")) {
      expect_block_end();
      s->branches.emplace_back(nullptr, subparse({"endif"}));
    }
    end_tag("endif");
    return s;
  }
}

std::vector<std::string> Parser::parse_targets(std::string_view what) {
  std::vector<std::string> names;
  const bool paren = skip_op("(");
  do {
    names.push_back(expect_name(what));
  } while (skip_op(","));
  if (paren) expect_op(")");
  return names;
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::For;
  s->line = next().line;
  s->targets = parse_targets("a loop variable name");
  if (!skip_name("in")) error(fmt::format("expected 'in' in the for tag, got {}", describe(cur())));
  s->expr = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) s->cond = parse_expression();
  if (at_name("recursive")) error("recursive for loops are not supported");
  expect_block_end();
  ++loop_depth_;
  s->body = subparse({"endfor", "else"});
  --loop_depth_;
  if (skip_name("else")) {
    expect_block_end();
    s->else_body = subparse({"endfor"});
  }
  end_tag("endfor");
  return s;
}

StmtPtr Parser::parse_set() {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::Set;
  s->line = next().line;
  if (cur().kind == TokKind::Name && peek().kind == TokKind::Op && peek().text == ".") {
    s->targets.push_back(next().text);  // ns.attr = value
    next();
    s->attr = expect_name("an attribute name");
  } else {
    s->targets = parse_targets("a variable name");
  }
  if (skip_op("=")) {
    s->expr = parse_tuple();
    expect_block_end();
    return s;
  }
  if (s->targets.size() != 1 || !s->attr.empty()) error("a block set ({% set x %}...{% endset %}) takes one name");
  s->kind = Stmt::Kind::SetBlock;
  while (at_op("|")) {
    next();
    s->filters.push_back(parse_filter(nullptr));
  }
  expect_block_end();
  s->body = subparse({"endset"});
  end_tag("endset");
  return s;
}

// (name [= default], ...) of a macro or a call block.
void Parser::parse_params(Stmt& s) {
  expect_op("(");
  while (!at_op(")")) {
    if (!s.params.empty()) expect_op(",");
    s.params.push_back(expect_name("a parameter name"));
    s.defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::Macro;
  s->line = next().line;
  s->name = expect_name("a macro name");
  parse_params(*s);
  expect_block_end();
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->body = subparse({"endmacro"});
  loop_depth_ = saved;
  end_tag("endmacro");
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::CallBlock;
  s->line = next().line;
  if (at_op("(")) parse_params(*s);
  s->expr = parse_expression();
  if (s->expr->kind != Expr::Kind::Call) error("expected a macro call in the call tag");
  expect_block_end();
  s->body = subparse({"endcall"});
  end_tag("endcall");
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::FilterBlock;
  s->line = next().line;
  s->filters.push_back(parse_filter(nullptr));
  while (at_op("|")) {
    next();
    s->filters.push_back(parse_filter(nullptr));
  }
  expect_block_end();
  s->body = subparse({"endfilter"});
  end_tag("endfilter");
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::With;
  s->line = next().line;
  while (cur().kind != TokKind::BlockEnd) {
    if (!s->targets.empty()) expect_op(",");
    s->targets.push_back(expect_name("a variable name"));
    expect_op("=");
    s->values.push_back(parse_expression());
  }
  expect_block_end();
  s->body = subparse({"endwith"});
  end_tag("endwith");
  return s;
}

Body parse(std::string_view source) { return Parser(lex(source)).parse_template(); }

}  // namespace lt::jinja

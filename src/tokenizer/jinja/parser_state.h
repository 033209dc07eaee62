// The parser's state shared by the statement parser (parser.cpp) and the expression parser
// (parse_expr.cpp): the token stream with its look-ahead helpers.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace lt::jinja {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Body parse_template();

  // Expressions (parse_expr.cpp), jinja2's Parser methods of the same names.
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_tuple(bool with_condexpr = true, bool explicit_parens = false,
                      std::initializer_list<std::string_view> end_names = {});
  ExprPtr parse_filter(ExprPtr input);  // at '|' (or the filter name when input is null)
  void parse_call_args(std::vector<ExprPtr>& pos, KwArgs& kw);  // at '('

 private:
  std::vector<Token> toks_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;  // nesting of expressions and blocks being parsed (bounded: the parser recurses)

 public:
  // Bounds the parser's recursion: a template nesting deeper than kMaxDepth is refused (a
  // hostile "((((((..." must not overflow the stack).
  static constexpr int kMaxDepth = 200;
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser);
    ~DepthGuard() { --p.depth_; }
  };

 private:

  // Statements (parser.cpp).
  Body subparse(std::initializer_list<std::string_view> end_names);
  StmtPtr parse_statement();
  StmtPtr parse_if();
  StmtPtr parse_for();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  std::vector<std::string> parse_targets(std::string_view what);
  void parse_params(Stmt& s);
  void end_tag(std::string_view name);

  // Expressions (parse_expr.cpp).
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_test(ExprPtr node);
  ExprPtr parse_list_or_dict();

 public:
  // The token stream.
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  Token next() { return i_ + 1 < toks_.size() ? toks_[i_++] : toks_[i_]; }
  bool at_op(std::string_view op) const { return cur().kind == TokKind::Op && cur().text == op; }
  bool at_name(std::string_view n) const { return cur().kind == TokKind::Name && cur().text == n; }
  bool skip_op(std::string_view op);
  bool skip_name(std::string_view n);
  void expect_op(std::string_view op);
  std::string expect_name(std::string_view what);
  void expect_block_end();
  std::string describe(const Token& t) const;  // "'x'", "end of statement block", ...
  [[noreturn]] void error(const std::string& msg) const;
  ExprPtr node(Expr::Kind k, int line) const;
};

}  // namespace lt::jinja

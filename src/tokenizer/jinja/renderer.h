// The renderer's state, shared by the statement runner (render.cpp) and the expression evaluator
// (eval.cpp): the scope chain, the output buffer and the generation-span tracking.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>

#include "tokenizer/jinja/render.h"

namespace lt::jinja {

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
  std::unordered_map<std::string, Value> vars;
  ScopePtr parent;
  explicit Scope(ScopePtr p = nullptr) : parent(std::move(p)) {}
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

class Renderer {
 public:
  explicit Renderer(std::vector<std::pair<size_t, size_t>>* generation) : generation_(generation) {}

  enum class Flow { Normal, Break, Continue };
  Flow exec_body(const Body& body, const ScopePtr& scope);
  std::string* out = nullptr;

  Value eval(const Expr& e, const ScopePtr& scope);

 private:
  std::vector<std::pair<size_t, size_t>>* generation_;
  int capture_depth_ = 0;  // > 0 while rendering into a macro / set block / filter block buffer
  int call_depth_ = 0;     // macro recursion guard
  int64_t steps_ = 0;      // statements and loop iterations run so far (ops.h: Limits::steps)
  void step();

  // render.cpp
  Flow exec(const Stmt& s, const ScopePtr& scope);
  Flow exec_if(const Stmt& s, const ScopePtr& scope);
  void exec_for(const Stmt& s, const ScopePtr& scope);
  void exec_set(const Stmt& s, const ScopePtr& scope);
  void exec_call_block(const Stmt& s, const ScopePtr& scope);
  void exec_generation(const Stmt& s, const ScopePtr& scope);
  std::string capture(const Body& body, const ScopePtr& scope);
  Value make_macro(const Stmt& s, const ScopePtr& scope);
  Value make_caller(const Stmt& s, const ScopePtr& scope);
  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope);
  void bind(Scope& scope, const std::vector<std::string>& names, const Value& v);

  // eval.cpp
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope, const Value* caller);
  Args eval_args(const std::vector<ExprPtr>& pos, const KwArgs& kw, const ScopePtr& scope);
  Value eval_compare(const Expr& e, const ScopePtr& scope);

 public:
  Value eval_filter(const Expr& f, Value input, const ScopePtr& scope);
};

}  // namespace lt::jinja

// Expression evaluation of the renderer (see renderer.h): names through the scope chain,
// operators with short-circuit and / or, chained comparisons, calls, filters and tests. A failure
// without a line gets the line of the expression where it happened.
#include <fmt/format.h>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/renderer.h"

namespace lt::jinja {

Value Renderer::eval(const Expr& e, const ScopePtr& scope) {
  try {
    return eval_inner(e, scope);
  } catch (Failure& f) {
    if (f.line == 0) f.line = e.line;
    throw;
  }
}

Args Renderer::eval_args(const std::vector<ExprPtr>& pos, const KwArgs& kw, const ScopePtr& scope) {
  Args a;
  for (const ExprPtr& p : pos) a.pos.push_back(eval(*p, scope));
  for (const auto& [k, v] : kw) a.kw.emplace_back(k, eval(*v, scope));
  return a;
}

Value Renderer::eval_filter(const Expr& f, Value input, const ScopePtr& scope) {
  Args a = eval_args(f.items, f.kwargs, scope);
  return apply_filter(f.name, input, a);
}

Value Renderer::eval_call(const Expr& e, const ScopePtr& scope, const Value* caller) {
  Value fn = eval(*e.a, scope);
  Args a = eval_args(e.items, e.kwargs, scope);
  if (caller) a.kw.emplace_back("caller", *caller);
  if (fn.is_undefined()) {
    fn.require_defined();
  }
  if (!fn.is_func()) raise(fmt::format("'{}' object is not callable", fn.type_name()));
  return fn.as_func()->call(a);
}

Value Renderer::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.items[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i + 1], scope);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = equals(left, right);
    else if (op == "!=") ok = !equals(left, right);
    else if (op == "in") ok = contains(right, left);
    else if (op == "notin") ok = !contains(right, left);
    else {
      int c = compare(left, right, op);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

Value Renderer::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case Expr::Kind::Const: return e.value;
    case Expr::Kind::Name: {
      const Value* v = scope->lookup(e.name);
      return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      std::vector<Value> items;
      for (const ExprPtr& x : e.items) items.push_back(eval(*x, scope));
      return make_list(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::Dict: {
      auto d = std::make_shared<DictObj>();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], scope);
        if (!k.is_string()) raise(fmt::format("dict literal keys must be strings here, got {}", k.type_name()));
        d->set(k.as_string(), eval(*e.items[i + 1], scope));
      }
      return Value(std::move(d));
    }
    case Expr::Kind::GetAttr: return get_attr(eval(*e.a, scope), e.name);
    case Expr::Kind::GetItem: return get_item(eval(*e.a, scope), eval(*e.b, scope));
    case Expr::Kind::Slice: {
      // x[a:b, c] parses as x[(slice, c)], a subscript no list, string or dict accepts (Python:
      // "indices must be integers or slices, not tuple"); its slice has no object (found by the fuzzer)
      if (!e.a) raise("a slice inside a tuple subscript (x[a:b, c]) is not a valid index: indices must be integers or slices, not tuple");
      auto opt = [&](const ExprPtr& x) { return x ? eval(*x, scope) : Value(None{}); };
      return get_slice(eval(*e.a, scope), opt(e.items[0]), opt(e.items[1]), opt(e.items[2]));
    }
    case Expr::Kind::Call: return eval_call(e, scope, nullptr);
    case Expr::Kind::Filter: return eval_filter(e, eval(*e.a, scope), scope);
    case Expr::Kind::Test: {
      Value v = eval(*e.a, scope);
      Args a = eval_args(e.items, e.kwargs, scope);
      return apply_test(e.name, v, a) != e.negate;
    }
    case Expr::Kind::Unary: {
      Value v = eval(*e.a, scope);
      if (e.name == "not") return !v.truthy();
      return unary_minus(v, e.name == "-");
    }
    case Expr::Kind::Binary: {
      Value a = eval(*e.a, scope);
      if (e.name == "and") return a.truthy() ? eval(*e.b, scope) : a;
      if (e.name == "or") return a.truthy() ? a : eval(*e.b, scope);
      Value b = eval(*e.b, scope);
      if (e.name != "~") {
        a.require_defined();
        b.require_defined();
      }
      return binary_op(e.name, a, b);
    }
    case Expr::Kind::Compare: return eval_compare(e, scope);
    case Expr::Kind::Cond:
      if (eval(*e.b, scope).truthy()) return eval(*e.a, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined(fmt::format("the inline if-expression on line {} evaluated to false and no else "
                                          "section was defined", e.line));
  }
  raise("unknown expression");
}

}  // namespace lt::jinja

// Statement execution of the renderer (see render.h for the scoping rules): output, if, for with
// the loop object, set, macros and call blocks, filter / set blocks, with, loop controls and
// transformers' {% generation %} spans.
#include "tokenizer/jinja/render.h"

#include <fmt/format.h>

#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/renderer.h"

namespace lt::jinja {

namespace {

constexpr int kMaxCallDepth = 200;

// The `loop` variable of one iteration.
Value loop_object(const std::vector<Value>& items, size_t i) {
  const size_t n = items.size();
  auto d = std::make_shared<DictObj>();
  d->items = {{"index", Value(i + 1)},
              {"index0", Value(i)},
              {"revindex", Value(n - i)},
              {"revindex0", Value(n - i - 1)},
              {"first", Value(i == 0)},
              {"last", Value(i + 1 == n)},
              {"length", Value(n)},
              {"depth", Value(1)},
              {"depth0", Value(0)},
              {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
              {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")}};
  d->set("cycle", make_func("loop.cycle", [i](const Args& a) {
           if (a.pos.empty()) raise("no items for cycling given");
           return a.pos[i % a.pos.size()];
         }));
  return Value(std::move(d));
}

}  // namespace

void Renderer::step() {
  if (++steps_ > limits().steps)
    raise(fmt::format("the template ran more than {} statements and loop iterations; a chat template walks "
                      "the messages in far fewer (does a loop run over a huge range?)",
                      limits().steps));
}

Renderer::Flow Renderer::exec_body(const Body& body, const ScopePtr& scope) {
  for (const StmtPtr& s : body) {
    Flow f = exec(*s, scope);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec(const Stmt& s, const ScopePtr& scope) {
  // Limits::text stops a template that loops its output up (each statement adds one value, itself
  // bounded by the repeat limit)
  if (out->size() > size_t(limits().text)) raise(fmt::format("the rendered text exceeds {} bytes", limits().text));
  try {
    step();
    switch (s.kind) {
      case Stmt::Kind::Text: *out += s.text; break;
      case Stmt::Kind::Output: *out += eval(*s.expr, scope).str(); break;
      case Stmt::Kind::If: return exec_if(s, scope);
      case Stmt::Kind::For: exec_for(s, scope); break;
      case Stmt::Kind::Set: exec_set(s, scope); break;
      case Stmt::Kind::SetBlock:
        scope->vars[s.targets[0]] = apply_filters(s.filters, Value(capture(s.body, scope)), scope);
        break;
      case Stmt::Kind::Macro: scope->vars[s.name] = make_macro(s, scope); break;
      case Stmt::Kind::CallBlock: exec_call_block(s, scope); break;
      case Stmt::Kind::FilterBlock: *out += apply_filters(s.filters, Value(capture(s.body, scope)), scope).str(); break;
      case Stmt::Kind::With: {
        auto inner = std::make_shared<Scope>(scope);
        for (size_t i = 0; i < s.targets.size(); ++i) inner->vars[s.targets[i]] = eval(*s.values[i], scope);
        return exec_body(s.body, inner);
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
      case Stmt::Kind::Generation: exec_generation(s, scope); break;
    }
  } catch (Failure& f) {
    if (f.line == 0) f.line = s.line;
    throw;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_if(const Stmt& s, const ScopePtr& scope) {
  for (const auto& [cond, body] : s.branches)
    if (!cond || eval(*cond, scope).truthy()) return exec_body(body, scope);
  return Flow::Normal;
}

void Renderer::bind(Scope& scope, const std::vector<std::string>& names, const Value& v) {
  if (names.size() == 1) {
    scope.vars[names[0]] = v;
    return;
  }
  std::vector<Value> parts = iterate(v);
  if (parts.size() != names.size())
    raise(fmt::format("{} values to unpack (expected {}, got {})", parts.size() > names.size() ? "too many" : "not enough",
                      names.size(), parts.size()));
  for (size_t i = 0; i < names.size(); ++i) scope.vars[names[i]] = parts[i];
}

void Renderer::exec_for(const Stmt& s, const ScopePtr& scope) {
  std::vector<Value> items = iterate(eval(*s.expr, scope));
  if (s.cond) {  // the loop filter sees the loop variables, not `loop`
    std::vector<Value> kept;
    for (const Value& x : items) {
      step();
      auto probe = std::make_shared<Scope>(scope);
      bind(*probe, s.targets, x);
      if (eval(*s.cond, probe).truthy()) kept.push_back(x);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, scope);
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    auto inner = std::make_shared<Scope>(scope);  // each iteration starts from the enclosing scope
    bind(*inner, s.targets, items[i]);
    inner->vars["loop"] = loop_object(items, i);
    if (exec_body(s.body, inner) == Flow::Break) break;
  }
}

void Renderer::exec_set(const Stmt& s, const ScopePtr& scope) {
  Value v = eval(*s.expr, scope);
  if (s.attr.empty()) {
    bind(*scope, s.targets, v);
    return;
  }
  const Value* ns = scope->lookup(s.targets[0]);
  if (!ns || !ns->is_dict() || !ns->as_dict()->is_namespace)
    raise(fmt::format("cannot assign attribute on non-namespace object '{}'", s.targets[0]));
  if (!s.attr.empty() && s.attr[0] == '_')
    raise(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'", s.attr));
  ns->as_dict()->set(s.attr, std::move(v));
}

std::string Renderer::capture(const Body& body, const ScopePtr& scope) {
  std::string buf;
  std::string* saved = out;
  out = &buf;
  ++capture_depth_;
  try {
    exec_body(body, scope);
  } catch (...) {
    out = saved;
    --capture_depth_;
    throw;
  }
  out = saved;
  --capture_depth_;
  return buf;
}

Value Renderer::apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope) {
  for (const ExprPtr& f : filters) v = eval_filter(*f, std::move(v), scope);
  return v;
}

// A macro: a callable that renders its body in a scope beneath the one it was defined in.
Value Renderer::make_macro(const Stmt& s, const ScopePtr& scope) {
  const Stmt* def = &s;
  std::weak_ptr<Scope> weak = scope;  // the defining scope holds the macro: no reference cycle
  return make_func(s.name, [this, def, weak](const Args& a) -> Value {
    ScopePtr defining = weak.lock();
    if (!defining) raise(fmt::format("macro '{}' called after its scope ended", def->name));
    if (call_depth_ >= kMaxCallDepth) raise(fmt::format("macro '{}': recursion deeper than {} calls", def->name, kMaxCallDepth));
    auto inner = std::make_shared<Scope>(defining);
    std::vector<Value> varargs;
    for (size_t i = 0; i < a.pos.size(); ++i) {
      if (i < def->params.size()) inner->vars[def->params[i]] = a.pos[i];
      else varargs.push_back(a.pos[i]);
    }
    auto kwargs = std::make_shared<DictObj>();
    for (const auto& [k, v] : a.kw) {
      bool is_param = std::find(def->params.begin(), def->params.end(), k) != def->params.end();
      if (is_param || k == "caller") inner->vars[k] = v;
      else kwargs->set(k, v);
    }
    for (size_t i = 0; i < def->params.size(); ++i) {
      if (inner->vars.count(def->params[i])) continue;
      inner->vars[def->params[i]] = def->defaults[i] ? eval(*def->defaults[i], inner)
                                                     : Value::undefined(fmt::format("'{}' is undefined", def->params[i]));
    }
    inner->vars["varargs"] = make_list(std::move(varargs));
    inner->vars["kwargs"] = Value(std::move(kwargs));
    ++call_depth_;
    struct Guard { int& d; ~Guard() { --d; } } guard{call_depth_};
    return Value(capture(def->body, inner));
  });
}

// `caller` of a call block: renders the block's body with its parameters bound.
Value Renderer::make_caller(const Stmt& s, const ScopePtr& scope) {
  const Stmt* def = &s;
  return make_func("caller", [this, def, scope](const Args& a) -> Value {
    auto inner = std::make_shared<Scope>(scope);
    for (size_t i = 0; i < def->params.size(); ++i) {
      const Value* v = a.get(i, def->params[i]);
      inner->vars[def->params[i]] = v ? *v : def->defaults[i] ? eval(*def->defaults[i], inner)
                                                               : Value::undefined(fmt::format("'{}' is undefined", def->params[i]));
    }
    return Value(capture(def->body, inner));
  });
}

void Renderer::exec_call_block(const Stmt& s, const ScopePtr& scope) {
  Value caller = make_caller(s, scope);
  *out += eval_call(*s.expr, scope, &caller).str();
}

void Renderer::exec_generation(const Stmt& s, const ScopePtr& scope) {
  const size_t begin = out->size();
  exec_body(s.body, scope);
  if (capture_depth_ == 0 && generation_) generation_->emplace_back(begin, out->size());
}

Rendered render(const Body& body, const DictObj& context) {
  auto globals = std::make_shared<Scope>();
  const DictPtr g = make_globals();
  for (const auto& [k, v] : g->items) globals->vars[k] = v;
  auto ctx = std::make_shared<Scope>(globals);
  for (const auto& [k, v] : context.items) ctx->vars[k] = v;
  auto root = std::make_shared<Scope>(ctx);
  Rendered r;
  Renderer rr(&r.generation);
  rr.out = &r.text;
  rr.exec_body(body, root);
  return r;
}

}  // namespace lt::jinja

// The syntax tree of a parsed Jinja template: expressions and statements, each with the template
// line it came from (for error messages). One generic node per family keeps the parser and the
// renderer short; the fields each kind uses are listed next to it.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace lt::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KwArgs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    Const,    // value
    Name,     // name
    List,     // items
    Tuple,    // items
    Dict,     // items: key, value, key, value, ...
    GetAttr,  // a.name
    GetItem,  // a[b]
    Slice,    // a[items[0]:items[1]:items[2]] (null: omitted)
    Call,     // a(items..., kwargs...)
    Filter,   // a | name(items..., kwargs...); a is null inside a {% filter %} block
    Test,     // a is [not] name(items...)   (negate)
    Unary,    // name in {"-", "+", "not"} applied to a
    Binary,   // a name b, name in {+ - * / // % ** ~ and or}
    Compare,  // items[0] ops[0] items[1] ops[1] items[2] ...  (==, !=, <, <=, >, >=, in, notin)
    Cond,     // a if b else c (c null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;
  KwArgs kwargs;
  ExprPtr a, b, c;
  bool negate = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches: (cond, body)...; else: cond null
    For,          // for targets in expr [if cond] body [else else_body]
    Set,          // set targets = expr, or set targets[0].attr = expr (attr non-empty)
    SetBlock,     // set targets[0] [| filters] body endset
    Macro,        // macro name(params = defaults) body endmacro
    CallBlock,    // call[(params)] expr body endcall: expr is the call, body is caller()
    FilterBlock,  // filter filters body endfilter
    With,         // with targets[i] = values[i] body endwith
    Break,
    Continue,
    Generation,   // generation body endgeneration (transformers' assistant-mask marker)
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr, cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attr;
  Body body, else_body;
  std::string name;                  // Macro
  std::vector<std::string> params;   // Macro, CallBlock
  std::vector<ExprPtr> defaults;     // Macro, CallBlock: one per param, null when none
  std::vector<ExprPtr> filters;      // SetBlock, FilterBlock: Filter nodes with a null input
  std::vector<ExprPtr> values;       // With
};

}  // namespace lt::jinja

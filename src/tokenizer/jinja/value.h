// The values of the Jinja template engine (chat templates): Python's data model as a template sees
// it through jinja2 — undefined, None, bool, int, float, str, list / tuple, dict / namespace and
// callables (macros, builtins, bound methods) — with Python's truthiness, str() / repr(), equality
// and ordering, so that what a template prints matches jinja2 character for character.
// Lists and dicts are shared by reference as in Python; only a namespace() is ever changed in
// place (transformers renders in jinja2's immutable sandbox).
// Errors raised while evaluating are jinja::Failure (a message; the renderer adds the line).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace lt::jinja {

// A template error before it is placed: `line` 0 until the renderer or parser sets it.
struct Failure : std::runtime_error {
  int line;
  Failure(const std::string& msg, int l = 0) : std::runtime_error(msg), line(l) {}
};
[[noreturn]] void raise(const std::string& msg);

struct Value;
struct ListObj;
struct DictObj;
struct FuncObj;
using ListPtr = std::shared_ptr<ListObj>;
using DictPtr = std::shared_ptr<DictObj>;
using FuncPtr = std::shared_ptr<const FuncObj>;

// jinja2's Undefined; `what` is the message using it gives ("'x' is undefined").
struct Undefined {
  std::string what;
};
struct None {};

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr, DictPtr, FuncPtr> v;

  Value() : v(Undefined{}) {}
  Value(None) : v(None{}) {}
  Value(bool b) : v(b) {}
  Value(int i) : v(int64_t(i)) {}
  Value(int64_t i) : v(i) {}
  Value(size_t i) : v(int64_t(i)) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(std::string_view s) : v(std::string(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(ListPtr l) : v(std::move(l)) {}
  Value(DictPtr d) : v(std::move(d)) {}
  Value(FuncPtr f) : v(std::move(f)) {}
  static Value undefined(std::string what) { Value x; x.v = Undefined{std::move(what)}; return x; }

  bool is_undefined() const { return v.index() == 0; }
  bool is_none() const { return v.index() == 1; }
  bool is_bool() const { return v.index() == 2; }
  bool is_int() const { return v.index() == 3; }
  bool is_float() const { return v.index() == 4; }
  bool is_number() const { return v.index() >= 2 && v.index() <= 4; }  // bool is an int in Python
  bool is_string() const { return v.index() == 5; }
  bool is_list() const { return v.index() == 6; }
  bool is_dict() const { return v.index() == 7; }
  bool is_func() const { return v.index() == 8; }

  // The accessors raise a template error (never std::bad_variant_access) on a value of another
  // type: "'x' is undefined", or "'list' object cannot be interpreted as an integer".
  bool as_bool() const { return get<bool>("a bool"); }
  int64_t as_int() const;  // bool or int
  double as_double() const;  // bool, int or float
  const std::string& as_string() const { return get<std::string>("a string"); }
  const ListPtr& as_list() const { return get<ListPtr>("a list"); }
  const DictPtr& as_dict() const { return get<DictPtr>("a dict"); }
  const FuncPtr& as_func() const { return get<FuncPtr>("a function"); }
  const std::string& undefined_what() const { return get<Undefined>("undefined").what; }

  bool truthy() const;
  std::string str() const;   // Python str(); '' for undefined
  std::string repr() const;  // Python repr()
  const char* type_name() const;  // Python's type name for messages: 'str', 'int', 'dict', ...
  // Raises "'x' is undefined" when this is undefined (arithmetic, calls and attributes on it).
  void require_defined() const;

 private:
  template <class T>
  const T& get(const char* want) const {
    if (const T* p = std::get_if<T>(&v)) return *p;
    wrong_type(want);
  }
  [[noreturn]] void wrong_type(const char* want) const;
};

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;  // printed (a, b) rather than [a, b]
};

// A dict in insertion order (Python 3.7+), or a namespace() (the only value set in place).
struct DictObj {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

// Call arguments: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at position `i`, else the keyword `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
  // Raises unless every keyword is one of `names` and there are at most `max_pos` positionals.
  void check(std::string_view fn, size_t max_pos, std::initializer_list<std::string_view> names) const;
};

struct FuncObj {
  std::string name;
  std::function<Value(const Args&)> call;
};

Value make_list(std::vector<Value> items, bool tuple = false);
Value make_dict(std::vector<std::pair<std::string, Value>> items = {});
Value make_func(std::string name, std::function<Value(const Args&)> fn);

// Python ==, and the ordering of < <= > >= (raises TypeError-like Failure across kinds).
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, std::string_view op);  // <0, 0, >0
// Python float repr: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
std::string float_repr(double d);
// Python repr of a str: single quotes unless it holds ' and no ", with escapes.
std::string string_repr(std::string_view s);

}  // namespace lt::jinja

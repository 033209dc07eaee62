// jinja2's built-in tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...), with the
// Python type checks behind them. Declared in builtins.h.
#include <fmt/format.h>

#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/text.h"

namespace lt::jinja {

namespace {

using TestFn = bool (*)(const Value&, const Args&);

const Value& arg0(const Args& a, std::string_view test) {
  if (a.pos.empty()) raise(fmt::format("the test '{}' needs an argument", test));
  return a.pos[0];
}

bool t_defined(const Value& v, const Args&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const Args&) { return v.is_undefined(); }
bool t_none(const Value& v, const Args&) { return v.is_none(); }
bool t_boolean(const Value& v, const Args&) { return v.is_bool(); }
bool t_true(const Value& v, const Args&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, const Args&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, const Args&) { return v.is_int(); }
bool t_float(const Value& v, const Args&) { return v.is_float(); }
bool t_number(const Value& v, const Args&) { return v.is_number(); }
bool t_string(const Value& v, const Args&) { return v.is_string(); }
bool t_mapping(const Value& v, const Args&) { return v.is_dict() && !v.as_dict()->is_namespace; }
bool t_iterable(const Value& v, const Args&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict()->is_namespace) || v.is_undefined();
}
bool t_sequence(const Value& v, const Args& a) { return t_iterable(v, a); }
bool t_callable(const Value& v, const Args&) { return v.is_func(); }
bool t_lower(const Value& v, const Args&) { return text::is_lower_cased(v.str()); }
bool t_upper(const Value& v, const Args&) { return text::is_upper_cased(v.str()); }
bool t_escaped(const Value&, const Args&) { return false; }

int64_t int_of(const Value& v, std::string_view test) {
  if (!v.is_int() && !v.is_bool()) raise(fmt::format("the test '{}' needs an integer, got {}", test, v.type_name()));
  return v.as_int();
}
bool t_odd(const Value& v, const Args&) { return int_of(v, "odd") % 2 != 0; }
bool t_even(const Value& v, const Args&) { return int_of(v, "even") % 2 == 0; }
bool t_divisibleby(const Value& v, const Args& a) {
  return binary_op("%", v, arg0(a, "divisibleby")).as_double() == 0;
}

bool t_eq(const Value& v, const Args& a) { return equals(v, arg0(a, "eq")); }
bool t_ne(const Value& v, const Args& a) { return !equals(v, arg0(a, "ne")); }
bool t_lt(const Value& v, const Args& a) { return compare(v, arg0(a, "lt"), "<") < 0; }
bool t_le(const Value& v, const Args& a) { return compare(v, arg0(a, "le"), "<=") <= 0; }
bool t_gt(const Value& v, const Args& a) { return compare(v, arg0(a, "gt"), ">") > 0; }
bool t_ge(const Value& v, const Args& a) { return compare(v, arg0(a, "ge"), ">=") >= 0; }
bool t_in(const Value& v, const Args& a) { return contains(arg0(a, "in"), v); }

// `is`: identity for containers and callables, equal value and type for scalars.
bool t_sameas(const Value& v, const Args& a) {
  const Value& o = arg0(a, "sameas");
  if (v.v.index() != o.v.index()) return false;
  if (v.is_list()) return v.as_list() == o.as_list();
  if (v.is_dict()) return v.as_dict() == o.as_dict();
  if (v.is_func()) return v.as_func() == o.as_func();
  return equals(v, o);
}

const std::map<std::string_view, TestFn>& tests() {
  static const std::map<std::string_view, TestFn> m = {
      {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
      {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
      {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence},
      {"callable", t_callable}, {"lower", t_lower}, {"upper", t_upper}, {"escaped", t_escaped}, {"odd", t_odd},
      {"even", t_even}, {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
      {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
      {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in},
      {"sameas", t_sameas},
  };
  return m;
}

}  // namespace

bool is_known_test(std::string_view name) { return tests().count(name) > 0; }

bool apply_test(std::string_view name, const Value& v, const Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) raise(fmt::format("no test named '{}'", name));
  return it->second(v, args);
}

}  // namespace lt::jinja

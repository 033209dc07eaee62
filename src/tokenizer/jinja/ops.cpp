// Value operations with jinja2's Python semantics (see ops.h).
#include "tokenizer/jinja/ops.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "tokenizer/jinja/methods.h"
#include "tokenizer/jinja/text.h"

namespace lt::jinja {

namespace {

std::string object_name(const Value& v) { return fmt::format("'{} object'", v.type_name()); }

Value no_attr(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("{} has no attribute '{}'", object_name(obj), name));
}

// Python's index normalization: negative counts from the end; nullopt when out of range.
std::optional<size_t> norm_index(int64_t i, size_t n) {
  if (i < 0) i += int64_t(n);
  if (i < 0 || i >= int64_t(n)) return std::nullopt;
  return size_t(i);
}

[[noreturn]] void bad_operands(std::string_view op, const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  if (op == "+" && a.is_string())
    raise(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
  raise(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
}

// a + b of two strings, the result bounded as a rendering is (a template doubling a string)
std::string concat(const std::string& a, const std::string& b) {
  if (a.size() + b.size() > size_t(limits().text))
    raise(fmt::format("the joined text would exceed {} bytes", limits().text));
  return a + b;
}

Value repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list()->items.size();
  if (n <= 0 || unit == 0) n = 0;  // '' * 2 ** 62 is '' at once, not 2 ** 62 empty appends
  if (n > 0 && uint64_t(n) > uint64_t(limits().made) / unit)
    raise(fmt::format("the repeated sequence would be too large: {} x {}, over the limit of {}", unit, n,
                      limits().made));
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return out;
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i)
    for (const Value& x : seq.as_list()->items) items.push_back(x);
  return make_list(std::move(items), seq.as_list()->tuple);
}

// a ** b for b >= 0 by squaring, every product checked
int64_t int_power(int64_t a, int64_t b) {
  int64_t r = 1, base = a;
  for (int64_t e = b; e > 0; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(r, base, &r)) int_overflow("**", a, b);
    // |a| >= 2 here, so a base that overflows while bits of b remain means the result does too
    if (e > 1 && __builtin_mul_overflow(base, base, &base)) int_overflow("**", a, b);
  }
  return r;
}

Value int_arithmetic(std::string_view op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(a, b, &r)) int_overflow(op, a, b);
    return r;
  }
  if (op == "-") {
    if (__builtin_sub_overflow(a, b, &r)) int_overflow(op, a, b);
    return r;
  }
  if (op == "*") {
    if (__builtin_mul_overflow(a, b, &r)) int_overflow(op, a, b);
    return r;
  }
  if (op == "**") {
    if (b < 0 && a == 0) raise("0.0 cannot be raised to a negative power");
    if (b < 0) return std::pow(double(a), double(b));
    if (a == 1 || a == 0) return b == 0 ? int64_t(1) : a;  // without a loop for a huge b
    if (a == -1) return int64_t(b % 2 ? -1 : 1);
    return int_power(a, b);
  }
  if (b == 0) raise(op == "/" ? "division by zero" : "integer division or modulo by zero");
  if (op == "/") return double(a) / double(b);
  if (b == -1) {  // INT64_MIN / -1 overflows; anything % -1 is 0
    if (op == "%") return int64_t(0);
    if (__builtin_sub_overflow(int64_t(0), a, &r)) int_overflow(op, a, b);
    return r;
  }
  if (op == "//") {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  }
  r = a % b;  // % : the result takes the divisor's sign
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Python's float divmod (floatobject.c): the remainder from fmod takes the divisor's sign and the
// quotient is (x - mod) / y rounded to the nearest integer, so 1 // 0.1 is 9.0 (floor(1 / 0.1) is
// 10.0, which disagrees with 1 % 0.1 = 0.0999...). `floor_div` picks the quotient, else the remainder.
double float_divmod(double x, double y, bool floor_div) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  if (!floor_div) return mod;
  if (div == 0) return std::copysign(0.0, x / y);
  double q = std::floor(div);
  if (div - q > 0.5) q += 1.0;
  return q;
}

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return int_arithmetic(op, a.as_int(), b.as_int());
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return x + y;
  if (op == "-") return x - y;
  if (op == "*") return x * y;
  if (op == "**") {
    if (x == 0 && y < 0) raise("0.0 cannot be raised to a negative power");
    return std::pow(x, y);
  }
  if (y == 0)
    raise(op == "/" ? "float division by zero" : op == "//" ? "float floor division by zero" : "float modulo by zero");
  if (op == "/") return x / y;
  return float_divmod(x, y, op == "//");
}

}  // namespace

static Limits g_limits;

const Limits& limits() { return g_limits; }
void set_limits(const Limits& l) { g_limits = l; }

void int_overflow(std::string_view op, int64_t a, int64_t b) { int_overflow(fmt::format("{} {} {}", a, op, b)); }

void int_overflow(std::string_view expression) {
  raise(fmt::format("integer overflow: {} is outside the 64-bit range templates compute in", expression));
}

int64_t float_to_int(double d, std::string_view what) {
  const double t = std::trunc(d);
  if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0))  // NaN fails both
    raise(fmt::format("{}: {} does not fit the 64-bit integers templates compute in", what, d));
  return int64_t(t);
}

Value get_attr(const Value& obj, std::string_view name) {
  obj.require_defined();
  if (obj.is_dict() && obj.as_dict()->is_namespace) {
    const Value* v = obj.as_dict()->find(name);
    return v ? *v : no_attr(obj, name);
  }
  Value m = bound_method(obj, name);
  if (!m.is_undefined() || !m.undefined_what().empty()) return m;
  if (obj.is_dict()) {
    const Value* v = obj.as_dict()->find(name);
    return v ? *v : no_attr(obj, name);
  }
  return no_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  obj.require_defined();
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict()->find(key.as_string())) return *v;
      if (!obj.as_dict()->is_namespace) return get_attr(obj, key.as_string());
    }
    return no_attr(obj, key.str());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    if (obj.is_list()) {
      const auto& items = obj.as_list()->items;
      auto i = norm_index(key.as_int(), items.size());
      return i ? items[*i] : no_attr(obj, key.str());
    }
    std::vector<size_t> o = text::offsets(obj.as_string());
    auto i = norm_index(key.as_int(), o.size() - 1);
    return i ? Value(obj.as_string().substr(o[*i], o[*i + 1] - o[*i])) : no_attr(obj, key.str());
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return no_attr(obj, key.str());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  obj.require_defined();
  auto as_opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) raise(fmt::format("slice {} must be an integer or None, got {}", what, v.type_name()));
    return v.as_int();
  };
  int64_t st = as_opt(step, "step").value_or(1);
  if (st == 0) raise("slice step cannot be zero");
  const bool is_str = obj.is_string();
  if (!is_str && !obj.is_list()) raise(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  std::vector<size_t> o = is_str ? text::offsets(obj.as_string()) : std::vector<size_t>{};
  const int64_t n = is_str ? int64_t(o.size() - 1) : int64_t(obj.as_list()->items.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = clamp(as_opt(start, "start"), st > 0 ? 0 : n - 1);
  int64_t e = clamp(as_opt(stop, "stop"), st > 0 ? n : -1);
  std::string s;
  std::vector<Value> items;
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    if (is_str) s.append(obj.as_string(), o[i], o[i + 1] - o[i]);
    else items.push_back(obj.as_list()->items[i]);
    if (__builtin_add_overflow(i, st, &i)) break;  // a huge step: past either end
  }
  return is_str ? Value(std::move(s)) : make_list(std::move(items), obj.as_list()->tuple);
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return concat(a.str(), b.str());
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return concat(a.as_string(), b.as_string());
    if (a.is_list() && b.is_list() && a.as_list()->tuple == b.as_list()->tuple) {
      if (a.as_list()->items.size() + b.as_list()->items.size() > size_t(limits().made))
        raise(fmt::format("the joined list would have more than {} items", limits().made));
      std::vector<Value> items = a.as_list()->items;
      items.insert(items.end(), b.as_list()->items.begin(), b.as_list()->items.end());
      return make_list(std::move(items), a.as_list()->tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) return percent_format(a.as_string(), b);
  bad_operands(op, a, b);
}

Value unary_minus(const Value& v, bool minus) {
  v.require_defined();
  if (!v.is_number()) raise(fmt::format("bad operand type for unary {}: '{}'", minus ? '-' : '+', v.type_name()));
  if (v.is_float()) return minus ? -v.as_double() : v.as_double();
  int64_t r = v.as_int();
  if (minus && __builtin_sub_overflow(int64_t(0), v.as_int(), &r)) int_overflow(fmt::format("-({})", v.as_int()));
  return r;
}

bool contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (!item.is_string()) raise(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
    return c.as_string().find(item.as_string()) != std::string::npos;
  }
  if (c.is_list()) {
    for (const Value& x : c.as_list()->items)
      if (equals(x, item)) return true;
    return false;
  }
  if (c.is_dict()) return item.is_string() && c.as_dict()->find(item.as_string()) != nullptr;
  if (c.is_undefined()) return false;
  raise(fmt::format("argument of type '{}' is not iterable", c.type_name()));
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_list()) return v.as_list()->items;
  if (v.is_dict() && !v.as_dict()->is_namespace) {
    std::vector<Value> keys;
    for (const auto& kv : v.as_dict()->items) keys.emplace_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    std::vector<size_t> o = text::offsets(v.as_string());
    for (size_t i = 0; i + 1 < o.size(); ++i) chars.emplace_back(v.as_string().substr(o[i], o[i + 1] - o[i]));
    return chars;
  }
  if (v.is_undefined()) return {};
  raise(fmt::format("'{}' object is not iterable", v.type_name()));
}

Value attr_path(const Value& item, std::string_view path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view part = path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    int64_t index = 0;  // digits past int64 index nothing either (Python: an IndexError)
    if (digits && std::from_chars(part.data(), part.data() + part.size(), index).ec != std::errc())
      index = std::numeric_limits<int64_t>::max();
    v = digits ? get_item(v, Value(index)) : get_item(v, Value(part));
    if (dot == std::string_view::npos) return v;
    start = dot + 1;
  }
}

}  // namespace lt::jinja

// Value operations with jinja2's Python semantics (see ops.h).
#include "tokenizer/jinja/ops.h"

#include <fmt/format.h>

#include <cmath>

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

Value repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list()->items.size();
  // At most 4 Mi characters or items (a chat template repeats a separator; a 20 MB string took the
  // ASan fuzzer past its 10 s timeout, and a larger one is memory a template has no use for).
  constexpr uint64_t kMaxRepeat = uint64_t(1) << 22;
  if (n > 0 && unit > 0 && uint64_t(n) > kMaxRepeat / unit)
    raise(fmt::format("the repeated sequence would be too large: {} x {}, over the limit of {}", unit, n, kMaxRepeat));
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

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
  const bool fl = a.is_float() || b.is_float();
  if (op == "+") return fl ? Value(a.as_double() + b.as_double()) : Value(a.as_int() + b.as_int());
  if (op == "-") return fl ? Value(a.as_double() - b.as_double()) : Value(a.as_int() - b.as_int());
  if (op == "*") return fl ? Value(a.as_double() * b.as_double()) : Value(a.as_int() * b.as_int());
  if (op == "**") {
    if (!fl && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
      return r;
    }
    return std::pow(a.as_double(), b.as_double());
  }
  if (b.as_double() == 0) raise(op == "/" ? "division by zero" : "integer division or modulo by zero");
  if (op == "/") return a.as_double() / b.as_double();
  if (op == "//") {
    if (fl) return std::floor(a.as_double() / b.as_double());
    int64_t q = a.as_int() / b.as_int();
    if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
    return q;
  }
  // % : the result takes the divisor's sign
  if (fl) {
    double r = std::fmod(a.as_double(), b.as_double());
    if (r != 0 && ((r < 0) != (b.as_double() < 0))) r += b.as_double();
    return r;
  }
  int64_t r = a.as_int() % b.as_int();
  if (r != 0 && ((r < 0) != (b.as_int() < 0))) r += b.as_int();
  return r;
}

}  // namespace

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
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (is_str) s.append(obj.as_string(), o[i], o[i + 1] - o[i]);
    else items.push_back(obj.as_list()->items[i]);
  }
  return is_str ? Value(std::move(s)) : make_list(std::move(items), obj.as_list()->tuple);
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return a.str() + b.str();
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return a.as_string() + b.as_string();
    if (a.is_list() && b.is_list() && a.as_list()->tuple == b.as_list()->tuple) {
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
  return minus ? -v.as_int() : v.as_int();
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
    v = digits ? get_item(v, Value(int64_t(std::stoll(std::string(part))))) : get_item(v, Value(part));
    if (dot == std::string_view::npos) return v;
    start = dot + 1;
  }
}

}  // namespace lt::jinja

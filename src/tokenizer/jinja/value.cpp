// Value: Python truthiness, str() / repr(), equality and ordering (see value.h).
#include "tokenizer/jinja/value.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "tokenizer/utf8.h"

namespace lt::jinja {

void raise(const std::string& msg) { throw Failure(msg); }

int64_t Value::as_int() const {
  if (is_bool()) return int64_t(as_bool());
  if (!is_int()) wrong_type("an integer");
  return std::get<int64_t>(v);
}

void Value::wrong_type(const char* want) const {
  require_defined();
  raise(fmt::format("'{}' object cannot be interpreted as {}", type_name(), want));
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v);
  return double(as_int());
}

bool Value::truthy() const {
  switch (v.index()) {
    case 0: case 1: return false;
    case 2: return as_bool();
    case 3: return std::get<int64_t>(v) != 0;
    case 4: return std::get<double>(v) != 0.0;
    case 5: return !as_string().empty();
    case 6: return !as_list()->items.empty();
    case 7: return as_dict()->is_namespace || !as_dict()->items.empty();
    default: return true;
  }
}

const char* Value::type_name() const {
  static const char* names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list", "dict", "function"};
  if (is_list() && as_list()->tuple) return "tuple";
  if (is_dict() && as_dict()->is_namespace) return "Namespace";
  return names[v.index()];
}

void Value::require_defined() const {
  if (is_undefined()) raise(undefined_what().empty() ? "a value is undefined" : undefined_what());
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view s(buf, r.ptr - buf);  // [-]d[.ddd]e[+-]xx
  std::string sign;
  if (s[0] == '-') { sign = "-"; s.remove_prefix(1); }
  size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  int decpt = std::stoi(std::string(s.substr(e + 1))) + 1;  // value = 0.digits * 10^decpt
  const int n = int(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
    if (decpt >= n) return sign + digits + std::string(decpt - n, '0') + ".0";
    return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  std::string m = digits.substr(0, 1) + (n > 1 ? "." + digits.substr(1) : "");
  int x = decpt - 1;
  return sign + m + fmt::format("e{}{:02d}", x < 0 ? '-' : '+', std::abs(x));
}

namespace {

// Characters Python's str.isprintable() rejects, among those a chat may hold: C0/C1 controls,
// the separators other than ' ', and the common format characters.
bool non_printable(uint32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return true;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || c == 0x205f) return true;
  if ((c >= 0x2060 && c <= 0x206f) || c == 0x3000 || c == 0xfeff) return true;
  return false;
}

std::string list_repr(const ListObj& l) {
  std::string s = l.tuple ? "(" : "[";
  for (size_t i = 0; i < l.items.size(); ++i) s += (i ? ", " : "") + l.items[i].repr();
  if (l.tuple && l.items.size() == 1) s += ",";
  return s + (l.tuple ? ")" : "]");
}

std::string dict_repr(const DictObj& d) {
  std::string s = d.is_namespace ? "<Namespace {" : "{";
  for (size_t i = 0; i < d.items.size(); ++i)
    s += (i ? ", " : "") + string_repr(d.items[i].first) + ": " + d.items[i].second.repr();
  return s + (d.is_namespace ? "}>" : "}");
}

}  // namespace

std::string string_repr(std::string_view s) {
  const bool dq = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    uint32_t c = utf8::decode(s, i, &len);
    if (c == '\\' || c == uint32_t(q)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (non_printable(c)) {
      out += c <= 0xff ? fmt::format("\\x{:02x}", c) : fmt::format("\\u{:04x}", c);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out + q;
}

std::string Value::str() const {
  switch (v.index()) {
    case 0: return "";
    case 1: return "None";
    case 2: return as_bool() ? "True" : "False";
    case 3: return std::to_string(std::get<int64_t>(v));
    case 4: return float_repr(std::get<double>(v));
    case 5: return as_string();
    case 6: return list_repr(*as_list());
    case 7: return dict_repr(*as_dict());
    default: return "<function " + as_func()->name + ">";
  }
}

std::string Value::repr() const {
  if (is_string()) return string_repr(as_string());
  if (is_undefined()) return "Undefined";
  return str();
}

const Value* DictObj::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void DictObj::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

const Value* Args::get(size_t i, std::string_view name) const {
  if (i < pos.size()) return &pos[i];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

void Args::check(std::string_view fn, size_t max_pos, std::initializer_list<std::string_view> names) const {
  if (pos.size() > max_pos) raise(fmt::format("{}() takes at most {} positional arguments ({} given)", fn, max_pos, pos.size()));
  for (const auto& kv : kw) {
    bool ok = false;
    for (std::string_view n : names) ok = ok || n == kv.first;
    if (!ok) raise(fmt::format("{}() got an unexpected keyword argument '{}'", fn, kv.first));
  }
}

Value make_list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListObj>();
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(std::move(l));
}

Value make_dict(std::vector<std::pair<std::string, Value>> items) {
  auto d = std::make_shared<DictObj>();
  d->items = std::move(items);
  return Value(std::move(d));
}

Value make_func(std::string name, std::function<Value(const Args&)> fn) {
  return Value(FuncPtr(std::make_shared<const FuncObj>(FuncObj{std::move(name), std::move(fn)})));
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.v.index() != b.v.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const auto &x = a.as_list()->items, &y = b.as_list()->items;
    if (x.size() != y.size() || a.as_list()->tuple != b.as_list()->tuple) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!equals(x[i], y[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    const DictObj &x = *a.as_dict(), &y = *b.as_dict();
    if (x.is_namespace || y.is_namespace) return &x == &y;
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* o = y.find(k);
      if (!o || !equals(v, *o)) return false;
    }
    return true;
  }
  return a.as_func() == b.as_func();
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list()->tuple == b.as_list()->tuple) {
    const auto &x = a.as_list()->items, &y = b.as_list()->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  a.require_defined();
  b.require_defined();
  raise(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(), b.type_name()));
}

}  // namespace lt::jinja

// jinja2's built-in filters with their Python behaviour (argument names and defaults as jinja2's
// do_* functions), and transformers' tojson. Declared in builtins.h.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/text.h"

namespace lt::jinja {

namespace {

using FilterFn = Value (*)(const Value&, const Args&);

bool flag(const Args& a, size_t i, std::string_view name) {
  const Value* v = a.get(i, name);
  return v && v->truthy();
}

std::optional<std::string> str_arg(const Args& a, size_t i, std::string_view name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  return v->str();
}

int64_t len_of(const Value& v) {
  if (v.is_string()) return int64_t(text::length(v.as_string()));
  if (v.is_list()) return int64_t(v.as_list()->items.size());
  if (v.is_dict()) return int64_t(v.as_dict()->items.size());
  if (v.is_undefined()) return 0;
  raise(fmt::format("object of type '{}' has no len()", v.type_name()));
}

// The sort / unique / min / max key: an attribute path when given, lower-cased unless case_sensitive.
Value sort_key(const Value& x, const std::optional<std::string>& attribute, bool case_sensitive) {
  Value k = attribute ? attr_path(x, *attribute) : x;
  if (!case_sensitive && k.is_string()) return text::lower(k.as_string());
  return k;
}

Value f_length(const Value& v, const Args&) { return len_of(v); }

Value f_default(const Value& v, const Args& a) {
  const Value* d = a.get(0, "default_value");
  if (v.is_undefined() || (flag(a, 1, "boolean") && !v.truthy())) return d ? *d : Value("");
  return v;
}

Value f_first(const Value& v, const Args&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, const Args&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(const Value& v, const Args& a) {
  std::string sep = str_arg(a, 0, "d").value_or(""), out;
  std::optional<std::string> attribute = str_arg(a, 1, "attribute");
  std::vector<Value> items = iterate(v);
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + (attribute ? attr_path(items[i], *attribute) : items[i]).str();
  return out;
}

Value f_tojson(const Value& v, const Args& a) { return dumps(v, tojson_style(a)); }

Value f_items(const Value& v, const Args&) {
  if (v.is_undefined()) return make_list({});
  if (!v.is_dict() || v.as_dict()->is_namespace) raise("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_dict()->items) out.push_back(make_list({Value(k), x}, true));
  return make_list(std::move(out));
}

Value f_list(const Value& v, const Args&) { return make_list(iterate(v)); }
Value f_string(const Value& v, const Args&) { return v.str(); }
Value f_upper(const Value& v, const Args&) { return text::upper(v.str()); }
Value f_lower(const Value& v, const Args&) { return text::lower(v.str()); }
Value f_capitalize(const Value& v, const Args&) { return text::py_capitalize(v.str()); }
Value f_title(const Value& v, const Args&) { return text::jinja_title(v.str()); }
Value f_safe(const Value& v, const Args&) { return v; }
Value f_trim(const Value& v, const Args& a) { return text::strip(v.str(), str_arg(a, 0, "chars"), true, true); }

Value f_replace(const Value& v, const Args& a) {
  const Value *o = a.get(0, "old"), *n = a.get(1, "new"), *c = a.get(2, "count");
  if (!o || !n) raise("replace filter: needs the old and the new string");
  return text::replace(v.str(), o->str(), n->str(), c && !c->is_none() ? c->as_int() : -1);
}

// Python int(str) / float(str) on a trimmed literal; nullopt when it is not one.
std::optional<int64_t> parse_int(std::string s) {
  s = text::strip(s, std::nullopt, true, true);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if ((c == '+' || c == '-') && i == 0) digits += c;
    else if (c >= '0' && c <= '9') digits += c;
    else if (c == '_' && i > 0 && i + 1 < s.size() && isdigit((unsigned char)s[i - 1]) && isdigit((unsigned char)s[i + 1])) continue;
    else return std::nullopt;
  }
  if (digits.empty() || digits == "+" || digits == "-") return std::nullopt;
  std::string_view d = digits;
  if (d[0] == '+') d.remove_prefix(1);
  int64_t r = 0;
  auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), r);
  if (ec == std::errc::result_out_of_range)  // Python's int() has no range; ours is 64 bits: say so
    int_overflow(fmt::format("int('{}')", d.size() > 40 ? std::string(d.substr(0, 40)) + "..." : std::string(d)));
  if (ec != std::errc() || end != d.data() + d.size()) return std::nullopt;
  return r;
}

std::optional<double> parse_float(const std::string& raw) {
  std::string s = text::strip(raw, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

Value f_int(const Value& v, const Args& a) {
  const Value* d = a.get(0, "default");
  const Value dflt = d ? *d : Value(int64_t(0));
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value(float_to_int(v.as_double(), "int")) : dflt;
  if (!v.is_string()) return dflt;
  if (auto i = parse_int(v.as_string())) return *i;
  if (auto f = parse_float(v.as_string()); f && std::isfinite(*f)) return float_to_int(*f, "int");
  return dflt;
}

Value f_float(const Value& v, const Args& a) {
  const Value* d = a.get(0, "default");
  if (v.is_number()) return v.as_double();
  if (v.is_string())
    if (auto f = parse_float(v.as_string())) return *f;
  return d ? *d : Value(0.0);
}

Value f_abs(const Value& v, const Args&) {
  if (v.is_float()) return std::fabs(v.as_double());
  if (v.is_number()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) int_overflow(fmt::format("abs({})", v.as_int()));
    return std::abs(v.as_int());
  }
  v.require_defined();
  raise(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_round(const Value& v, const Args& a) {
  const Value* p = a.get(0, "precision");
  const int64_t prec = p ? p->as_int() : 0;
  const std::string method = str_arg(a, 1, "method").value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") raise("round: method must be common, ceil or floor");
  if (!v.is_number()) raise(fmt::format("round: a number is required, got {}", v.type_name()));
  if (!v.is_float() && method == "common") return v.as_int();  // Python's round(int, n) is that int
  const double x = v.as_double(), scale = std::pow(10.0, double(prec));
  if (method == "ceil") return std::ceil(x * scale) / scale;
  if (method == "floor") return std::floor(x * scale) / scale;
  // Python rounds the exact binary value half-to-even, as printf's %.Nf does
  if (prec >= 0 && std::isfinite(x)) return std::stod(fmt::format("{:.{}f}", x, int(std::min<int64_t>(prec, 300))));
  return std::nearbyint(x * scale) / scale;
}

Value f_reverse(const Value& v, const Args&) {
  if (v.is_string()) {
    std::vector<Value> chars = iterate(v);
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
    return out;
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}

Value f_sort(const Value& v, const Args& a) {
  std::vector<Value> items = iterate(v);
  const bool rev = flag(a, 0, "reverse"), cs = flag(a, 1, "case_sensitive");
  std::optional<std::string> attribute = str_arg(a, 2, "attribute");
  // each key once (lowering a string per comparison made a 7 KB sort take 28 s under the fuzzer)
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& x : items) keys.push_back(sort_key(x, attribute, cs));
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    int c = compare(keys[x], keys[y], "<");
    return rev ? c > 0 : c < 0;
  });
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  return make_list(std::move(sorted));
}

Value f_unique(const Value& v, const Args& a) {
  const bool cs = flag(a, 0, "case_sensitive");
  std::optional<std::string> attribute = str_arg(a, 1, "attribute");
  std::vector<Value> out, seen;
  for (const Value& x : iterate(v)) {
    Value k = sort_key(x, attribute, cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return make_list(std::move(out));
}

Value min_max(const Value& v, const Args& a, bool want_max) {
  const bool cs = flag(a, 0, "case_sensitive");
  std::optional<std::string> attribute = str_arg(a, 1, "attribute");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = compare(sort_key(items[i], attribute, cs), sort_key(items[best], attribute, cs), "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
Value f_min(const Value& v, const Args& a) { return min_max(v, a, false); }
Value f_max(const Value& v, const Args& a) { return min_max(v, a, true); }

Value f_sum(const Value& v, const Args& a) {
  std::optional<std::string> attribute = str_arg(a, 0, "attribute");
  const Value* start = a.get(1, "start");
  Value total = start ? *start : Value(int64_t(0));
  for (const Value& x : iterate(v)) total = binary_op("+", total, attribute ? attr_path(x, *attribute) : x);
  return total;
}

Value f_dictsort(const Value& v, const Args& a) {
  std::vector<Value> pairs = f_items(v, {}).as_list()->items;
  const bool cs = flag(a, 0, "case_sensitive"), rev = flag(a, 2, "reverse");
  const std::string by = str_arg(a, 1, "by").value_or("key");
  if (by != "key" && by != "value") raise("dictsort: 'by' must be 'key' or 'value'");
  const size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    int c = compare(sort_key(x.as_list()->items[idx], std::nullopt, cs), sort_key(y.as_list()->items[idx], std::nullopt, cs), "<");
    return rev ? c > 0 : c < 0;
  });
  return make_list(std::move(pairs));
}

// map(attribute=..., default=...) or map('filter', args...)
Value f_map(const Value& v, const Args& a) {
  std::vector<Value> out;
  if (std::optional<std::string> attribute = str_arg(a, size_t(-1), "attribute")) {
    const Value* dflt = a.get(size_t(-1), "default");
    for (const Value& x : iterate(v)) {
      Value y = attr_path(x, *attribute);
      out.push_back(y.is_undefined() && dflt ? *dflt : y);
    }
    return make_list(std::move(out));
  }
  if (a.pos.empty() || !a.pos[0].is_string()) raise("map: expected a filter name or attribute=");
  const std::string name = a.pos[0].as_string();
  if (!is_known_filter(name)) raise(fmt::format("map: no filter named '{}'", name));
  Args rest{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
  for (const Value& x : iterate(v)) out.push_back(apply_filter(name, x, rest));
  return make_list(std::move(out));
}

// select / reject / selectattr / rejectattr
Value select_impl(const Value& v, const Args& a, bool attr, bool keep) {
  size_t off = attr ? 1 : 0;
  std::optional<std::string> attribute;
  if (attr) {
    if (a.pos.empty()) raise("selectattr / rejectattr: missing the attribute name");
    attribute = a.pos[0].str();
  }
  std::optional<std::string> test;
  if (a.pos.size() > off) test = a.pos[off].str();
  if (test && !is_known_test(*test)) raise(fmt::format("no test named '{}'", *test));
  Args rest{std::vector<Value>(a.pos.begin() + std::min(a.pos.size(), off + 1), a.pos.end()), a.kw};
  std::vector<Value> out;
  for (const Value& x : iterate(v)) {
    Value y = attribute ? attr_path(x, *attribute) : x;
    bool ok = test ? apply_test(*test, y, rest) : y.truthy();
    if (ok == keep) out.push_back(x);
  }
  return make_list(std::move(out));
}
Value f_select(const Value& v, const Args& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, const Args& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, const Args& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, const Args& a) { return select_impl(v, a, true, false); }

Value f_indent(const Value& v, const Args& a) {
  const Value* w = a.get(0, "width");
  if (w && !w->is_string() && w->as_int() > limits().made)
    raise(fmt::format("indent: width {} is over {}", w->as_int(), limits().made));
  std::string ind = w ? (w->is_string() ? w->as_string() : std::string(size_t(std::max<int64_t>(0, w->as_int())), ' ')) : "    ";
  const bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
  std::vector<std::string> lines = text::splitlines(v.str() + "\n", false);
  std::string rv;
  auto check = [&] {  // the indent is bounded, but it is added once per line
    if (rv.size() > size_t(limits().text))
      raise(fmt::format("indent: the indented text exceeds {} bytes", limits().text));
  };
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i, check()) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i, check()) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  return first ? ind + rv : rv;
}

Value f_format(const Value& v, const Args& a) {
  if (!a.kw.empty()) return percent_format(v.str(), make_dict(a.kw));
  return percent_format(v.str(), make_list(a.pos, true));
}

Value f_escape(const Value& v, const Args&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value f_wordcount(const Value& v, const Args&) {
  int64_t n = 0;
  bool in_word = false;
  std::vector<Value> chars = iterate(Value(v.str()));
  for (const Value& c : chars) {  // runs of \w characters, as re.findall(r"\w+")
    std::string_view s = c.as_string();
    bool w = s == "_" || text::all_of(s, text::is_alnum);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return n;
}

const std::map<std::string_view, FilterFn>& filters() {
  static const std::map<std::string_view, FilterFn> m = {
      {"abs", f_abs}, {"capitalize", f_capitalize}, {"count", f_length}, {"d", f_default}, {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first}, {"float", f_float},
      {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join},
      {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max},
      {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
      {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
      {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title},
      {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
  };
  return m;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filters().count(name) > 0; }

Value apply_filter(std::string_view name, const Value& v, const Args& args) {
  auto it = filters().find(name);
  if (it == filters().end()) raise(fmt::format("no filter named '{}'", name));
  return it->second(v, args);
}

}  // namespace lt::jinja

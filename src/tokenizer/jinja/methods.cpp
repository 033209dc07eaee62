// Bound methods of str, dict and list values (see methods.h).
#include "tokenizer/jinja/methods.h"

#include <fmt/format.h>

#include <optional>

#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/text.h"

namespace lt::jinja {

namespace {

std::optional<std::string> opt_str(const Args& a, size_t i, std::string_view name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) raise(fmt::format("{} must be a str or None, not {}", name, v->type_name()));
  return v->as_string();
}

int64_t opt_int(const Args& a, size_t i, std::string_view name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int() && !v->is_bool()) raise(fmt::format("{} must be an int, not {}", name, v->type_name()));
  return v->as_int();
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  for (auto& p : parts) items.emplace_back(std::move(p));
  return make_list(std::move(items));
}

// startswith / endswith with a str or a tuple of str.
bool affix(const std::string& s, const Value& arg, bool start) {
  auto one = [&](const Value& x) {
    if (!x.is_string()) raise(fmt::format("{}with first arg must be str or a tuple of str, not {}", start ? "starts" : "ends", x.type_name()));
    const std::string& p = x.as_string();
    return p.size() <= s.size() && (start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
  };
  if (arg.is_list()) {
    for (const Value& x : arg.as_list()->items)
      if (one(x)) return true;
    return false;
  }
  return one(arg);
}

const Value& need(const Args& a, size_t i, std::string_view method) {
  if (i >= a.pos.size()) raise(fmt::format("{}() is missing an argument", method));
  return a.pos[i];
}

Value call_str_method(const std::string& s, std::string_view m, const Args& a) {
  if (m == "strip" || m == "lstrip" || m == "rstrip")
    return text::strip(s, opt_str(a, 0, "chars"), m != "rstrip", m != "lstrip");
  if (m == "split") return str_list(text::split(s, opt_str(a, 0, "sep"), opt_int(a, 1, "maxsplit", -1)));
  if (m == "rsplit") return str_list(text::rsplit(s, opt_str(a, 0, "sep"), opt_int(a, 1, "maxsplit", -1)));
  if (m == "splitlines") return str_list(text::splitlines(s, a.get(0, "keepends") && a.get(0, "keepends")->truthy()));
  if (m == "startswith" || m == "endswith") return affix(s, need(a, 0, m), m == "startswith");
  if (m == "upper") return text::upper(s);
  if (m == "lower") return text::lower(s);
  if (m == "title") return text::py_title(s);
  if (m == "capitalize") return text::py_capitalize(s);
  if (m == "replace") {
    const Value &o = need(a, 0, m), &n = need(a, 1, m);
    if (!o.is_string() || !n.is_string()) raise("replace() arguments must be str");
    return text::replace(s, o.as_string(), n.as_string(), opt_int(a, 2, "count", -1));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex") {
    const Value& sub = need(a, 0, m);
    if (!sub.is_string()) raise(fmt::format("{}() argument must be str, not {}", m, sub.type_name()));
    int64_t r = text::find(s, sub.as_string(), m[0] == 'r');
    if (r < 0 && (m == "index" || m == "rindex")) raise("substring not found");
    return r;
  }
  if (m == "count") {
    const Value& sub = need(a, 0, m);
    if (!sub.is_string()) raise(fmt::format("count() argument must be str, not {}", sub.type_name()));
    return text::count(s, sub.as_string());
  }
  if (m == "join") {
    std::string out;
    std::vector<Value> items = iterate(need(a, 0, m));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) raise(fmt::format("sequence item {}: expected str instance, {} found", i, items[i].type_name()));
      out += (i ? s : "") + items[i].as_string();
    }
    return out;
  }
  if (m == "format") return str_format(s, a);
  if (m == "isdigit") return text::all_of(s, text::is_digit);
  if (m == "isalpha") return text::all_of(s, text::is_alpha);
  if (m == "isalnum") return text::all_of(s, text::is_alnum);
  if (m == "isspace") return text::all_of(s, text::is_space);
  if (m == "islower") return text::is_lower_cased(s);
  if (m == "isupper") return text::is_upper_cased(s);
  raise(fmt::format("str.{} is not supported", m));
}

Value call_dict_method(const DictPtr& d, std::string_view m, const Args& a) {
  if (m == "get") {
    const Value& key = need(a, 0, m);
    const Value* v = key.is_string() ? d->find(key.as_string()) : nullptr;
    if (v) return *v;
    return a.pos.size() > 1 ? a.pos[1] : Value(None{});
  }
  std::vector<Value> out;
  for (const auto& [k, v] : d->items) {
    if (m == "keys") out.emplace_back(k);
    else if (m == "values") out.push_back(v);
    else out.push_back(make_list({Value(k), v}, true));
  }
  return make_list(std::move(out));
}

Value call_list_method(const ListPtr& l, std::string_view m, const Args& a) {
  const Value& x = need(a, 0, m);
  int64_t n = 0;
  for (size_t i = 0; i < l->items.size(); ++i) {
    if (!equals(l->items[i], x)) continue;
    if (m == "index") return int64_t(i);
    ++n;
  }
  if (m == "index") raise(fmt::format("{} is not in list", x.repr()));
  return n;
}

bool one_of(std::string_view m, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names)
    if (m == n) return true;
  return false;
}

Value unsafe(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe (chat templates cannot modify values)",
                                      name, obj.type_name()));
}

}  // namespace

Value bound_method(const Value& obj, std::string_view name) {
  const std::string m(name);
  if (obj.is_string()) {
    static const std::initializer_list<std::string_view> names = {
        "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
        "title", "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "join", "format", "isdigit",
        "isalpha", "isalnum", "isspace", "islower", "isupper"};
    if (!one_of(name, names)) return Value();
    std::string s = obj.as_string();
    return make_func("str." + m, [s, m](const Args& a) { return call_str_method(s, m, a); });
  }
  if (obj.is_dict() && !obj.as_dict()->is_namespace) {
    if (one_of(name, {"pop", "popitem", "update", "setdefault", "clear"})) return unsafe(obj, name);
    if (!one_of(name, {"get", "items", "keys", "values"})) return Value();
    DictPtr d = obj.as_dict();
    return make_func("dict." + m, [d, m](const Args& a) { return call_dict_method(d, m, a); });
  }
  if (obj.is_list()) {
    if (one_of(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})) return unsafe(obj, name);
    if (!one_of(name, {"index", "count"})) return Value();
    ListPtr l = obj.as_list();
    return make_func("list." + m, [l, m](const Args& a) { return call_list_method(l, m, a); });
  }
  return Value();
}

}  // namespace lt::jinja

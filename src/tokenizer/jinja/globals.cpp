// The global functions of a chat template: transformers' raise_exception, strftime_now,
// namespace and dict, and jinja2's range (at most 100000 items, as the sandbox allows).
// Declared in builtins.h.
#include <fmt/format.h>

#include <ctime>

#include "tokenizer/jinja/builtins.h"

namespace lt::jinja {

namespace {

Value g_range(const Args& a) {
  a.check("range", 3, {});
  for (const Value& v : a.pos)
    if (!v.is_int() && !v.is_bool()) raise(fmt::format("range() arguments must be integers, got {}", v.type_name()));
  if (a.pos.empty()) raise("range expected at least 1 argument, got 0");
  int64_t start = 0, stop = 0, step = 1;
  if (a.pos.size() == 1) stop = a.pos[0].as_int();
  else start = a.pos[0].as_int(), stop = a.pos[1].as_int();
  if (a.pos.size() == 3) step = a.pos[2].as_int();
  if (step == 0) raise("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= 100000) raise("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // past stop either way
  }
  return make_list(std::move(out));
}

// dict(mapping, **kw) / namespace(mapping, **kw)
Value dict_from(const Args& a, const char* fn, bool ns) {
  if (a.pos.size() > 1) raise(fmt::format("{}() takes at most 1 positional argument ({} given)", fn, a.pos.size()));
  auto d = std::make_shared<DictObj>();
  d->is_namespace = ns;
  if (!a.pos.empty()) {
    if (!a.pos[0].is_dict()) raise(fmt::format("{}() takes a mapping as its positional argument, got {}", fn, a.pos[0].type_name()));
    d->items = a.pos[0].as_dict()->items;
  }
  for (const auto& [k, v] : a.kw) {
    if (ns && !k.empty() && k[0] == '_') raise(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'", k));
    d->set(k, v);
  }
  return Value(std::move(d));
}

Value g_raise_exception(const Args& a) {
  std::string msg = a.pos.empty() ? std::string() : a.pos[0].str();
  raise("the template raised an error: " + msg);
}

// datetime.now().strftime(format), local time.
Value g_strftime_now(const Args& a) {
  if (a.pos.empty() || !a.pos[0].is_string()) raise("strftime_now() takes a format string");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  const std::string& f = a.pos[0].as_string();
  if (f.empty()) return "";
  for (size_t cap = 256; cap <= (1u << 20); cap *= 4) {
    std::string buf(cap, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
    if (n > 0) return buf.substr(0, n);
  }
  return "";
}

}  // namespace

DictPtr make_globals() {
  auto g = std::make_shared<DictObj>();
  g->set("range", make_func("range", g_range));
  g->set("dict", make_func("dict", [](const Args& a) { return dict_from(a, "dict", false); }));
  g->set("namespace", make_func("namespace", [](const Args& a) { return dict_from(a, "namespace", true); }));
  g->set("raise_exception", make_func("raise_exception", g_raise_exception));
  g->set("strftime_now", make_func("strftime_now", g_strftime_now));
  return g;
}

}  // namespace lt::jinja

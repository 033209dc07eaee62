// JSON <-> values, and Python's json.dumps for the tojson filter (see json.h).
#include "tokenizer/jinja/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/ops.h"
#include "tokenizer/utf8.h"

namespace lt::jinja {

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(int64_t(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& x : j) items.push_back(from_json(x));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return make_dict(std::move(items));
    }
    default: raise("unsupported JSON value (binary) in the template context");
  }
}

nlohmann::ordered_json to_json_value(const Value& v) {
  if (v.is_none()) return nullptr;
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int();
  if (v.is_float()) return v.as_double();
  if (v.is_string()) return v.as_string();
  if (v.is_list()) {
    auto a = nlohmann::ordered_json::array();
    for (const Value& x : v.as_list()->items) a.push_back(to_json_value(x));
    return a;
  }
  if (v.is_dict()) {
    auto o = nlohmann::ordered_json::object();
    for (const auto& [k, x] : v.as_dict()->items) o[k] = to_json_value(x);
    return o;
  }
  raise(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
}

namespace {

void quote(std::string& out, std::string_view s, bool ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    uint32_t c = utf8::decode(s, i, &len);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ascii && c > 0x7e)) {
          if (c > 0xffff) {  // a surrogate pair, as Python writes it
            uint32_t x = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (x >> 10), 0xdc00 + (x & 0x3ff));
          } else {
            out += fmt::format("\\u{:04x}", c);
          }
        } else {
          out.append(s.substr(i, len));
        }
    }
    i += len;
  }
  out += '"';
}

void dump(std::string& out, const Value& v, const JsonStyle& st, int level) {
  auto newline = [&](int lv) {  // the indent is bounded, but it is written once per level per line
    out += '\n';
    for (int k = 0; k < lv; ++k) {
      out += *st.indent;
      if (out.size() > size_t(limits().text))
        raise(fmt::format("tojson: the JSON text exceeds {} bytes", limits().text));
    }
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    double d = v.as_double();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
  } else if (v.is_string()) {
    quote(out, v.as_string(), st.ensure_ascii);
  } else if (v.is_list()) {
    const auto& items = v.as_list()->items;
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += st.item_sep;
      if (st.indent) newline(level + 1);
      dump(out, items[i], st, level + 1);
    }
    if (st.indent) newline(level);
    out += ']';
  } else if (v.is_dict() && !v.as_dict()->is_namespace) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : v.as_dict()->items) items.push_back(&kv);
    if (items.empty()) {
      out += "{}";
      return;
    }
    if (st.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += st.item_sep;
      if (st.indent) newline(level + 1);
      quote(out, items[i]->first, st.ensure_ascii);
      out += st.key_sep;
      dump(out, items[i]->second, st, level + 1);
    }
    if (st.indent) newline(level);
    out += '}';
  } else {
    raise(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string dumps(const Value& v, const JsonStyle& style) {
  std::string out;
  dump(out, v, style, 0);
  return out;
}

JsonStyle tojson_style(const Args& args) {
  args.check("tojson", 4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle st;
  if (const Value* a = args.get(0, "ensure_ascii")) st.ensure_ascii = a->truthy();
  if (const Value* ind = args.get(1, "indent"); ind && !ind->is_none()) {
    if (ind->is_string()) st.indent = ind->as_string();
    else if (ind->is_int() || ind->is_bool()) {
      if (ind->as_int() > limits().made)
        raise(fmt::format("tojson: indent {} is over {}", ind->as_int(), limits().made));
      st.indent = std::string(size_t(std::max<int64_t>(0, ind->as_int())), ' ');
    }
    else raise(fmt::format("tojson: indent must be an int or a str, got {}", ind->type_name()));
    st.item_sep.assign(1, ',');  // (assign: gcc 12 warns falsely on = "," here)
  }
  if (const Value* sep = args.get(2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->as_list()->items.size() != 2 || !sep->as_list()->items[0].is_string() ||
        !sep->as_list()->items[1].is_string())
      raise("tojson: separators must be a pair of strings (item_separator, key_separator)");
    st.item_sep = sep->as_list()->items[0].as_string();
    st.key_sep = sep->as_list()->items[1].as_string();
  }
  if (const Value* s = args.get(3, "sort_keys")) st.sort_keys = s->truthy();
  return st;
}

}  // namespace lt::jinja

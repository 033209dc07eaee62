// JSON in and out of template values: chat messages and tools become values in their key order,
// and the `tojson` filter writes JSON as transformers' override of it does (Python json.dumps with
// ensure_ascii=False by default, separators ", " / ": " without indent and "," / ": " with one).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace lt::jinja {

Value from_json(const nlohmann::ordered_json& j);
// A value without undefined or callables, back to JSON (for the rendering API's messages).
nlohmann::ordered_json to_json_value(const Value& v);

struct JsonStyle {
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// json.dumps(v, ...): raises "Object of type X is not JSON serializable" for undefined / callables.
std::string dumps(const Value& v, const JsonStyle& style);
// The style from tojson's arguments (ensure_ascii, indent, separators, sort_keys).
JsonStyle tojson_style(const Args& args);

}  // namespace lt::jinja

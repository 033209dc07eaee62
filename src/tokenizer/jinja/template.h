// A parsed Jinja template (the engine's entry point): parse once, render many times. Errors —
// syntax, an unsupported construct, or a failure while rendering (undefined values, type errors,
// raise_exception) — are lt::Error naming the template and its line:
//   "<name>: line 12: no filter named 'wordwrap' (not supported)".
// Usage:
//   lt::JinjaTemplate t(source, "models/x/tokenizer_config.json chat_template");
//   lt::jinja::Rendered r = t.render(context);  // context: a JSON object of variables
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/render.h"

namespace lt {

class JinjaTemplate {
 public:
  JinjaTemplate(std::string source, std::string name);
  JinjaTemplate(JinjaTemplate&&) noexcept = default;
  JinjaTemplate& operator=(JinjaTemplate&&) noexcept = default;

  // Renders with the variables of `context` (a JSON object; key order is kept, as tojson shows).
  jinja::Rendered render(const nlohmann::ordered_json& context) const;
  // The same with variables already converted (the chat template adds values that are not JSON).
  jinja::Rendered render(const jinja::DictObj& context) const;

  const std::string& source() const { return source_; }
  const std::string& name() const { return name_; }

 private:
  std::string source_, name_;
  std::shared_ptr<const jinja::Body> body_;
};

}  // namespace lt

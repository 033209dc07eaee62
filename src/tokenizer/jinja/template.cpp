// JinjaTemplate: parse on construction, render on demand, failures as lt::Error with the line.
#include "tokenizer/jinja/template.h"

#include "core/error.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/parser.h"

namespace lt {

namespace {
[[noreturn]] void rethrow(const std::string& name, const jinja::Failure& f) {
  if (f.line > 0) fail("{}: line {}: {}", name, f.line, f.what());
  fail("{}: {}", name, f.what());
}
}  // namespace

JinjaTemplate::JinjaTemplate(std::string source, std::string name) : source_(std::move(source)), name_(std::move(name)) {
  try {
    body_ = std::make_shared<const jinja::Body>(jinja::parse(source_));
  } catch (const jinja::Failure& f) {
    rethrow(name_, f);
  }
}

jinja::Rendered JinjaTemplate::render(const jinja::DictObj& context) const {
  try {
    return jinja::render(*body_, context);
  } catch (const jinja::Failure& f) {
    rethrow(name_, f);
  }
}

jinja::Rendered JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  LT_CHECK(context.is_object(), "{}: the template context must be a JSON object", name_);
  jinja::Value v;
  try {
    v = jinja::from_json(context);
  } catch (const jinja::Failure& f) {
    rethrow(name_, f);
  }
  return render(*v.as_dict());
}

}  // namespace lt

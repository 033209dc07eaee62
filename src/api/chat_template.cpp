// leantune::ChatTemplate and the Tokenizer's chat methods: the public face of the engine's
// Jinja chat templates (tokenizer/hf_chat_template.h) and of the built-in ones.
#include "leantune/chat_template.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "api/access.h"
#include "api/guard.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "leantune/tokenizer.h"
#include "tokenizer/builtin_chat_templates.h"
#include "tokenizer/hf_chat_template.h"

namespace leantune {

using ojson = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  std::shared_ptr<const lt::HfChatTemplate> t;
  std::string name;  // which of the model's named templates ("": its default)
  bool builtin = false;
};

namespace {

ojson parse_json_arg(std::string_view text, const char* what) {
  lt::parse_json(text, what);  // depth-bounded, with the line and column of a syntax error
  try {
    return ojson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    lt::fail("{}: not valid JSON ({}): {}", what, e.what(), lt::excerpt(text));
  }
}

lt::ChatRenderOptions render_options(const ChatOptions& o, const std::string& name) {
  lt::ChatRenderOptions r;
  r.add_generation_prompt = o.add_generation_prompt;
  r.name = name;
  if (!o.tools_json.empty()) {
    r.tools = parse_json_arg(o.tools_json, "tools_json");
    LT_CHECK(r.tools.is_array() || r.tools.is_null(), "tools_json: expected a JSON array of tool schemas");
  }
  if (!o.vars_json.empty()) {
    r.vars = parse_json_arg(o.vars_json, "vars_json");
    LT_CHECK(r.vars.is_object(), "vars_json: expected a JSON object of template variables");
  }
  return r;
}

ojson messages_json(const std::vector<ChatMessage>& messages) {
  ojson a = ojson::array();
  for (const ChatMessage& m : messages) a.push_back({{"role", m.role}, {"content", m.content}});
  return a;
}

bool is_jinja_path(const std::string& s) { return s.size() > 6 && s.compare(s.size() - 6, 6, ".jinja") == 0; }

}  // namespace

ChatTemplate::ChatTemplate(const Tokenizer& tok, const std::string& name) {
  impl_ = detail::guard([&] {
    auto impl = std::make_unique<Impl>();
    const lt::Tokenizer& et = detail::Access::tokenizer(tok);
    if (std::optional<std::string> src = lt::builtin_chat_template(name)) {
      impl->t = std::make_shared<lt::HfChatTemplate>(std::vector<std::pair<std::string, std::string>>{{"default", *src}},
                                                     "built-in " + name, et.template_special_tokens());
      impl->builtin = true;
    } else if (is_jinja_path(name)) {
      impl->t = lt::HfChatTemplate::from_file(name, et.template_special_tokens());
    } else {
      LT_CHECK(et.has_chat_template(), "{}: this tokenizer has no chat template (no chat_template in tokenizer_config.json "
               "and no chat_template.jinja){}; name one: chatml, llama3, llama2, alpaca or a .jinja file", et.source(),
               name.empty() ? "" : " so it has none named '" + name + "'");
      impl->t = et.chat_template();
      impl->name = name;
      lt::ChatRenderOptions probe;
      probe.name = name;
      impl->t->select(probe);  // leantune::Error listing the names it has
    }
    return impl;
  });
}

ChatTemplate ChatTemplate::from_file(const std::string& path, const std::string& special_tokens_json) {
  ChatTemplate c;
  c.impl_ = detail::guard([&] {
    auto impl = std::make_unique<Impl>();
    ojson special = special_tokens_json.empty() ? ojson::object() : parse_json_arg(special_tokens_json, "special_tokens_json");
    LT_CHECK(special.is_object(), "special_tokens_json: expected a JSON object such as {{\"bos_token\": \"<s>\"}}");
    if (std::optional<std::string> src = lt::builtin_chat_template(path)) {
      impl->t = std::make_shared<lt::HfChatTemplate>(std::vector<std::pair<std::string, std::string>>{{"default", *src}},
                                                     "built-in " + path, special);
      impl->builtin = true;
    } else {
      impl->t = lt::HfChatTemplate::from_file(path, special);
    }
    return impl;
  });
  return c;
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, const ChatOptions& o) const {
  return detail::guard([&] { return impl_->t->apply(messages_json(messages), render_options(o, impl_->name)); });
}

std::string ChatTemplate::apply_json(std::string_view messages_json_text, const ChatOptions& o) const {
  return detail::guard([&] {
    return impl_->t->apply(parse_json_arg(messages_json_text, "messages"), render_options(o, impl_->name));
  });
}

std::vector<ChatSegment> ChatTemplate::segments_json(std::string_view messages_json_text, const ChatOptions& o) const {
  return detail::guard([&] {
    std::vector<ChatSegment> out;
    for (lt::ChatSegment& s : impl_->t->segments(parse_json_arg(messages_json_text, "messages"), render_options(o, impl_->name)))
      out.push_back({std::move(s.text), s.assistant});
    return out;
  });
}

std::string ChatTemplate::render_requests_json(std::string_view requests_json, bool segments) const {
  return detail::guard([&] {
    ojson in = parse_json_arg(requests_json, "requests");
    if (in.is_object()) in = ojson::array({in});
    LT_CHECK(in.is_array(), "requests: expected a JSON object or an array of them");
    ojson out = ojson::array();
    for (size_t i = 0; i < in.size(); ++i) {
      const ojson& r = in[i];
      try {
        LT_CHECK(r.is_object() && r.contains("messages"), "request {}: expected an object with \"messages\"", i);
        lt::ChatRenderOptions o;
        o.name = impl_->name;
        o.add_generation_prompt = r.value("add_generation_prompt", false);
        if (r.contains("tools")) o.tools = r["tools"];
        if (r.contains("vars")) o.vars = r["vars"];
        if (!segments) {
          out.push_back({{"text", impl_->t->apply(r["messages"], o)}});
          continue;
        }
        ojson segs = ojson::array();
        for (const lt::ChatSegment& s : impl_->t->segments(r["messages"], o))
          segs.push_back({{"text", s.text}, {"assistant", s.assistant}});
        out.push_back({{"segments", segs}});
      } catch (const lt::Error& e) {
        out.push_back({{"error", e.what()}});
      }
    }
    return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
}

bool ChatTemplate::encode_with_special() const { return impl_->builtin; }
const std::string& ChatTemplate::origin() const { return impl_->t->origin(); }

// --- the Tokenizer's chat methods ---

bool Tokenizer::has_chat_template() const { return impl_->tok->has_chat_template(); }

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages, const ChatOptions& o) const {
  return ChatTemplate(*this, o.chat_template).apply(messages, o);
}

std::string Tokenizer::apply_chat_template_json(std::string_view messages_json_text, const ChatOptions& o) const {
  return ChatTemplate(*this, o.chat_template).apply_json(messages_json_text, o);
}

namespace {
// A built-in template's text after the BOS the tokenizer's add_special puts first (not its EOS).
std::vector<int> encode_rendered(const lt::Tokenizer& tok, const std::string& text, bool with_bos) {
  std::vector<int> ids;
  if (with_bos) {
    std::vector<int> with = tok.encode("a", true), without = tok.encode("a", false);
    auto it = std::search(with.begin(), with.end(), without.begin(), without.end());
    if (!without.empty() && it != with.end()) ids.assign(with.begin(), it);
  }
  std::vector<int> body = tok.encode(text, false);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}
}  // namespace

std::vector<int> Tokenizer::encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& o) const {
  ChatTemplate t(*this, o.chat_template);
  const std::string text = t.apply(messages, o);
  return detail::guard([&] { return encode_rendered(*impl_->tok, text, t.encode_with_special()); });
}

std::vector<int> Tokenizer::encode_chat_json(std::string_view messages_json_text, const ChatOptions& o) const {
  ChatTemplate t(*this, o.chat_template);
  const std::string text = t.apply_json(messages_json_text, o);
  return detail::guard([&] { return encode_rendered(*impl_->tok, text, t.encode_with_special()); });
}

}  // namespace leantune

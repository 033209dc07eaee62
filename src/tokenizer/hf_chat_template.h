// A model's chat template as transformers applies it: the Jinja source from the tokenizer folder
// (chat_template.jinja, else tokenizer_config.json "chat_template": a string, or a list of named
// templates such as "default" and "tool_use"), rendered by the native Jinja engine with the
// variables transformers passes — messages (keys whose value is null dropped, reasoning fields
// aliased), tools, documents, add_generation_prompt, the special tokens (bos_token, eos_token, ...)
// and any extra variables (date_string, enable_thinking, ...).
// For training, segments() marks the assistant turns: from {% generation %} blocks when the
// template has them (transformers' return_assistant_tokens_mask), else by rendering prefixes of
// the conversation (see segments()).
// Usage:
//   auto t = lt::HfChatTemplate::from_folder("models/SmolLM2-135M-Instruct");  // null: none
//   std::string prompt = t->apply(messages, {.add_generation_prompt = true});
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/template.h"

namespace lt {

struct ChatRenderOptions {
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools;  // a list of tool schemas, or null (the template sees tools = None)
  nlohmann::ordered_json vars;   // an object of more variables (documents, date_string, ...), or null
  std::string name;              // one of names(); empty: "tool_use" when tools are given and it exists, else "default"
};

struct ChatSegment {
  std::string text;
  bool assistant = false;  // an assistant turn's own text and end marker: trained
};

class HfChatTemplate {
 public:
  // The folder's template, or nullptr when it defines none. lt::Error naming the file when the
  // template is malformed (bad JSON shape, a Jinja syntax error or an unsupported construct).
  static std::shared_ptr<const HfChatTemplate> from_folder(const std::string& dir);
  // A .jinja file's template with the special tokens of `special` (bos_token, ...; may be null).
  static std::shared_ptr<const HfChatTemplate> from_file(const std::string& path, const nlohmann::ordered_json& special);
  // Templates by name ("default" for a single one); `origin` names them in messages.
  HfChatTemplate(const std::vector<std::pair<std::string, std::string>>& sources, std::string origin,
                 nlohmann::ordered_json special_tokens);

  // The rendered conversation. lt::Error naming the template line on a rendering failure
  // (raise_exception included) or on messages that are not a non-empty list of objects.
  std::string apply(const nlohmann::ordered_json& messages, const ChatRenderOptions& o) const;
  // The rendered conversation cut into untrained text and assistant segments (concatenated, equal
  // to apply()). Without {% generation %}: for each assistant message i, its turn starts where
  // rendering messages[0..i) with add_generation_prompt and rendering messages[0..i] part, and
  // ends where the latter parts from the whole conversation's rendering (trailing whitespace
  // untrained); lt::Error when the turn cannot be found that way (a template that rewrites
  // earlier turns, e.g. drops their reasoning).
  std::vector<ChatSegment> segments(const nlohmann::ordered_json& messages, const ChatRenderOptions& o) const;

  std::vector<std::string> names() const;
  const std::string& origin() const { return origin_; }
  const nlohmann::ordered_json& special_tokens() const { return special_; }
  const JinjaTemplate& select(const ChatRenderOptions& o) const;

 private:
  std::vector<std::pair<std::string, JinjaTemplate>> templates_;
  std::string origin_;
  nlohmann::ordered_json special_;

  jinja::Rendered render(const JinjaTemplate& t, const nlohmann::ordered_json& messages, const ChatRenderOptions& o,
                         size_t n_messages) const;
};

// The special tokens a template sees, from a tokenizer folder's tokenizer_config.json (and
// special_tokens_map.json): {"bos_token": "<s>", "eos_token": "</s>", ...}; an empty object if none.
nlohmann::ordered_json read_special_tokens(const std::string& dir);

}  // namespace lt

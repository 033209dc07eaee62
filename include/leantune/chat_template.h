// Chat templates: a conversation formatted the way the model defines it. A model's own template
// (its tokenizer_config.json "chat_template", or chat_template.jinja) is a Jinja program; leantune
// renders it natively with the same output as transformers' apply_chat_template (jinja2 with
// trim_blocks and lstrip_blocks, transformers' tojson, raise_exception and strftime_now).
// Built-in templates (chatml, llama3, llama2, alpaca) and .jinja files can be named instead.
//
// Usage:
//   leantune::Tokenizer tok("models/SmolLM2-135M-Instruct");
//   std::vector<leantune::ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi!"}};
//   std::string prompt = tok.apply_chat_template(chat);      // ends with the assistant header
//   std::vector<int> ids = tok.encode_chat(chat);             // ready for Generator::generate_ids
//   // with tools, or any message keys the template reads (tool_calls, reasoning_content, ...):
//   std::string p = tok.apply_chat_template_json(R"([{"role":"user","content":"2+2?"}])",
//                                                {.tools_json = R"([{"type":"function",...}])"});
//   // any template file, without a tokenizer (special tokens in vars_json):
//   leantune::ChatTemplate t = leantune::ChatTemplate::from_file("my.jinja", R"({"bos_token":"<s>"})");
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace leantune {

class Tokenizer;

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant" | "tool" | ...
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;  // end with the header the model answers after
  std::string tools_json;     // a JSON array of tool schemas ("" : none; the template sees tools = None)
  std::string vars_json;      // a JSON object of more template variables (date_string, enable_thinking, ...)
  // Which template: "" the tokenizer's own; chatml | llama3 | llama2 | alpaca; a path ending in
  // .jinja; or the name of one of the model's templates (e.g. "tool_use").
  std::string chat_template;
};

// A piece of a rendered conversation: an assistant turn's own text (what training learns) or not.
struct ChatSegment {
  std::string text;
  bool assistant = false;
};

class ChatTemplate {
 public:
  // The template `name` names (as ChatOptions::chat_template) for `tok`. leantune::Error when
  // the tokenizer has no template of its own and none is named, or the name is not known.
  explicit ChatTemplate(const Tokenizer& tok, const std::string& name = "");
  // A .jinja file (or a built-in name); special_tokens_json: {"bos_token": ..., ...} or "".
  static ChatTemplate from_file(const std::string& path, const std::string& special_tokens_json = "");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  std::string apply(const std::vector<ChatMessage>& messages, const ChatOptions& o = {}) const;
  // messages_json: a JSON array of message objects (any keys the template reads).
  std::string apply_json(std::string_view messages_json, const ChatOptions& o = {}) const;
  // The rendering cut into segments, assistant turns marked (by {% generation %} blocks, else by
  // rendering prefixes of the conversation); concatenated they equal apply_json's text.
  std::vector<ChatSegment> segments_json(std::string_view messages_json, const ChatOptions& o = {}) const;

  // Testing aid (`leantune chat-template --input`): `requests_json` is one request object
  // {"messages": [...], "tools"?: [...], "add_generation_prompt"?: bool, "vars"?: {...}} or an
  // array of them. Returns a JSON array, one entry per request: {"text": ...} (with `segments`:
  // {"segments": [{"text", "assistant"}, ...]}), or {"error": message} when that one fails.
  std::string render_requests_json(std::string_view requests_json, bool segments) const;

  // A built-in template's text is encoded with the tokenizer's BOS (as training does); a model's
  // own template writes its BOS itself and is encoded without special tokens (as transformers).
  bool encode_with_special() const;
  const std::string& origin() const;  // the file (and key) it came from, or "built-in <name>"

 private:
  ChatTemplate() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace leantune

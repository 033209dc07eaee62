// Chat formatting for /v1/chat/completions: a conversation becomes one prompt text ending where the
// assistant's reply begins, plus the texts that end the reply (end-of-turn markers). This is the
// one place the server formats chats: with the model's own Jinja chat template when it has one
// (leantune/chat_template.h; the request's messages and tools go to it as they are), else with the
// built-in formats below.
#pragma once
#include <string>
#include <vector>

namespace leantune {
class Tokenizer;
}

namespace lt::serve {

struct ChatMessage {
  std::string role;     // system | user | assistant
  std::string content;
};

struct ChatPrompt {
  std::string text;                // the prompt text
  bool add_special = true;         // encode with the tokenizer's special tokens (BOS as it adds); a
                                   // model's own template writes its BOS itself (false)
  std::vector<std::string> stops;  // end-of-turn markers: the reply ends at any of them
};

// "chatml" (<|im_start|>role ... <|im_end|>), "llama3" (header / <|eot_id|> blocks), "llama2"
// ([INST] ... [/INST]) or "plain" ("User: ...\nAssistant:"); "model" (the tokenizer's own Jinja
// template), one of the model's named templates (e.g. "tool_use") or a FILE.jinja; "auto" is
// "model" when the tokenizer has a chat template, else chatml or llama3 when the tokenizer has
// their markers as tokens, else plain. leantune::Error for another name.
std::string resolve_chat_template(const std::string& name, const leantune::Tokenizer& tok);

// Whether the resolved name is rendered by the Jinja engine (format_chat_json).
bool is_jinja_template(const std::string& resolved);

// The prompt for a Jinja template: `messages_json` (an array of message objects, any keys the
// template reads) and `tools_json` ("" : none). Stops are the tokenizer's end-of-turn special tokens.
ChatPrompt format_chat_json(const std::string& resolved, const std::string& messages_json,
                            const std::string& tools_json, const leantune::Tokenizer& tok);

// The prompt for `messages` in template `name` (resolved). leantune::Error for a role other than
// system, user and assistant, or no messages.
ChatPrompt format_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                       const leantune::Tokenizer& tok);

}  // namespace lt::serve

// Chat formatting for /v1/chat/completions: a conversation becomes one prompt text ending where the
// assistant's reply begins, plus the texts that end the reply (end-of-turn markers). This is the
// one place the server formats chats, so a chat-template engine (the model's own Jinja template)
// can replace it without touching the rest.
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
  std::string text;                // to encode with the tokenizer's special tokens (BOS as it adds)
  std::vector<std::string> stops;  // end-of-turn markers: the reply ends at any of them
};

// "chatml" (<|im_start|>role ... <|im_end|>), "llama3" (header / <|eot_id|> blocks), "llama2"
// ([INST] ... [/INST]) or "plain" ("User: ...\nAssistant:"); "auto" picks chatml or llama3 when
// the tokenizer has their markers as tokens, else plain. leantune::Error for another name.
std::string resolve_chat_template(const std::string& name, const leantune::Tokenizer& tok);

// The prompt for `messages` in template `name` (resolved). leantune::Error for a role other than
// system, user and assistant, or no messages.
ChatPrompt format_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                       const leantune::Tokenizer& tok);

}  // namespace lt::serve

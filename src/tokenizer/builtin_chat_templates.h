// The built-in chat templates (chatml, llama3, llama2, alpaca) as Jinja sources, for prompting a
// model with a named template (generate --chat --chat-template chatml). Each renders the same text
// as the training renderer of that name (train/chat_template.h), without the BOS the tokenizer's
// add_special puts first: encode their output with add_special, as training does; a model's own
// template writes its BOS itself and is encoded without.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace lt {

// The source for a built-in name ("chatml", "llama3", "llama2", "alpaca"; case-insensitive,
// '-' and '_' ignored), nullopt for another name.
std::optional<std::string> builtin_chat_template(std::string_view name);

}  // namespace lt

// Built-in prompt templates for fine-tuning data: chat templates (ChatML, Llama 3, Llama 2, Alpaca)
// for {"messages": [...]} records and the Alpaca instruction template for {"instruction", "input",
// "output"} records. A template renders to a list of pieces, each either text or one special token
// id, and each marked `train` (the loss is taken on its tokens) or not. The data loader encodes the
// pieces one by one and concatenates them, so labels line up with ids exactly (DESIGN: loss on
// assistant turns only, as Axolotl's train_on_inputs=false).
// What is trained: an assistant message's content and its end-of-turn marker (ChatML <|im_end|>,
// Llama 3 <|eot_id|>, Llama 2 </s>, Alpaca EOS), so the model learns to stop; role headers,
// system and user turns are never trained.
// A model's own Jinja template (tokenizer/hf_chat_template.h) is used instead when the config names
// none: resolve_chat_format() says which applies.
// Usage: RenderedPrompt r = render_chat(ChatTemplate::ChatML, msgs, tok.bos_id(), tok.eos_id());
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lt {

class HfChatTemplate;
class Tokenizer;

enum class ChatTemplate { ChatML, Llama3, Llama2, Alpaca };

// "chatml" | "llama3" | "llama2" | "alpaca" (case-insensitive, '-'/'_' ignored); lt::Error otherwise.
ChatTemplate parse_chat_template(std::string_view name);
const char* chat_template_name(ChatTemplate t);

// What `chat_template:` in a training config names for {"messages"} records:
//   "" or "auto"                       the model's own template (tokenizer_config.json /
//                                      chat_template.jinja) when it has one, else chatml;
//   chatml | llama3 | llama2 | alpaca  a built-in template (below);
//   a path ending in .jinja            that Jinja template;
//   another name                       one of the model's named templates (e.g. tool_use).
struct ChatFormat {
  ChatTemplate builtin = ChatTemplate::ChatML;
  std::shared_ptr<const HfChatTemplate> jinja;  // when set, it is used and `builtin` is not
  std::string jinja_name;                       // which of the model's named templates ("": its default)
};
// lt::Error when the name is none of the above or the model has no such template.
ChatFormat resolve_chat_format(std::string_view name, const Tokenizer& tok);
// Config validation without the tokenizer: the value is one of the forms above.
void check_chat_template_name(std::string_view name);

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct PromptPiece {
  std::string text;   // used when token_id < 0
  int token_id = -1;  // a special token inserted by id (Llama 2's </s> and <s> between turns)
  bool train = false; // loss on this piece's tokens
};

struct RenderedPrompt {
  std::vector<PromptPiece> pieces;
  // The loader appends the tokenizer's EOS after the pieces when append_eos (and the tokenizer has
  // one); eos_train says whether that EOS is a trained label.
  bool append_eos = true;
  bool eos_train = false;
};

// Renders a conversation. Roles must be system/user/assistant (lt::Error naming the bad role or
// order otherwise); at least one assistant message is required. bos_id/eos_id (-1 = none) are
// used only by templates that place them between turns (Llama 2). BOS at the very start is not
// part of the rendering: the loader adds what the tokenizer's add_special adds.
RenderedPrompt render_chat(ChatTemplate t, std::span<const ChatMessage> messages, int bos_id, int eos_id);

// The Stanford Alpaca template; `input` may be empty (the no-input variant is used). The output
// and the appended EOS are trained, the instruction part is not.
RenderedPrompt render_alpaca(std::string_view instruction, std::string_view input, std::string_view output);

}  // namespace lt

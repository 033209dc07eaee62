// Chat and instruction templates rendered as trained / untrained pieces (see chat_template.h).
// The text of each template follows the model family's reference chat template (HF
// tokenizer_config.json chat_template): ChatML as Qwen/OpenHermes, Llama 3 header/eot blocks,
// Llama 2 [INST] with <<SYS>> folded into the first user turn, Alpaca as Stanford Alpaca.
#include "train/chat_template.h"

#include <cctype>

#include <filesystem>

#include "core/error.h"
#include "tokenizer/hf_chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lt {

namespace {

const char* kAlpacaPreambleInput =
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n";
const char* kAlpacaPreambleNoInput =
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n";

void add_text(RenderedPrompt& r, std::string text, bool train) {
  if (text.empty()) return;
  r.pieces.push_back(PromptPiece{std::move(text), -1, train});
}

void add_token(RenderedPrompt& r, int id, bool train) {
  if (id >= 0) r.pieces.push_back(PromptPiece{{}, id, train});
}

// system only first, then user/assistant; alternation user, assistant, user, ... when `alternate`.
void check_messages(std::span<const ChatMessage> m, bool alternate, ChatTemplate t) {
  LT_CHECK(!m.empty(), "chat: 'messages' is empty");
  bool any_assistant = false;
  size_t first = (m[0].role == "system") ? 1 : 0;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& role = m[i].role;
    LT_CHECK(role == "system" || role == "user" || role == "assistant",
             "chat: message {} has role '{}'; expected system, user or assistant", i, role);
    LT_CHECK(role != "system" || i == 0, "chat: message {} is a system message; only the first message may be one", i);
    if (alternate && i >= first) {
      const char* want = ((i - first) % 2 == 0) ? "user" : "assistant";
      LT_CHECK(role == want, "chat: message {} has role '{}' but the {} template needs user and assistant to alternate "
               "starting with user (expected '{}')", i, role, chat_template_name(t), want);
    }
    any_assistant = any_assistant || role == "assistant";
  }
  LT_CHECK(any_assistant, "chat: no assistant message, so nothing to train on");
}

RenderedPrompt render_chatml(std::span<const ChatMessage> m) {
  RenderedPrompt r;
  r.append_eos = false;  // <|im_end|> is the stop token
  for (size_t i = 0; i < m.size(); ++i) {
    bool last = i + 1 == m.size();
    add_text(r, "<|im_start|>" + m[i].role + "\n", false);
    bool a = m[i].role == "assistant";
    add_text(r, m[i].content + "<|im_end|>", a);
    if (!last) add_text(r, "\n", false);
  }
  return r;
}

RenderedPrompt render_llama3(std::span<const ChatMessage> m) {
  RenderedPrompt r;
  r.append_eos = false;  // <|eot_id|> is the stop token
  for (const ChatMessage& msg : m) {
    add_text(r, "<|start_header_id|>" + msg.role + "<|end_header_id|>\n\n", false);
    add_text(r, msg.content + "<|eot_id|>", msg.role == "assistant");
  }
  return r;
}

// <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST] ...
RenderedPrompt render_llama2(std::span<const ChatMessage> m, int bos_id, int eos_id) {
  RenderedPrompt r;
  r.append_eos = false;  // </s> is written after every assistant turn
  size_t i = 0;
  std::string system;
  if (m[0].role == "system") system = m[i++].content;
  bool first_turn = true;
  for (; i < m.size(); ++i) {
    if (m[i].role == "user") {
      if (!first_turn) add_token(r, bos_id, false);
      std::string s = "[INST] ";
      if (first_turn && !system.empty()) s += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
      add_text(r, s + m[i].content + " [/INST]", false);
      first_turn = false;
    } else {
      add_text(r, " " + m[i].content + " ", true);
      add_token(r, eos_id, true);
    }
  }
  return r;
}

// {system or the Alpaca preamble}### Instruction:\n{user}\n\n### Response:\n{assistant}</s>\n\n...
RenderedPrompt render_alpaca_chat(std::span<const ChatMessage> m, int eos_id) {
  RenderedPrompt r;
  r.append_eos = false;
  size_t i = 0;
  if (m[0].role == "system") {
    add_text(r, m[i++].content + "\n\n", false);
  } else {
    add_text(r, kAlpacaPreambleNoInput, false);
  }
  for (; i < m.size(); ++i) {
    if (m[i].role == "user") {
      add_text(r, "### Instruction:\n" + m[i].content + "\n\n### Response:\n", false);
    } else {
      add_text(r, m[i].content, true);
      add_token(r, eos_id, true);
      if (i + 1 < m.size()) add_text(r, "\n\n", false);
    }
  }
  return r;
}

}  // namespace

ChatTemplate parse_chat_template(std::string_view name) {
  std::string n;
  for (char c : name) {
    if (c == '-' || c == '_') continue;
    n += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (n == "chatml") return ChatTemplate::ChatML;
  if (n == "llama3") return ChatTemplate::Llama3;
  if (n == "llama2") return ChatTemplate::Llama2;
  if (n == "alpaca") return ChatTemplate::Alpaca;
  fail("chat_template '{}' is not known; expected chatml, llama3, llama2 or alpaca", name);
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::ChatML: return "chatml";
    case ChatTemplate::Llama3: return "llama3";
    case ChatTemplate::Llama2: return "llama2";
    case ChatTemplate::Alpaca: return "alpaca";
  }
  return "?";
}

RenderedPrompt render_chat(ChatTemplate t, std::span<const ChatMessage> messages, int bos_id, int eos_id) {
  bool alternate = t == ChatTemplate::Llama2 || t == ChatTemplate::Alpaca;
  check_messages(messages, alternate, t);
  switch (t) {
    case ChatTemplate::ChatML: return render_chatml(messages);
    case ChatTemplate::Llama3: return render_llama3(messages);
    case ChatTemplate::Llama2: return render_llama2(messages, bos_id, eos_id);
    case ChatTemplate::Alpaca: return render_alpaca_chat(messages, eos_id);
  }
  fail("chat: unknown template");
}

RenderedPrompt render_alpaca(std::string_view instruction, std::string_view input, std::string_view output) {
  RenderedPrompt r;
  std::string prompt = input.empty() ? kAlpacaPreambleNoInput : kAlpacaPreambleInput;
  prompt += "### Instruction:\n";
  prompt += instruction;
  if (!input.empty()) {
    prompt += "\n\n### Input:\n";
    prompt += input;
  }
  prompt += "\n\n### Response:\n";
  add_text(r, std::move(prompt), false);
  add_text(r, std::string(output), true);
  r.append_eos = true;
  r.eos_train = true;
  return r;
}

namespace {
bool is_jinja_path(std::string_view name) {
  return name.size() > 6 && name.substr(name.size() - 6) == ".jinja";
}
bool is_builtin(std::string_view name) {
  try {
    parse_chat_template(name);
    return true;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

void check_chat_template_name(std::string_view name) {
  if (name.empty() || name == "auto" || is_jinja_path(name) || is_builtin(name)) return;
  for (char c : name)
    LT_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-',
             "chat_template '{}' is not known; expected chatml, llama3, llama2, alpaca, auto (the model's own), a "
             ".jinja file, or the name of one of the model's templates", name);
}

ChatFormat resolve_chat_format(std::string_view name, const Tokenizer& tok) {
  ChatFormat f;
  if (name.empty() || name == "auto") {
    if (tok.has_chat_template()) f.jinja = tok.chat_template();  // else the chatml default
    return f;
  }
  if (is_builtin(name)) {
    f.builtin = parse_chat_template(name);
    return f;
  }
  if (is_jinja_path(name)) {
    std::error_code ec;
    LT_CHECK(std::filesystem::is_regular_file(std::string(name), ec), "chat_template: {}: no such file", name);
    f.jinja = HfChatTemplate::from_file(std::string(name), tok.template_special_tokens());
    return f;
  }
  check_chat_template_name(name);
  LT_CHECK(tok.has_chat_template(), "chat_template '{}' is not known: it is not chatml, llama3, llama2, alpaca or a "
           ".jinja file, and the tokenizer {} has no chat template of its own", name, tok.source());
  f.jinja = tok.chat_template();
  f.jinja_name = std::string(name);
  ChatRenderOptions probe;
  probe.name = f.jinja_name;
  f.jinja->select(probe);  // lt::Error listing the names it has
  return f;
}

}  // namespace lt

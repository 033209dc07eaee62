// The built-in chat formats (chat_format.h), the same texts as the training templates
// (src/train/chat_template.cpp) with the assistant's header appended as the generation prompt.
#include "chat_format.h"

#include "leantune/chat_template.h"
#include "leantune/error.h"
#include "leantune/tokenizer.h"

namespace lt::serve {

namespace {

// Whether `text` encodes to one special token of `tok`.
bool has_special(const leantune::Tokenizer& tok, const std::string& text) {
  const std::vector<int> ids = tok.encode(text, false);
  return ids.size() == 1 && tok.is_special(ids[0]);
}

void check_roles(const std::vector<ChatMessage>& m) {
  if (m.empty()) throw leantune::Error("messages: the conversation is empty; give at least one message");
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i].role != "system" && m[i].role != "user" && m[i].role != "assistant")
      throw leantune::Error("messages[" + std::to_string(i) + "].role: '" + leantune::excerpt(m[i].role, 40) +
                            "' is not a role this server formats; use system, user or assistant");
}

ChatPrompt chatml(const std::vector<ChatMessage>& m) {
  ChatPrompt p;
  for (const auto& msg : m) p.text += "<|im_start|>" + msg.role + "\n" + msg.content + "<|im_end|>\n";
  p.text += "<|im_start|>assistant\n";
  p.stops = {"<|im_end|>"};
  return p;
}

ChatPrompt llama3(const std::vector<ChatMessage>& m) {
  ChatPrompt p;
  for (const auto& msg : m)
    p.text += "<|start_header_id|>" + msg.role + "<|end_header_id|>\n\n" + msg.content + "<|eot_id|>";
  p.text += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  p.stops = {"<|eot_id|>"};
  return p;
}

ChatPrompt llama2(const std::vector<ChatMessage>& m, const leantune::Tokenizer& tok) {
  ChatPrompt p;
  size_t i = 0;
  std::string system;
  if (m[0].role == "system") system = m[i++].content;
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  bool first = true;
  for (; i < m.size(); ++i) {
    if (m[i].role == "assistant") {
      p.text += " " + m[i].content + " " + eos;
      continue;
    }
    if (!first) p.text += bos;
    std::string s = "[INST] ";
    if (first && !system.empty()) s += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
    p.text += s + m[i].content + " [/INST]";
    first = false;
  }
  return p;
}

ChatPrompt plain(const std::vector<ChatMessage>& m) {
  ChatPrompt p;
  for (const auto& msg : m) {
    std::string role = msg.role;
    role[0] = char(role[0] - 'a' + 'A');
    p.text += role + ": " + msg.content + "\n";
  }
  p.text += "Assistant:";
  p.stops = {"\nUser:"};
  return p;
}

}  // namespace

std::string resolve_chat_template(const std::string& name, const leantune::Tokenizer& tok) {
  if (name == "auto" && tok.has_chat_template()) return resolve_chat_template("model", tok);
  if (name == "auto") {
    if (has_special(tok, "<|im_start|>")) return "chatml";
    if (has_special(tok, "<|start_header_id|>")) return "llama3";
    return "plain";
  }
  if (name == "chatml" || name == "llama3" || name == "llama2" || name == "plain") return name;
  const bool file = name.size() > 6 && name.compare(name.size() - 6, 6, ".jinja") == 0;
  if (name == "model" || file || tok.has_chat_template()) {
    leantune::ChatTemplate check(tok, name == "model" ? "" : name);  // leantune::Error saying what is wrong
    return name;
  }
  throw leantune::Error("--chat-template: '" + leantune::excerpt(name, 40) +
                        "' is not known; use auto, model, chatml, llama3, llama2, plain or a .jinja file");
}

bool is_jinja_template(const std::string& resolved) {
  return resolved != "chatml" && resolved != "llama3" && resolved != "llama2" && resolved != "plain";
}

ChatPrompt format_chat_json(const std::string& resolved, const std::string& messages_json,
                            const std::string& tools_json, const leantune::Tokenizer& tok) {
  leantune::ChatTemplate t(tok, resolved == "model" ? "" : resolved);
  leantune::ChatOptions o;
  o.add_generation_prompt = true;
  o.tools_json = tools_json;
  ChatPrompt p;
  p.text = t.apply_json(messages_json, o);
  p.add_special = t.encode_with_special();
  // the reply ends at EOS (stop_at_eos) or at any end-of-turn marker the vocabulary has as a token
  for (const char* m : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>"})
    if (has_special(tok, m)) p.stops.push_back(m);
  return p;
}

ChatPrompt format_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                       const leantune::Tokenizer& tok) {
  check_roles(messages);
  if (name == "chatml") return chatml(messages);
  if (name == "llama3") return llama3(messages);
  if (name == "llama2") return llama2(messages, tok);
  return plain(messages);
}

}  // namespace lt::serve

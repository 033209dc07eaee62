// Tokenizer: Hugging Face tokenizer.json (byte-level BPE with regex pre-tokenizers, SentencePiece-
// style BPE with byte fallback, added tokens), llama2.c tokenizer .bin files and the tokenizer a
// GGUF model carries, behind one class.
// A Tokenizer is immutable: any number of threads may encode and decode with one at once.
//
// Usage:
//   leantune::Tokenizer tok("models/SmolLM2-135M");            // the folder's tokenizer.json
//   std::vector<int> ids = tok.encode("Hello world");          // BOS/EOS as the tokenizer says
//   std::string text = tok.decode(ids, /*skip_special=*/true);  // "Hello world"
//   std::vector<int> chat = tok.encode_chat({{"user", "Hi!"}});   // the model's chat template (chat_template.h)
// A model path may also be a Hugging Face repo id in the local cache: "HuggingFaceTB/SmolLM2-135M"
// (optionally "@revision"); nothing is downloaded.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leantune/chat_template.h"

namespace leantune {

class Model;
namespace detail {
struct Access;
}

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json file, a folder holding one (and optionally
  // tokenizer_config.json), a llama2.c tokenizer .bin, or a GGUF model (*.gguf or the GGUF magic:
  // the tokenizer in its tokenizer.ggml.* metadata). *.json is tokenizer.json, *.bin / *.model
  // llama2.c; another name is tokenizer.json when it starts with '{' or '['. leantune::Error naming
  // the file on bad input.
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Text to ids. add_special: add BOS / EOS as the tokenizer's post-processor (llama2.c: BOS)
  // says. Special tokens written in the text are recognised either way.
  std::vector<int> encode(std::string_view text, bool add_special = true) const;
  // Ids to text; skip_special drops special tokens.
  std::string decode(std::span<const int> ids, bool skip_special = false) const;

  int vocab_size() const;
  int bos_id() const;  // -1 when there is none
  int eos_id() const;  // -1 when there is none
  bool is_special(int id) const;
  std::string token_text(int id) const;  // the raw piece of a token
  const std::string& path() const;       // the file it was read from

  // leantune::Error naming both files when this tokenizer's ids do not fit `model`'s embedding
  // rows, or a llama2.c tokenizer has another number of entries than the model's vocabulary.
  void check_fits(const Model& model) const;

  // Chat templates (chat_template.h): the folder's own (tokenizer_config.json / chat_template.jinja),
  // or the one o.chat_template names. apply_* return the text; encode_chat* the ids to generate
  // from (a model's template is encoded without special tokens, as transformers does; a built-in
  // one after the tokenizer's BOS, as training encodes it).
  bool has_chat_template() const;
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, const ChatOptions& o = {}) const;
  std::string apply_chat_template_json(std::string_view messages_json, const ChatOptions& o = {}) const;
  std::vector<int> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& o = {}) const;
  std::vector<int> encode_chat_json(std::string_view messages_json, const ChatOptions& o = {}) const;

  // Encodes each string of the JSON array in the file `json_path` and returns a JSON array of
  // {"ids": [...], "decoded": "..."} (the ids decoded again, skip_special as given), one line.
  std::string encode_json_file(const std::string& json_path, bool add_special, bool skip_special) const;

 private:
  friend struct detail::Access;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace leantune

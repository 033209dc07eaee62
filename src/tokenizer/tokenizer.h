// Tokenizer: Hugging Face tokenizer.json (byte-level BPE with regex pre-tokenizers, and
// SentencePiece-style BPE with byte fallback) and llama2.c tokenizer.bin, behind one interface.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt {

class HfChatTemplate;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads `path`: a tokenizer.json file, a folder holding tokenizer.json (and optionally
  // tokenizer_config.json), or a llama2.c tokenizer .bin. The format follows the name: *.json is
  // tokenizer.json, *.bin / *.model llama2.c; another name is tokenizer.json when its first
  // non-blank byte is '{' or '['. lt::Error naming the file on bad input.
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  // Encodes text. add_special: add BOS/EOS as the post-processor / tokenizer_config.json says
  // (llama2.c: BOS only). Special/added tokens written in the text are recognized.
  virtual std::vector<int> encode(std::string_view text, bool add_special) const = 0;
  // Decodes ids to text; skip_special drops special tokens.
  virtual std::string decode(std::span<const int> ids, bool skip_special) const = 0;

  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 when none
  virtual int eos_id() const = 0;  // -1 when none
  virtual bool is_special(int id) const = 0;
  // The raw piece string of a token (for debugging / listing).
  virtual std::string token_text(int id) const = 0;
  // true for a llama2.c tokenizer: one entry per model token, so its size must equal the model's.
  virtual bool one_entry_per_model_token() const { return false; }
  // The file it was read from (for messages).
  const std::string& source() const { return source_; }

  // The chat template of the folder it was loaded from (tokenizer_config.json / chat_template.jinja),
  // nullptr when there is none. A template that does not parse (an unsupported construct) is an
  // lt::Error raised here, on use, so that plain encoding still works.
  std::shared_ptr<const HfChatTemplate> chat_template() const;
  bool has_chat_template() const { return chat_template_ || !chat_template_error_.empty(); }
  // The special tokens a chat template sees ({"bos_token": ..., "eos_token": ...}): the folder's
  // tokenizer_config.json, else the text of the BOS / EOS tokens.
  nlohmann::ordered_json template_special_tokens() const;

  // Streaming decode: push ids one at a time; each call returns the text that is now complete
  // (valid UTF-8 only; bytes of a multi-byte character split across byte-fallback tokens are held
  // back until the character is complete). Equal, concatenated, to decode() of all ids.
  // Incremental: each push decodes only the ids since the last emitted text plus one token of
  // context before them (so O(new tokens), not O(all ids)).
  class StreamDecoder {
   public:
    explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true) : tok_(tok), skip_(skip_special) {}
    std::string push(int id);
    // Starts after `ids` (e.g. the prompt) without emitting them, so that what follows is
    // decoded in context (a continuation keeps the space a SentencePiece piece carries).
    void prime(std::span<const int> ids);
    std::string flush();  // whatever is left (invalid trailing bytes as U+FFFD)

   private:
    const Tokenizer& tok_;
    bool skip_;
    std::vector<int> ids_;  // the window: one context token (already emitted), then the ids not yet final
    size_t emitted_ = 0;    // bytes of decode(ids_) already returned
  };

 protected:
  std::string source_;
  std::shared_ptr<const HfChatTemplate> chat_template_;
  std::string chat_template_error_;
  nlohmann::ordered_json special_tokens_;  // from the folder's config files; empty when not a folder
};

// Where a model and its tokenizer meet (generate, train): lt::Error naming both when the
// tokenizer's ids run past the model's `model_vocab` embedding rows, or when a llama2.c tokenizer
// has a different number of entries than the model's vocabulary (truncated, or another model's).
// `model_path` names the model in the message (empty: "the model").
void check_tokenizer_fits_model(const Tokenizer& tok, int model_vocab, const std::string& model_path);

}  // namespace lt

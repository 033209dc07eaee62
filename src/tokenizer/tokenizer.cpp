// Tokenizer::load dispatches on the name, then the content: a folder (tokenizer.json + optional
// tokenizer_config.json), *.json (tokenizer.json), *.bin / *.model (llama2.c), else a JSON file
// when the first non-blank byte is '{' or '[', a llama2.c tokenizer otherwise.
// StreamDecoder decodes a window of ids and returns the new complete text, holding back a
// trailing U+FFFD or incomplete character that later tokens may still complete, and everything
// while the last token is a "<0xNN>" byte piece. Once the text is complete after an ordinary
// token, the window restarts at that token: it stays as context, so the next token decodes as in
// the whole sequence (a SentencePiece decoder strips the leading space of the first piece only,
// and that is the context token's, already emitted), and each push costs O(window), not O(all).
#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "core/hf_cache.h"
#include "core/mapped_file.h"
#include "tokenizer/hf_chat_template.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/utf8.h"

namespace lt {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path_or_repo) {
  const std::string path = resolve_model_path(path_or_repo);
  std::error_code ec;
  LT_CHECK(fs::exists(path, ec), "{}: tokenizer path does not exist", path);
  if (fs::is_directory(path, ec)) {
    std::string json_path = (fs::path(path) / "tokenizer.json").string();
    LT_CHECK(fs::is_regular_file(json_path, ec),
             "{}: folder has no tokenizer.json (SentencePiece tokenizer.model files are not supported)", path);
    std::string cfg_path = (fs::path(path) / "tokenizer_config.json").string();
    std::string cfg = fs::is_regular_file(cfg_path, ec) ? read_text_file(cfg_path) : std::string();
    std::unique_ptr<Tokenizer> t = load_hf_tokenizer(json_path, read_text_file(json_path), cfg_path, cfg);
    t->special_tokens_ = read_special_tokens(path);
    try {
      t->chat_template_ = HfChatTemplate::from_folder(path);
    } catch (const Error& e) {
      t->chat_template_error_ = e.what();
    }
    return t;
  }
  std::string bytes = read_text_file(path);
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".json") return load_hf_tokenizer(path, bytes, "", "");
  if (ext == ".model") {
    try {
      return load_llama2c_tokenizer(path, bytes);
    } catch (const Error& e) {
      fail("{} (a SentencePiece tokenizer.model is not supported: give the model's tokenizer.json, or a llama2.c "
           "tokenizer.bin exported from it)", e.what());
    }
  }
  size_t i = bytes.find_first_not_of(" \t\r\n");
  const bool json = i != std::string::npos && (bytes[i] == '{' || bytes[i] == '[');
  if (ext != ".bin" && json) return load_hf_tokenizer(path, bytes, "", "");
  return load_llama2c_tokenizer(path, bytes);
}

std::shared_ptr<const HfChatTemplate> Tokenizer::chat_template() const {
  if (!chat_template_error_.empty()) throw Error(chat_template_error_);
  return chat_template_;
}

nlohmann::ordered_json Tokenizer::template_special_tokens() const {
  nlohmann::ordered_json s = special_tokens_.is_object() ? special_tokens_ : nlohmann::ordered_json::object();
  if (!s.contains("bos_token") && bos_id() >= 0) s["bos_token"] = token_text(bos_id());
  if (!s.contains("eos_token") && eos_id() >= 0) s["eos_token"] = token_text(eos_id());
  return s;
}

void check_tokenizer_fits_model(const Tokenizer& tok, int model_vocab, const std::string& model_path) {
  const std::string model = model_path.empty() ? std::string("the model") : "the model " + model_path;
  if (tok.one_entry_per_model_token())
    LT_CHECK(tok.vocab_size() == model_vocab,
             "{}: the llama2.c tokenizer has {} entries but {} has a vocabulary of {}: a llama2.c "
             "tokenizer lists one entry per model token, so this file is truncated or belongs to another model; "
             "give the tokenizer the model was trained with",
             tok.source(), tok.vocab_size(), model, model_vocab);
  LT_CHECK(tok.vocab_size() <= model_vocab,
           "{}: the tokenizer has ids up to {} but {} has a vocabulary of {} (ids 0..{}); give the "
           "tokenizer the model was trained with",
           tok.source(), tok.vocab_size() - 1, model, model_vocab, model_vocab - 1);
}

std::string Tokenizer::StreamDecoder::push(int id) {
  ids_.push_back(id);
  // A run of byte-fallback pieces is decoded as a whole (ByteFallback turns the entire run into
  // U+FFFDs when it is not valid UTF-8), so nothing is final until the run ends.
  // A skipped special token (or an unknown id) adds nothing and lets the runs around it join.
  std::string piece = tok_.token_text(id);
  if (piece.empty() || (skip_ && tok_.is_special(id))) return {};
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') return {};
  std::string text = tok_.decode(ids_, skip_);
  std::string_view v = text;
  // Hold back what a later token may still change: an incomplete character, or U+FFFD standing
  // for the partial byte run of a byte-fallback / byte-level character.
  if (utf8::incomplete_tail_len(v) > 0) return {};
  if (v.size() >= 3 && v.substr(v.size() - 3) == utf8::kReplacement) return {};
  std::string out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  // Everything so far is final and ends with this ordinary token: restart the window at it.
  ids_.assign(1, id);
  emitted_ = tok_.decode(ids_, skip_).size();
  return out;
}

void Tokenizer::StreamDecoder::prime(std::span<const int> ids) {
  ids_.assign(ids.begin(), ids.end());
  emitted_ = tok_.decode(ids_, skip_).size();
}

std::string Tokenizer::StreamDecoder::flush() {
  std::string text = tok_.decode(ids_, skip_);
  std::string out = text.size() > emitted_ ? utf8::lossy(std::string_view(text).substr(emitted_)) : std::string();
  emitted_ = text.size();
  return out;
}

}  // namespace lt

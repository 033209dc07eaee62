// GGUF tokenizer metadata -> gguf::Vocab -> Tokenizer (make_gguf_tokenizer), and the default
// tokenizer of each model format.
#include "model/model_tokenizer.h"

#include <climits>
#include <filesystem>

#include "core/error.h"
#include "io/model_files.h"

namespace lt {

namespace fs = std::filesystem;

namespace {

int token_id(const gguf::Reader& r, const char* key, int def) {
  const std::optional<int64_t> v = r.get_int(key);
  if (!v) return def;
  LT_CHECK(*v >= -1 && *v <= INT_MAX, "{}: GGUF key '{}' is {}; expected a token id", r.path(), key, *v);
  return int(*v);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

gguf::Vocab read_gguf_vocab(const gguf::Reader& r) {
  gguf::Vocab v;
  v.model = r.get_string("tokenizer.ggml.model").value_or("");
  LT_CHECK(!v.model.empty(), "{}: no tokenizer.ggml.model key: the GGUF carries no tokenizer; pass one with "
           "--tokenizer", r.path());
  v.pre = r.get_string("tokenizer.ggml.pre").value_or("");
  const std::vector<std::string>* tokens = r.get_strings("tokenizer.ggml.tokens");
  LT_CHECK(tokens, "{}: no tokenizer.ggml.tokens key: the GGUF carries no vocabulary; pass a tokenizer with "
           "--tokenizer", r.path());
  v.tokens = *tokens;
  v.scores = r.get_floats("tokenizer.ggml.scores").value_or(std::vector<float>());
  for (int64_t t : r.get_ints("tokenizer.ggml.token_type").value_or(std::vector<int64_t>())) {
    LT_CHECK(t >= INT32_MIN && t <= INT32_MAX, "{}: tokenizer.ggml.token_type holds {}", r.path(), t);
    v.types.push_back(int32_t(t));
  }
  if (const std::vector<std::string>* m = r.get_strings("tokenizer.ggml.merges")) v.merges = *m;
  const bool spm = v.model == "llama";
  v.bos = token_id(r, "tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  v.eos = token_id(r, "tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  v.unk = token_id(r, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  v.pad = token_id(r, "tokenizer.ggml.padding_token_id", -1);
  const bool llama3 = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3";
  v.add_bos = r.get_bool("tokenizer.ggml.add_bos_token").value_or(spm || llama3);
  v.add_eos = r.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = r.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  return v;
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  const gguf::Reader r(path);
  return make_gguf_tokenizer(read_gguf_vocab(r), path);
}

std::unique_ptr<Tokenizer> load_tokenizer_for_model(const std::string& model_path, const std::string& tokenizer_path) {
  if (!tokenizer_path.empty())
    return is_gguf_model_path(tokenizer_path) ? load_gguf_tokenizer(tokenizer_path) : Tokenizer::load(tokenizer_path);
  if (is_gguf_model_path(model_path)) return load_gguf_tokenizer(model_path);
  if (fs::is_directory(model_path)) return Tokenizer::load(model_path);
  if (ends_with(model_path, ".safetensors")) {
    const fs::path dir = fs::path(model_path).parent_path();
    return Tokenizer::load(dir.empty() ? "." : dir.string());
  }
  fail("{}: a llama2.c checkpoint needs --tokenizer (e.g. tok512.bin)", model_path);
}

}  // namespace lt

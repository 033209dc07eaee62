// make_gguf_tokenizer: GGUF vocabulary data -> Tokenizer.
//   "llama": an SpmVocab: "▁" written back as ' ', control / unknown tokens special, unused ones
//            decoded as nothing, control and user-defined tokens recognized in the text, byte
//            tokens "<0xNN>" as byte fallback (the unknown token for a byte without one),
//            decoded as llama.cpp does.
//   "gpt2":  a tokenizer.json built in memory for the Hugging Face pipeline (tokenizer_json.cpp):
//            the BPE vocabulary and merges (unused tokens left out: they decode to nothing, as
//            in llama.cpp), control / user-defined tokens as added tokens, the
//            pre-tokenizer llama.cpp uses for `pre` (written as the model's own tokenizer.json
//            writes it), a ByteLevel decoder, BOS / EOS and add_bos / add_eos as a
//            tokenizer_config.json says them.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace lt {

using json = nlohmann::json;

namespace {

// The pre-tokenizer regexes of the models' tokenizer.json files (llama.cpp's llm_tokenizer_bpe
// uses the same ones for these `pre` names).
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::vector<int32_t> token_types(const gguf::Vocab& v, const std::string& source) {
  if (v.types.empty()) return std::vector<int32_t>(v.tokens.size(), gguf::kTokNormal);
  LT_CHECK(v.types.size() == v.tokens.size(), "{}: tokenizer.ggml.token_type has {} entries for {} tokens", source,
           v.types.size(), v.tokens.size());
  return v.types;
}

void check_id(int id, const gguf::Vocab& v, const char* key, const std::string& source) {
  LT_CHECK(id >= -1 && id < int(v.tokens.size()), "{}: tokenizer.ggml.{} {} is outside the vocabulary ({} tokens)",
           source, key, id, v.tokens.size());
}

// "<0xNN>" -> NN, else -1.
int byte_of(const std::string& s) {
  if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
  int v = 0;
  for (char c : s.substr(3, 2)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::unique_ptr<Tokenizer> make_spm(const gguf::Vocab& v, const std::string& source) {
  const std::vector<int32_t> types = token_types(v, source);
  LT_CHECK(v.scores.size() == v.tokens.size(), "{}: tokenizer.ggml.scores has {} entries for {} tokens; a llama "
           "(SentencePiece) tokenizer needs one score per token", source, v.scores.size(), v.tokens.size());
  SpmVocab s;
  s.byte_ids.fill(-1);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    std::string piece;
    for (size_t k = 0; k < v.tokens[i].size(); ++k) {  // "▁" (U+2581) -> ' '
      if (v.tokens[i].compare(k, 3, "\xE2\x96\x81") == 0) piece += ' ', k += 2;
      else piece += v.tokens[i][k];
    }
    const int32_t t = types[i];
    s.special.push_back(t == gguf::kTokControl || t == gguf::kTokUnknown);
    s.unused.push_back(t == gguf::kTokUnused);
    if (t == gguf::kTokControl || t == gguf::kTokUser) s.text_tokens.push_back(int(i));
    const int b = byte_of(v.tokens[i]);
    if (b >= 0 && s.byte_ids[size_t(b)] < 0 && (t == gguf::kTokByte || v.types.empty())) s.byte_ids[size_t(b)] = int(i);
    s.pieces.push_back(std::move(piece));
  }
  s.scores = v.scores;
  s.bos = v.bos, s.eos = v.eos;
  s.unk = v.unk >= 0 && size_t(v.unk) < v.tokens.size() ? v.unk : -1;
  s.add_bos = v.add_bos, s.add_eos = v.add_eos, s.add_space_prefix = v.add_space_prefix;
  s.llama_cpp_decode = true;
  return make_spm_tokenizer(source, std::move(s));
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split_then_byte_level(const char* regex) {
  json split = {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  return {{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level(false)})}};
}

json pre_tokenizer(const std::string& pre, const std::string& source) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return split_then_byte_level(kLlama3Regex);
  if (pre == "qwen2") return split_then_byte_level(kQwen2Regex);
  if (pre == "smollm") {
    json digits = {{"type", "Digits"}, {"individual_digits", true}};
    return {{"type", "Sequence"}, {"pretokenizers", json::array({digits, byte_level(true)})}};
  }
  if (pre.empty() || pre == "default" || pre == "gpt-2") return byte_level(true);
  fail("{}: tokenizer.ggml.pre '{}' is not supported; supported: {}", source, excerpt(pre), gguf::kSupportedPre);
}

// A merge "a b" as ["a", "b"], split at the first space after the first byte (llama.cpp's rule).
json merge_pair(const std::string& m, size_t rank, const std::string& source) {
  const size_t sp = m.find(' ', 1);
  LT_CHECK(sp != std::string::npos, "{}: tokenizer.ggml.merges[{}] '{}' is not two tokens separated by a space",
           source, rank, excerpt(m));
  return json::array({m.substr(0, sp), m.substr(sp + 1)});
}

std::unique_ptr<Tokenizer> make_byte_level(const gguf::Vocab& v, const std::string& source) {
  const std::vector<int32_t> types = token_types(v, source);
  json vocab = json::object(), added = json::array(), merges = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int32_t t = types[i];
    if (t == gguf::kTokUnused) continue;  // never produced, decoded as nothing (as llama.cpp)
    const bool dup = vocab.contains(v.tokens[i]);  // the first id keeps the text; a later one is an added token
    if (!dup) vocab[v.tokens[i]] = i;
    if (dup || t == gguf::kTokControl || t == gguf::kTokUser)
      added.push_back({{"id", i}, {"content", v.tokens[i]}, {"special", t != gguf::kTokUser}, {"normalized", false},
                       {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  }
  for (size_t r = 0; r < v.merges.size(); ++r) merges.push_back(merge_pair(v.merges[r], r, source));
  const bool llama3 = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3";
  json j = {{"added_tokens", added}, {"normalizer", nullptr}, {"pre_tokenizer", pre_tokenizer(v.pre, source)},
            {"post_processor", nullptr}, {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", llama3},
                       {"byte_fallback", false}}}};
  json cfg = {{"add_bos_token", v.add_bos}, {"add_eos_token", v.add_eos}};
  if (v.bos >= 0) cfg["bos_token"] = v.tokens[size_t(v.bos)];
  if (v.eos >= 0) cfg["eos_token"] = v.tokens[size_t(v.eos)];
  return make_hf_tokenizer(source, j, cfg, v.tokens.size());
}

}  // namespace

std::unique_ptr<Tokenizer> make_gguf_tokenizer(const gguf::Vocab& v, const std::string& source) {
  LT_CHECK(!v.tokens.empty(), "{}: tokenizer.ggml.tokens is missing or empty: the GGUF has no tokenizer; pass one "
           "with --tokenizer", source);
  check_id(v.bos, v, "bos_token_id", source);
  check_id(v.eos, v, "eos_token_id", source);
  LT_CHECK(!v.add_bos || v.bos >= 0, "{}: tokenizer.ggml.add_bos_token is true but there is no bos_token_id", source);
  LT_CHECK(!v.add_eos || v.eos >= 0, "{}: tokenizer.ggml.add_eos_token is true but there is no eos_token_id", source);
  if (v.model == "llama") return make_spm(v, source);
  if (v.model == "gpt2") return make_byte_level(v, source);
  fail("{}: tokenizer.ggml.model '{}' is not supported; supported: llama (SentencePiece BPE), gpt2 (byte-level BPE)",
       source, excerpt(v.model));
}

}  // namespace lt

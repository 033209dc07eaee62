// Model + tokenizer -> llama-architecture GGUF: hyperparameters as llama.* keys, the tokenizer as
// tokenizer.ggml.* (from a tokenizer.json or a llama2.c tokenizer .bin), HF tensor names mapped
// to llama.cpp's (token_embd, blk.N.attn_q, ...), q/k rows of HF checkpoints permuted.
#include "model/gguf_export.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "core/mapped_file.h"
#include "core/rope_freqs.h"
#include "io/gguf_names.h"
#include "io/gguf_reader.h"
#include "model/model_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "core/lora_config.h"

namespace lt::gguf {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int32_t kNormal = kTokNormal, kUnknown = kTokUnknown, kControl = kTokControl, kUser = kTokUser,
                  kUnused = kTokUnused, kByte = kTokByte;

bool is_byte_piece(const std::string& s) {
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && std::isxdigit((unsigned char)s[3]) &&
         std::isxdigit((unsigned char)s[4]);
}

// llama2.c's tokenizer.py wrote BOS/EOS as "\n<s>\n" / "\n</s>\n" and SentencePiece's "▁" as " ".
Vocab read_llama2c_vocab(const std::string& path, const std::string& bytes) {
  Vocab v;
  v.model = "llama";
  size_t p = 4;  // after max_token_length
  LT_CHECK(bytes.size() >= 4, "{}: too short for a llama2.c tokenizer ({} bytes)", path, bytes.size());
  while (p < bytes.size()) {
    float score;
    int32_t len;
    LT_CHECK(p + 8 <= bytes.size(), "{}: token {} is truncated at byte {}", path, v.tokens.size(), p);
    std::memcpy(&score, bytes.data() + p, 4);
    std::memcpy(&len, bytes.data() + p + 4, 4);
    p += 8;
    LT_CHECK(len >= 0 && size_t(len) <= bytes.size() - p, "{}: token {} has length {} past the end of the file",
             path, v.tokens.size(), len);
    std::string piece = bytes.substr(p, size_t(len)), text;
    p += size_t(len);
    if (piece == "\n<s>\n" || piece == "\n</s>\n") piece = piece.substr(1, piece.size() - 2);
    for (char ch : piece) text += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
    const int id = int(v.tokens.size());
    v.types.push_back(id == 0 ? kUnknown : id <= 2 ? kControl : is_byte_piece(text) ? kByte : kNormal);
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
  }
  v.unk = 0, v.bos = 1, v.eos = 2, v.add_bos = true;  // run.c's encode adds BOS
  return v;
}

// tokenizer.ggml.pre for a byte-level BPE, from its pre-tokenizer (llama.cpp's names).
std::string gpt2_pre(const json& pre) {
  const std::string s = pre.dump();
  if (s.find("(?i:'s|'t|'re|'ve|'m|'ll|'d)") != std::string::npos)
    return s.find("p{N}{1,3}") != std::string::npos ? "llama-bpe" : "qwen2";
  if (s.find("\"Digits\"") != std::string::npos) return "smollm";
  return "gpt-2";
}

// "a b" or ["a", "b"] -> "a b"
std::string merge_string(const json& m, const std::string& path) {
  if (m.is_string()) return m.get<std::string>();
  LT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
           "{}: a merge is neither \"a b\" nor [\"a\", \"b\"]: {}", path, m.dump());
  return m[0].get<std::string>() + " " + m[1].get<std::string>();
}

// Scores a SentencePiece-style BPE from its merges: the token a merge makes scores -(rank + 1),
// so llama.cpp's SPM tokenizer (highest score first) merges in rank order.
std::vector<float> scores_from_merges(const std::vector<std::string>& merges, const std::vector<std::string>& tokens) {
  std::map<std::string, int> id;
  for (size_t i = 0; i < tokens.size(); ++i) id.emplace(tokens[i], int(i));
  std::vector<float> s(tokens.size(), 0.0f);
  std::vector<bool> set(tokens.size(), false);
  for (size_t r = 0; r < merges.size(); ++r) {
    std::string joined = merges[r];
    joined.erase(joined.find(' '), 1);
    auto it = id.find(joined);
    if (it != id.end() && !set[size_t(it->second)]) s[size_t(it->second)] = -float(r + 1), set[size_t(it->second)] = true;
  }
  return s;
}

Vocab read_hf_vocab(const std::string& path) {
  const std::string json_path = fs::is_directory(path) ? (fs::path(path) / "tokenizer.json").string() : path;
  const json j = load_json_file(json_path);  // depth-bounded: the dump()s below recurse per level
  LT_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "{}: not a tokenizer.json", json_path);
  const json& m = j["model"];
  const std::string around = j.value("pre_tokenizer", json()).dump() + j.value("decoder", json()).dump();
  Vocab v;
  if (around.find("ByteLevel") != std::string::npos) v.model = "gpt2";
  else if (m.value("byte_fallback", false) || around.find("Metaspace") != std::string::npos ||
           around.find("\xE2\x96\x81") != std::string::npos) v.model = "llama";
  LT_CHECK(!v.model.empty() && m.value("type", "") == "BPE",
           "{}: only byte-level BPE and SentencePiece-style BPE tokenizers can be written to GGUF", json_path);
  auto tok = Tokenizer::load(path);
  std::map<int, bool> added;  // id -> special
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) added[a.value("id", -1)] = a.value("special", false);
  std::vector<std::string> merges;
  if (m.contains("merges") && m["merges"].is_array())
    for (const auto& x : m["merges"]) merges.push_back(merge_string(x, json_path));
  const std::string unk = m.contains("unk_token") && m["unk_token"].is_string() ? m["unk_token"].get<std::string>() : "";
  for (int i = 0; i < tok->vocab_size(); ++i) {
    std::string t = tok->token_text(i);
    int32_t type = tok->is_special(i) ? kControl : added.count(i) ? kUser : kNormal;
    if (t.empty()) t = "[PAD" + std::to_string(i) + "]", type = kUnused;
    else if (v.model == "llama" && type == kNormal && is_byte_piece(t)) type = kByte;
    if (!unk.empty() && t == unk) type = kUnknown, v.unk = i;
    v.tokens.push_back(t);
    v.types.push_back(type);
  }
  if (v.model == "gpt2") v.pre = gpt2_pre(j.value("pre_tokenizer", json())), v.merges = std::move(merges);
  else v.scores = scores_from_merges(merges, v.tokens);
  v.bos = tok->bos_id(), v.eos = tok->eos_id();
  const std::vector<int> ends = tok->encode("", true);  // what the post-processor adds
  v.add_bos = !ends.empty() && ends.front() == v.bos;  // one id equal to both: taken as BOS
  v.add_eos = !ends.empty() && ends.back() == v.eos && (ends.size() == 2 || !v.add_bos);
  return v;
}

void pad_vocab(Vocab& v, int n_vocab, const std::string& path) {
  LT_CHECK(int(v.tokens.size()) <= n_vocab,
           "{}: the tokenizer has {} tokens but the model's embedding only {} rows; pass the model's own tokenizer "
           "with --tokenizer", path, v.tokens.size(), n_vocab);
  for (int i = int(v.tokens.size()); i < n_vocab; ++i) {
    v.tokens.push_back("[PAD" + std::to_string(i) + "]");
    v.types.push_back(kUnused);
    if (!v.scores.empty()) v.scores.push_back(-1e9f);  // never a merge result
  }
}

uint32_t file_type(TensorType t) {  // llama_ftype
  switch (t) {
    case TensorType::F32: return 0;
    case TensorType::F16: return 1;
    case TensorType::Q4_0: return 2;
    case TensorType::Q8_0: return 7;
    case TensorType::BF16: return 32;
  }
  return 0;
}

void add_hparams(Writer& w, const ModelConfig& c, TensorType type, const std::string& name) {
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", name);
  w.add_u32("general.file_type", file_type(type));
  w.add_u32("general.alignment", uint32_t(kAlignment));
  w.add_u32("llama.context_length", uint32_t(c.max_seq_len));
  w.add_u32("llama.embedding_length", uint32_t(c.dim));
  w.add_u32("llama.block_count", uint32_t(c.n_layers));
  w.add_u32("llama.feed_forward_length", uint32_t(c.hidden_dim));
  w.add_u32("llama.rope.dimension_count", uint32_t(c.head_dim));
  w.add_u32("llama.attention.head_count", uint32_t(c.n_heads));
  w.add_u32("llama.attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.add_u32("llama.attention.key_length", uint32_t(c.head_dim));
  w.add_u32("llama.attention.value_length", uint32_t(c.head_dim));
  w.add_f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  w.add_f32("llama.rope.freq_base", c.rope_theta);
  w.add_u32("llama.vocab_size", uint32_t(c.vocab_size));
}

void add_vocab(Writer& w, const Vocab& v) {
  w.add_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_strings("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32s("tokenizer.ggml.scores", v.scores);
  w.add_i32s("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty()) w.add_strings("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
  if (v.unk >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
  if (v.pad >= 0) w.add_u32("tokenizer.ggml.padding_token_id", uint32_t(v.pad));
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", v.add_eos);
}

// A 2-D weight at `type`, or f16 when a block type does not divide its rows (as convert_hf_to_gguf).
void add_matrix(Writer& w, const std::string& name, int64_t rows, int64_t cols, const float* data, TensorType type) {
  const bool block = type == TensorType::Q8_0 || type == TensorType::Q4_0;
  w.add_tensor(name, {rows, cols}, data, block && cols % kBlock != 0 ? TensorType::F16 : type);
}

// Tensor `hf` (f32 from `weight`) under its GGUF name (io/gguf_names.h).
void add_named(Writer& w, const std::string& hf, const std::vector<int64_t>& shape, const float* data,
               TensorType type) {
  const std::string name = gguf_name(hf);
  LT_ASSERT(!name.empty());
  if (shape.size() == 2) add_matrix(w, name, shape[0], shape[1], data, type);
  else w.add_tensor(name, shape, data, type);
}

void add_layer(Writer& w, const ModelConfig& c, int l, const std::function<const float*(const std::string&)>& weight,
               TensorType type) {
  const std::string hf = "model.layers." + std::to_string(l) + ".";
  add_named(w, hf + "input_layernorm.weight", {c.dim}, weight(hf + "input_layernorm.weight"), TensorType::F32);
  add_named(w, hf + "post_attention_layernorm.weight", {c.dim}, weight(hf + "post_attention_layernorm.weight"),
            TensorType::F32);
  for (Proj p : kProjs) {
    const auto [in, out] = c.linear_shape(p);
    const bool permute = p <= Proj::K && c.rope_layout == RopeLayout::Halves;
    const int heads = p == Proj::Q ? c.n_heads : c.n_kv_heads;
    const std::string wn = proj_hf_name(l, p, "weight"), bn = proj_hf_name(l, p, "bias");
    const float* W = weight(wn);
    std::vector<float> P = permute ? permute_qk(W, out, in, heads) : std::vector<float>();
    add_named(w, wn, {out, in}, permute ? P.data() : W, type);
    if (!c.has_bias(p)) continue;
    const float* b = weight(bn);
    std::vector<float> Pb = permute ? permute_qk(b, out, 1, heads) : std::vector<float>();
    add_named(w, bn, {out}, permute ? Pb.data() : b, TensorType::F32);
  }
}

// llama.cpp applies Llama 3 rope scaling through rope_freqs.weight: per pair, the factor the
// frequency is divided by (unscaled / scaled inverse frequency); linear scaling through
// llama.rope.scaling.type / .factor.
void add_rope_freqs(Writer& w, const ModelConfig& c) {
  if (c.rope_scaling.type.empty()) return;
  if (c.rope_scaling.type == "linear") {  // as convert_hf_to_gguf.py: two keys, no tensor
    w.add_string("llama.rope.scaling.type", "linear");
    w.add_f32("llama.rope.scaling.factor", c.rope_scaling.factor);
    return;
  }
  LT_CHECK(c.rope_scaling.type == "llama3", "rope_scaling type '{}' cannot be written to GGUF (supported: linear, "
           "llama3)", c.rope_scaling.type);
  ModelConfig plain = c;
  plain.rope_scaling.type.clear();
  const std::vector<float> scaled = rope_inv_freq(c), base = rope_inv_freq(plain);
  std::vector<float> f(scaled.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = base[i] / scaled[i];
  w.add_tensor("rope_freqs.weight", {int64_t(f.size())}, f.data(), TensorType::F32);
}

}  // namespace

Vocab read_vocab(const std::string& path, int n_vocab) {
  LT_CHECK(fs::exists(path), "{}: tokenizer path does not exist", path);
  Vocab v;
  if (is_gguf_file(path)) {
    v = read_gguf_vocab(Reader(path));
  } else if (fs::is_directory(path)) {
    v = read_hf_vocab(path);
  } else {
    const std::string bytes = read_text_file(path);
    const size_t i = bytes.find_first_not_of(" \t\r\n");
    v = i != std::string::npos && bytes[i] == '{' ? read_hf_vocab(path) : read_llama2c_vocab(path, bytes);
  }
  pad_vocab(v, n_vocab, path);
  return v;
}

std::vector<float> permute_qk(const float* w, int64_t rows, int64_t cols, int n_head) {
  const int64_t hs = rows / n_head, half = hs / 2;
  LT_CHECK(hs * n_head == rows && half * 2 == hs, "cannot permute {} q/k rows into {} heads of even size", rows,
           n_head);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(&out[size_t((h * hs + 2 * i + j) * cols)], w + (h * hs + j * half + i) * cols,
                    size_t(cols) * sizeof(float));
  return out;
}

// The GGUF files written here use llama.cpp's llama architecture, which has no per-head q / k norms.
static void check_llama_architecture(const ModelConfig& c) {
  LT_CHECK(!c.gemma(), "GGUF export: a {} model (GeGLU, four norms per layer, (1 + w) norms, soft-capping) does not "
           "fit the llama architecture these GGUF files use; export is supported for llama, mistral and qwen2 models",
           c.arch);
  LT_CHECK(!c.qk_norm, "GGUF export: a {} model (q_norm / k_norm per head) does not fit the llama architecture these "
           "GGUF files use; export is supported for llama, mistral and qwen2 models", c.arch);
}

size_t write_model_gguf(const std::string& path, const ModelConfig& c,
                        const std::function<const float*(const std::string&)>& weight, const Vocab& vocab,
                        TensorType type, const std::string& name) {
  LT_CHECK(int(vocab.tokens.size()) == c.vocab_size, "GGUF export: {} tokens for a vocabulary of {}",
           vocab.tokens.size(), c.vocab_size);
  check_llama_architecture(c);
  Writer w;
  add_hparams(w, c, type, name);
  add_vocab(w, vocab);
  add_named(w, "model.embed_tokens.weight", {c.vocab_size, c.dim}, weight("model.embed_tokens.weight"), type);
  for (int l = 0; l < c.n_layers; ++l) add_layer(w, c, l, weight, type);
  add_named(w, "model.norm.weight", {c.dim}, weight("model.norm.weight"), TensorType::F32);
  if (!c.tie_embeddings) add_named(w, "lm_head.weight", {c.vocab_size, c.dim}, weight("lm_head.weight"), type);
  add_rope_freqs(w, c);
  w.write(path);
  return w.tensor_count();
}

namespace {

std::vector<float> f32_of(const TensorInfo& t) {
  std::vector<float> v(size_t(t.numel()));
  convert_to_f32(v.data(), t.data, t.dtype, v.size());
  return v;
}

// lora_a / lora_b of projection m in layer l, when the adapter has them.
void add_lora_pair(Writer& w, const ModelConfig& c, const LoadedAdapter& ad, int l, int m, TensorType type) {
  const std::string& mod = llama_linear_modules()[size_t(m)];
  const TensorInfo* A = ad.tensors.find(peft_lora_key(l, mod, true));
  const TensorInfo* B = ad.tensors.find(peft_lora_key(l, mod, false));
  if (!A || !B) return;
  const std::string base = gguf_name(proj_hf_name(l, Proj(m), "weight"));
  const auto [in, out] = c.linear_shape(m);
  const int64_t r = A->shape[0];
  std::vector<float> a = f32_of(*A), b = f32_of(*B);
  if (m <= 1 && c.rope_layout == RopeLayout::Halves) b = permute_qk(b.data(), out, r, m == 0 ? c.n_heads : c.n_kv_heads);
  add_matrix(w, base + ".lora_a", r, in, a.data(), type);
  add_matrix(w, base + ".lora_b", out, r, b.data(), type);
}

}  // namespace

size_t write_lora_gguf(const std::string& path, const ModelConfig& c, const LoadedAdapter& ad,
                       const std::string& adapter_dir, TensorType type, const std::string& name) {
  check_adapter_matches_model(ad, c, adapter_dir);
  check_llama_architecture(c);
  LT_CHECK(!ad.config.use_dora, "{}: a DoRA adapter (use_dora) rescales each row by its magnitude, which a llama.cpp "
           "LoRA GGUF cannot carry; export the merged model instead (--model BASE --adapter {})", adapter_dir,
           adapter_dir);
  for (const auto& [key, t] : ad.tensors.all())
    LT_CHECK(key.size() < 5 || key.compare(key.size() - 5, 5, ".bias") != 0,
             "{}: tensor {}: the adapter trains a bias, which a llama.cpp LoRA GGUF cannot carry; export the "
             "merged model instead (--model BASE --adapter {})", adapter_dir, key, adapter_dir);
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.type", "adapter");
  w.add_string("general.name", name);
  w.add_u32("general.alignment", uint32_t(kAlignment));
  w.add_string("adapter.type", "lora");
  w.add_f32("adapter.lora.alpha", ad.config.scaling() * float(ad.config.r));
  for (int l = 0; l < c.n_layers; ++l)
    for (int m = 0; m < 7; ++m) add_lora_pair(w, c, ad, l, m, type);
  LT_CHECK(w.tensor_count() > 0, "{}: the adapter has no LoRA tensors", adapter_dir);
  w.write(path);
  return w.tensor_count();
}

}  // namespace lt::gguf

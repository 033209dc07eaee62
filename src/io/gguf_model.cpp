// llama GGUF -> ModelConfig + TensorSet: hyperparameters from llama.* (as llama.cpp's
// llm_load_hparams reads them for LLM_ARCH_LLAMA), tensors renamed to HF names, q/k rows
// un-permuted, block types dequantized.
#include "io/gguf_model.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/rope_freqs.h"
#include "io/gguf_names.h"

namespace lt {

namespace {

constexpr const char* kSupportedArchs = "llama";

// llama.<key> as an int in [lo, INT_MAX]; `def` when absent (required when def is nullopt).
int hparam(const gguf::Reader& r, const std::string& key, std::optional<int64_t> def, int64_t lo = 1) {
  const std::string k = "llama." + key;
  std::optional<int64_t> v = r.get_int(k);
  if (!v) {
    LT_CHECK(def.has_value(), "{}: GGUF key '{}' is missing; a llama model GGUF needs it", r.path(), k);
    return int(*def);
  }
  LT_CHECK(*v >= lo && *v <= INT_MAX, "{}: GGUF key '{}' is {}; expected {} to {}", r.path(), k, *v, lo, INT_MAX);
  return int(*v);
}

// llama.attention.head_count_kv: a number, or one per layer (all equal: per-layer counts differ
// only in models leantune does not run).
int kv_heads(const gguf::Reader& r, int n_heads) {
  const std::string k = "llama.attention.head_count_kv";
  const gguf::Value* v = r.find(k);
  if (!v || v->type != gguf::ValueType::Array) return hparam(r, "attention.head_count_kv", n_heads);
  const auto per_layer = r.get_ints(k);
  LT_CHECK(!per_layer->empty(), "{}: GGUF key '{}' is an empty array", r.path(), k);
  for (int64_t n : *per_layer)
    LT_CHECK(n == per_layer->front(), "{}: GGUF key '{}' differs between layers ([{}]); leantune runs models with "
             "the same number of key/value heads in every layer", r.path(), k, fmt::join(*per_layer, ", "));
  LT_CHECK(per_layer->front() >= 1 && per_layer->front() <= INT_MAX, "{}: GGUF key '{}' is {}; expected a positive "
           "count", r.path(), k, per_layer->front());
  return int(per_layer->front());
}

void check_architecture(const gguf::Reader& r) {
  const auto arch = r.get_string("general.architecture");
  LT_CHECK(arch.has_value(), "{}: no general.architecture key: not a model GGUF", r.path());
  LT_CHECK(r.get_string("general.type").value_or("model") != "adapter",
           "{}: a LoRA adapter GGUF, not a model; pass the model with --model", r.path());
  LT_CHECK(*arch == kSupportedArchs, "{}: general.architecture '{}' is not supported; leantune reads GGUF models of "
           "architecture: {}", r.path(), excerpt(*arch), kSupportedArchs);
  const int experts = hparam(r, "expert_count", 0, 0);
  LT_CHECK(experts == 0, "{}: a mixture-of-experts llama ({} experts, llama.expert_count); leantune runs dense "
           "models only", r.path(), experts);
}

void read_shapes(const gguf::Reader& r, ModelConfig& c) {
  c.dim = hparam(r, "embedding_length", std::nullopt);
  c.n_layers = hparam(r, "block_count", std::nullopt);
  c.hidden_dim = hparam(r, "feed_forward_length", std::nullopt);
  c.n_heads = hparam(r, "attention.head_count", std::nullopt);
  c.n_kv_heads = kv_heads(r, c.n_heads);
  LT_CHECK(r.find("llama.attention.key_length") || c.dim % c.n_heads == 0, "{}: llama.embedding_length {} is not a "
           "multiple of llama.attention.head_count {} and llama.attention.key_length is missing", r.path(), c.dim,
           c.n_heads);
  c.head_dim = hparam(r, "attention.key_length", c.dim / c.n_heads);
  const int v_len = hparam(r, "attention.value_length", c.head_dim);
  LT_CHECK(v_len == c.head_dim, "{}: llama.attention.value_length {} differs from key_length {}; leantune runs "
           "equal key and value head sizes", r.path(), v_len, c.head_dim);
  const int rot = hparam(r, "rope.dimension_count", c.head_dim);
  LT_CHECK(rot == c.head_dim, "{}: llama.rope.dimension_count {} is not the head size {}: partial rotary embeddings "
           "are not supported", r.path(), rot, c.head_dim);
  c.max_seq_len = hparam(r, "context_length", std::nullopt);
  const gguf::TensorEntry* embd = r.find_tensor("token_embd.weight");
  LT_CHECK(embd && embd->shape.size() == 2, "{}: no 2-D tensor token_embd.weight (the embedding)", r.path());
  LT_CHECK(embd->shape[0] >= 1 && embd->shape[0] <= INT_MAX, "{}: token_embd.weight has {} rows", r.path(),
           embd->shape[0]);
  c.vocab_size = int(embd->shape[0]);
  const int v = hparam(r, "vocab_size", c.vocab_size);
  LT_CHECK(v == c.vocab_size, "{}: llama.vocab_size {} differs from the {} rows of token_embd.weight", r.path(), v,
           c.vocab_size);
}

// llama.<key> as a positive finite f32; `def` when absent (required when def is nullopt).
float fparam(const gguf::Reader& r, const std::string& key, std::optional<double> def) {
  const std::string k = "llama." + key;
  const std::optional<double> v = r.get_float(k);
  LT_CHECK(v || def, "{}: GGUF key '{}' is missing; a llama model GGUF needs it", r.path(), k);
  const double x = v.value_or(def.value_or(0));
  LT_CHECK(std::isfinite(x) && x > 0 && x <= FLT_MAX, "{}: GGUF key '{}' is {}; expected a positive number", r.path(),
           k, x);
  return float(x);
}

void read_rope(const gguf::Reader& r, ModelConfig& c) {
  c.norm_eps = fparam(r, "attention.layer_norm_rms_epsilon", std::nullopt);
  c.rope_theta = fparam(r, "rope.freq_base", 10000.0);
  c.rope_layout = RopeLayout::Halves;  // the q/k rows are un-permuted on load
  const std::string scaling = r.get_string("llama.rope.scaling.type").value_or("none");
  LT_CHECK(scaling == "none" || scaling == "linear", "{}: llama.rope.scaling.type '{}' is not supported (supported: "
           "none, linear, and Llama 3 scaling through rope_freqs.weight)", r.path(), excerpt(scaling));
  const gguf::TensorEntry* t = r.find_tensor("rope_freqs.weight");
  if (scaling == "linear") {
    LT_CHECK(!t, "{}: both llama.rope.scaling.type linear and rope_freqs.weight; expected one of them", r.path());
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = fparam(r, "rope.scaling.factor", std::nullopt);
  }
  if (!t) return;
  LT_CHECK(t->type == gguf::TensorType::F32 && t->shape == std::vector<int64_t>{c.head_dim / 2},
           "{}: rope_freqs.weight is {} [{}]; expected f32 [{}] (one factor per rotated pair)", r.path(),
           gguf::type_name(t->type), fmt::join(t->shape, ", "), c.head_dim / 2);
  std::vector<float> f(size_t(c.head_dim / 2));
  std::memcpy(f.data(), t->data, f.size() * sizeof(float));
  validate_config(c, r.path());  // rope_inv_freq needs a sane head size and theta
  const auto s = llama3_scaling_from_factors(c, f);
  LT_CHECK(s.has_value(), "{}: rope_freqs.weight holds frequency factors [{}] that no Llama 3 rope scaling gives; "
           "only that scaling is supported", r.path(), fmt::join(f, ", "));
  c.rope_scaling = *s;
}

// Un-permutes the rows of a q/k tensor (`rows` rows of `row_bytes`) from llama.cpp's interleaved
// order to HF's: HF row h*HS + j*HS/2 + i <- GGUF row h*HS + 2i + j.
void unpermute_rows(uint8_t* dst, const uint8_t* src, int64_t rows, size_t row_bytes, int n_head) {
  const int64_t hs = rows / n_head, half = hs / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + size_t(h * hs + j * half + i) * row_bytes, src + size_t(h * hs + 2 * i + j) * row_bytes,
                    row_bytes);
}

// The HF tensor of GGUF tensor `t`: in place, or converted into memory `set` owns.
TensorInfo convert_tensor(const gguf::TensorEntry& t, const std::string& hf, const ModelConfig& c, TensorSet& set) {
  TensorInfo ti;
  ti.name = hf;
  ti.shape = t.shape;
  ti.file = set.source;
  const uint8_t* src = t.data;
  size_t nbytes = t.nbytes;
  if (t.type == gguf::TensorType::Q8_0 || t.type == gguf::TensorType::Q4_0) {
    nbytes = size_t(t.numel()) * sizeof(float);
    auto* out = reinterpret_cast<float*>(set.allocate(nbytes));
    (t.type == gguf::TensorType::Q8_0 ? gguf::dequantize_q8_0 : gguf::dequantize_q4_0)(t.data, t.numel(), out);
    src = reinterpret_cast<const uint8_t*>(out);
    ti.dtype = DType::F32;
  } else {
    ti.dtype = t.type == gguf::TensorType::F32 ? DType::F32 : t.type == gguf::TensorType::F16 ? DType::F16 : DType::BF16;
  }
  const bool q = hf.find(".q_proj.") != std::string::npos, k = hf.find(".k_proj.") != std::string::npos;
  if (q || k) {
    const int heads = q ? c.n_heads : c.n_kv_heads;
    const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
    LT_CHECK(rows == int64_t(heads) * c.head_dim, "{}: GGUF tensor '{}' has {} rows; expected {} ({} heads of {})",
             set.source, t.name, rows, int64_t(heads) * c.head_dim, heads, c.head_dim);
    uint8_t* dst = set.allocate(nbytes);
    unpermute_rows(dst, src, rows, nbytes / size_t(rows), heads);
    src = dst;
  }
  ti.data = src;
  ti.nbytes = nbytes;
  return ti;
}

// Whether every linear weight of every block is stored as `type` (blocks checked by check_blocks later).
bool all_linears_are(const gguf::Reader& r, int n_layers, gguf::TensorType type) {
  for (int l = 0; l < n_layers; ++l)
    for (Proj p : kProjs) {
      const gguf::TensorEntry* t = r.find_tensor(fmt::format("blk.{}.{}.weight", l, gguf::proj_gguf_name(p)));
      if (!t || t->type != type || t->shape.size() != 2) return false;
    }
  return true;
}

// Linear weight `t` (q8_0 / q4_0) as its stored blocks, part "<hf>.blocks": in place, q/k rows un-permuted
// into memory `set` owns (a row is cols / 32 whole blocks).
TensorInfo stored_blocks(const gguf::TensorEntry& t, const std::string& hf, const ModelConfig& c, TensorSet& set) {
  TensorInfo ti;
  ti.name = hf + ".blocks";
  ti.dtype = DType::U8;
  ti.shape = {int64_t(t.nbytes)};
  ti.file = set.source;
  ti.data = t.data;
  ti.nbytes = t.nbytes;
  const bool q = hf.find(".q_proj.") != std::string::npos, k = hf.find(".k_proj.") != std::string::npos;
  if (q || k) {
    const int heads = q ? c.n_heads : c.n_kv_heads;
    const int64_t rows = t.shape[0];
    LT_CHECK(rows == int64_t(heads) * c.head_dim, "{}: GGUF tensor '{}' has {} rows; expected {} ({} heads of {})",
             set.source, t.name, rows, int64_t(heads) * c.head_dim, heads, c.head_dim);
    uint8_t* dst = set.allocate(t.nbytes);
    unpermute_rows(dst, t.data, rows, t.nbytes / size_t(rows), heads);
    ti.data = dst;
  }
  return ti;
}

// The names of block l's tensors that every llama block has (norms, then the seven projections).
std::vector<std::string> block_tensor_names(int l) {
  std::vector<std::string> names = {fmt::format("blk.{}.attn_norm.weight", l), fmt::format("blk.{}.ffn_norm.weight", l)};
  for (Proj p : kProjs) names.push_back(fmt::format("blk.{}.{}.weight", l, gguf::proj_gguf_name(p)));
  return names;
}

// llama.block_count against the tensors the file holds: a small file announcing many blocks is
// refused here, before anything per block is built.
void check_block_count(const gguf::Reader& r, int n_layers) {
  const int64_t needed = int64_t(n_layers) * int64_t(block_tensor_names(0).size()) + 2;  // + token_embd, output_norm
  LT_CHECK(int64_t(r.tensors().size()) >= needed, "{}: llama.block_count is {} but the file holds {} tensors; a llama "
           "of {} blocks has at least {} (the embedding, the output norm and 9 per block)", r.path(), n_layers,
           r.tensors().size(), n_layers, needed);
}

// Every block has its tensors, named as the file names them (the model would name the first one
// missing by its Hugging Face name).
void check_blocks(const gguf::Reader& r, int n_layers) {
  for (int l = 0; l < n_layers; ++l)
    for (const std::string& name : block_tensor_names(l))
      LT_CHECK(r.find_tensor(name), "{}: GGUF tensor '{}' is missing; llama.block_count {} needs it in every block "
               "(blk.0 to blk.{})", r.path(), name, n_layers, n_layers - 1);
}

}  // namespace

ModelConfig gguf_model_config(const gguf::Reader& r) {
  check_architecture(r);
  ModelConfig c;
  c.arch = "llama";
  read_shapes(r, c);
  check_block_count(r, c.n_layers);
  read_rope(r, c);
  c.tie_embeddings = !r.find_tensor("output.weight");
  c.attention_bias = r.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.o_proj_bias = r.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = r.find_tensor("blk.0.ffn_gate.bias") != nullptr;
  auto token = [&](const char* key) {
    const std::optional<int64_t> id = r.get_int(key);
    return id && *id >= 0 && *id < c.vocab_size ? int(*id) : -1;  // out of range: no such token
  };
  c.bos_token_id = token("tokenizer.ggml.bos_token_id");
  c.eos_token_id = token("tokenizer.ggml.eos_token_id");
  validate_config(c, r.path());
  return c;
}

ModelFiles load_gguf_model(const std::string& path, Quantization blocks_as_stored) {
  const gguf::Reader r(path);
  ModelFiles m;
  m.config = gguf_model_config(r);
  LT_CHECK(!blocks_as_stored || is_ggml_block(*blocks_as_stored), "load_gguf_model: {} is not a GGUF block type",
           quantization_name(blocks_as_stored));
  const auto type = blocks_as_stored == QuantType::Q4_0 ? gguf::TensorType::Q4_0 : gguf::TensorType::Q8_0;
  const bool blocks = blocks_as_stored && all_linears_are(r, m.config.n_layers, type);
  if (blocks) m.config.quantization = blocks_as_stored, m.config.quant_blocksize = 32, m.config.quant_double_quant = false;
  m.tensors.source = path;
  m.tensors.add_file(r.file());
  for (const gguf::TensorEntry& t : r.tensors()) {
    if (t.name == "rope_freqs.weight") continue;  // read into the config
    const std::string hf = gguf::hf_name(t.name);
    LT_CHECK(!hf.empty(), "{}: GGUF tensor '{}' is not one a llama model has (expected token_embd, output_norm, "
             "output, rope_freqs and blk.N.{{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, "
             "ffn_up, ffn_down}})", path, excerpt(t.name));
    const bool linear = t.name.starts_with("blk.") && hf.ends_with("_proj.weight");
    m.tensors.add(blocks && linear ? stored_blocks(t, hf, m.config, m.tensors) : convert_tensor(t, hf, m.config, m.tensors));
  }
  check_blocks(r, m.config.n_layers);
  return m;
}

void check_gguf_stored_as(const std::string& path, QuantType type) {
  const gguf::Reader r(path);
  const int layers = gguf_model_config(r).n_layers;
  const auto want = type == QuantType::Q4_0 ? gguf::TensorType::Q4_0 : gguf::TensorType::Q8_0;
  auto check = [&](const std::string& name) {
    const gguf::TensorEntry* t = r.find_tensor(name);
    LT_CHECK(t && t->type == want, "{}: tensor '{}' is stored as {}; llama.cpp numerics need every linear weight and "
             "the lm_head stored as {} (run without them, or use a GGUF quantized that way)", path, name,
             t ? gguf::type_name(t->type) : "(missing)", gguf::type_name(want));
  };
  for (int l = 0; l < layers; ++l)
    for (Proj p : kProjs) check(fmt::format("blk.{}.{}.weight", l, gguf::proj_gguf_name(p)));
  check(r.find_tensor("output.weight") ? "output.weight" : "token_embd.weight");
}

}  // namespace lt

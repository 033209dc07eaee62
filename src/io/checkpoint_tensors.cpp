// Checkpoint accounting: the tensors a Llama-family model reads, the allow-list of those it may
// ignore, and the check that a checkpoint holds exactly those (io/checkpoint_tensors.h).
#include "io/checkpoint_tensors.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/quant_model.h"
#include "core/lora_config.h"

namespace lt {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string linear_name(int l, int m, const char* what) {
  const std::string& mod = llama_linear_modules()[size_t(m)];
  return fmt::format("model.layers.{}.{}.{}.{}", l, llama_module_parent(mod), mod, what);
}

// The stored parts of a quantized weight (io/quant_model.h documents the layout).
std::vector<const char*> quant_parts(const QuantSpec& s) {
  if (s.type == QuantType::Int8) return {".qweight", ".row_absmax"};
  if (s.type == QuantType::Int4) return {".codes", ".scales"};
  if (is_ggml_block(s.type)) return {".blocks"};
  if (s.type == QuantType::Int4Asym) return {".codes", ".scales", ".mins"};
  if (s.double_quant) return {".codes", ".qabsmax", ".absmax2", ".offset"};
  return {".codes", ".absmax"};
}

// Element by element equality of two tensors of any float dtype (a tied head saved in the file).
bool same_values(const TensorInfo& a, const TensorInfo& b) {
  if (a.shape != b.shape) return false;
  if (a.dtype == b.dtype) return a.nbytes == b.nbytes && std::memcmp(a.data, b.data, a.nbytes) == 0;
  const size_t n = size_t(a.numel()), chunk = 4096;
  std::vector<float> fa(chunk), fb(chunk);
  for (size_t i = 0; i < n; i += chunk) {
    const size_t k = std::min(chunk, n - i);
    convert_to_f32(fa.data(), static_cast<const uint8_t*>(a.data) + i * dtype_size(a.dtype), a.dtype, k);
    convert_to_f32(fb.data(), static_cast<const uint8_t*>(b.data) + i * dtype_size(b.dtype), b.dtype, k);
    if (std::memcmp(fa.data(), fb.data(), k * sizeof(float)) != 0) return false;
  }
  return true;
}

// The projection index of "model.layers.{l}.{parent}.{module}.bias", or -1.
int bias_module(const std::string& name) {
  for (int m = 0; m < 7; ++m)
    if (ends_with(name, fmt::format(".{}.{}.bias", llama_module_parent(llama_linear_modules()[size_t(m)]),
                                    llama_linear_modules()[size_t(m)])))
      return m;
  return -1;
}

// Why a bias tensor is unexpected (or expected but missing), in transformers' terms.
std::string bias_hint(const ModelConfig& c, int m, bool missing) {
  if (m < 0) return "";
  if (missing && c.arch == "qwen2") return " (transformers' Qwen2 always has q_proj, k_proj and v_proj biases)";
  if (missing)
    return m <= 3 ? " (config.json sets attention_bias: true, which gives q_proj, k_proj, v_proj and o_proj a bias)"
                  : " (config.json sets mlp_bias: true, which gives gate_proj, up_proj and down_proj a bias)";
  if (c.arch == "mistral") return " (transformers' Mistral has no linear biases)";
  if (c.arch == "qwen2") return " (transformers' Qwen2 has biases on q_proj, k_proj and v_proj only)";
  return m <= 3 ? " (config.json does not set attention_bias: true, so the attention projections have no bias)"
                : " (config.json does not set mlp_bias: true, so the MLP projections have no bias)";
}

}  // namespace

std::vector<ExpectedTensor> checkpoint_tensors(const ModelConfig& c) {
  const int64_t C = c.dim, V = c.vocab_size;
  const bool quant = c.quantization.has_value();
  std::vector<ExpectedTensor> v;
  v.push_back({"model.embed_tokens.weight", {V, C}});
  for (int l = 0; l < c.n_layers; ++l) {
    v.push_back({fmt::format("model.layers.{}.input_layernorm.weight", l), {C}});
    v.push_back({fmt::format("model.layers.{}.post_attention_layernorm.weight", l), {C}});
    if (c.sandwich_norms)  // Gemma: the MLP's own pre- and post-norms
      for (const char* n : {"pre_feedforward_layernorm", "post_feedforward_layernorm"})
        v.push_back({fmt::format("model.layers.{}.{}.weight", l, n), {C}});
    if (c.qk_norm)
      for (const char* n : {"q_norm", "k_norm"})
        v.push_back({fmt::format("model.layers.{}.self_attn.{}.weight", l, n), {c.head_dim}});
    for (int m = 0; m < 7; ++m) {
      const auto [in, out] = c.linear_shape(m);
      const std::string w = linear_name(l, m, "weight");
      if (!quant) v.push_back({w, {out, in}});
      else
        for (const char* part : quant_parts(model_quant_spec(c))) v.push_back({w + part, {}});
      if (c.has_bias(m)) v.push_back({linear_name(l, m, "bias"), {out}});
    }
  }
  v.push_back({"model.norm.weight", {C}});
  if (!c.tie_embeddings) v.push_back({"lm_head.weight", {V, C}});
  return v;
}

bool ignored_checkpoint_tensor(const ModelConfig& c, const TensorSet& ts, const TensorInfo& t) {
  if (ends_with(t.name, "rotary_emb.inv_freq")) return true;
  if (c.tie_embeddings && t.name == "lm_head.weight") {
    const TensorInfo* e = ts.find("model.embed_tokens.weight");
    const bool same = e && same_values(t, *e);
    release_mapped_pages(t.data, t.nbytes);
    return same;
  }
  return false;
}

void check_checkpoint_tensors(const ModelConfig& c, const TensorSet& ts) {
  const auto expected = checkpoint_tensors(c);
  std::set<std::string> names;
  for (const auto& e : expected) names.insert(e.name);
  std::vector<const TensorInfo*> extra;
  for (const auto& [name, t] : ts.all())
    if (!names.count(name) && !ignored_checkpoint_tensor(c, ts, t)) extra.push_back(&t);
  if (!extra.empty()) {
    const TensorInfo& t = *extra[0];
    std::string why = bias_hint(c, bias_module(t.name), false);
    if (t.name == "lm_head.weight" && c.tie_embeddings)
      why = " (config.json sets tie_word_embeddings: true but this lm_head.weight differs from "
            "model.embed_tokens.weight; set tie_word_embeddings: false to use it)";
    std::string more;
    for (size_t i = 1; i < extra.size() && i < 4; ++i) more += fmt::format("{}'{}'", i == 1 ? "" : ", ", extra[i]->name);
    if (extra.size() > 4) more += fmt::format(" and {} more", extra.size() - 4);
    fail("{}: tensor '{}' is not used by a {} model with this config ({} layers){}: it would be dropped without a "
         "word. Check that config.json belongs to these weights{}", t.file, t.name, c.arch, c.n_layers, why,
         more.empty() ? "" : fmt::format(" (also unused: {})", more));
  }
  for (const auto& e : expected) {
    const TensorInfo* t = ts.find(e.name);
    LT_CHECK(t, "{}: missing tensor '{}'{} that a {} model with this config reads{}", ts.source, e.name,
             e.shape.empty() ? "" : fmt::format(" (expected shape [{}])", fmt::join(e.shape, ", ")), c.arch,
             bias_hint(c, bias_module(e.name), true));
    if (!e.shape.empty()) ts.get(e.name, e.shape);  // the shape, named as TensorSet::get names it
  }
}

}  // namespace lt

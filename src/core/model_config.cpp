// validate_config: the checks every loader runs before a ModelConfig is used, so that later code
// can rely on positive sizes, a whole number of query heads per key/value head, an even head
// size for RoPE, and finite positive epsilons and frequencies.
#include "core/model_config.h"

#include <cmath>

#include "core/error.h"
#include "core/quant_spec.h"
#include "core/rope_freqs.h"

namespace lt {

constexpr int kMaxLayers = 1024;  // see validate_config

void validate_config(const ModelConfig& c, const std::string& where) {
  LT_CHECK(c.arch == "llama" || c.arch == "mistral" || c.arch == "qwen2" || c.arch == "qwen3" || c.arch == "phi3" ||
               c.gemma(),
           "unknown architecture '{}' in {}; supported model types: {}", c.arch, where, kSupportedModelTypes);
  auto positive = [&](int v, const char* name) {
    LT_CHECK(v > 0, "{}: {} must be positive, got {}", where, name, v);
  };
  positive(c.dim, "hidden size (dim)");
  positive(c.n_layers, "number of layers");
  // Every layer adds its buffers to the memory plan and its tensors to the load: a corrupt count
  // (a fuzzed config.json with 1.4 billion layers built a plan of 15 million entries and ran out of
  // memory) stops here. llama.cpp caps layers at 512; released models have at most a few hundred.
  LT_CHECK(c.n_layers <= kMaxLayers, "{}: number of layers (num_hidden_layers) is {}, more than the {} leantune "
           "supports; check the file", where, c.n_layers, kMaxLayers);
  positive(c.n_heads, "number of attention heads");
  positive(c.n_kv_heads, "number of key/value heads");
  positive(c.head_dim, "head size (head_dim)");
  positive(c.hidden_dim, "MLP width (intermediate_size)");
  positive(c.vocab_size, "vocabulary size");
  positive(c.max_seq_len, "maximum sequence length (max_position_embeddings)");
  LT_CHECK(c.n_heads % c.n_kv_heads == 0,
           "{}: number of attention heads ({}) must be a multiple of the number of key/value heads ({})", where,
           c.n_heads, c.n_kv_heads);
  LT_CHECK(c.head_dim % 2 == 0, "{}: head size {} must be even for RoPE", where, c.head_dim);
  // q_dim / kv_dim and the largest matrices must fit in an int.
  LT_CHECK(int64_t(c.n_heads) * c.head_dim <= (1 << 30) && int64_t(c.n_kv_heads) * c.head_dim <= (1 << 30),
           "{}: heads x head size is too large ({} x {})", where, c.n_heads, c.head_dim);
  LT_CHECK(std::isfinite(c.norm_eps) && c.norm_eps > 0, "{}: rms_norm_eps must be a positive number, got {}", where,
           c.norm_eps);
  LT_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0, "{}: rope_theta must be a positive number, got {}",
           where, c.rope_theta);
  validate_rope_scaling(c, where);
  for (auto [v, name] : {std::pair{c.attn_softcap, "attn_logit_softcapping"},
                         std::pair{c.final_softcap, "final_logit_softcapping"},
                         std::pair{c.query_pre_attn_scalar, "query_pre_attn_scalar"},
                         std::pair{c.rope_local_theta, "rope_local_base_freq"}})
    LT_CHECK(std::isfinite(v) && v >= 0, "{}: {} must be a positive number or null, got {}", where, name, v);
  LT_CHECK(std::isfinite(c.embed_scale) && c.embed_scale > 0, "{}: embedding scale must be positive, got {}", where,
           c.embed_scale);
  LT_CHECK(c.sliding_window >= 0, "{}: sliding_window must be positive or null, got {}", where, c.sliding_window);
  LT_CHECK(c.sliding_layers.empty() || c.sliding_layers.size() == size_t(c.n_layers),
           "{}: layer_types lists {} layers; the model has {}", where, c.sliding_layers.size(), c.n_layers);
  if (c.quantization) {
    try {
      check_quant_spec({*c.quantization, c.quant_blocksize, c.quant_double_quant});
    } catch (const Error& e) {
      fail("{}: quantization_config: {}", where, e.what());
    }
  }
  LT_CHECK(c.bos_token_id >= -1 && c.bos_token_id < c.vocab_size,
           "{}: bos_token_id {} is outside the vocabulary ({} tokens)", where, c.bos_token_id, c.vocab_size);
  LT_CHECK(c.eos_token_id >= -1 && c.eos_token_id < c.vocab_size,
           "{}: eos_token_id {} is outside the vocabulary ({} tokens)", where, c.eos_token_id, c.vocab_size);
}

}  // namespace lt

// llama2.c checkpoints (karpathy/llama2.c, legacy "version 0" export, as run.c reads them):
// a header of 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
// a negative vocab_size means the classifier is not shared with the embedding), then f32 arrays
// in a fixed order. The file is memory-mapped and exposed as per-layer views under HF names.
#pragma once
#include <string>

#include "io/tensor_set.h"
#include "core/model_config.h"

namespace lt {

struct Llama2cModel {
  ModelConfig config;  // arch llama, RopeLayout::Interleaved, rope_theta 1e4, norm_eps 1e-5, bos 1, eos 2
  TensorSet tensors;   // model.embed_tokens.weight, model.layers.{i}.*, model.norm.weight, [lm_head.weight]
};

// Maps `path` and checks that its size is exactly what the header implies (lt::Error naming the
// file with expected vs actual bytes otherwise).
Llama2cModel load_llama2c(const std::string& path);

}  // namespace lt

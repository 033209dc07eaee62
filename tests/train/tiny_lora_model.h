// Tests' shared fixture: a random one-layer Llama in memory, trained with LoRA (r 4) on every
// linear, for the memory-plan tests of the optimizer-side state (grad_topk, adaptive rank).
#pragma once
#include <random>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "io/tensor_set.h"
#include "train/train_model.h"

namespace lt {

struct TinyModel {
  ModelConfig cfg;
  std::vector<std::vector<float>> store;
  TensorSet ts;
  TinyModel() {
    cfg.dim = 32; cfg.n_layers = 1; cfg.n_heads = 2; cfg.n_kv_heads = 1; cfg.head_dim = 16; cfg.hidden_dim = 48;
    cfg.vocab_size = 40; cfg.max_seq_len = 16;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0, 0.1f);
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      size_t n = 1;
      for (auto s : shape) n *= size_t(s);
      store.emplace_back(n);
      for (auto& v : store.back()) v = nd(rng);
      TensorInfo t;
      t.name = name; t.shape = shape; t.data = store.back().data(); t.nbytes = n * 4; t.file = "memory";
      ts.add(t);
    };
    add("model.embed_tokens.weight", {40, 32});
    const std::string p = "model.layers.0.";
    add(p + "input_layernorm.weight", {32});
    add(p + "post_attention_layernorm.weight", {32});
    add(p + "self_attn.q_proj.weight", {32, 32});
    add(p + "self_attn.k_proj.weight", {16, 32});
    add(p + "self_attn.v_proj.weight", {16, 32});
    add(p + "self_attn.o_proj.weight", {32, 32});
    add(p + "mlp.gate_proj.weight", {48, 32});
    add(p + "mlp.up_proj.weight", {48, 32});
    add(p + "mlp.down_proj.weight", {32, 48});
    add("model.norm.weight", {32});
    add("lm_head.weight", {40, 32});
    ts.source = "memory";
  }
  static TrainModelOptions options(TopkOptions topk) {
    TrainModelOptions o;
    o.lora.r = 4;
    o.lora.target_modules = {"all-linear"};
    o.micro_batch = 1;
    o.seq_len = 16;
    o.topk = topk;
    return o;
  }
};

}  // namespace lt

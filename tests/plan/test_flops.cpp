// The actuary's FLOP counts against hand-derived values for a small Llama shape.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/flops.h"

using namespace lt;

static ModelConfig shape() {
  ModelConfig m;
  m.dim = 64; m.n_layers = 2; m.n_heads = 4; m.n_kv_heads = 2; m.head_dim = 16; m.hidden_dim = 128;
  m.vocab_size = 100; m.max_seq_len = 256;
  return m;
}

TEST(PlanFlops, FullFineTuningCounts) {
  ModelConfig m = shape();
  TrainModelOptions o;
  o.method = Method::Full;
  o.seq_len = 31;  // (T+1)/2 = 16 keys per query on average
  const double lin = 64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64 + 3 * 64.0 * 128;  // weights per layer
  const double attn = 2 * 2 * 64.0 * 16;
  const double head = 2 * 64.0 * 100;
  PhaseFlops f = training_flops_per_token(m, o);
  EXPECT_DOUBLE_EQ(f.forward, 2 * (2 * lin + attn) + head);
  EXPECT_DOUBLE_EQ(f.backward, 2 * (2 * 2 * lin + 2.5 * attn) + 2 * head);
  EXPECT_DOUBLE_EQ(f.recompute, 0.0);
  // a replay skips the down projection (128 -> 64): its output is the next layer's saved input
  const double down = 2 * 128.0 * 64;
  parse_checkpointing("every", o);
  EXPECT_DOUBLE_EQ(training_flops_per_token(m, o).recompute, 2 * (2 * lin + attn - down));
  parse_checkpointing("every:2", o);
  EXPECT_DOUBLE_EQ(training_flops_per_token(m, o).recompute, 2 * lin + attn - down);
  parse_checkpointing("mlp", o);
  EXPECT_DOUBLE_EQ(training_flops_per_token(m, o).recompute, 2 * (2 * 3 * 64.0 * 128 - down));
  m.sandwich_norms = true;  // Gemma: the down output feeds a norm whose backward reads it, so it is replayed
  EXPECT_DOUBLE_EQ(training_flops_per_token(m, o).recompute, 2 * (2 * 3 * 64.0 * 128));
}

TEST(PlanFlops, LoraAddsLinearlyInRank) {
  ModelConfig m = shape();
  TrainModelOptions o;
  o.seq_len = 31;
  o.lora.target_modules = {"q_proj"};
  o.lora.r = 4;
  double f4 = training_flops_per_token(m, o).total();
  o.lora.r = 8;
  double f8 = training_flops_per_token(m, o).total();
  o.lora.r = 12;
  double f12 = training_flops_per_token(m, o).total();
  EXPECT_NEAR(f12 - f8, f8 - f4, 1e-6);
  // each rank unit of q_proj adds 2*(64+64) forward FLOPs per layer, and twice that backward
  EXPECT_DOUBLE_EQ(f8 - f4, 2 * 4 * (2 * 128.0) * 3);
}

TEST(PlanFlops, HeadDimOfItsOwn) {
  // Qwen3-style: head_dim 24 with 4 heads, so q is 96 wide where the model is 64
  ModelConfig m = shape();
  m.head_dim = 24;
  TrainModelOptions o;
  o.method = Method::Full;
  o.seq_len = 31;
  const double lin = 64.0 * 96 + 2 * 64.0 * 48 + 96.0 * 64 + 3 * 64.0 * 128;
  const double attn = 2 * 2 * 96.0 * 16;
  EXPECT_DOUBLE_EQ(training_flops_per_token(m, o).forward, 2 * (2 * lin + attn) + 2 * 64.0 * 100);
}

TEST(PlanFlops, SlidingWindowAttentionGrowsLinearlyBeyondTheWindow) {
  ModelConfig m = shape();
  m.sliding_window = 16;
  TrainModelOptions o;
  o.method = Method::Full;
  auto attn_per_token = [&](int T) {
    o.seq_len = T;
    ModelConfig full = m;
    full.sliding_window = 0;
    const double without_attn = training_flops_per_token(full, o).forward - 2 * 2 * 2 * 64.0 * (T + 1) / 2.0;
    return training_flops_per_token(m, o).forward - without_attn;  // the two layers' attention
  };
  // within the window: as causal attention
  EXPECT_DOUBLE_EQ(attn_per_token(15), 2 * 2 * 2 * 64.0 * 8);
  // beyond it: (16*17/2 + (T-16)*16) / T keys per query, so per sequence 16 more keys per token
  auto near = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::abs(b); };
  EXPECT_PRED2(near, attn_per_token(100) * 100, 2 * 2 * 2 * 64.0 * (136 + 84 * 16));
  EXPECT_PRED2(near, attn_per_token(200) * 200 - attn_per_token(100) * 100, 2 * 2 * 2 * 64.0 * 100 * 16);
  // a layer that does not slide (Qwen2's max_window_layers) keeps causal attention
  m.sliding_layers = {false, true};
  EXPECT_PRED2(near, attn_per_token(100) * 100, 2 * 2 * 64.0 * (136 + 84 * 16) + 2 * 2 * 64.0 * 100 * 101 / 2.0);
}

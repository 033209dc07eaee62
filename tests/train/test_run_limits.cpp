// The limits checked before a run is planned (plan/run_limits.h, core/memory_plan.h,
// core/threads.h): the context, tokens per micro-batch, the LoRA rank of each adapted projection,
// a plan whose byte counts would pass 64 bits, budgets and prices out of range, and the thread cap.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <omp.h>

#include "../io/io_test_util.h"
#include "core/memory_plan.h"
#include "core/threads.h"
#include "plan/budget.h"
#include "plan/flops.h"
#include "train/run_limits.h"
#include "train/train_model.h"

namespace lt {
namespace {

using test::error_of;
using test::expect_contains;

// dim 64, 8 heads of 8 (q 64), 2 key/value heads (kv 16), MLP 128, vocabulary 100, context 256.
ModelConfig small_model() {
  ModelConfig c;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 128;
  c.vocab_size = 100;
  c.max_seq_len = 256;
  return c;
}

TrainModelOptions lora(int r, std::vector<std::string> targets) {
  TrainModelOptions o;
  o.method = Method::Lora;
  o.lora.r = r;
  o.lora.target_modules = std::move(targets);
  o.micro_batch = 2;
  o.seq_len = 32;
  return o;
}

TEST(RunLimits, LoraRankAboveTheSmallestSideOfAProjectionNamesTheModuleAndShape) {
  const ModelConfig m = small_model();
  // k_proj is (out 16, in 64): rank 17 is more than min(in, out) = 16
  expect_contains(error_of([&] { plan_training(m, lora(17, {"q_proj", "k_proj"})); }),
                  {"lora_r", "17", "k_proj", "(out 16, in 64)", "lora_r <= 16"});
  expect_contains(error_of([&] { plan_training(m, lora(65, {"all-linear"})); }), {"65", "q_proj", "(out 64, in 64)"});
  plan_training(m, lora(16, {"q_proj", "k_proj"}));  // exactly min(in, out) is allowed
  plan_training(m, lora(64, {"q_proj", "gate_proj"}));  // k_proj not targeted: 64 fits q and gate
}

TEST(RunLimits, ContextBeyondTheModelNamesBothNumbers) {
  TrainModelOptions o = lora(4, {"q_proj"});
  o.seq_len = 257;
  expect_contains(error_of([&] { plan_training(small_model(), o); }),
                  {"sequence_len", "257", "256", "max_position_embeddings"});
}

TEST(RunLimits, TokensPerMicroBatchBeyondAnIntIsRefused) {
  ModelConfig m = small_model();
  m.max_seq_len = 1 << 24;
  TrainModelOptions o = lora(4, {"q_proj"});
  o.micro_batch = 1 << 10;
  o.seq_len = 1 << 22;  // 2^32 tokens
  expect_contains(error_of([&] { plan_training(m, o); }), {"micro_batch_size 1024", "sequence_len 4194304",
                                                           "4294967296", "too large"});
}

// A config.json of int-sized dimensions: the products (vocabulary x hidden size x bytes, ...) pass
// 64 bits; the plan must refuse, not wrap to a small number.
TEST(RunLimits, PlanThatWouldOverflow64BitsSaysTheConfigurationIsTooLarge) {
  ModelConfig m = small_model();
  m.dim = 1 << 30;
  m.n_heads = 1 << 20;
  m.n_kv_heads = 1 << 20;
  m.head_dim = 1 << 10;
  m.hidden_dim = INT_MAX;
  m.vocab_size = INT_MAX;
  TrainModelOptions o = lora(4, {"q_proj"});
  o.method = Method::Full;
  expect_contains(error_of([&] { plan_training(m, o); }), {"configuration is too large", "the weights", "2^62"});
  // the bound really bounds: a normal run's plan is below it
  const ModelConfig s = small_model();
  const TrainModelOptions ok = lora(8, {"all-linear"});
  EXPECT_LE((long double)plan_training(s, ok).total_bytes(), plan_bytes_bound(s, ok).bytes);
  TrainModelOptions full = ok;
  full.method = Method::Full;
  full.precision = Precision::BF16;
  EXPECT_LE((long double)plan_training(s, full).total_bytes(), plan_bytes_bound(s, full).bytes);
}

TEST(MemoryPlanChecked, BufferOrSumPast2To62NamesTheBuffer) {
  MemoryPlan p;
  expect_contains(error_of([&] { p.add("huge.buffer", Category::Activations, size_t(1) << 63); }),
                  {"huge.buffer", "too large"});
  p.add("a", Category::Activations, kMaxPlanBytes);
  p.add("b", Category::Activations, 64);
  expect_contains(error_of([&] { p.arena_bytes(Category::Activations); }), {"'b'", "activations arena", "too large"});
  MemoryPlan q;
  q.add("w", Category::FrozenWeights, kMaxPlanBytes / 2 + 64);
  q.add("x", Category::Activations, kMaxPlanBytes / 2 + 64);
  EXPECT_EQ(q.arena_bytes(Category::FrozenWeights), kMaxPlanBytes / 2 + 64);
  expect_contains(error_of([&] { q.total_bytes(); }), {"total", "'x'", "too large"});
}

TEST(PlanInputs, BudgetAndPricesOutOfRange) {
  expect_contains(error_of([&] { parse_bytes("1000000000000000000000GiB"); }), {"1000000000000000000000GiB", "2^62"});
  EXPECT_EQ(parse_bytes("4TiB"), size_t(4) << 40);
  TrainModelOptions o = lora(4, {"q_proj"});
  expect_contains(error_of([&] { actuary_report(small_model(), o, 1000, 1e6, -1.0); }), {"price-per-hour", "-1", ">= 0"});
  std::vector<GpuProfile> g = {gpu_profiles()[0]};
  g[0].price_per_hour = -2;
  expect_contains(error_of([&] { actuary_report(small_model(), o, 1000, 1e6, 0.0, g); }),
                  {g[0].name, "price_per_hour", "-2"});
}

TEST(Threads, HardCapIsAnErrorAboveHardwareIsAWarning) {
  expect_contains(error_of([&] { set_num_threads(10000); }), {"threads", "10000", "1024"});
  expect_contains(error_of([&] { set_num_threads(-1); }), {"threads", "-1", ">= 0"});
  const int hw = omp_get_num_procs();
  if (hw < kMaxThreads) {
    testing::internal::CaptureStderr();
    set_num_threads(hw + 1);
    const std::string err = testing::internal::GetCapturedStderr();
    expect_contains(err, {"warning", std::to_string(hw + 1), std::to_string(hw) + " hardware threads", "as asked"});
    EXPECT_EQ(num_threads(), hw + 1);  // the value used is the one asked for, as the warning says
  }
  set_num_threads(0);
  EXPECT_EQ(num_threads(), hw);
}

}  // namespace
}  // namespace lt

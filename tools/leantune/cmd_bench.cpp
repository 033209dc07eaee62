// `leantune bench`: inference speed (prefill, then decode through the KV cache) or, with --train,
// training steps, on a model with deterministic pseudo-random token ids (median of the runs).
// Prints one JSON line with the figures and the exact configuration, for bench/ scripts to collect.
// The measurements are leantune::bench_inference / bench_training (include/leantune/trainer.h).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "flag_check.h"
#include "leantune/trainer.h"

namespace lt::cli {

namespace {

struct BenchArgs {
  leantune::TrainBenchOptions train;
  leantune::InferenceBenchOptions infer;
  std::string model, quantize, weights, kv_cache;
  int threads = 0;
  bool train_mode = false, double_quant = false;
};

// The ranges of the numeric flags (the model-dependent limits are checked once its config is read).
void check_bench_flags(const BenchArgs& a) {
  check_flag_range("--repeats", a.infer.repeats, 1, 1e6, "measured runs; the median is reported");
  if (a.train_mode) {
    check_flag_range("--steps", a.train.steps, 1, 1e6, "measured training steps after the warm-up step");
    check_flag_range("--micro-batch", a.train.micro_batch, 1, 1 << 20, "sequences per step");
    check_flag_range("--seq", a.train.seq, 2, 1 << 24, "tokens per sequence, at most the model's context");
    check_flag_range("--lora-r", a.train.lora_r, 1, 65536, "the LoRA rank, at most min(in, out) of every projection");
    return;
  }
  check_flag_range("--prompt-tokens", a.infer.prompt_tokens, 1, 1 << 24, "prefill tokens, at most the model's context");
  check_flag_range("--decode-tokens", a.infer.decode_tokens, 1, 1 << 24, "decode steps");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* c = app.add_subcommand("bench", "Measure prefill and decode tokens/s");
  c->add_option("--model,-m", a->model, "model path")->required();
  c->add_option("--threads,-t", a->threads, "threads");
  c->add_option("--prompt-tokens", a->infer.prompt_tokens, "prefill length (prompt + decode tokens fit the model's context)");
  c->add_option("--decode-tokens", a->infer.decode_tokens, "decode steps");
  c->add_option("--repeats", a->infer.repeats, "runs (median reported)");
  c->add_flag("--train", a->train_mode, "measure training steps instead of inference");
  c->add_option("--method", a->train.method, "training: lora | full");
  c->add_option("--lora-r", a->train.lora_r, "training: LoRA rank (all linear modules)");
  c->add_option("--micro-batch", a->train.micro_batch, "training: micro-batch B");
  c->add_option("--seq", a->train.seq, "training: sequence length T");
  c->add_option("--checkpointing", a->train.checkpointing, "training: none | every | every:K");
  c->add_option("--precision", a->train.precision, "training: fp32 | bf16 | fp16 (weights, saved GEMM inputs and GEMMs)");
  c->add_option("--attention-precision", a->train.attention_precision,
                 "training: auto | f32 | bf16, the attention's q, k, v with --precision bf16");
  c->add_option("--steps", a->train.steps, "training: measured steps (after one warm-up), at least 1");
  c->add_option("--quantize", a->quantize, "quantize the frozen linear weights on load (nf4 | fp4 | int8): inference, or the QLoRA base with --train");
  c->add_flag("--double-quant", a->double_quant, "nf4 / fp4 double quantization");
  c->add_option("--weights", a->weights, "inference: weights (and lm_head) in memory: f32 | bf16 | f16 | int8 | q4 | nf4 | q8_0 | q4_0");
  c->add_option("--kv-cache", a->kv_cache, "inference: the KV cache's element type: f32 | bf16");
  c->add_option("--profile", a->train.profile_trace, "training: Chrome trace of the measured steps to this file, per-op table on stderr");
  c->callback([a] {
    check_bench_flags(*a);
    a->train.model = a->infer.model = a->model;
    a->train.threads = a->infer.threads = a->threads;
    a->train.quantization = a->infer.quantization = a->quantize;
    a->train.double_quant = a->infer.double_quant = a->double_quant;
    a->infer.weights = a->weights;
    a->infer.kv_cache = a->kv_cache;
    fmt::print("{}\n", a->train_mode ? leantune::bench_training(a->train) : leantune::bench_inference(a->infer));
  });
}

}  // namespace lt::cli

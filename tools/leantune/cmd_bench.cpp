// `leantune bench`: inference speed on a model with deterministic pseudo-random token ids:
// prefill tokens/s over --prompt-tokens, then decode tokens/s over --decode-tokens single-token
// steps through the KV cache (median of --repeats runs). Prints one JSON line with the figures
// and the exact configuration, for bench/ scripts to collect.
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.h"
#include "flag_check.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/memory_plan.h"
#include "core/threads.h"
#include "kernels/ops.h"
#include "io/model_files.h"
#include "model/llama_model.h"
#include "core/ledger.h"
#include "core/profiler.h"
#include "plan/flops.h"
#include "plan/peak.h"
#include "train/optimizer.h"
#include "train/train_model.h"

namespace lt::cli {

namespace {

struct BenchArgs {
  std::string model, method = "lora", ckpt = "none", profile, precision = "fp32", quantize;
  int threads = 0, prompt = 128, decode = 64, repeats = 3, batch = 4, seq = 256, r = 16, steps = 3;
  bool train = false, double_quant = false;
};

// The ranges of the numeric flags (the model-dependent limits are checked once its config is read).
void check_bench_flags(const BenchArgs& a) {
  check_flag_range("--repeats", a.repeats, 1, 1e6, "measured runs; the median is reported");
  if (a.train) {
    check_flag_range("--steps", a.steps, 1, 1e6, "measured training steps after the warm-up step");
    check_flag_range("--micro-batch", a.batch, 1, 1 << 20, "sequences per step");
    check_flag_range("--seq", a.seq, 2, 1 << 24, "tokens per sequence, at most the model's context");
    check_flag_range("--lora-r", a.r, 1, 65536, "the LoRA rank, at most min(in, out) of every projection");
    return;
  }
  check_flag_range("--prompt-tokens", a.prompt, 1, 1 << 24, "prefill tokens, at most the model's context");
  check_flag_range("--decode-tokens", a.decode, 1, 1 << 24, "decode steps");
}

}  // namespace

void add_bench_command(CLI::App& app) {
  using Args = BenchArgs;
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("bench", "Measure prefill and decode tokens/s");
  c->add_option("--model,-m", a->model, "model path")->required();
  c->add_option("--threads,-t", a->threads, "threads");
  c->add_option("--prompt-tokens", a->prompt, "prefill length (prompt + decode tokens fit the model's context)");
  c->add_option("--decode-tokens", a->decode, "decode steps");
  c->add_option("--repeats", a->repeats, "runs (median reported)");
  c->add_flag("--train", a->train, "measure training steps instead of inference");
  c->add_option("--method", a->method, "training: lora | full");
  c->add_option("--lora-r", a->r, "training: LoRA rank (all linear modules)");
  c->add_option("--micro-batch", a->batch, "training: micro-batch B");
  c->add_option("--seq", a->seq, "training: sequence length T");
  c->add_option("--checkpointing", a->ckpt, "training: none | every | every:K");
  c->add_option("--precision", a->precision, "training: fp32 | bf16 | fp16 (weights, saved GEMM inputs and GEMMs)");
  c->add_option("--steps", a->steps, "training: measured steps (after one warm-up), at least 1");
  c->add_option("--quantize", a->quantize, "quantize the frozen linear weights on load (nf4 | fp4 | int8): inference, or the QLoRA base with --train");
  c->add_flag("--double-quant", a->double_quant, "nf4 / fp4 double quantization");
  c->add_option("--profile", a->profile, "training: Chrome trace of the measured steps to this file, per-op table on stderr");
  c->callback([a] {
    check_bench_flags(*a);
    set_num_threads(a->threads);
    if (a->train) {
      auto files = load_model_files(a->model);
      LT_CHECK(a->seq <= files.config.max_seq_len, "{}: --seq {} is more than the model's context of {} positions "
               "(max_position_embeddings); use --seq {} or less", a->model, a->seq, files.config.max_seq_len,
               files.config.max_seq_len);
      TrainModelOptions o;
      o.method = parse_method(a->method);
      o.lora.r = a->r;
      o.lora.alpha = float(2 * a->r);
      o.lora.target_modules = {"all-linear"};
      o.micro_batch = a->batch;
      o.seq_len = a->seq;
      o.precision = parse_precision(a->precision);
      if (!a->quantize.empty()) {
        o.quantization = parse_quantization(a->quantize);
        o.double_quant = a->double_quant;
      }
      parse_checkpointing(a->ckpt, o);
      if (a->profile.size()) prof::route(true);
      TrainModel m(files.config, files.tensors, o, ops_cpu());
      Ledger ledger(m.arenas(), size_t(4 * files.config.n_layers + 8));
      ledger.mark("loaded");
      m.set_ledger(&ledger);
      const int N = a->batch * a->seq, V = files.config.vocab_size;
      std::mt19937 rng(1234);
      std::vector<int> tok(N), lab(N), pos(N), doc(N);
      for (int i = 0; i < N; ++i) {
        tok[i] = int(rng() % unsigned(V));
        pos[i] = i % a->seq;
        doc[i] = i - i % a->seq;
      }
      for (int i = 0; i < N; ++i) lab[i] = (i + 1) % a->seq ? tok[i + 1] : -100;
      std::vector<ParamGroup> groups;
      for (auto& p : m.params()) {
        ParamGroup g;
        g.param = p.p; g.grad = p.g; g.m = p.m; g.v = p.v; g.n = p.n;
        groups.push_back(g);
      }
      std::vector<double> times;
      for (int s = 0; s <= a->steps; ++s) {
        auto t0 = std::chrono::steady_clock::now();
        m.forward_backward(tok.data(), lab.data(), pos.data(), doc.data(), 1.0f, uint64_t(s));
        adamw_step(groups, AdamWOptions{}, 1e-4f, s + 1);
        m.zero_grads();
        if (s == 0) {
          ledger.mark("optimizer");
          m.set_ledger(nullptr);
          if (a->profile.size()) prof::start();  // the measured steps, not the warm-up
        }
        if (s) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(times.begin(), times.end());
      nlohmann::json j;
      j["model"] = a->model; j["threads"] = num_threads(); j["method"] = a->method; j["lora_r"] = a->r;
      j["micro_batch"] = a->batch; j["seq"] = a->seq; j["checkpointing"] = a->ckpt;
      j["precision"] = a->precision;
      j["quantization"] = a->quantize.empty() ? "none" : a->quantize;
      j["step_s"] = times[times.size() / 2];
      j["tokens_per_s"] = N / times[times.size() / 2];
      j["planned_bytes"] = m.plan().total_bytes();
      j["trainable_params"] = m.trainable_count();
      j["peak_rss_bytes"] = process_peak_rss_bytes();
      auto lj = nlohmann::json::parse(ledger.to_json());
      j["measured_resident"] = lj["max_resident"];
      j["peak_phase"] = lj["peak_phase"];
      const PhaseFlops f = training_flops_per_token(files.config, o);
      j["model_flops_per_token"] = f.forward + f.backward;
      // MFU against the peak of the precision the GEMMs run in (bf16: vdpbf16ps when present)
      const double peak = a->precision == "bf16" && peak_bf16_gflops() > 0 ? peak_bf16_gflops() : peak_f32_gflops();
      j["peak_f32_gflops"] = peak_f32_gflops();
      j["peak_gflops_used_for_mfu"] = peak;
      j["mfu"] = (f.forward + f.backward) * j["tokens_per_s"].get<double>() / (peak * 1e9);
      if (a->profile.size()) {
        prof::stop();
        prof::write_trace(a->profile);
        fmt::print(stderr, "profile (measured steps):\n{}wrote {}\n", prof::table(), a->profile);
      }
      fmt::print("{}\n", j.dump());
      return;
    }
    const ModelConfig mc = load_model_config(a->model);
    LT_CHECK(int64_t(a->prompt) + a->decode <= mc.max_seq_len, "{}: --prompt-tokens {} + --decode-tokens {} = {} "
             "positions is more than the model's context of {} (max_position_embeddings); use at most {} in all",
             a->model, a->prompt, a->decode, int64_t(a->prompt) + a->decode, mc.max_seq_len, mc.max_seq_len);
    InferenceOptions io;
    io.context = a->prompt + a->decode + 1;
    io.quantization = parse_quantization(a->quantize);
    io.double_quant = a->double_quant;
    auto model = LlamaModel::load(a->model, io, ops_cpu());
    const int V = model->config().vocab_size;
    std::mt19937 rng(1234);
    std::vector<int> ids(size_t(a->prompt + a->decode));
    for (auto& t : ids) t = int(rng() % unsigned(V));
    using Clock = std::chrono::steady_clock;
    std::vector<double> pre, dec;
    for (int r = 0; r < a->repeats + 1; ++r) {  // first run is warm-up
      auto t0 = Clock::now();
      model->forward(ids.data(), a->prompt, 0);
      auto t1 = Clock::now();
      for (int i = 0; i < a->decode; ++i) model->forward(&ids[size_t(a->prompt + i)], 1, a->prompt + i);
      auto t2 = Clock::now();
      if (r == 0) continue;
      pre.push_back(std::chrono::duration<double>(t1 - t0).count());
      dec.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
    auto median = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    nlohmann::json j;
    j["model"] = a->model;
    j["threads"] = num_threads();
    j["isa"] = isa_name(cpu_isa());
    j["prompt_tokens"] = a->prompt;
    j["decode_tokens"] = a->decode;
    j["prefill_tok_s"] = a->prompt / median(pre);
    j["decode_tok_s"] = a->decode / median(dec);
    j["weights_bytes"] = model->arenas().allocated_bytes(Category::FrozenWeights);
    j["quantization"] = a->quantize.empty() ? "none" : a->quantize;
    j["peak_rss_bytes"] = process_peak_rss_bytes();
    fmt::print("{}\n", j.dump());
  });
}

}  // namespace lt::cli

// `leantune bench` (include/leantune/trainer.h): training steps through the training loop on
// synthetic batches, and inference prefill / decode through LlamaModel.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>

#include "api/access.h"
#include "api/run_training.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/ledger.h"
#include "core/memory_plan.h"
#include "core/profiler.h"
#include "core/threads.h"
#include "io/model_files.h"
#include "kernels/ops.h"
#include "leantune/trainer.h"
#include "model/llama_model.h"
#include "plan/flops.h"
#include "plan/peak.h"

namespace leantune {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

lt::TrainConfig bench_config(const TrainBenchOptions& a) {
  lt::TrainConfig c;
  c.source = "bench";
  c.base_model = a.model;
  c.method = lt::parse_method(a.method);
  c.lora.r = a.lora_r;
  c.lora.alpha = float(2 * a.lora_r);
  c.lora.target_modules = {"all-linear"};
  c.micro_batch_size = a.micro_batch;
  c.sequence_len = a.seq;
  c.gradient_checkpointing = a.checkpointing;
  c.precision = lt::parse_precision(a.precision);
  c.attention_precision = lt::parse_attention_precision(a.attention_precision);
  if (!a.quantization.empty()) {
    c.quantization = lt::parse_quantization(a.quantization);
    c.double_quant = a.double_quant;
  }
  c.max_steps = a.steps + 1;  // the warm-up, then the measured steps
  c.learning_rate = 1e-4;
  c.lr_scheduler = "constant";
  c.weight_decay = 0.01;
  c.max_grad_norm = 0;
  c.threads = a.threads;
  return c;
}

// The measured figures of a bench run and its configuration, as one JSON object.
nlohmann::json train_report(const TrainBenchOptions& a, lt::TrainLoop& loop, std::vector<double> times) {
  lt::TrainModel& m = loop.model();
  const int N = a.micro_batch * a.seq;
  nlohmann::json j;
  j["model"] = a.model; j["threads"] = lt::num_threads(); j["method"] = a.method; j["lora_r"] = a.lora_r;
  j["micro_batch"] = a.micro_batch; j["seq"] = a.seq; j["checkpointing"] = a.checkpointing;
  j["precision"] = a.precision;
  j["attention_precision"] = lt::bf16_attention(m.options()) ? "bf16" : "f32";  // as resolved (auto: by the CPU)
  j["quantization"] = a.quantization.empty() ? "none" : a.quantization;
  j["step_s"] = median(times);
  j["tokens_per_s"] = N / median(times);
  j["planned_bytes"] = m.plan().total_bytes();
  j["trainable_params"] = m.trainable_count();
  j["peak_rss_bytes"] = lt::process_peak_rss_bytes();
  const auto lj = nlohmann::json::parse(loop.ledger()->to_json());
  j["measured_resident"] = lj["max_resident"];
  j["peak_phase"] = lj["peak_phase"];
  const lt::PhaseFlops f = lt::training_flops_per_token(m.config(), m.options());
  j["model_flops_per_token"] = f.forward + f.backward;
  // MFU against the fastest unit of the run's precision on this machine (bf16: AMX tiles where
  // present, else vdpbf16ps, else the f32 FMA peak), and against each measured peak
  const double model_gflops = (f.forward + f.backward) * j["tokens_per_s"].get<double>() / 1e9;
  const lt::MfuPeak peak = lt::mfu_peak(a.precision == "bf16");
  j["peak_f32_gflops"] = lt::peak_f32_gflops();
  j["peak_bf16_gflops"] = lt::peak_bf16_gflops();
  j["peak_amx_bf16_gflops"] = lt::peak_amx_bf16_gflops();
  j["peak_gflops_used_for_mfu"] = peak.gflops;
  j["peak_unit_used_for_mfu"] = peak.unit;
  j["mfu"] = model_gflops / peak.gflops;
  nlohmann::json by_peak;
  for (const char* k : {"peak_f32_gflops", "peak_bf16_gflops", "peak_amx_bf16_gflops"})
    if (j[k].get<double>() > 0) by_peak[k] = model_gflops / j[k].get<double>();
  j["mfu_by_peak"] = by_peak;
  return j;
}

}  // namespace

std::string bench_training(const TrainBenchOptions& a) {
  lt::set_num_threads(a.threads);
  const lt::ModelConfig mc = lt::load_model_config(a.model);
  LT_CHECK(a.seq <= mc.max_seq_len, "{}: --seq {} is more than the model's context of {} positions "
           "(max_position_embeddings); use --seq {} or less", a.model, a.seq, mc.max_seq_len, mc.max_seq_len);
  if (!a.profile_trace.empty()) lt::prof::route(true);
  auto loop = lt::TrainLoop::synthetic(bench_config(a), lt::local_services(), 1234);
  std::vector<double> times;
  for (int s = 0; s <= a.steps; ++s) {
    const lt::StepStats st = loop->step();
    if (s == 0 && !a.profile_trace.empty()) lt::prof::start();  // the measured steps, not the warm-up
    if (s) times.push_back(st.seconds);
  }
  const nlohmann::json j = train_report(a, *loop, times);
  if (!a.profile_trace.empty()) {
    lt::prof::stop();
    lt::prof::write_trace(a.profile_trace);
    fmt::print(stderr, "profile (measured steps):\n{}wrote {}\n", lt::prof::table(), a.profile_trace);
  }
  return j.dump();
}

std::string bench_inference(const InferenceBenchOptions& a) {
  lt::set_num_threads(a.threads);
  const lt::ModelConfig mc = lt::load_model_config(a.model);
  LT_CHECK(int64_t(a.prompt_tokens) + a.decode_tokens <= mc.max_seq_len, "{}: --prompt-tokens {} + --decode-tokens {} "
           "= {} positions is more than the model's context of {} (max_position_embeddings); use at most {} in all",
           a.model, a.prompt_tokens, a.decode_tokens, int64_t(a.prompt_tokens) + a.decode_tokens, mc.max_seq_len,
           mc.max_seq_len);
  lt::InferenceOptions io;
  io.context = a.prompt_tokens + a.decode_tokens + 1;
  io.quantization = lt::parse_quantization(a.quantization);
  io.double_quant = a.double_quant;
  const Weights weights = a.weights.empty() ? Weights::F32 : parse_weights(a.weights);
  detail::apply_weights(weights, parse_quantization(a.quantization), io);
  LT_CHECK(a.kv_cache.empty() || a.kv_cache == "f32" || a.kv_cache == "bf16", "--kv-cache '{}': expected f32 or bf16",
           a.kv_cache);
  io.kv_cache = a.kv_cache == "bf16" ? lt::DType::BF16 : lt::DType::F32;
  auto model = lt::LlamaModel::load(a.model, io, lt::ops_cpu());
  std::mt19937 rng(1234);
  std::vector<int> ids(size_t(a.prompt_tokens + a.decode_tokens));
  for (auto& t : ids) t = int(rng() % unsigned(model->config().vocab_size));
  std::vector<double> pre, dec, dec_cpu;
  for (int r = 0; r < a.repeats + 1; ++r) {  // the first run is the warm-up
    const auto t0 = Clock::now();
    model->forward(ids.data(), a.prompt_tokens, 0);
    const auto t1 = Clock::now();
    const std::clock_t c1 = std::clock();
    for (int i = 0; i < a.decode_tokens; ++i)
      model->forward(&ids[size_t(a.prompt_tokens + i)], 1, a.prompt_tokens + i);
    const auto t2 = Clock::now();
    const std::clock_t c2 = std::clock();
    if (r == 0) continue;
    pre.push_back(std::chrono::duration<double>(t1 - t0).count());
    dec.push_back(std::chrono::duration<double>(t2 - t1).count());
    dec_cpu.push_back(double(c2 - c1) / CLOCKS_PER_SEC);
  }
  nlohmann::json j;
  j["model"] = a.model;
  j["threads"] = lt::num_threads();
  j["isa"] = lt::isa_name(lt::cpu_isa());
  j["prompt_tokens"] = a.prompt_tokens;
  j["decode_tokens"] = a.decode_tokens;
  j["prefill_tok_s"] = a.prompt_tokens / median(pre);
  j["decode_tok_s"] = a.decode_tokens / median(dec);
  // per second of the process's CPU time (all threads): on a shared, loaded machine the 1-thread
  // figure is what the decode would reach alone, where wall time also counts the waits for a core
  j["decode_tok_per_cpu_s"] = a.decode_tokens / median(dec_cpu);
  const size_t weight_bytes = model->arenas().allocated_bytes(lt::Category::FrozenWeights);
  j["weights_bytes"] = weight_bytes;
  j["weights"] = weights_name(weights);
  j["kv_cache"] = a.kv_cache == "bf16" ? "bf16" : "f32";
  // bytes one decode step streams: every weight but the embedding table (one row of it is read),
  // unless the f32 lm_head is that table; the KV cache is left out (small at these lengths)
  const lt::ModelConfig& c = model->config();
  const size_t table = size_t(c.vocab_size) * size_t(c.dim) * sizeof(float);
  const size_t streamed = weight_bytes - (c.tie_embeddings && model->lm_head_weights() ? 0 : table);
  j["decode_bytes_per_token"] = streamed;
  j["decode_gb_s"] = double(streamed) * (a.decode_tokens / median(dec)) / 1e9;
  j["quantization"] = a.quantization.empty() ? "none" : a.quantization;
  j["peak_rss_bytes"] = lt::process_peak_rss_bytes();
  return j.dump();
}

}  // namespace leantune

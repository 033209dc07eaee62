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
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/memory_plan.h"
#include "core/threads.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

namespace lt::cli {

void add_bench_command(CLI::App& app) {
  struct Args { std::string model; int threads = 0, prompt = 128, decode = 64, repeats = 3; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("bench", "Measure prefill and decode tokens/s");
  c->add_option("--model,-m", a->model, "model path")->required();
  c->add_option("--threads,-t", a->threads, "threads");
  c->add_option("--prompt-tokens", a->prompt, "prefill length")->check(CLI::PositiveNumber);
  c->add_option("--decode-tokens", a->decode, "decode steps")->check(CLI::PositiveNumber);
  c->add_option("--repeats", a->repeats, "runs (median reported)")->check(CLI::PositiveNumber);
  c->callback([a] {
    set_num_threads(a->threads);
    InferenceOptions io;
    io.context = a->prompt + a->decode + 1;
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
    j["peak_rss_bytes"] = process_peak_rss_bytes();
    fmt::print("{}\n", j.dump());
  });
}

}  // namespace lt::cli

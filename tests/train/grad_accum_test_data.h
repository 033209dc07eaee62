// Synthetic fine-tuning data for the gradient-accumulation tests (tests/train/test_grad_accum.cpp,
// tests/dist/test_dist_grad_accum.cpp): documents and prompt/completion pairs of very different
// lengths, so micro-batches carry very different label-token counts, and the comparison of one
// step's results with and without accumulation (the trained weights of two output folders).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/tensor_set.h"
#include "train/train_config.h"

namespace lt::test {

// Every comparison of this file: accumulation changes only the fp32 summation order of the
// gradients (a dW is summed over 8 rows in one GEMM, or over 4 + 4 in two, then added; the step
// loss is one sum, or two partial sums added), each order exact to a few ulp (6e-8) times the
// depth of the sum, so after a few steps of AdamW the losses and weights agree to ~1e-6 relative;
// the mean of per-micro-batch means that the normalisation replaced differs by ~1e-4 on this data.
constexpr double kAccumRelTol = 1e-5;

inline std::string random_words(std::mt19937& rng, int n) {
  static const char* kWords[] = {"the", "fox", "saw", "a", "crow", "with", "cheese", "and", "said", "how",
                                 "fine", "you", "are", "lion", "mouse", "ran", "away", "big", "tree", "sun"};
  std::string s;
  for (int i = 0; i < n; ++i) s += std::string(i ? " " : "") + kWords[rng() % 20];
  return s + ".";
}

// Plain text: 80 documents of 2 to 60 words separated by blank lines (packed: many document
// boundaries per row, each an ignored label, at different places in each micro-batch).
inline std::string write_packed_text(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/docs.txt";
  std::ofstream f(path);
  std::mt19937 rng(7);
  for (int d = 0; d < 80; ++d) f << random_words(rng, 2 + int(rng() % 59)) << "\n\n";
  return path;
}

// Prompt/completion JSONL: prompts of 5 to 40 words (no loss) and completions of 1 to 30 words, so
// one example per row gives rows with anywhere from 2 to ~150 label tokens.
inline std::string write_prompt_completion(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/pairs.jsonl";
  std::ofstream f(path);
  std::mt19937 rng(11);
  for (int d = 0; d < 80; ++d) {
    const std::string p = random_words(rng, 5 + int(rng() % 36)), c = random_words(rng, 1 + int(rng() % 30));
    f << "{\"prompt\": \"" << p << " \", \"completion\": \"" << c << "\"}\n";
  }
  return path;
}

// A short fine-tune of stories260K on `data` (one thread, no dropout: the masks are drawn per
// micro-batch shape); global batch micro_batch x accum rows of 64 tokens.
inline TrainConfig accum_config(const std::string& data, const std::string& method, bool packing) {
  const std::string shared = LT_SHARED_DIR;
  TrainConfig c;
  c.base_model = shared + "/models/stories260K/stories260K.bin";
  c.tokenizer = shared + "/models/stories260K/tok512.bin";
  c.datasets = {{data, 1}};
  c.val_set_size = 0.1;
  c.method = parse_method(method);
  c.lora.r = 4;
  c.lora.alpha = 8;
  c.lora.dropout = 0.0f;
  c.lora.target_modules = {"all-linear"};
  c.sequence_len = 64;
  c.sample_packing = packing;
  c.learning_rate = method == "lora" ? 3e-3 : 1e-3;
  c.lr_scheduler = "constant";
  c.max_grad_norm = 1.0;  // below stories260K's first gradient norms (5-8): clipping is part of what is compared
  c.max_steps = 4;
  c.threads = 1;
  c.logging_steps = 100;
  return c;
}

// The trained tensors of a finished run: the adapter (LoRA) or the model folder (full).
inline std::string trained_file(const TrainConfig& c) {
  return c.output_dir + (c.method == Method::Lora ? "/adapter/adapter_model.safetensors" : "/model/model.safetensors");
}

inline std::vector<float> tensor_f32(const TensorInfo& t) {
  std::vector<float> v(t.nbytes / dtype_size(t.dtype));
  convert_to_f32(v.data(), t.data, t.dtype, v.size());
  return v;
}

// Per tensor: every element within kAccumRelTol of the tensor's largest magnitude (an element-wise
// ratio would divide by weights that happen to be near zero), except at most 5% of its elements,
// which must be within the largest update AdamW can make in `steps` steps at `lr` (lr per step,
// as |m̂/(√v̂+ε)| <= 1 here). Those few are AdamW's ill-conditioned elements: where a gradient is a
// cancellation within a few ulps of its terms of zero, its relative rounding error is large, and
// m̂/(√v̂+ε) (sign(g) at step 1) passes it on undamped; a mis-weighted micro-batch would move every
// element (and the losses and gradient norms, well-conditioned, are held to kAccumRelTol too).
// Seen here: at most 3 such elements in a tensor (of 256), 9 in a whole adapter.
inline void expect_same_weights(const std::string& got_file, const std::string& want_file, const std::string& what,
                                double lr, int steps) {
  TensorSet got, want;
  load_safetensors(got_file, got);
  load_safetensors(want_file, want);
  ASSERT_EQ(got.all().size(), want.all().size()) << what;
  double worst = 0;
  size_t outliers = 0;
  for (const auto& [name, wt] : want.all()) {
    const TensorInfo* gt = got.find(name);
    ASSERT_TRUE(gt) << what << ": " << name << " missing";
    const auto a = tensor_f32(*gt), b = tensor_f32(wt);
    ASSERT_EQ(a.size(), b.size()) << what << ": " << name;
    double scale = 0;
    for (float v : b) scale = std::max(scale, std::fabs(double(v)));
    size_t n_out = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      const double diff = std::fabs(double(a[i]) - b[i]);
      worst = std::max(worst, diff / std::max(scale, 1e-30));
      if (diff <= kAccumRelTol * scale) continue;
      ++n_out;
      EXPECT_LE(diff, lr * steps) << what << ": " << name << "[" << i << "] " << a[i] << " vs " << b[i];
    }
    EXPECT_LE(n_out, b.size() / 20) << what << ": tensor " << name << " differs in " << n_out << " of " << b.size()
                                      << " elements by more than " << kAccumRelTol << " of its largest magnitude";
    outliers += n_out;
  }
  std::printf("%s: weights' largest relative difference %.2e (%zu ill-conditioned elements over %.0e)\n", what.c_str(),
              worst, outliers, kAccumRelTol);
}

// The grad_norm of each training step in a run's metrics.jsonl (before clipping: the step's gradient).
inline std::vector<float> grad_norms(const std::string& out_dir) {
  std::vector<float> g;
  std::ifstream f(out_dir + "/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("grad_norm")) g.push_back(j["grad_norm"].get<float>());
  }
  return g;
}

inline void expect_same_losses(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) / want[i] - 1));
    EXPECT_LE(std::fabs(double(got[i]) - want[i]), kAccumRelTol * std::fabs(double(want[i])))
        << what << ": loss " << i << " is " << got[i] << ", expected " << want[i];
  }
  std::printf("%s: losses' largest relative difference %.2e\n", what.c_str(), worst);
}

}  // namespace lt::test

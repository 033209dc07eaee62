// Inference on quantized linear weights (stories260K): int8 (LLM.int8) and NF4 + double quant
// logits stay close to f32 over a prompt and KV-cache decode steps, the plan's arenas are what was
// allocated and the weights shrink, a folder written by `leantune quantize` gives the same logits
// as quantizing on load (to rounding: the folder holds the HF q/k layout), and merging an adapter into quantized weights is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/quant_model.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

using namespace lt;
namespace fs = std::filesystem;

static const std::string kModel = std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin";

namespace {

// Logits of a 24-token prompt, then of 8 decode steps, concatenated.
std::vector<float> run(LlamaModel& m) {
  std::vector<int> ids;
  for (int i = 0; i < 32; ++i) ids.push_back(1 + (i * 37 + 11) % 500);
  std::vector<float> out;
  m.forward(ids.data(), 24, 0);
  out.insert(out.end(), m.logits(), m.logits() + m.config().vocab_size);
  for (int i = 24; i < 32; ++i) {
    m.forward(&ids[size_t(i)], 1, i);
    out.insert(out.end(), m.logits(), m.logits() + m.config().vocab_size);
  }
  return out;
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST(QuantInference, Int8AndNf4StayCloseToF32AndShrinkTheWeights) {
  auto f32 = LlamaModel::load(kModel, {}, ops_cpu());
  const auto ref = run(*f32);
  InferenceOptions i8;
  i8.quantization = QuantType::Int8;
  auto m8 = LlamaModel::load(kModel, i8, ops_cpu());
  InferenceOptions n4;
  n4.quantization = QuantType::NF4;
  n4.double_quant = true;
  auto m4 = LlamaModel::load(kModel, n4, ops_cpu());
  const double e8 = rel_rms(run(*m8), ref), e4 = rel_rms(run(*m4), ref);
  std::printf("relative RMS logit error vs f32: int8 %.4f, nf4+dq %.4f\n", e8, e4);
  EXPECT_LT(e8, 0.02);  // int8 rows: ~0.4% weight error
  EXPECT_LT(e4, 0.15);  // 4-bit: ~10% weight error on a model this small
  EXPECT_GT(e4, e8);
  for (auto* m : {m8.get(), m4.get()}) {
    for (size_t c = 0; c < kNumCategories; ++c)
      EXPECT_EQ(m->arenas().allocated_bytes(Category(c)), m->plan().arena_bytes(Category(c)));
    EXPECT_LT(m->arenas().allocated_bytes(Category::FrozenWeights),
              f32->arenas().allocated_bytes(Category::FrozenWeights));
  }
  EXPECT_THROW(m8->merge_adapter("/nonexistent"), Error);
}

TEST(QuantInference, AQuantizedFolderGivesTheSameLogitsAsQuantizingOnLoad) {
  fs::path dir = fs::temp_directory_path() / ("lt_quant_inference_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  quantize_model(kModel, {QuantType::NF4, 64, true}, dir.string());
  InferenceOptions n4;
  n4.quantization = QuantType::NF4;
  n4.double_quant = true;
  auto on_load = LlamaModel::load(kModel, n4, ops_cpu());
  auto stored = LlamaModel::load(dir.string(), {}, ops_cpu());  // no options: the folder says nf4 + dq
  // the folder is in the Hugging Face layout (q/k rows permuted for rotate-half RoPE), so only the
  // order of float sums differs from the llama2.c layout: equal to rounding
  const auto a = run(*stored), b = run(*on_load);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f) << i;
  fs::remove_all(dir);
}

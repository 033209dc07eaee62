// The rolling KV cache of sliding-window layers (model/llama_model.h), on stories260K given a
// window of 8: it holds window + prefill block - 1 rows per layer, gives the logits of the plain
// cache with the same window (prefill blocks that wrap around it, decode steps, a shared-weights
// sequence), and refuses a sequence cut back further than it still holds. Logits against
// transformers: tests/python/test_sliding_window_parity.py.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "io/model_files.h"
#include "kernels/ops.h"
#include "model/llama_model.h"

using namespace lt;

namespace {

const ModelFiles& stories() {
  static const ModelFiles f = load_model_files(std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  return f;
}

ModelConfig windowed(int window) {
  ModelConfig c = stories().config;
  c.sliding_window = window;
  return c;
}

// The logits after a prompt of `prompt` ids and after each of `decode` further ids, one at a time.
std::vector<float> run(LlamaModel& m, const std::vector<int>& ids, int prompt) {
  std::vector<float> out;
  const int V = m.config().vocab_size;
  m.forward(ids.data(), prompt, 0);
  out.insert(out.end(), m.logits(), m.logits() + V);
  for (int p = prompt; p < int(ids.size()); ++p) {
    m.forward(&ids[size_t(p)], 1, p);
    out.insert(out.end(), m.logits(), m.logits() + V);
  }
  return out;
}

std::vector<int> random_ids(int n) {
  std::mt19937 rng(3);
  std::vector<int> ids(static_cast<size_t>(n));
  for (auto& i : ids) i = int(rng() % 512);
  return ids;
}

TEST(SlidingWindowCache, RollingCacheHoldsWindowPlusBlockRows) {
  InferenceOptions o;
  o.context = 200;
  o.prefill_block = 6;
  const ModelConfig c = windowed(8);
  for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(kv_cache_rows(c, o, l), 8 + 6 - 1);
  EXPECT_EQ(kv_cache_rows(stories().config, o, 0), 200);  // no window: the whole context
  ModelConfig mixed = c;                                    // Qwen2's max_window_layers: layer 0 full
  mixed.sliding_layers.assign(size_t(c.n_layers), true);
  mixed.sliding_layers[0] = false;
  EXPECT_EQ(kv_cache_rows(mixed, o, 0), 200);
  EXPECT_EQ(kv_cache_rows(mixed, o, 1), 13);
  const size_t kv = plan_inference(c, o).arena_bytes(Category::KVCache);
  EXPECT_LT(kv, plan_inference(stories().config, o).arena_bytes(Category::KVCache) / 10);
}

TEST(SlidingWindowCache, RollingCacheGivesThePlainCachesLogits) {
  const ModelConfig c = windowed(8);
  const std::vector<int> ids = random_ids(60);
  InferenceOptions plain;  // one block covers the prompt: every layer keeps all 64 rows
  plain.context = 64;
  plain.prefill_block = 64;
  LlamaModel a(c, stories().tensors, plain, ops_cpu());
  const std::vector<float> want = run(a, ids, 37);
  // the window matters here (without it the logits differ)
  LlamaModel full(stories().config, stories().tensors, plain, ops_cpu());
  const std::vector<float> no_window = run(full, ids, 37);
  double moved = 0;
  for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, double(std::fabs(want[i] - no_window[i])));
  EXPECT_GT(moved, 1e-2);
  for (int block : {1, 5, 7, 16}) {
    InferenceOptions o = plain;
    o.prefill_block = block;  // 8 + block - 1 rows: the prompt wraps around them
    LlamaModel b(c, stories().tensors, o, ops_cpu());
    const std::vector<float> got = run(b, ids, 37);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << "block " << block << " at " << i;
    // a sequence over the same weights, and the reference kernels, agree too
    std::shared_ptr<const LlamaModel> weights = std::make_shared<LlamaModel>(c, stories().tensors, o, ops_ref());
    LlamaModel seq(weights, o);
    const std::vector<float> ref = run(seq, ids, 37);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(ref[i], want[i], 1e-4) << "ref, block " << block;
  }
}

TEST(SlidingWindowCache, CuttingBackFurtherThanTheCacheHoldsIsRefused) {
  InferenceOptions o;
  o.context = 64;
  o.prefill_block = 4;  // 11 rows
  LlamaModel m(windowed(8), stories().tensors, o, ops_cpu());
  const std::vector<int> ids = random_ids(40);
  m.forward(ids.data(), 30, 0);  // rows hold positions 19..29
  // continuing at 27 needs positions 20..26: still held
  EXPECT_NO_THROW(m.forward(&ids[27], 1, 27));
  // continuing at 20 needs 13..19, overwritten
  try {
    m.forward(&ids[20], 1, 20);
    ADD_FAILURE() << "a cut past the rolling cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no longer holds"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(m.forward(ids.data(), 5, 0));  // starting over is always possible
}

}  // namespace

// The base a sweep's runs share (train/base_cache.h): a model built on a borrowed frozen block
// (the first model's converted weights, fp32, bf16 or NF4) reads the very same buffers, converts
// nothing and computes the loss and every gradient bit for bit as a model that loads its own; the
// block is sealed read-only; the cache keeps one block while the frozen format is the same (any
// rank or target modules), makes a new one when it changes, none for PiSSA; the files load once.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/ops.h"
#include "train/base_cache.h"
#include "train/train_model.h"
#include "tiny_lora_model.h"

namespace lt {
namespace {

struct Pass {
  float loss;
  std::vector<std::vector<float>> grads;
};

Pass train_pass(TrainModel& m) {
  std::vector<int> tok(16), lab(16), pos(16), doc(16, 0);
  for (int i = 0; i < 16; ++i) {
    tok[size_t(i)] = (7 * i + 3) % 40;
    lab[size_t(i)] = (7 * i + 10) % 40;
    pos[size_t(i)] = i;
  }
  Pass p{m.forward_backward(tok.data(), lab.data(), pos.data(), doc.data(), 1.0f, 0), {}};
  for (const auto& t : m.params()) p.grads.emplace_back(t.g, t.g + t.n);
  return p;
}

TrainModelOptions options(int r, const std::vector<std::string>& targets, Precision prec, Quantization q) {
  TrainModelOptions o = TinyModel::options({});
  o.lora.r = r;
  o.lora.alpha = 2.0f * float(r);
  o.lora.target_modules = targets;
  o.precision = prec;
  o.quantization = q;
  o.seed = 11;
  return o;
}

struct Format {
  Precision precision;
  Quantization quant;
};

class BorrowedBase : public ::testing::TestWithParam<Format> {};

TEST_P(BorrowedBase, TrainsBitForBitAsItsOwnBase) {
  TinyModel tiny;
  BaseCache cache;
  const TrainModelOptions first = options(4, {"all-linear"}, GetParam().precision, GetParam().quant);
  const TrainModelOptions second = options(2, {"q_proj", "v_proj"}, GetParam().precision, GetParam().quant);
  auto block = cache.frozen("memory", tiny.cfg, first);
  ASSERT_TRUE(block);
  TrainModel a(tiny.cfg, tiny.ts, first, ops_cpu(), nullptr, block.get());
  EXPECT_TRUE(block->filled);
  EXPECT_TRUE(a.arenas().borrowed(Category::FrozenWeights));
  const Pass pa = train_pass(a);
  // another rank and other targets: the same frozen buffers, lent
  ASSERT_EQ(cache.frozen("memory", tiny.cfg, second), block);
  TrainModel b(tiny.cfg, tiny.ts, second, ops_cpu(), nullptr, block.get());
  EXPECT_EQ(block->borrowers, 1);
  EXPECT_EQ(cache.frozen_builds(), 1);
  EXPECT_EQ(b.arenas().allocated_bytes(Category::FrozenWeights), a.arenas().allocated_bytes(Category::FrozenWeights));
  if (!GetParam().quant && GetParam().precision == Precision::FP32)
    EXPECT_EQ(b.weight("model.layers.0.self_attn.q_proj.weight"), a.weight("model.layers.0.self_attn.q_proj.weight"));
  const Pass pb = train_pass(b);
  // the same two configurations on bases of their own
  TrainModel own_a(tiny.cfg, tiny.ts, first, ops_cpu());
  TrainModel own_b(tiny.cfg, tiny.ts, second, ops_cpu());
  EXPECT_FALSE(own_b.arenas().borrowed(Category::FrozenWeights));
  const Pass qa = train_pass(own_a), qb = train_pass(own_b);
  EXPECT_EQ(std::memcmp(&pa.loss, &qa.loss, sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(&pb.loss, &qb.loss, sizeof(float)), 0);
  EXPECT_EQ(pa.grads, qa.grads);
  ASSERT_EQ(pb.grads.size(), qb.grads.size());
  for (size_t i = 0; i < pb.grads.size(); ++i)
    EXPECT_EQ(std::memcmp(pb.grads[i].data(), qb.grads[i].data(), pb.grads[i].size() * sizeof(float)), 0) << i;
}

INSTANTIATE_TEST_SUITE_P(Formats, BorrowedBase,
                         ::testing::Values(Format{Precision::FP32, std::nullopt}, Format{Precision::BF16, std::nullopt},
                                           Format{Precision::FP32, QuantType::NF4}));

TEST(BaseCache, SealedBlockFaultsOnWrite) {
  TinyModel tiny;
  BaseCache cache;
  const TrainModelOptions o = options(4, {"all-linear"}, Precision::FP32, std::nullopt);
  auto block = cache.frozen("memory", tiny.cfg, o);
  TrainModel m(tiny.cfg, tiny.ts, o, ops_cpu(), nullptr, block.get());
  float* w = m.weight("model.layers.0.mlp.up_proj.weight");
  EXPECT_DEATH(*static_cast<volatile float*>(w) = 1.0f, "");
}

TEST(BaseCache, NewBlockWhenTheFrozenFormatChanges) {
  TinyModel tiny;
  BaseCache cache;
  const auto o32 = options(4, {"all-linear"}, Precision::FP32, std::nullopt);
  auto b32 = cache.frozen("memory", tiny.cfg, o32);
  TrainModel m(tiny.cfg, tiny.ts, o32, ops_cpu(), nullptr, b32.get());
  EXPECT_EQ(cache.frozen("memory", tiny.cfg, options(8, {"gate_proj", "up_proj", "down_proj"}, Precision::FP32, std::nullopt)), b32);
  auto b16 = cache.frozen("memory", tiny.cfg, options(4, {"all-linear"}, Precision::BF16, std::nullopt));
  EXPECT_NE(b16, b32);
  EXPECT_FALSE(b16->filled);
  EXPECT_EQ(cache.frozen_builds(), 2);
  auto pissa = options(4, {"all-linear"}, Precision::FP32, std::nullopt);
  pissa.lora.init = "pissa";
  EXPECT_EQ(cache.frozen("memory", tiny.cfg, pissa), nullptr);  // PiSSA rewrites its base: its own
  // a block whose model failed before filling it is not handed out again
  auto nf4 = options(4, {"all-linear"}, Precision::FP32, QuantType::NF4);
  auto unfilled = cache.frozen("memory", tiny.cfg, nf4);
  EXPECT_NE(cache.frozen("memory", tiny.cfg, nf4), unfilled);
}

TEST(BaseCache, FilesLoadOnce) {
  BaseCache cache;
  const std::string path = std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  const ModelFiles& f = cache.files(path);
  EXPECT_EQ(&cache.files(path), &f);
  EXPECT_EQ(cache.file_loads(), 1);
  EXPECT_GT(f.config.n_layers, 0);
}

}  // namespace
}  // namespace lt

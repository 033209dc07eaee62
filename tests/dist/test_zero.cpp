// ZeRO: the flat layout and the per-rank byte formulas, and whole runs. On R ranks with
// accumulation a a ZeRO run must give, step for step, the loss of one process (the plain trainer)
// with accumulation R·a, for every stage, LoRA and full fine-tuning, with disk offload, and after
// resuming a sharded checkpoint on another number of ranks or from its consolidation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/shard_checkpoint.h"
#include "dist/zero.h"
#include "dist_test_config.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "train/train_model.h"
#include "api/run_training.h"

using namespace lt;
using lt::test::dist_config;
using lt::test::dist_dir;
using lt::test::reset_shared_dir;

namespace fs = std::filesystem;

namespace {

constexpr double kRelTol = 1e-5;
// fp16 runs: ZeRO stages 2-3 accumulate each micro-batch's gradient into a zeroed bucket, the one
// process into the gradient buffer that already holds the last one (GEMMs with beta = 1). Where the
// GEMM blocks K (oneDNN's AVX2 sgemm does, its AVX-512 one not at these sizes) the f32 sums round
// differently, ~1e-7 relative (the f32 runs above show it). In fp16 the next step rounds dY to
// fp16, where such a difference can flip an element by one fp16 ulp (2^-10 relative), and the loss,
// a mean over many elements, moves by well under that: losses agree to half an ulp, 2^-11.
constexpr double kFp16RelTol = 1.0 / 2048;

void expect_same_losses(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                        double rel_tol = kRelTol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) / want[i] - 1));
  if (world().rank() == 0)
    std::printf("%s, %d rank(s): losses %.6f .. %.6f, largest relative difference to one process %.2e\n",
                what.c_str(), world().size(), got.front(), got.back(), worst);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(std::fabs(double(got[i]) - want[i]), rel_tol * std::fabs(double(want[i])))
        << what << ": step " << i + 1 << " loss " << got[i] << " vs one process " << want[i];
}

// The plain single-process trainer with the whole global batch (accumulation 2), once per method.
const std::vector<float>& one_process_losses(const std::string& method) {
  static std::map<std::string, std::vector<float>> cache;
  auto it = cache.find(method);
  if (it != cache.end()) return it->second;
  TrainConfig c = dist_config(method, 2);
  c.gradient_accumulation_steps = 2;
  c.output_dir = dist_dir("ref_" + method, true);
  fs::remove_all(c.output_dir);
  auto losses = run_training_single(c).losses;
  fs::remove_all(c.output_dir);
  return cache[method] = losses;
}

std::vector<float> zero_losses(TrainConfig c, const ZeroOptions& z, const std::string& name) {
  c.output_dir = dist_dir(name);
  reset_shared_dir(c.output_dir);
  return run_training_zero(c, z, world()).losses;
}

}  // namespace

TEST(DistZeroLayout, ShardsAreContiguousAndPadded) {
  const size_t counts[] = {10, 7, 5};
  FlatLayout l = flat_layout(counts, 3);
  EXPECT_EQ(l.total, 22u);
  EXPECT_EQ(l.shard, 8u);  // ceil(22 / 3)
  EXPECT_EQ(l.offset, (std::vector<size_t>{0, 10, 17}));
  EXPECT_EQ(l.begin(2), 16u);
  EXPECT_EQ(l.end(2), 22u);  // the last shard is 6 real elements + 2 of padding
}

// The ZeRO formulas, per rank, in floats, for Ψ trainable floats, S = ceil(Ψ/R), M the largest
// unit (the embedding, a decoder layer, or the final norm with lm_head) and X the overlap slot (the
// largest decoder layer with overlap, where a unit is prefetched or reduced while another runs;
// 0 without); every buffer rounded up to 64 bytes:
//   optimizer state  2·Ψ (stage 0)   2·S (stages 1-3)                    (0 with disk offload)
//   gradients        Ψ (stages 0-1)  S + M + X (stages 2-3)
//   parameters       Ψ (stages 0-2)  S + M + X (stage 3)                 (M + X with disk offload)
struct Formula {
  size_t optimizer, grads, params;
};
Formula zero_formula(size_t psi, size_t M, size_t X, int R, int stage, bool disk) {
  const size_t S = (psi + size_t(R) - 1) / size_t(R), f = 4;
  Formula x;
  x.optimizer = disk ? 0 : 2 * align_up((stage == 0 ? psi : S) * f);
  x.grads = stage >= 2 ? align_up(S * f) + align_up(M * f) + (X ? align_up(X * f) : 0) : 0;  // + the model's Ψ below stage 2
  x.params = stage == 3 ? (disk ? 0 : align_up(S * f)) + align_up(M * f) + (X ? align_up(X * f) : 0) : 0;
  return x;
}

TEST(DistZeroLayout, EngineBytesFollowTheZeroFormulas) {
  ZeroTensors t;
  t.counts = {300, 400, 301};
  t.units = {0, 1, 2};
  t.total = 1001;
  t.unit_max = 400;
  t.layer_max = 400;
  const int R = 4;
  for (bool overlap : {true, false}) {
    for (int stage = 0; stage <= 3; ++stage)
      for (bool disk : {false, true}) {
        ZeroOptions o;
        o.stage = stage;
        o.overlap = overlap;
        if (disk) o.offload = OptimizerOffload::Disk;
        const MemoryPlan p = plan_zero_state(t, R, o);
        const Formula x = zero_formula(1001, 400, overlap ? 400 : 0, R, stage, disk);
        EXPECT_EQ(p.arena_bytes(Category::OptimizerState), x.optimizer) << stage << disk;
        EXPECT_EQ(p.arena_bytes(Category::Grads), x.grads) << stage << disk;
        EXPECT_EQ(p.arena_bytes(Category::TrainableParams), x.params) << stage << disk;
        EXPECT_EQ(zero_offloaded_bytes(1001, R, o),
                  disk ? 2 * align_up((stage == 0 ? 1001 : 251) * 4) + (stage == 3 ? align_up(251 * 4) : 0) : 0);
      }
  }
}

// On the real model: units, M and k from the plan, and one rank's whole plan per category against
// the formulas (the model's own Ψ of gradients below stage 2 and of parameters below stage 3).
TEST(DistZeroLayout, RankPlansOfTheModelFollowTheZeroFormulas) {
  for (std::string method : {"lora", "full"}) {
    TrainConfig c = dist_config(method, 2);
    auto files = load_model_files(c.base_model);
    const ModelConfig& mc = files.config;
    TrainModelOptions o = train_model_options(c);
    const MemoryPlan single = plan_training(mc, o);
    const ZeroTensors t = zero_tensors(single, mc.n_layers);
    const size_t psi = trainable_floats(single);
    EXPECT_EQ(t.total, psi);
    // the largest unit by hand: a decoder layer's trainables, or the embedding
    size_t layer0 = 0, embed = 0;
    for (const auto& b : single.buffers) {
      if (b.cat != Category::TrainableParams) continue;
      if (b.name.find("layers.0.") != std::string::npos) layer0 += b.bytes / 4;
      if (b.name == "model.embed_tokens.weight") embed += b.bytes / 4;
    }
    EXPECT_EQ(t.unit_max, std::max(layer0, embed)) << method;
    EXPECT_EQ(t.layer_max, layer0) << method;
    EXPECT_EQ(t.tied_floats, method == "full" && mc.tie_embeddings ? embed : 0) << method;
    for (int R : {1, 2, 3})
      for (int stage = 0; stage <= 3; ++stage)
        for (bool overlap : {true, false}) {
        ZeroOptions z;
        z.stage = stage;
        z.overlap = overlap;
        const MemoryPlan r = plan_zero_rank(single, mc.n_layers, R, z);
        const Formula x = zero_formula(psi, t.unit_max, overlap ? layer0 : 0, R, stage, false);
        const std::string what = method + " R=" + std::to_string(R) + " stage " + std::to_string(stage) +
                                 (overlap ? " overlap" : "");
        EXPECT_EQ(r.arena_bytes(Category::OptimizerState), x.optimizer) << what;
        EXPECT_EQ(r.arena_bytes(Category::Grads), x.grads + (stage < 2 ? single.arena_bytes(Category::Grads) : 0))
            << what;
        EXPECT_EQ(r.arena_bytes(Category::TrainableParams),
                  x.params + (stage < 3 ? single.arena_bytes(Category::TrainableParams) : 0)) << what;
        EXPECT_EQ(r.arena_bytes(Category::Activations), single.arena_bytes(Category::Activations)) << what;
        EXPECT_EQ(r.arena_bytes(Category::FrozenWeights), single.arena_bytes(Category::FrozenWeights)) << what;
      }
  }
}

class DistZeroStages : public testing::TestWithParam<std::tuple<std::string, int, bool>> {};

TEST_P(DistZeroStages, LossesEqualOneProcessWithTheSameGlobalBatch) {
  const auto [method, stage, overlap] = GetParam();
  ZeroOptions z;
  z.stage = stage;
  z.overlap = overlap;
  const std::string name = method + "_zero" + std::to_string(stage) + (overlap ? "" : "_blocking");
  auto got = zero_losses(dist_config(method, 2), z, name);
  expect_same_losses(got, one_process_losses(method), name);
  // every rank's ledger: allocated bytes per category equal the per-rank plan
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dist_dir(name) + "/ledger-rank" +
                                                         std::to_string(world().rank()) + ".json"));
  for (auto& [cat, v] : j["categories"].items())
    EXPECT_EQ(v["planned"].get<size_t>(), v["allocated"].get<size_t>()) << name << " " << cat;
  // and the sharded categories equal the formulas (model-held Ψ below stages 2 / 3)
  const size_t psi = j["trainable_floats"].get<size_t>();
  const Formula x = zero_formula(psi, j["unit_floats"].get<size_t>(), overlap ? j["layer_unit_floats"].get<size_t>() : 0,
                                 world().size(), stage, false);
  auto allocated = [&](const char* cat) {
    return j["categories"].contains(cat) ? j["categories"][cat]["allocated"].get<size_t>() : size_t(0);
  };
  EXPECT_EQ(allocated("optimizer_state"), x.optimizer) << name;
  if (stage >= 2) { EXPECT_EQ(allocated("gradients"), x.grads) << name; }
  if (stage == 3) { EXPECT_EQ(allocated("trainable_params"), x.params) << name; }
  if (stage < 3) { EXPECT_GE(allocated("trainable_params"), psi * 4) << name; }
  // with overlap the collectives did overlap: stage 3 found units prefetched, and on several ranks
  // the reductions were started during the backward
  const auto& ov = j["overlap"];
  if (overlap && stage == 3) { EXPECT_GT(ov["prefetched_units"].get<size_t>(), ov["gathered_units"].get<size_t>()) << name; }
  if (!overlap && stage == 3) { EXPECT_EQ(ov["prefetched_units"].get<size_t>(), 0u) << name; }
  if (world().size() > 1) {
    if (overlap) EXPECT_GT(ov["reductions_overlapped"].get<size_t>(), 0u) << name;
    else EXPECT_EQ(ov["reductions_overlapped"].get<size_t>(), 0u) << name;
  }
  // `leantune consolidate`: the last sharded checkpoint exports the model the run wrote, tensor for tensor
  if (world().rank() == 0) {
    const std::string ex = dist_dir(name + "_export", true);
    fs::remove_all(ex);
    export_sharded_checkpoint(dist_dir(name), ex);
    const std::string file = method == "lora" ? "/adapter/adapter_model.safetensors" : "/model/model.safetensors";
    TensorSet wrote, exported;
    load_safetensors(dist_dir(name) + file, wrote);
    load_safetensors(ex + (method == "lora" ? "/adapter_model.safetensors" : "/model.safetensors"), exported);
    EXPECT_EQ(wrote.all().size(), exported.all().size()) << name;
    for (const auto& [key, t] : wrote.all()) {
      const TensorInfo* e = exported.find(key);
      ASSERT_NE(e, nullptr) << name << ": " << key;
      ASSERT_EQ(e->nbytes, t.nbytes) << key;
      EXPECT_EQ(std::memcmp(e->data, t.data, t.nbytes), 0) << name << ": " << key;
    }
    fs::remove_all(ex);
  }
}

INSTANTIATE_TEST_SUITE_P(DistZero, DistZeroStages,
                         testing::Combine(testing::Values("lora", "full"), testing::Values(0, 1, 2, 3),
                                          testing::Values(true, false)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_stage" + std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_overlap" : "_blocking");
                         });

// fp16 with dynamic loss scaling: the same losses as the single-process trainer, including the
// steps skipped while an initial scale of 2^24 overflows and backs off (every rank skips them).
TEST(DistZeroFp16, LossScalingSkipsTheSameStepsAsOneProcess) {
  auto fp16 = [](TrainConfig c) {
    c.precision = Precision::FP16;
    c.initial_loss_scale = 16777216.0;  // 2^24: the first steps overflow
    c.max_steps = 10;
    return c;
  };
  TrainConfig one = fp16(dist_config("lora", 2));
  one.gradient_accumulation_steps = 2;
  one.output_dir = dist_dir("fp16_ref", true);
  fs::remove_all(one.output_dir);
  const auto want = run_training_single(one).losses;
  int skipped = 0;
  {
    std::ifstream m(one.output_dir + "/metrics.jsonl");
    for (std::string line; std::getline(m, line);) skipped += line.find("\"skipped\"") != std::string::npos;
  }
  EXPECT_GT(skipped, 0) << "the reference run should overflow at 2^24";
  EXPECT_LT(skipped, 10) << "and then train";
  fs::remove_all(one.output_dir);
  for (int stage : {0, 2, 3}) {
    ZeroOptions z;
    z.stage = stage;
    const std::string name = "fp16_zero" + std::to_string(stage);
    expect_same_losses(zero_losses(fp16(dist_config("lora", 2)), z, name), want, name, kFp16RelTol);
    if (world().rank() == 0) {
      int got = 0;
      std::ifstream m(dist_dir(name) + "/metrics.jsonl");
      for (std::string line; std::getline(m, line);) got += line.find("\"skipped\"") != std::string::npos;
      EXPECT_EQ(got, skipped) << name;
    }
  }
}

// memory_budget under ZeRO is checked per rank before anything is allocated; the error lists every stage.
TEST(DistZeroBudget, ABudgetTooSmallForEveryStageIsAnErrorListingThem) {
  if (world().size() > 1) GTEST_SKIP() << "run_training_zero aborts the job on an error with several ranks";
  TrainConfig c = dist_config("full", 2);
  c.memory_budget = "2MB";
  c.output_dir = dist_dir("budget", true);
  ZeroOptions z;
  z.stage = 1;
  try {
    run_training_zero(c, z, world());
    FAIL() << "a 2 MB budget cannot fit";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("zero_stage 1 on 1 rank needs"), std::string::npos) << m;
    EXPECT_NE(m.find("over the memory budget of 1.91 MiB"), std::string::npos) << m;
    for (const char* stage : {"zero_stage 0", "zero_stage 2", "zero_stage 3"})
      EXPECT_NE(m.find(stage), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(c.output_dir + "/metrics.jsonl"));
  fs::remove_all(c.output_dir);
}

TEST(DistZeroOffload, DiskOffloadGivesTheSameLossesAndNoResidentMoments) {
  for (int stage : {1, 3}) {
    ZeroOptions z;
    z.stage = stage;
    auto resident = zero_losses(dist_config("lora", 2), z, "offload_ref" + std::to_string(stage));
    z.offload = OptimizerOffload::Disk;
    z.offload_dir = dist_dir("offload_files" + std::to_string(stage));
    const std::string name = "offload_disk" + std::to_string(stage);
    auto disk = zero_losses(dist_config("lora", 2), z, name);
    EXPECT_EQ(disk, resident) << "stage " << stage;  // the same arithmetic on file-backed memory: bit for bit
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dist_dir(name) + "/ledger-rank" +
                                                           std::to_string(world().rank()) + ".json"));
    EXPECT_FALSE(j["categories"].contains("optimizer_state") &&
                 j["categories"]["optimizer_state"]["allocated"].get<size_t>() > 0);
    const size_t psi = j["trainable_floats"].get<size_t>();
    EXPECT_EQ(j["offloaded_bytes"].get<size_t>(), zero_offloaded_bytes(psi, world().size(), z));
    EXPECT_GT(j["offloaded_bytes"].get<size_t>(), 2 * psi * 4 / size_t(world().size()) - 1);
    EXPECT_FALSE(fs::exists(z.offload_dir + "/leantune-optimizer-rank" + std::to_string(world().rank()) + ".bin"));
  }
}

// Stage 2 LoRA: 2 steps, checkpoint, then steps 3-4 resumed (a) on this job's ranks, (b) on one
// process from the same sharded checkpoint (re-sharded), (c) by the plain single-process trainer
// from its consolidation; each must repeat the uninterrupted run's losses.
TEST(DistZeroCheckpoint, ResumesOnAnyNumberOfRanksAndFromTheConsolidation) {
  ZeroOptions z;
  z.stage = 2;
  const auto full = zero_losses(dist_config("lora", 2), z, "ckpt_full");
  ASSERT_EQ(full.size(), 4u);
  TrainConfig half = dist_config("lora", 2);
  half.max_steps = 2;
  zero_losses(half, z, "ckpt_half");
  const std::string ckpt = dist_dir("ckpt_half") + "/checkpoint-2";
  ASSERT_TRUE(fs::exists(ckpt + "/manifest.json"));
  for (int r = 0; r < world().size(); ++r)
    EXPECT_TRUE(fs::exists(ckpt + "/shard-" + std::to_string(r) + "-of-" + std::to_string(world().size()) +
                           ".safetensors"));

  // (b) one process, accumulation 2, from the sharded checkpoint
  SelfCommunicator self;
  TrainConfig one = dist_config("lora", 2);
  one.gradient_accumulation_steps = 2;
  one.resume = ckpt;
  one.output_dir = dist_dir("ckpt_one", true);
  fs::remove_all(one.output_dir);
  expect_same_losses(run_training_zero(one, z, self).losses, full, "resumed on one process");
  // (c) consolidated, then the plain trainer
  const std::string cons = dist_dir("ckpt_consolidated", true);
  fs::remove_all(cons);
  consolidate_checkpoint(ckpt, cons);
  TrainConfig plain = one;
  plain.resume = cons;
  plain.output_dir = dist_dir("ckpt_plain", true);
  fs::remove_all(plain.output_dir);
  expect_same_losses(run_training_single(plain).losses, full, "plain trainer from the consolidation");
  world().barrier();  // (a) below replaces checkpoint-2
  // (a) this job's ranks, LATEST
  half.max_steps = 4;
  half.resume = "auto";
  half.output_dir = dist_dir("ckpt_half");
  expect_same_losses(run_training_zero(half, z, world()).losses, full, "resumed on the same ranks");
  for (const auto& d : {one.output_dir, cons, plain.output_dir}) fs::remove_all(d);
}

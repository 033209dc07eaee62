// ZeRO: the flat layout and the per-rank byte formulas, and whole runs. On R ranks with
// accumulation a a ZeRO run must give, step for step, the loss of one process (the plain trainer)
// with accumulation R·a, for every stage, LoRA and full fine-tuning, with disk offload, and after
// resuming a sharded checkpoint on another number of ranks or from its consolidation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dist/shard_checkpoint.h"
#include "dist/zero.h"
#include "dist/zero_trainer.h"
#include "dist_test_config.h"
#include "train/trainer.h"

using namespace lt;
using lt::test::dist_config;
using lt::test::dist_dir;
using lt::test::reset_shared_dir;

namespace fs = std::filesystem;

namespace {

constexpr double kRelTol = 1e-5;

void expect_same_losses(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) / want[i] - 1));
  if (world().rank() == 0)
    std::printf("%s, %d rank(s): losses %.6f .. %.6f, largest relative difference to one process %.2e\n",
                what.c_str(), world().size(), got.front(), got.back(), worst);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(std::fabs(double(got[i]) - want[i]), kRelTol * std::fabs(double(want[i])))
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

// Per rank, for Ψ trainable floats and S = ceil(Ψ/R) (each buffer rounded up to 64 bytes):
// moments 2·Ψ (stage 0) or 2·S (stages 1-3), a gradient shard S from stage 2, a master shard S
// at stage 3; disk offload moves the moments and the master shard into the file.
TEST(DistZeroLayout, EngineBytesFollowTheZeroFormulas) {
  const size_t psi = 1001;
  const int R = 4;
  const size_t S = 251, f = 4;
  for (int stage = 0; stage <= 3; ++stage) {
    ZeroOptions o;
    o.stage = stage;
    MemoryPlan p = plan_zero_state(psi, R, o);
    EXPECT_EQ(p.arena_bytes(Category::OptimizerState), 2 * align_up((stage == 0 ? psi : S) * f)) << stage;
    EXPECT_EQ(p.arena_bytes(Category::Grads), stage >= 2 ? align_up(S * f) : 0) << stage;
    EXPECT_EQ(p.arena_bytes(Category::TrainableParams), stage == 3 ? align_up(S * f) : 0) << stage;
    o.offload = OptimizerOffload::Disk;
    MemoryPlan d = plan_zero_state(psi, R, o);
    EXPECT_EQ(d.arena_bytes(Category::OptimizerState), 0u) << stage;
    EXPECT_EQ(d.arena_bytes(Category::TrainableParams), 0u) << stage;
    EXPECT_EQ(zero_offloaded_bytes(psi, R, o),
              2 * align_up((stage == 0 ? psi : S) * f) + (stage == 3 ? align_up(S * f) : 0)) << stage;
  }
}

class DistZeroStages : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(DistZeroStages, LossesEqualOneProcessWithTheSameGlobalBatch) {
  const auto [method, stage] = GetParam();
  ZeroOptions z;
  z.stage = stage;
  const std::string name = method + "_zero" + std::to_string(stage);
  auto got = zero_losses(dist_config(method, 2), z, name);
  expect_same_losses(got, one_process_losses(method), name);
  // every rank's ledger: allocated bytes per category equal the per-rank plan
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dist_dir(name) + "/ledger-rank" +
                                                         std::to_string(world().rank()) + ".json"));
  for (auto& [cat, v] : j["categories"].items())
    EXPECT_EQ(v["planned"].get<size_t>(), v["allocated"].get<size_t>()) << name << " " << cat;
}

INSTANTIATE_TEST_SUITE_P(DistZero, DistZeroStages,
                         testing::Combine(testing::Values("lora", "full"), testing::Values(0, 1, 2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_stage" + std::to_string(std::get<1>(info.param));
                         });

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

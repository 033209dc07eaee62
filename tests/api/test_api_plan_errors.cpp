// The public API's plans equal the engine's (the numbers `leantune plan` and the allocator use),
// and its errors: a bad path is a leantune::Error naming the file; a library's exception reaches
// the caller as leantune::Error in leantune's words.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "io/model_files.h"
#include "leantune/leantune.h"
#include "model/llama_model.h"
#include "train/train_config.h"
#include "train/train_model.h"

namespace {

const std::string kDir = std::string(LT_SHARED_DIR) + "/models/stories260K/";

void expect_same_buffers(const leantune::MemoryPlan& got, const lt::MemoryPlan& want) {
  ASSERT_EQ(got.buffers.size(), want.buffers.size());
  for (size_t i = 0; i < want.buffers.size(); ++i) {
    EXPECT_EQ(got.buffers[i].name, want.buffers[i].name);
    EXPECT_EQ(int(got.buffers[i].category), int(want.buffers[i].cat)) << want.buffers[i].name;
    EXPECT_EQ(got.buffers[i].bytes, want.buffers[i].bytes) << want.buffers[i].name;
    EXPECT_EQ(int(got.buffers[i].lifetime), int(want.buffers[i].life)) << want.buffers[i].name;
  }
  for (size_t k = 0; k < lt::kNumCategories; ++k)
    EXPECT_EQ(got.category_bytes(leantune::BufferCategory(k)), want.arena_bytes(lt::Category(k))) << k;
  EXPECT_EQ(got.arena_bytes(), want.total_bytes());
  EXPECT_EQ(got.format_table(true), want.format_table(true));
}

TEST(ApiPlan, InferencePlanIsTheEngines) {
  leantune::InferencePlanOptions o;
  o.sequence = {.context = 100, .prefill_block = 7};
  o.measure_baseline = false;
  const leantune::InferencePlan p = leantune::plan_inference(kDir + "stories260K.bin", o);
  lt::InferenceOptions io;
  io.context = 100;
  io.prefill_block = 7;
  const lt::ModelConfig c = lt::load_model_config(kDir + "stories260K.bin");
  expect_same_buffers(p.memory, lt::plan_inference(c, io));
  EXPECT_EQ(p.context, 100);
  EXPECT_EQ(p.prefill_block, 7);
  // KV cache: L * 2 * P * NKV * HS floats = 5 * 2 * 100 * 4 * 8 * 4 bytes
  EXPECT_EQ(p.memory.category_bytes(leantune::BufferCategory::KVCache), 5u * 2 * 100 * 4 * 8 * 4);
  EXPECT_EQ(p.baseline_bytes, 0u);
  // what a Sequence of that context allocates is the plan without the weights
  const leantune::Model model(kDir + "stories260K.bin");
  const leantune::Sequence seq(model, o.sequence);
  EXPECT_EQ(seq.memory_bytes(), p.memory.arena_bytes() -
                                    p.memory.category_bytes(leantune::BufferCategory::FrozenWeights));
}

TEST(ApiPlan, TrainingPlanIsTheEngines) {
  const std::vector<std::string> args = {"--base_model", kDir + "stories260K.bin", "--method", "lora",
                                         "--lora_r", "4", "--lora_target_modules", "all-linear",
                                         "--micro_batch_size", "3", "--sequence_len", "64",
                                         "--gradient_checkpointing", "every"};
  leantune::TrainingPlanOptions o;
  o.measure_baseline = false;
  o.rank_report = true;
  o.zero_ranks = 2;
  const leantune::TrainingPlan p = leantune::plan_training(args, o);
  const lt::TrainConfig cfg = lt::parse_train_args(args);
  const lt::ModelConfig c = lt::load_model_config(kDir + "stories260K.bin");
  const lt::MemoryPlan want = lt::plan_training(c, lt::train_model_options(cfg));
  expect_same_buffers(p.memory, want);
  EXPECT_EQ(p.method, "lora");
  EXPECT_EQ(p.lora_r, 4);
  EXPECT_EQ(p.micro_batch_size, 3);
  EXPECT_EQ(p.sequence_len, 64);
  EXPECT_EQ(p.checkpointing, "every");
  EXPECT_EQ(p.data_bytes, 0u);
  EXPECT_EQ(p.predicted_peak_bytes, want.total_bytes());
  // the rank report: 3 target sets x 5 ranks; stories260K's k/v projections (out 32) refuse r 64
  ASSERT_EQ(p.rank_report.size(), 15u);
  EXPECT_EQ(p.rank_report[0].targets, "q_proj,v_proj");
  EXPECT_EQ(p.rank_report[0].r, 4);
  EXPECT_EQ(p.rank_report[4].max_rank, 32);
  // q_proj (64x64) and v_proj (32x64) at r 4, 5 layers: (4*64 + 64*4) + (4*64 + 32*4) per layer
  EXPECT_EQ(p.rank_report[0].trainable_params, 5u * (4 * 64 + 64 * 4 + 4 * 64 + 32 * 4));
  ASSERT_TRUE(p.zero.has_value());
  EXPECT_EQ(p.zero->ranks, 2);
  EXPECT_EQ(p.zero->trainable_floats, want.arena_bytes(lt::Category::TrainableParams) / 4);
  EXPECT_EQ(p.zero->shard_floats, (p.zero->trainable_floats + 1) / 2);
  EXPECT_NE(leantune::format_zero_plan(p).find("per rank, ZeRO stage 0 on 2 ranks"), std::string::npos);
  EXPECT_NE(leantune::to_json(p, true).find("\"peak_phase\""), std::string::npos);
}

// A run given as YAML text with flags over it (what the Python package passes) plans as the same
// run given as `leantune plan` arguments; a bad key names the text's line.
TEST(ApiPlan, TrainerConfigPlansAsTheArguments) {
  leantune::TrainingPlanOptions o;
  o.measure_baseline = false;
  leantune::TrainerConfig c;
  c.yaml_text = "base_model: \"" + kDir + "stories260K.bin\"\nmethod: lora\nlora_r: 8\n";
  c.flags = {"--micro_batch_size=3", "--lora_r", "4"};
  const leantune::TrainingPlan got = leantune::plan_training_config(c, o);
  const leantune::TrainingPlan want = leantune::plan_training(
      {"--base_model", kDir + "stories260K.bin", "--method", "lora", "--lora_r", "4", "--micro_batch_size", "3"}, o);
  EXPECT_EQ(got.lora_r, 4);
  EXPECT_EQ(got.micro_batch_size, 3);
  EXPECT_EQ(got.memory.format_table(true), want.memory.format_table(true));
  c.yaml_file = "<config dict>";
  c.yaml_text += "lora_rank: 8\n";
  try {
    leantune::plan_training_config(c, o);
    ADD_FAILURE() << "no leantune::Error";
  } catch (const leantune::Error& e) {
    EXPECT_NE(std::string(e.what()).find("<config dict>: line 4: unknown key 'lora_rank'"), std::string::npos)
        << e.what();
  }
}

TEST(ApiPlan, CostEstimateFollowsItsInputs) {
  leantune::TrainingPlanOptions o;
  o.measure_baseline = false;
  o.cost_estimate = true;
  o.tokens = 1e6;
  o.price_per_hour = 2;
  o.gpus = {leantune::find_gpu_profile("h100")};
  const leantune::TrainingPlan p = leantune::plan_training({"--base_model", kDir + "stories260K.bin"}, o);
  ASSERT_TRUE(p.cost.has_value());
  const leantune::CostEstimate& c = *p.cost;
  EXPECT_GT(c.forward_flops, 0);
  EXPECT_GT(c.gemm_gflops, 0);
  EXPECT_DOUBLE_EQ(c.cpu_hours, c.total_flops() * 1e6 / (c.gemm_gflops * 1e9) / 3600);
  EXPECT_DOUBLE_EQ(c.cpu_cost_usd, c.cpu_hours * 2);
  ASSERT_EQ(c.gpus.size(), 1u);
  EXPECT_EQ(c.gpus[0].gpu.name, "H100 80GB");
  EXPECT_TRUE(c.gpus[0].fits);
  const std::string text = leantune::format_cost_estimate(c);
  EXPECT_NE(text.find("H100 80GB"), std::string::npos) << text;
  EXPECT_THROW(leantune::find_gpu_profile("V100"), leantune::Error);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const leantune::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no leantune::Error";
  return "";
}

TEST(ApiErrors, BadPathsNameTheFile) {
  const std::string missing = "/nonexistent/dir/model.bin";
  EXPECT_NE(error_of([&] { leantune::Model m(missing); }).find(missing), std::string::npos);
  EXPECT_NE(error_of([&] { leantune::Tokenizer t("/nonexistent/tok.bin"); }).find("/nonexistent/tok.bin"),
            std::string::npos);
  EXPECT_NE(error_of([&] { leantune::read_model_config(missing); }).find(missing), std::string::npos);
  leantune::InferencePlanOptions no_baseline;
  no_baseline.measure_baseline = false;
  EXPECT_NE(error_of([&] { leantune::plan_inference(missing, no_baseline); }).find(missing), std::string::npos);
  const std::string adapter = "/nonexistent/adapter";
  leantune::ModelOptions o;
  o.adapter = adapter;
  EXPECT_NE(error_of([&] { leantune::Model m(kDir + "stories260K.bin", o); }).find(adapter), std::string::npos);
  EXPECT_NE(error_of([] { leantune::parse_quantization("nf5"); }).find("nf5"), std::string::npos);
  EXPECT_NE(error_of([] { leantune::resolve_threads(-1); }).find("-1"), std::string::npos);
}

TEST(ApiErrors, OutOfRangeUseIsAnError) {
  const leantune::Model model(kDir + "stories260K.bin");
  leantune::Sequence seq(model, {.context = 4});
  const std::vector<int> five = {1, 2, 3, 4, 5}, bad = {512};
  EXPECT_NE(error_of([&] { seq.append(five); }).find("context of 4"), std::string::npos);
  EXPECT_NE(error_of([&] { seq.append(bad); }).find("512"), std::string::npos);
  EXPECT_EQ(seq.size(), 0);  // nothing was appended
  EXPECT_THROW(seq.truncate(1), leantune::Error);
  leantune::Generator gen(model, {.context = 8});
  const leantune::Tokenizer tok(kDir + "tok512.bin");
  EXPECT_NE(error_of([&] { gen.generate(tok, "Once upon a time, there was a little girl"); }).find("context holds 8"),
            std::string::npos);
  leantune::GenerateOptions g;
  g.sampling.top_p = 2;
  EXPECT_NE(error_of([&] { gen.generate(tok, "", g); }).find("top_p"), std::string::npos);
}

TEST(ApiErrors, LibraryExceptionsAreWordedAsLeantuneErrors) {
  // a JSON value of the wrong type deep in a file reaches the caller as leantune::Error
  const std::string dir = ::testing::TempDir() + "api_bad_json";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/texts.json") << "[\"fine\", 5]";
  const leantune::Tokenizer tok(kDir + "tok512.bin");
  EXPECT_NE(error_of([&] { tok.encode_json_file(dir + "/texts.json", true, false); }).find("element 1 is not a string"),
            std::string::npos);
  auto describe = [](auto thrower) {
    try {
      thrower();
    } catch (...) {
      return leantune::describe_current_exception();
    }
    return std::string();
  };
  EXPECT_NE(describe([] { throw std::length_error("vector"); }).find("too large to allocate"), std::string::npos);
  EXPECT_NE(describe([] { throw std::bad_alloc(); }).find("out of memory"), std::string::npos);
  EXPECT_NE(describe([] { throw std::logic_error("oops"); }).find("internal error: oops"), std::string::npos);
  EXPECT_EQ(describe([] { throw leantune::Error("as is"); }), "as is");
  std::filesystem::remove_all(dir);
}

}  // namespace

// Memory budgets: byte parsing, the cheaper runs that fit, and auto choosing the largest
// micro-batch with the least recomputation, all predicted from the plan without allocating.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/model_files.h"
#include "plan/budget.h"

using namespace lt;

TEST(PlanBudget, ParsesByteSizes) {
  EXPECT_EQ(parse_bytes("6GiB"), 6ull << 30);
  EXPECT_EQ(parse_bytes("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_bytes("2.5GB"), 2500000000ull);
  EXPECT_EQ(parse_bytes("1000"), 1000u);
  EXPECT_THROW(parse_bytes("lots"), Error);
  EXPECT_THROW(parse_bytes("3 parsecs"), Error);
}

TEST(PlanBudget, FitsAndAutoFollowThePlan) {
  auto files = load_model_files(std::string(LT_SHARED_DIR) + "/models/stories260K/stories260K.bin");
  TrainConfig c;
  c.base_model = "stories260K";
  c.micro_batch_size = 8;
  c.sequence_len = 256;
  c.lora.target_modules = {"all-linear"};
  const size_t base = 10u << 20;
  size_t need = predict_training_bytes(files.config, c, base);
  size_t budget = need * 3 / 4;
  auto fits = cheaper_fits(files.config, c, budget, base);
  ASSERT_FALSE(fits.empty());
  for (const auto& f : fits) {
    EXPECT_LE(f.predicted_bytes, budget) << f.change;
    EXPECT_EQ(f.predicted_bytes, predict_training_bytes(files.config, f.config, base));
    EXPECT_EQ(f.config.micro_batch_size * f.config.gradient_accumulation_steps, 8) << f.change;  // same global batch
  }
  FitCandidate a = auto_fit(files.config, c, budget, base);
  EXPECT_LE(a.predicted_bytes, budget);
  // nothing with a larger micro-batch, or the same micro-batch and less recomputation, fits
  EXPECT_GT(predict_training_bytes(files.config, [&] { TrainConfig t = a.config; t.micro_batch_size *= 2;
                                                       t.gradient_checkpointing = "every"; return t; }(), base),
            budget);
  EXPECT_THROW(auto_fit(files.config, c, base + 1000, base), Error);
  // over budget without auto: an error listing the fits, before anything is allocated
  c.memory_budget = std::to_string(budget);
  try {
    fit_memory_budget(c, files.config, base);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Changes that fit"), std::string::npos) << e.what();
  }
}

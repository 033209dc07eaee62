// Learning-rate schedules against values produced by transformers' schedules, and the staged
// unfreezing parser: semantics at stage boundaries and the errors for malformed strings.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/schedule.h"

namespace lt {
namespace {

// Produced once with transformers 5.24 / torch 2.15 in /work/main/.venv: AdamW(lr=2e-4) wrapped in
// get_{constant,linear,cosine}_schedule_with_warmup(opt, 3[, 17]); param_groups[0]["lr"] read
// before each of 20 opt.step(); sched.step() pairs, printed with "%.17g".
const std::vector<double> kHfConstant = {0, 6.666666666666667e-05, 0.00013333333333333334, 0.0002, 0.0002, 0.0002,
                                         0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002,
                                         0.0002, 0.0002, 0.0002, 0.0002, 0.0002};
const std::vector<double> kHfLinear = {0,
                                       6.666666666666667e-05,
                                       0.00013333333333333334,
                                       0.00020000000000000001,
                                       0.00018571428571428572,
                                       0.00017142857142857143,
                                       0.00015714285714285716,
                                       0.00014285714285714287,
                                       0.00012857142857142858,
                                       0.00011428571428571428,
                                       0.0001,
                                       8.5714285714285713e-05,
                                       7.1428571428571434e-05,
                                       5.7142857142857142e-05,
                                       4.2857142857142856e-05,
                                       2.8571428571428571e-05,
                                       1.4285714285714285e-05,
                                       0,
                                       0,
                                       0};
const std::vector<double> kHfCosine = {0,
                                       6.666666666666667e-05,
                                       0.00013333333333333334,
                                       0.00020000000000000001,
                                       0.00019749279121818235,
                                       0.00019009688679024191,
                                       0.00017818314824680299,
                                       0.00016234898018587337,
                                       0.00014338837391175582,
                                       0.00012225209339563145,
                                       0.0001,
                                       7.7747906604368577e-05,
                                       5.6611626088244194e-05,
                                       3.7651019814126654e-05,
                                       2.1816851753197022e-05,
                                       9.9031132097580962e-06,
                                       2.5072087818176382e-06,
                                       0,
                                       2.5072087818176382e-06,  // HF's cosine rises again past the end
                                       9.9031132097580861e-06};

void expect_matches_hf(ScheduleKind kind, const std::vector<double>& hf) {
  ScheduleOptions o;
  o.kind = kind;
  o.lr = 2e-4;
  o.warmup_steps = 3;
  for (int step = 0; step < int(hf.size()); step++)
    EXPECT_EQ(lr_at(o, step, 17), float(hf[step])) << schedule_kind_name(kind) << " step " << step;
}

TEST(TrainSchedule, ConstantMatchesTransformers) { expect_matches_hf(ScheduleKind::Constant, kHfConstant); }
TEST(TrainSchedule, LinearMatchesTransformers) { expect_matches_hf(ScheduleKind::Linear, kHfLinear); }
TEST(TrainSchedule, CosineMatchesTransformers) { expect_matches_hf(ScheduleKind::Cosine, kHfCosine); }

TEST(TrainSchedule, KeyStepsByFormula) {
  ScheduleOptions o;
  o.lr = 1.0;
  o.warmup_steps = 10;
  o.kind = ScheduleKind::Linear;
  EXPECT_EQ(lr_at(o, 0, 110), 0.0f);    // first update of a warmup runs at lr 0, as HF
  EXPECT_EQ(lr_at(o, 9, 110), 0.9f);
  EXPECT_EQ(lr_at(o, 10, 110), 1.0f);   // warmup edge: peak
  EXPECT_EQ(lr_at(o, 60, 110), 0.5f);
  EXPECT_EQ(lr_at(o, 110, 110), 0.0f);  // end
  EXPECT_EQ(lr_at(o, 500, 110), 0.0f);  // clamped
  o.kind = ScheduleKind::Cosine;
  EXPECT_EQ(lr_at(o, 10, 110), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(o, 35, 110), float(0.5 * (1 + std::cos(std::numbers::pi * 0.25))));
  EXPECT_FLOAT_EQ(lr_at(o, 60, 110), 0.5f);
  EXPECT_NEAR(lr_at(o, 110, 110), 0.0f, 1e-7);
  o.kind = ScheduleKind::Constant;
  EXPECT_EQ(lr_at(o, 5, 110), 0.5f);
  EXPECT_EQ(lr_at(o, 10, 110), 1.0f);
  EXPECT_EQ(lr_at(o, 1000, 110), 1.0f);
  o.warmup_steps = 0;  // no warmup: full lr from step 0
  EXPECT_EQ(lr_at(o, 0, 110), 1.0f);
  o.kind = ScheduleKind::Linear;
  EXPECT_EQ(lr_at(o, 0, 100), 1.0f);
  EXPECT_EQ(lr_at(o, 25, 100), 0.75f);
}

TEST(TrainSchedule, WarmupRatioRoundsUpLikeHf) {
  ScheduleOptions o;
  o.warmup_ratio = 0.031;
  EXPECT_EQ(warmup_steps_for(o, 100), 4);  // ceil(3.1)
  o.warmup_ratio = 0.05;
  EXPECT_EQ(warmup_steps_for(o, 100), 5);
  o.warmup_steps = 7;  // explicit steps win
  EXPECT_EQ(warmup_steps_for(o, 100), 7);
  o.warmup_steps = 0;
  o.warmup_ratio = 1.5;
  EXPECT_THROW(warmup_steps_for(o, 100), Error);
}

TEST(TrainSchedule, ParseKind) {
  EXPECT_EQ(parse_schedule_kind("cosine"), ScheduleKind::Cosine);
  EXPECT_EQ(parse_schedule_kind("linear"), ScheduleKind::Linear);
  EXPECT_EQ(parse_schedule_kind("constant_with_warmup"), ScheduleKind::Constant);
  try {
    parse_schedule_kind("polynomial");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("polynomial"), std::string::npos);
  }
}

TEST(TrainScheduleUnfreeze, ParseAndSemantics) {
  const auto s = UnfreezeSchedule::parse("0:4:1.0, 100:2:0.5,200:0:0.25");
  ASSERT_EQ(s.stages().size(), 3u);
  EXPECT_EQ(s.stages()[1].start_step, 100);
  EXPECT_EQ(s.stages()[1].first_layer, 2);
  EXPECT_EQ(s.stages()[1].lr_factor, 0.5f);
  s.check_layers(6);
  for (int step : {0, 99}) {
    EXPECT_FALSE(s.layer_trainable(3, step));
    EXPECT_TRUE(s.layer_trainable(4, step));
    EXPECT_TRUE(s.layer_trainable(5, step));
    EXPECT_EQ(s.lr_factor(3, step), 0.0f);
    EXPECT_EQ(s.lr_factor(5, step), 1.0f);
  }
  for (int step : {100, 199}) {
    EXPECT_FALSE(s.layer_trainable(1, step));
    EXPECT_TRUE(s.layer_trainable(2, step));
    EXPECT_EQ(s.lr_factor(2, step), 0.5f);
    EXPECT_EQ(s.lr_factor(3, step), 0.5f);
    EXPECT_EQ(s.lr_factor(4, step), 1.0f);  // keeps the factor of the stage that unfroze it
  }
  for (int step : {200, 1000000}) {
    EXPECT_TRUE(s.layer_trainable(0, step));
    EXPECT_EQ(s.lr_factor(0, step), 0.25f);
    EXPECT_EQ(s.lr_factor(1, step), 0.25f);
    EXPECT_EQ(s.lr_factor(3, step), 0.5f);
    EXPECT_EQ(s.lr_factor(5, step), 1.0f);
  }
  const UnfreezeSchedule none;  // no staged unfreezing
  EXPECT_TRUE(none.layer_trainable(0, 0));
  EXPECT_EQ(none.lr_factor(0, 0), 1.0f);
  EXPECT_THROW(s.check_layers(4), Error);  // first_layer 4 does not exist in a 4-layer model
}

void expect_parse_error(const std::string& spec, const std::string& part) {
  try {
    UnfreezeSchedule::parse(spec);
    ADD_FAILURE() << "no error for '" << spec << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
  }
}

TEST(TrainScheduleUnfreeze, InvalidStringsNameTheProblem) {
  expect_parse_error("", "empty");
  expect_parse_error("0:4", "three ':'-separated fields");
  expect_parse_error("0:4:1:2", "three ':'-separated fields");
  expect_parse_error("0:x:1", "first_layer 'x' is not a valid integer");
  expect_parse_error("0:4:fast", "lr_factor 'fast' is not a valid number");
  expect_parse_error("0:4:1.0abc", "lr_factor '1.0abc'");
  expect_parse_error("5:4:1", "first stage must start at step 0");
  expect_parse_error("0:4:1,0:2:1", "must be greater than the previous stage's 0");
  expect_parse_error("0:4:1,10:4:1", "first_layer 4 must be smaller");
  expect_parse_error("0:4:0", "lr_factor must be a finite number > 0");
  expect_parse_error("0:4:nan", "lr_factor must be a finite number > 0");
  expect_parse_error("0:-1:1", "first_layer must be >= 0");
  expect_parse_error("0:4:1,", "empty stage");
}

}  // namespace
}  // namespace lt

// Dynamic loss scaling (train/loss_scaler.h): the 2^16 start, backoff and skip on an Inf/NaN
// gradient, growth after the window of clean steps (and the count restarting after an overflow),
// exact unscaling, state restore and bad options.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "train/loss_scaler.h"

using namespace lt;

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterTheWindow) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_FALSE(s.update(false));  // overflow: skip, halve
  EXPECT_EQ(s.scale(), 32768.0f);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0f);  // 1999 clean steps: not yet
  EXPECT_EQ(s.clean_steps(), 1999);
  EXPECT_FALSE(s.update(false));   // an overflow restarts the count
  EXPECT_EQ(s.scale(), 16384.0f);
  EXPECT_EQ(s.clean_steps(), 0);
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0f);  // the 2000th clean step doubles it
  EXPECT_EQ(s.clean_steps(), 0);

  LossScaler small({4.0f, 2.0f, 0.5f, 3});
  for (int i = 0; i < 6; ++i) small.update(true);
  EXPECT_EQ(small.scale(), 16.0f);
  LossScaler huge({3e38f, 2.0f, 0.5f, 1});
  huge.update(true);
  EXPECT_EQ(huge.scale(), 3e38f);  // never grows to Inf
  small.set_state(1024.0f, 2);
  EXPECT_EQ(small.scale(), 1024.0f);
  small.update(true);
  EXPECT_EQ(small.scale(), 2048.0f);
}

TEST(LossScaler, UnscalesExactlyAndDetectsInfAndNan) {
  LossScaler s({1024.0f, 2.0f, 0.5f, 2000});
  std::vector<float> g1 = {1024.0f, -3.0f, 0.5f}, g2(40000, 2048.0f), g3 = {7.0f};
  std::vector<ParamGroup> groups(3);
  groups[0].grad = g1.data(); groups[0].n = g1.size();
  groups[1].grad = g2.data(); groups[1].n = g2.size();
  groups[2].grad = g3.data(); groups[2].n = g3.size(); groups[2].frozen = true;
  EXPECT_TRUE(s.unscale(groups));
  EXPECT_EQ(g1[0], 1.0f);
  EXPECT_EQ(g1[1], -3.0f / 1024.0f);
  EXPECT_EQ(g1[2], 0.5f / 1024.0f);
  EXPECT_EQ(g2[39999], 2.0f);
  EXPECT_EQ(g3[0], 7.0f);  // frozen groups are left alone
  g2[12345] = INFINITY;
  EXPECT_FALSE(s.unscale(groups));
  g2[12345] = 0.0f;
  g1[2] = NAN;
  EXPECT_FALSE(s.unscale(groups));
}

TEST(LossScaler, BadOptionsSaySo) {
  EXPECT_THROW(LossScaler({0.0f, 2.0f, 0.5f, 2000}), Error);
  EXPECT_THROW(LossScaler({INFINITY, 2.0f, 0.5f, 2000}), Error);
  EXPECT_THROW(LossScaler({65536.0f, 2.0f, 0.5f, 0}), Error);
  EXPECT_THROW(LossScaler({65536.0f, 1.0f, 0.5f, 10}), Error);
  LossScaler s;
  EXPECT_THROW(s.set_state(-1.0f, 0), Error);
}

// NaN or +inf in a model's logits is reported as a broken forward pass, not blamed on a sampling
// option (it used to read "every token is banned ... lower no_repeat_ngram_size"); -inf stays a
// legal mask, and all -inf without any ban names the logits, not the n-gram option.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "../io/io_test_util.h"
#include "infer/sampler.h"

namespace lt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplerNonFinite, NaNLogitsAreReportedAsSuch) {
  for (float T : {0.0f, 1.0f}) {
    Sampler s({.temperature = T}, 4);
    std::vector<float> all_nan(4, kNaN);
    std::string msg = test::error_of([&] { s.sample(all_nan.data(), {}); });
    test::expect_contains(msg, {"logits", "4 non-finite value(s) of 4", "token id 0", "nan"});
    EXPECT_EQ(msg.find("no_repeat_ngram_size"), std::string::npos) << msg;
    // one NaN among finite values: still an error (it would otherwise be silently skipped)
    std::vector<float> one = {1.0f, 2.0f, kNaN, 0.5f};
    EXPECT_LT_ERROR(s.sample(one.data(), {}), {"1 non-finite value(s) of 4", "token id 2"});
    std::vector<float> pinf = {1.0f, kInf, 0.0f, 0.0f};
    EXPECT_LT_ERROR(s.sample(pinf.data(), {}), {"token id 1", "inf"});
  }
}

TEST(SamplerNonFinite, AllMinusInfWithoutBansNamesTheLogits) {
  Sampler s({.temperature = 0.7f}, 3);
  std::vector<float> l(3, -kInf);
  std::string msg = test::error_of([&] { s.sample(l.data(), {}); });
  test::expect_contains(msg, {"every one of the model's 3 logits is -inf"});
  EXPECT_EQ(msg.find("no_repeat_ngram_size"), std::string::npos) << msg;
  // with a ban active the option is still named
  Sampler b({.no_repeat_ngram_size = 1}, 3);
  std::vector<float> f = {1.0f, 2.0f, 3.0f};
  const std::vector<int> ctx = {0, 1, 2};
  EXPECT_LT_ERROR(b.sample(f.data(), ctx), {"no_repeat_ngram_size=1"});
}

}  // namespace
}  // namespace lt

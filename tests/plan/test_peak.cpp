// The measured peaks behind MFU: the AMX bf16 peak is 0 where AMX is absent or the ISA is capped
// below avx512, positive where it is usable, and the MFU peak is the fastest unit of the precision.
// No timing thresholds: a rate is only checked to be 0 or > 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <unistd.h>

#include "core/cpu_features.h"
#include "plan/peak.h"

using namespace lt;

namespace {

// Sets an environment variable for a scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The measurements go to a fresh cache, so the test measures here rather than reading a file.
std::string fresh_cache() {
  const auto d = std::filesystem::temp_directory_path() / ("lt_peak_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

}  // namespace

TEST(PlanPeak, FastestPeakPicksTheLargestUnitOfThePrecision) {
  EXPECT_STREQ(fastest_peak(true, 100, 400, 1600).unit, "amx_bf16");
  EXPECT_DOUBLE_EQ(fastest_peak(true, 100, 400, 1600).gflops, 1600);
  EXPECT_STREQ(fastest_peak(true, 100, 400, 0).unit, "avx512_bf16");  // no AMX
  EXPECT_DOUBLE_EQ(fastest_peak(true, 100, 400, 0).gflops, 400);
  EXPECT_STREQ(fastest_peak(true, 100, 0, 0).unit, "f32_fma");        // bf16 emulated on f32 FMAs
  EXPECT_STREQ(fastest_peak(true, 500, 400, 0).unit, "f32_fma");      // never below a faster unit
  // fp32 runs use the f32 FMA peak whatever the bf16 units could do
  EXPECT_STREQ(fastest_peak(false, 100, 400, 1600).unit, "f32_fma");
  EXPECT_DOUBLE_EQ(fastest_peak(false, 100, 400, 1600).gflops, 100);
}

TEST(PlanPeak, AmxPeakIsZeroUnlessUsableAndPositiveWhereUsable) {
  ScopedEnv cache("XDG_CACHE_HOME", fresh_cache());
  {
    ScopedEnv isa("LEANTUNE_ISA", "avx2");  // capped below avx512: no AMX, no AVX512-BF16
    EXPECT_FALSE(amx_bf16_usable());
    EXPECT_EQ(peak_amx_bf16_gflops(), 0.0);
    EXPECT_EQ(peak_bf16_gflops(), 0.0);
    EXPECT_STREQ(mfu_peak(true).unit, "f32_fma");
  }
  {
    ScopedEnv isa("LEANTUNE_ISA", "scalar");
    EXPECT_EQ(peak_amx_bf16_gflops(), 0.0);
  }
  const CpuFeatures& f = cpu_features();
  if (!f.amx_bf16 || !f.amx_tile) {
    EXPECT_FALSE(amx_bf16_usable());
  }
  if (amx_bf16_usable()) {
    EXPECT_GT(peak_amx_bf16_gflops(), 0.0);
  } else {
    EXPECT_EQ(peak_amx_bf16_gflops(), 0.0);
  }
  // the bf16 MFU peak is the largest of the measured units, the fp32 one the f32 FMA peak
  const double f32 = peak_f32_gflops(), bf16 = peak_bf16_gflops(), amx = peak_amx_bf16_gflops();
  EXPECT_GT(f32, 0.0);
  const MfuPeak p = mfu_peak(true);
  EXPECT_DOUBLE_EQ(p.gflops, std::max(f32, std::max(bf16, amx)));
  if (amx > std::max(f32, bf16)) {
    EXPECT_STREQ(p.unit, "amx_bf16");
  }
  EXPECT_DOUBLE_EQ(mfu_peak(false).gflops, f32);
  std::filesystem::remove_all(std::getenv("XDG_CACHE_HOME"));
}

#include "plan/peak.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/cpu_features.h"
#include "core/threads.h"
#include "plan/machine_cache.h"

namespace lt {

double peak_f32_gflops() {
  const Isa isa = cpu_isa();
  const int n = num_threads();
  return cached_measurement(fmt::format("peak_f32_gflops_{}_threads_{}", isa_name(isa), n), [&] {
    std::vector<double> per(size_t(n), 0.0);
#pragma omp parallel num_threads(n)
    {
      int t = omp_get_thread_num();
      // the best of ten 10 ms trials: a peak, so a moment of contention must not lower it
      for (int trial = 0; trial < 10 && isa != Isa::Scalar; ++trial)
        per[size_t(t)] = std::max(per[size_t(t)], isa == Isa::Avx512 ? detail::fma_gflops_avx512(0.01)
                                                                     : detail::fma_gflops_avx2(0.01));
    }
    double total = 0;
    for (double g : per) total += g;
    if (isa == Isa::Scalar) {  // no vector FMA: one multiply-add per cycle-ish; measure plainly
      volatile float x = 1.0f;
      auto t0 = omp_get_wtime();
      long k = 0;
      for (; omp_get_wtime() - t0 < 0.05; k += 1000)
        for (int i = 0; i < 1000; ++i) x = x * 0.9999999f + 1e-7f;
      total = 2.0 * double(k) / (omp_get_wtime() - t0) / 1e9 * n;
    }
    return total;
  });
}

double peak_bf16_gflops() {
  if (cpu_isa() != Isa::Avx512 || !cpu_features().avx512_bf16) return 0;
  const int n = num_threads();
  return cached_measurement(fmt::format("peak_bf16_gflops_threads_{}", n), [&] {
    std::vector<double> per(size_t(n), 0.0);
#pragma omp parallel num_threads(n)
    {
      const int t = omp_get_thread_num();
      for (int trial = 0; trial < 10; ++trial)
        per[size_t(t)] = std::max(per[size_t(t)], detail::bf16_gflops_avx512(0.01));
    }
    double total = 0;
    for (double g : per) total += g;
    return total;
  });
}

double peak_amx_bf16_gflops() {
  if (!amx_bf16_usable()) return 0;
  const int n = num_threads();
  return cached_measurement(fmt::format("peak_amx_bf16_gflops_threads_{}", n), [&] {
    std::vector<double> per(size_t(n), 0.0);
#pragma omp parallel num_threads(n)
    {
      const int t = omp_get_thread_num();
      for (int trial = 0; trial < 10; ++trial)
        per[size_t(t)] = std::max(per[size_t(t)], detail::amx_bf16_gflops(0.01));
    }
    double total = 0;
    for (double g : per) total += g;
    return total;
  });
}

MfuPeak fastest_peak(bool bf16, double f32_gflops, double bf16_gflops, double amx_bf16_gflops) {
  MfuPeak p{f32_gflops, "f32_fma"};
  if (!bf16) return p;
  if (bf16_gflops > p.gflops) p = {bf16_gflops, "avx512_bf16"};
  if (amx_bf16_gflops > p.gflops) p = {amx_bf16_gflops, "amx_bf16"};
  return p;
}

MfuPeak mfu_peak(bool bf16) {
  if (!bf16) return fastest_peak(false, peak_f32_gflops(), 0, 0);
  return fastest_peak(true, peak_f32_gflops(), peak_bf16_gflops(), peak_amx_bf16_gflops());
}

}  // namespace lt

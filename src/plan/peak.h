// This machine's peak rates, measured: independent FMA chains in registers (no memory
// traffic) on each thread, the best of ten 10 ms trials, at the widest ISA in use; likewise the
// bf16 units (AVX512-BF16 vdpbf16ps, AMX tdpbf16ps on tiles). Model FLOPs utilization (MFU) is
// achieved model FLOP/s over the fastest unit for the run's precision (mfu_peak). Cached per ISA
// and thread count (plan/machine_cache.h).
#pragma once

namespace lt {

double peak_f32_gflops();  // all threads together
// The bf16 dot-product peak (AVX512-BF16 vdpbf16ps; bf16 in, f32 accumulate), all threads; 0 when
// the CPU has no AVX512-BF16 (bf16 GEMMs are then emulated and the f32 peak applies).
double peak_bf16_gflops();
// The AMX bf16 tile peak (tdpbf16ps; bf16 in, f32 accumulate), all threads; 0 without usable AMX
// (core/cpu_features.h amx_bf16_usable: no amx_bf16, LEANTUNE_ISA below avx512, or the OS refused).
double peak_amx_bf16_gflops();

// The peak an MFU is taken against, and the unit it was measured on.
struct MfuPeak {
  double gflops = 0;
  const char* unit = "f32_fma";  // "f32_fma" | "avx512_bf16" | "amx_bf16"
};
// The fastest of the given peaks for the precision (bf16: all three; otherwise the f32 FMA peak).
MfuPeak fastest_peak(bool bf16, double f32_gflops, double bf16_gflops, double amx_bf16_gflops);
// fastest_peak over this machine's measured peaks.
MfuPeak mfu_peak(bool bf16);

namespace detail {
double fma_gflops_avx512(double seconds);  // one thread (peak_avx512.cpp)
double fma_gflops_avx2(double seconds);    // one thread (peak_avx2.cpp)
double bf16_gflops_avx512(double seconds); // one thread, vdpbf16ps (peak_avx512.cpp)
double amx_bf16_gflops(double seconds);    // one thread, tdpbf16ps; only where amx_bf16_usable() (peak_amx.cpp)
}  // namespace detail

}  // namespace lt

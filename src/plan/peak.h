// This machine's peak f32 rate, measured: independent FMA chains in registers (no memory
// traffic) on each thread, the best of ten 10 ms trials, at the widest ISA in use. Model FLOPs utilization (MFU) is
// achieved model FLOP/s over this peak. Cached per ISA and thread count (plan/machine_cache.h).
#pragma once

namespace lt {

double peak_f32_gflops();  // all threads together
// The bf16 dot-product peak (AVX512-BF16 vdpbf16ps; bf16 in, f32 accumulate), all threads; 0 when
// the CPU has no AVX512-BF16 (bf16 GEMMs are then emulated and the f32 peak applies).
double peak_bf16_gflops();

namespace detail {
double fma_gflops_avx512(double seconds);  // one thread (peak_avx512.cpp)
double fma_gflops_avx2(double seconds);    // one thread (peak_avx2.cpp)
double bf16_gflops_avx512(double seconds); // one thread, vdpbf16ps (peak_avx512.cpp)
}  // namespace detail

}  // namespace lt

// This machine's peak f32 rate, measured: independent FMA chains in registers (no memory
// traffic) on each thread, the best of ten 10 ms trials, at the widest ISA in use. Model FLOPs utilization (MFU) is
// achieved model FLOP/s over this peak. Cached per ISA and thread count (plan/machine_cache.h).
#pragma once

namespace lt {

double peak_f32_gflops();  // all threads together

namespace detail {
double fma_gflops_avx512(double seconds);  // one thread (peak_avx512.cpp)
double fma_gflops_avx2(double seconds);    // one thread (peak_avx2.cpp)
}  // namespace detail

}  // namespace lt

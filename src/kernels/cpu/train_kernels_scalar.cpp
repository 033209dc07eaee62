// Scalar instantiation of train_kernels.inc (vector width 1): the fallback for CPUs without
// AVX2 and the LEANTUNE_ISA=scalar path. V is the same as in kernels_scalar.cpp.
#include <omp.h>

#include <cmath>

#include "core/error.h"
#include "kernels/backward.h"
#include "kernels/cpu/train_kernels.h"

namespace lt::cpu::scalar {
namespace {

struct V {
  static constexpr int W = 1;
  float v;
  static V zero() { return {0.0f}; }
  static V set1(float a) { return {a}; }
  static V load(const float* p) { return {*p}; }
  static V load_n(const float* p, int) { return {*p}; }
  static void store(float* p, V a) { *p = a.v; }
  static void store_n(float* p, V a, int) { *p = a.v; }
  static V fmadd(V a, V b, V c) { return {a.v * b.v + c.v}; }
  static float reduce_add(V a) { return a.v; }
  static V exp(V a) { return {std::exp(a.v)}; }
};
inline V operator+(V a, V b) { return {a.v + b.v}; }
inline V operator-(V a, V b) { return {a.v - b.v}; }
inline V operator*(V a, V b) { return {a.v * b.v}; }
inline V operator/(V a, V b) { return {a.v / b.v}; }

}  // namespace

#include "kernels/cpu/train_kernels.inc"

}  // namespace lt::cpu::scalar

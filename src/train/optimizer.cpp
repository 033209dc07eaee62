// AdamW, gradient clipping and the finiteness check (see optimizer.h for the formulas).
// Scalars (bias corrections, step size, decay factor) are computed in double as PyTorch does in
// Python, then used as float, as PyTorch's scalar arguments to float tensor ops are.
#include "train/optimizer.h"

#include <omp.h>

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/adamw.h"

namespace lt {

namespace {

// Below this many elements a group is updated by the calling thread alone.
constexpr size_t kParallelMin = 1 << 14;

// The most OpenMP threads clip_grad_norm keeps partial sums for (on the stack).
constexpr int kMaxThreads = 1024;

// adamw_range for a top-k sparsified gradient (ParamGroup::age): a nonzero g stands for the age+1
// steps it accumulated, so v takes g²/(age+1); ages advance on zeros and reset on nonzeros.
void adamw_range_aged(float* __restrict p, const float* __restrict gr, float* __restrict m, float* __restrict v,
                      float* __restrict age, size_t lo, size_t hi, float decay_factor, float one_minus_b1, float beta2,
                      float one_minus_b2, float bc2_sqrt, float eps, float neg_step_size) {
  for (size_t i = lo; i < hi; i++) {
    const float pi = p[i] * decay_factor;
    const float gi = gr[i];
    const float mi = m[i] + one_minus_b1 * (gi - m[i]);
    const float vi = beta2 * v[i] + one_minus_b2 * (gi * gi / (age[i] + 1.0f));
    age[i] = gi != 0.0f ? 0.0f : age[i] + 1.0f;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = pi + neg_step_size * mi / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adamw_step(std::span<ParamGroup> groups, const AdamWOptions& opts, float lr, int step) {
  LT_CHECK(step >= 1, "adamw_step: step must be 1-based (got {})", step);
  const double b1 = opts.beta1, b2 = opts.beta2;
  const double bc1 = 1.0 - std::pow(b1, step);
  const double bc2 = 1.0 - std::pow(b2, step);
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float one_minus_b1 = float(1.0 - b1), one_minus_b2 = float(1.0 - b2);
  const float beta2 = float(opts.beta2), eps = float(opts.eps);
  for (ParamGroup& g : groups) {
    if (g.frozen || g.n == 0) continue;
    LT_ASSERT(g.param && g.grad && g.m && g.v);
    const double glr = double(lr) * double(g.lr_factor);
    // Without decay the factor is 1 and the multiply is exact: one loop body, no branch.
    const bool decay = g.weight_decay && opts.weight_decay != 0.0;
    const float decay_factor = decay ? float(1.0 - glr * opts.weight_decay) : 1.0f;
    const float neg_step_size = float(-(glr / bc1));
    const size_t n = g.n;
#pragma omp parallel if (n >= kParallelMin)
    {
      const size_t T = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
      const size_t lo = n * t / T, hi = n * (t + 1) / T;
      if (g.age)
        adamw_range_aged(g.param, g.grad, g.m, g.v, g.age, lo, hi, decay_factor, one_minus_b1, beta2, one_minus_b2,
                         bc2_sqrt, eps, neg_step_size);
      else  // the vector loops of kernels/cpu/adamw.h, the scalar loop's bits
        cpu::adamw_range(g.param + lo, g.grad + lo, g.m + lo, g.v + lo, hi - lo,
                         {decay_factor, one_minus_b1, beta2, one_minus_b2, bc2_sqrt, eps, neg_step_size});
    }
  }
}

float clip_grad_norm(std::span<ParamGroup> groups, float max_norm) {
  // Each thread sums a fixed slice [n·t/T, n·(t+1)/T) of every group; the partial sums are then
  // added in thread order, so the result depends only on the thread count.
  double partial[kMaxThreads];
  int nthreads = 1;
  size_t total_n = 0;
  for (const ParamGroup& g : groups) total_n += g.frozen ? 0 : g.n;
#pragma omp parallel if (total_n >= kParallelMin)
  {
    const int T = omp_get_num_threads(), t = omp_get_thread_num();
#pragma omp single
    nthreads = T;
    LT_ASSERT(T <= kMaxThreads);
    double s = 0.0;
    for (const ParamGroup& g : groups) {
      if (g.frozen || g.n == 0) continue;
      const size_t lo = g.n * size_t(t) / size_t(T), hi = g.n * size_t(t + 1) / size_t(T);
      const float* gr = g.grad;
      double gs = 0.0;
#pragma omp simd reduction(+ : gs)
      for (size_t i = lo; i < hi; i++) gs += double(gr[i]) * double(gr[i]);
      s += gs;
    }
    partial[t] = s;
  }
  double total = 0.0;
  for (int t = 0; t < nthreads; t++) total += partial[t];
  const double norm = std::sqrt(total);
  const double coef = double(max_norm) / (norm + 1e-6);
  if (std::isfinite(norm) && coef < 1.0) {
    const float c = float(coef);
    for (ParamGroup& g : groups) {
      if (g.frozen || g.n == 0) continue;
      float* __restrict gr = g.grad;
      const ptrdiff_t n = ptrdiff_t(g.n);
#pragma omp parallel for simd schedule(static) if (g.n >= kParallelMin)
      for (ptrdiff_t i = 0; i < n; i++) gr[i] *= c;
    }
  }
  return float(norm);
}

bool grads_finite(std::span<const ParamGroup> groups) {
  for (const ParamGroup& g : groups) {
    if (g.frozen || g.n == 0) continue;
    const float* gr = g.grad;
    const ptrdiff_t n = ptrdiff_t(g.n);
    int bad = 0;
    // x - x is 0 for finite x and NaN for inf/NaN; the comparison is vectorizable.
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (g.n >= kParallelMin)
    for (ptrdiff_t i = 0; i < n; i++) bad |= !(gr[i] - gr[i] == 0.0f);
    if (bad) return false;
  }
  return true;
}

}  // namespace lt

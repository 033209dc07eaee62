// AdamW's element update (train/optimizer.h's formula) over one thread's range, per ISA: the
// AVX-512 and AVX2 loops do the scalar loop's operations in its order (no fused multiply-adds;
// their files build with -ffp-contract=off, sqrt and division are correctly rounded in every
// form), so every level gives the scalar loop's bits. The scalar loop alone was not vectorized
// (sqrtf may set errno), which made the optimizer step of a full fine-tune ~2x its memory time.
// Usage: cpu::adamw_range(p, g, m, v, n, scalars);
#pragma once
#include <cstddef>

namespace lt::cpu {

// The per-step scalars, in float as PyTorch uses them (train/optimizer.cpp derives them).
struct AdamWScalars {
  float decay_factor, one_minus_b1, beta2, one_minus_b2, bc2_sqrt, eps, neg_step_size;
};

// For i < n: p = p·decay + nss·m' / (sqrt(v') / bc2_sqrt + eps), with m' = m + (1-β1)·(g - m) and
// v' = β2·v + (1-β2)·g·g written back. Dispatches on cpu_isa() (LEANTUNE_ISA caps it).
void adamw_range(float* p, const float* g, float* m, float* v, size_t n, const AdamWScalars& s);

namespace scalar {
void adamw_range(float* p, const float* g, float* m, float* v, size_t n, const AdamWScalars& s);
}
namespace avx512 {
void adamw_range(float* p, const float* g, float* m, float* v, size_t n, const AdamWScalars& s);
}
namespace avx2 {
void adamw_range(float* p, const float* g, float* m, float* v, size_t n, const AdamWScalars& s);
}

}  // namespace lt::cpu

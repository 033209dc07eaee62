// PiSSA and OLoRA initialisation of one adapted projection, as PEFT's LoraLayer.pissa_init and
// olora_init (peft/tuners/lora/layer.py), for W (out, in) f32 row-major, A (r, in), B (out, r),
// scale s = alpha / r (or alpha / sqrt r):
//   pissa         W = U·diag(S)·Vᵀ (svd_jacobi); A = diag(sqrt(S_r / s))·V_rᵀ, B = U_r·diag(sqrt(S_r / s))
//   pissa_niter_K the same from svd_randomized with K subspace iterations (not torch's random numbers)
//   olora         W = Q·R (qr_householder); A = R[:r], B = Q[:, :r]
// and then, in both, W <- W − s·(B·A) (B·A summed in f32, as PEFT's f32 matmul). So s·B·A + the new
// W is the old W (to rounding): the adapted model starts where the base was. The factorizations run
// in double; A, B are rounded to f32 once. PiSSA's pairs carry LAPACK-independent signs (a pair's
// u and v may both be negated relative to torch's); OLoRA's Q and R follow LAPACK's signs.
#pragma once
#include <cstdint>

namespace lt {

// niter < 0: the exact SVD; else the randomized one with niter iterations and Ω from seed.
void pissa_init(float* W, int out, int in, int r, float scale, int niter, uint64_t seed, float* A, float* B);
void olora_init(float* W, int out, int in, int r, float scale, float* A, float* B);

}  // namespace lt

// Dense factorizations in double for LoRA initialisation (core/lora_init.h): PiSSA's singular value
// decomposition and OLoRA's QR, at the sizes of one projection weight. Plain loops, row-major
// matrices, nothing shared; the caller owns every buffer.
//   qr_householder   A (m, n) = Q (m, k) · R (k, n), k = min(m, n): Householder reflections with
//                    LAPACK's sign convention (dgeqrf: R[j][j] = −sign(a_jj)·‖a_j‖, an H of a
//                    column already zero below the diagonal is the identity), so Q and R are those
//                    of torch.linalg.qr (mode "reduced") up to rounding.
//   svd_jacobi       A (m, n) = U (m, k) · diag(S) · Vᵀ (k, n): one-sided Jacobi (Hestenes) rotations
//                    until every pair of columns is orthogonal to 1e-15 relative; S descending. Each
//                    singular pair is unique up to a common sign flip of u_i and v_i (for distinct
//                    singular values); this one is not LAPACK's choice. Cost about 10 sweeps of
//                    k²/2 · m·6 flops: fine for the small models tests use, minutes for a 4096²
//                    weight (use svd_randomized there).
//   svd_randomized   the top q singular triplets from Halko–Martinsson–Tropp's randomized range
//                    finder with `niter` subspace iterations (as torch.svd_lowrank): Ω (n, q)
//                    standard normal from `seed`, Q = qr(A·Ω), niter times Q = qr(A·qr(Aᵀ·Q)), then
//                    the exact SVD of Qᵀ·A. Not torch's numbers (its Ω comes from torch's generator):
//                    equal to the exact top q only as niter grows or when rank(A) <= q.
#pragma once
#include <cstdint>
#include <vector>

namespace lt {

// Q (m, k) and R (k, n), k = min(m, n); a (m, n) row-major.
void qr_householder(const double* a, int m, int n, double* Q, double* R);

// U (m, k), S (k) descending, Vt (k, n); a (m, n) row-major, k = min(m, n).
void svd_jacobi(const double* a, int m, int n, double* U, double* S, double* Vt);

// The top q triplets: U (m, q), S (q), Vt (q, n); q <= min(m, n), niter >= 0.
void svd_randomized(const double* a, int m, int n, int q, int niter, uint64_t seed, double* U, double* S, double* Vt);

}  // namespace lt

// STREAM-like triad, a[i] = b[i] + s·c[i] over three arrays far larger than the caches, with
// OpenMP threads splitting the index range: the memory bandwidth a decode that streams its weights
// can hope for. Counts 3 arrays of traffic per pass (STREAM's convention: no write-allocate).
// Build: g++ -O3 -march=native -fopenmp stream_triad.cpp -o stream_triad; run: stream_triad [MiB per array]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? size_t(std::atol(argv[1])) : 256;
  const size_t n = mib * (1 << 20) / sizeof(double);
  std::vector<double> a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] = 0, b[i] = 1, c[i] = 2;  // first touch by the threads that use them
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("{\"threads\": %d, \"array_mib\": %zu, \"triad_gb_s\": %.2f, \"check\": %.1f}\n", omp_get_max_threads(), mib,
              3.0 * n * sizeof(double) / best / 1e9, a[n / 2]);
  return 0;
}

// Read-only memory bandwidth with S sequential streams per thread: each OpenMP thread sums its
// contiguous part of a 2 GiB buffer (far past the caches) read as S interleaved slices, as a decode
// GEMV reads a group of weight rows side by side. The ceiling a weight-streaming decode can reach
// (STREAM's triad, stream_triad.cpp, also writes, and one stream alone does not fill the memory
// queues). Best of 4 passes, GB/s of bytes read.
// Build: g++ -O2 -mavx512f -fopenmp bench/decode/read_streams.cpp -o /tmp/read_streams
// Usage: OMP_NUM_THREADS=T /tmp/read_streams [S]   (S = 1: one stream; 8: a GEMV row group)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's _mm512_reduce_add_epi32 (its header's __Y = __Y)
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  const int S = argc > 1 ? std::atoi(argv[1]) : 1;
  const size_t n = size_t(2) << 30;
  char* a = static_cast<char*>(std::aligned_alloc(4096, n));
  if (!a || S < 1) return 1;
  std::memset(a, 1, n);
  double best = 0;
  long sink = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    long tot = 0;
    size_t bytes = 0;  // read: each thread's S slices of whole 128-byte steps
#pragma omp parallel reduction(+ : tot, bytes)
    {
      const size_t part = n / size_t(omp_get_num_threads()), slice = part / size_t(S) / 128 * 128;
      const char* base = a + size_t(omp_get_thread_num()) * part;
      __m512i acc = _mm512_setzero_si512();
      for (size_t i = 0; i < slice; i += 128)
        for (int s = 0; s < S; ++s) {
          const char* p = base + size_t(s) * slice + i;
          acc = _mm512_add_epi32(acc, _mm512_add_epi32(_mm512_load_si512(p), _mm512_load_si512(p + 64)));
        }
      tot += _mm512_reduce_add_epi32(acc);
      bytes += size_t(S) * slice;
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (double(bytes) / t / 1e9 > best) best = double(bytes) / t / 1e9;
    sink += tot;
  }
  std::printf("{\"streams\": %d, \"threads\": %d, \"read_gb_s\": %.2f, \"sink\": %ld}\n", S, omp_get_max_threads(),
              best, sink);
  std::free(a);
}

// Training attention GFLOP/s, f32 kernels against the bf16 ones (vdpbf16ps), forward and backward,
// at the SmolLM2-135M shape (9 query heads, 3 KV heads, head size 64), micro-batch 4 × 512 packed
// as TrainModel passes it (T = 2048 tokens, a document start every 512), the kernels TrainModel
// calls (train_ops_cpu()). Not built by CMake: build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -I src bench/bench_attention_bf16.cpp build/liblt_kernels.a \
//       build/liblt_core.a -ldnnl -lfmt -o /tmp/bench_attn && OMP_NUM_THREADS=2 /tmp/bench_attn
// FLOPs counted as the profiler does: 4·pairs·NH·HS forward (QKᵀ and PV), 10·pairs·NH·HS backward
// (the FA-2 backward's five products, not the recomputation). Best of 5 after a warm-up, in wall
// time, or with BENCH_CPU_TIME=1 (for OMP_NUM_THREADS=1 on a shared machine) in process CPU time.
// Optional arguments: T doc_len NH NKV HS. BENCH_BF16_ONLY=1 skips the f32 kernels (for perf record); BENCH_REPS=n takes the best of n (5).
// Measured (2-core AVX512-BF16 VM shared with other jobs, load average ~10, best of 5; Dec 2026):
// OMP_NUM_THREADS=1 BENCH_CPU_TIME=1: f32 forward 48 ms / backward 95 ms, bf16 32 ms / 85 ms
// (before the tiles were packed once per call: bf16 41 ms / 128 ms against f32 38 ms / 82 ms).
// With one barrier per call (load average ~14): OMP_NUM_THREADS=1 BENCH_CPU_TIME=1: f32 37 / 102 ms,
// bf16 26 / 89 ms; OMP_NUM_THREADS=2 BENCH_CPU_TIME=1 (both threads' CPU, spinning included): f32
// 49 / 125 ms, bf16 39 / 95 ms; OMP_NUM_THREADS=2 wall: f32 352 / 885 ms, bf16 286 / 704 ms.
// 2-core Zen 4 VM (AVX512-BF16, no AMX), BENCH_REPS=20 BENCH_BF16_ONLY=1, wall: before / after the
// accumulators were kept in registers and pass 2 reused pass 1's dS: OMP_NUM_THREADS=1 bf16 ~17 / ~63
// ms -> ~12.5 / ~30-34 ms; OMP_NUM_THREADS=2 ~9.7 / ~28 ms -> 6.1-7.0 / 14.5-17 ms.
// f32 kernels, four queries per sweep over the value / key rows and four dst rows per rank update
// (BENCH_REPS=10, args 2048 512 14 2 64, 2 threads, wall, GFLOP/s forward / backward): Zen 4 111 / 96 ->
// 147 / 117; Xeon with AMX (f32 peak 443) 130 / 125 -> 155-164 / 155-159.
// AMX kernels on that Xeon (args 2048 512 9 3 64, BENCH_BF16_ONLY=1, 2 threads): backward 402 -> 460 GFLOP/s with
// pass 1's dS rows kept and dq's accumulators left in tiles; forward 278-290 -> 360-380 with the 16 rows' softmax
// together.
#include <omp.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/backward.h"

using namespace lt;

static double now_seconds() {
  static const bool cpu = std::getenv("BENCH_CPU_TIME") && std::atoi(std::getenv("BENCH_CPU_TIME")) != 0;
  if (!cpu) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double best_seconds(const std::function<void()>& f) {
  f();
  static const int reps = std::getenv("BENCH_REPS") ? std::atoi(std::getenv("BENCH_REPS")) : 5;
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    const double t0 = now_seconds();
    f();
    best = std::min(best, now_seconds() - t0);
  }
  return best;
}

int main(int argc, char** argv) {
  int T = 2048, doc = 512, NH = 9, NKV = 3, HS = 64;
  if (argc == 6) T = atoi(argv[1]), doc = atoi(argv[2]), NH = atoi(argv[3]), NKV = atoi(argv[4]), HS = atoi(argv[5]);
  const TrainOps& t = train_ops_cpu();
  std::printf("# %s, %s, %d threads, T=%d doc=%d NH=%d NKV=%d HS=%d\n", t.name, cpu_features_string().c_str(),
              omp_get_max_threads(), T, doc, NH, NKV, HS);
  std::vector<int> ds(T);
  double pairs = 0;
  for (int i = 0; i < T; i++) ds[i] = i - i % doc, pairs += i - ds[i] + 1;
  const size_t nq = size_t(T) * NH * HS, nk = size_t(T) * NKV * HS;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(nq), k(nk), v(nk), dout(nq), out(nq), lse(size_t(NH) * T), dq(nq), dk(nk), dv(nk);
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = u(rng);
  std::vector<uint16_t> q16(nq), k16(nk), v16(nk), out16(nq);
  for (size_t i = 0; i < nq; i++) q16[i] = f32_to_bf16(q[i]);
  for (size_t i = 0; i < nk; i++) k16[i] = f32_to_bf16(k[i]), v16[i] = f32_to_bf16(v[i]);
  const double ffwd = 4.0 * pairs * NH * HS, fbwd = 10.0 * pairs * NH * HS;
  auto report = [&](const char* what, double flops, double s) {
    std::printf("%-22s %8.2f ms %8.1f GFLOP/s\n", what, 1e3 * s, flops / s * 1e-9);
  };
  // the kept dS rows, planned as a training run plans them (0 bytes: recomputed)
  std::vector<unsigned char> rows32(attention_ds_rows_bytes(T, doc, NH, 4));
  std::vector<unsigned char> rows16(attention_ds_rows_bytes(T, doc, NH, 2));
  std::printf("# kept dS rows: %.1f MB f32, %.1f MB bf16\n", rows32.size() / 1e6, rows16.size() / 1e6);
  const bool only_bf16 = std::getenv("BENCH_BF16_ONLY") && std::atoi(std::getenv("BENCH_BF16_ONLY")) != 0;
  if (!only_bf16) {
  report("f32 forward", ffwd, best_seconds([&] {
           t.attention_train_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), T, NH, NKV, HS);
         }));
  report("f32 backward", fbwd, best_seconds([&] {
           t.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                                lse.data(), ds.data(), T, NH, NKV, HS, rows32.data(), rows32.size());
         }));
  }
  if (!t.attention_train_forward_bf16) {
    std::printf("# no bf16 attention on this CPU / ISA level (needs avx512 with avx512_bf16)\n");
    return 0;
  }
  for (size_t i = 0; i < nq; i++) out16[i] = f32_to_bf16(out[i]);
  report("bf16 forward", ffwd, best_seconds([&] {
           t.attention_train_forward_bf16(out.data(), lse.data(), q16.data(), k16.data(), v16.data(), ds.data(), T, NH,
                                          NKV, HS);
         }));
  report("bf16 backward", fbwd, best_seconds([&] {
           t.attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), q16.data(), k16.data(), v16.data(),
                                     out16.data(), lse.data(), ds.data(), T, NH, NKV, HS, rows16.data(),
                                     rows16.size());
         }));
  return 0;
}

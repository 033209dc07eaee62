#include "plan/baseline.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <vector>

#include "core/memory_plan.h"
#include "core/threads.h"
#include "kernels/cpu/gemm.h"
#include "plan/machine_cache.h"

namespace lt {

// oneDNN JIT-compiles a GEMM kernel per variant on first use, each in its own code buffer (about
// 320 KiB resident): every transpose pair, alpha and beta variant a step calls is run here once
// (a training run's first layer compiled about 20 of them, 6-7 MiB, above an f32-only probe). Where
// the CPU has AMX the bf16 GEMMs are gemm_bf16_amx.cpp's, whose per-thread packing panels the
// first call allocates and touches whole.
size_t measure_baseline_in_this_process() {
  const int M = 64, N = 96, K = 80, L = std::max({M, N, K});
  std::vector<float> a(size_t(L) * L, 0.01f), b(size_t(L) * L, 0.02f), c(size_t(L) * L);
  std::vector<uint16_t> a16(a.size(), 0x3c00), b16(b.size(), 0x3c00);  // bf16 1/128
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float alpha : {1.0f, 0.5f})
        for (float beta : {0.0f, 1.0f}) {
          const int lda = ta ? M : K, ldb = tb ? K : N;
          cpu::gemm_f32(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), N);
          cpu::gemm_bf16(ta, tb, M, N, K, alpha, a16.data(), lda, b16.data(), ldb, beta, c.data(), N);
        }
  return process_peak_rss_bytes();
}

size_t process_baseline_bytes() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  struct stat st {};
  if (ec || exe.filename() != "leantune" || stat(exe.c_str(), &st) != 0) return process_rss_bytes();
  const std::string key = fmt::format("baseline_bytes_threads_{}_binary_{}_{}", num_threads(), st.st_size, st.st_mtime);
  double v = cached_measurement(key, [&]() -> double {
    std::string cmd = fmt::format("'{}' baseline-probe --threads {} 2>/dev/null", exe.string(), num_threads());
    std::FILE* p = popen(cmd.c_str(), "r");
    if (!p) return double(process_rss_bytes());
    unsigned long long n = 0;
    int got = std::fscanf(p, "%llu", &n);
    int rc = pclose(p);
    return got == 1 && rc == 0 && n > 0 ? double(n) : double(process_rss_bytes());
  });
  return size_t(v);
}

}  // namespace lt

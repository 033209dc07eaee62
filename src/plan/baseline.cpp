#include "plan/baseline.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <vector>

#include "core/memory_plan.h"
#include "core/threads.h"
#include "kernels/cpu/gemm.h"
#include "plan/machine_cache.h"

namespace lt {

size_t measure_baseline_in_this_process() {
  const int M = 64, N = 96, K = 80;
  std::vector<float> a(size_t(M) * K, 0.01f), b(size_t(N) * K, 0.02f), c(size_t(M) * N);
  for (bool tb : {false, true}) cpu::gemm_f32(false, tb, M, N, K, 1.0f, a.data(), K, b.data(), tb ? K : N, 0.0f, c.data(), N);
  cpu::gemm_f32(true, false, K, N, M, 1.0f, a.data(), K, c.data(), N, 0.0f, b.data(), N);
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

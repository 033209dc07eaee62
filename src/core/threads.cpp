// The process-wide OpenMP thread count: 0 picks one thread per hardware thread; more than
// kMaxThreads is an error, more than the hardware threads runs as asked with a warning.
#include "core/threads.h"

#include <fmt/format.h>
#include <omp.h>

#include <cstdio>

#include "core/error.h"

namespace lt {

void set_num_threads(int n) {
  const int hw = omp_get_num_procs();
  LT_CHECK(n >= 0 && n <= kMaxThreads, "threads: {} is out of range: it must be >= 0 and <= {} (0: one per hardware "
           "thread; this machine has {})", n, kMaxThreads, hw);
  if (n == 0) n = hw;
  if (n > hw)
    fmt::print(stderr, "leantune: warning: threads: {} is more than the {} hardware threads of this machine; using {} "
               "threads as asked (oversubscribed threads run slower; 0 picks {})\n", n, hw, n, hw);
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace lt

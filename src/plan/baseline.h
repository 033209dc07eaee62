// The process baseline: the resident memory a leantune process holds before any model, data or
// arena exists (runtime libraries, the OpenMP team, oneDNN's first GEMM). It is the one part of a
// predicted peak that is measured rather than counted: once per machine, thread count and binary,
// by running `leantune baseline-probe` in a fresh process, then cached (plan/machine_cache.h).
#pragma once
#include <cstddef>

namespace lt {

// What the probe measures in its own process: start the thread team, run one small GEMM of each
// kind the engine uses, return VmHWM.
size_t measure_baseline_in_this_process();

// The cached baseline for the current thread count. When this program is not the leantune CLI
// (tests link the library into another binary) or the probe fails, this process's current
// resident memory stands in.
size_t process_baseline_bytes();

}  // namespace lt

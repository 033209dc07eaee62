// The machine leantune runs on: its CPU features, the kernels it picked, and thread counts.
// Nothing here is global state of the library: a thread count is an option of each object that
// computes (ModelOptions::threads, ...), applied to the calling thread while it computes.
//
// Usage:
//   leantune::MachineInfo m = leantune::machine_info();
//   std::printf("cpu: %s (kernels: %s), threads: %d\n", m.cpu_features.c_str(), m.kernels.c_str(),
//               leantune::resolve_threads(0));
#pragma once
#include <string>

namespace leantune {

struct MachineInfo {
  std::string cpu_features;  // the ISA extensions detected, e.g. "avx2 fma f16c avx512f ..."
  std::string kernels;       // the kernel level used: "scalar", "avx2" or "avx512" (LEANTUNE_ISA caps it)
  int hardware_threads = 0;  // hardware threads this process may use
};

MachineInfo machine_info();

// The most threads an option may ask for (more is an error: a typo, not a machine).
constexpr int kMaxThreads = 1024;

// The thread count that `requested` means: 0 is one per hardware thread; more than the hardware
// threads is used as asked, with a warning on stderr. leantune::Error when requested < 0 or
// > kMaxThreads.
int resolve_threads(int requested);

}  // namespace leantune

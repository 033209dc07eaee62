// OpenMP thread count for the whole process (one team runs a step; oneDNN shares the runtime).
#pragma once

namespace lt {

constexpr int kMaxThreads = 1024;  // a hard cap: more is an error (a typo, not a machine)

// n = 0: one thread per hardware thread. lt::Error when n < 0 or n > kMaxThreads; a warning on
// stderr (and n threads all the same) when n is more than the hardware threads.
void set_num_threads(int n);
int num_threads();

}  // namespace lt

// OpenMP thread count for the whole process (one team runs a step; oneDNN shares the runtime).
#pragma once

namespace lt {

void set_num_threads(int n);  // n <= 0: number of cores
int num_threads();

}  // namespace lt

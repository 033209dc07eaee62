// machine.h: the CPU's features and the kernels picked, thread counts resolved, and ThreadScope
// (guard.h), which applies a thread count to the calling thread only.
#include "leantune/machine.h"

#include <omp.h>

#include "api/guard.h"
#include "core/cpu_features.h"
#include "core/threads.h"

namespace leantune {

static_assert(kMaxThreads == lt::kMaxThreads);

MachineInfo machine_info() {
  return detail::guard([] {
    MachineInfo m;
    m.cpu_features = lt::cpu_features_string();
    m.kernels = lt::isa_name(lt::cpu_isa());
    m.hardware_threads = omp_get_num_procs();
    return m;
  });
}

int resolve_threads(int requested) {
  return detail::guard([&] {
    // validates and warns exactly as the engine does, leaving the calling thread's count as it was
    detail::ThreadScope keep(omp_get_max_threads());
    lt::set_num_threads(requested);
    return lt::num_threads();
  });
}

namespace detail {

ThreadScope::ThreadScope(int threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(threads); }
ThreadScope::~ThreadScope() { omp_set_num_threads(previous_); }

}  // namespace detail
}  // namespace leantune

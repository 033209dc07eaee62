// The choice of the process's communicator (dist/comm.h).
#include "dist/comm.h"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace lt {

#ifdef LT_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_communicator();  // dist/mpi_comm.cpp
#endif

static const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool launched_by_mpirun() { return env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_SIZE"); }

size_t comm_bucket_elems() {
  const char* v = env("LEANTUNE_DIST_BUCKET_ELEMS");
  size_t n = v ? size_t(std::strtoull(v, nullptr, 10)) : size_t(4) << 20;
  LT_CHECK(n >= 1 && n <= (size_t(1) << 30), "LEANTUNE_DIST_BUCKET_ELEMS must be in [1, 2^30] (got '{}')", v ? v : "");
  return n;
}

double comm_timeout_seconds() {
  const char* v = env("LEANTUNE_DIST_TIMEOUT_S");
  double s = v ? std::strtod(v, nullptr) : 300.0;
  LT_CHECK(s > 0, "LEANTUNE_DIST_TIMEOUT_S must be a positive number of seconds (got '{}')", v ? v : "");
  return s;
}

Communicator& world() {
  static std::unique_ptr<Communicator> w = []() -> std::unique_ptr<Communicator> {
    if (!launched_by_mpirun()) return std::make_unique<SelfCommunicator>();
#ifdef LT_HAVE_MPI
    return make_mpi_communicator();
#else
    const char* n = env("OMPI_COMM_WORLD_SIZE") ? env("OMPI_COMM_WORLD_SIZE") : env("PMI_SIZE");
    LT_CHECK(!n || std::atoi(n) <= 1, "started by mpirun with {} ranks, but this leantune was built without MPI; "
             "install libopenmpi-dev and rebuild (CMake finds MPI), or run without mpirun", n);
    return std::make_unique<SelfCommunicator>();
#endif
  }();
  return *w;
}

}  // namespace lt

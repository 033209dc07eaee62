// The process's communicator (world()): the Communicator interface and SelfCommunicator are in
// core/comm.h; this adds MPI (dist/mpi_comm.cpp, compiled when CMake finds MPI) for
// `mpirun -np N leantune ...`, and a single process's SelfCommunicator otherwise.
// Failure policy: every MPI call returns its error (MPI_ERRORS_RETURN) and throws lt::Error naming
// the operation, this rank and the communicator size; a watchdog thread ends this process with
// exit status 1 and a message when one collective has waited longer than the timeout (a peer that
// died or stopped), so no rank hangs. OpenMPI's mpirun also ends the whole job, non-zero, naming
// the rank, when one rank exits abnormally.
// Usage: Communicator& c = world(); c.allreduce_sum(grad, n); if (c.rank() == 0) ...
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/comm.h"

namespace lt {

// The process's communicator: MPI over every rank when started by mpirun (OpenMPI / PMIx
// environment) and built with MPI, else a SelfCommunicator. Initialises MPI on first use and
// finalises it at exit. lt::Error when started by mpirun with several ranks in a build without MPI.
Communicator& world();

// Whether this process was started by mpirun (it may still be a job of one rank).
bool launched_by_mpirun();

// Elements per MPI call: larger collectives are sent in buckets of this size (default 4 Mi
// floats = 16 MiB; LEANTUNE_DIST_BUCKET_ELEMS overrides, for tests).
size_t comm_bucket_elems();
// Seconds one collective may wait before the watchdog ends the process (default 300;
// LEANTUNE_DIST_TIMEOUT_S overrides).
double comm_timeout_seconds();

}  // namespace lt

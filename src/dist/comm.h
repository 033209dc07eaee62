// The process's communicator (MPI under mpirun, else a single-process SelfCommunicator) and the
// collective tuning knobs. The Communicator interface itself is in core/comm.h.
#pragma once
#include <cstddef>

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

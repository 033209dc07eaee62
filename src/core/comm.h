// Communicator: the collectives data-parallel training needs (DESIGN.md §7), behind one interface.
// Two implementations: a single process is a communicator of size 1 whose collectives are copies
// or no-ops (no MPI call is ever made), and MPI (dist/mpi_comm.cpp, compiled when CMake finds MPI)
// for `mpirun -np N leantune ...`. Sizes are in elements; every rank passes the same n.
// Failure policy: every MPI call returns its error (MPI_ERRORS_RETURN) and throws lt::Error naming
// the operation, this rank and the communicator size; a watchdog thread ends this process with
// exit status 1 and a message when one collective has waited longer than the timeout (a peer that
// died or stopped), so no rank hangs. OpenMPI's mpirun also ends the whole job, non-zero, naming
// the rank, when one rank exits abnormally.
// The interface lives in core so the training loop (train) can take a Communicator without
// depending on dist, which chooses and builds the process's communicator (dist/comm.h: world()).
// Usage: Communicator& c = world(); c.allreduce_sum(grad, n); if (c.rank() == 0) ...
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lt {

// Bytes this rank sent per kind of collective, counted as a ring algorithm moves them: all-reduce
// of n floats 2·(R-1)/R·4n, reduce-scatter and all-gather of R·n floats ·4n each.
struct CommStats {
  uint64_t allreduce_bytes = 0, reduce_scatter_bytes = 0, allgather_bytes = 0, broadcast_bytes = 0;
  uint64_t calls = 0;
  uint64_t total() const { return allreduce_bytes + reduce_scatter_bytes + allgather_bytes + broadcast_bytes; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // In place: data (n) becomes the element-wise sum over ranks.
  virtual void allreduce_sum(float* data, size_t n) = 0;
  virtual void allreduce_sum(double* data, size_t n) = 0;
  // send (size()·n): block r goes to rank r; recv (n) = the sum over ranks of their block rank().
  // recv may alias send's own block (send + rank()·n).
  virtual void reduce_scatter_sum(float* recv, const float* send, size_t n) = 0;
  // send (n) from every rank; recv (size()·n) holds rank r's at r·n. send may alias recv + rank()·n.
  virtual void allgather(float* recv, const float* send, size_t n) = 0;
  // In place: on rank root, data (n) becomes the element-wise sum over ranks; elsewhere it is only
  // sent (counted as reduce-scatter bytes: the pieces of a reduce-scatter to owners of unequal size).
  virtual void reduce_sum(float* data, size_t n, int root) = 0;
  // bytes from rank root to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Nonblocking versions (MPI-3): start the collective and return a handle; the buffer must stay
  // untouched until wait(handle). Every rank starts the same collectives in the same order. The
  // defaults run the blocking collective (a single process: nothing to wait for).
  using Handle = uint64_t;
  virtual Handle ibroadcast(void* data, size_t bytes, int root) {
    broadcast(data, bytes, root);
    return 0;
  }
  virtual Handle ireduce_sum(float* data, size_t n, int root) {
    reduce_sum(data, n, root);
    return 0;
  }
  virtual Handle iallreduce_sum(float* data, size_t n) {
    allreduce_sum(data, n);
    return 0;
  }
  virtual void wait(Handle) {}
  // Lets collectives in flight advance (MPI_Testall) between pieces of computation.
  virtual void progress() {}
  // Ends every rank of the job with this status (MPI_Abort); a single process just exits.
  [[noreturn]] virtual void abort(int status) = 0;
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  CommStats stats_;
};

// A communicator of size 1 for one process: no MPI, collectives are copies.
class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void reduce_scatter_sum(float* recv, const float* send, size_t n) override;
  void allgather(float* recv, const float* send, size_t n) override;
  void reduce_sum(float*, size_t, int) override {}
  void broadcast(void*, size_t, int) override {}
  [[noreturn]] void abort(int status) override;
};

}  // namespace lt

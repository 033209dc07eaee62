// The MPI communicator (dist/comm.h): MPI_COMM_WORLD with MPI_ERRORS_RETURN, collectives cut into
// buckets of comm_bucket_elems() elements, every error turned into lt::Error naming the operation
// and the rank, and a watchdog thread that ends the process when one collective waits too long.
// Reduce-scatter is one MPI_Reduce per owner and a bucketed all-gather one MPI_Bcast per owner, so
// nothing is staged (no allocation inside a step).
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <map>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"

namespace lt {

namespace {

using Clock = std::chrono::steady_clock;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      std::atexit([] {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
      });
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    bucket_ = comm_bucket_elems();
    timeout_s_ = comm_timeout_seconds();
    watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiCommunicator() override {
    stop_ = true;
    if (watchdog_.joinable()) watchdog_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void barrier() override {
    Op op(this, "barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

  void allreduce_sum(float* data, size_t n) override { allreduce(data, n, MPI_FLOAT, sizeof(float)); }
  void allreduce_sum(double* data, size_t n) override { allreduce(data, n, MPI_DOUBLE, sizeof(double)); }

  void reduce_scatter_sum(float* recv, const float* send, size_t n) override {
    Op op(this, "reduce-scatter");
    if (recv != send + size_t(rank_) * n) std::memmove(recv, send + size_t(rank_) * n, n * sizeof(float));
    for (int r = 0; r < size_; ++r)
      for (size_t o = 0; o < n; o += bucket_) {
        const int k = int(std::min(bucket_, n - o));
        if (r == rank_)
          check(MPI_Reduce(MPI_IN_PLACE, recv + o, k, MPI_FLOAT, MPI_SUM, r, MPI_COMM_WORLD), "MPI_Reduce");
        else
          check(MPI_Reduce(send + size_t(r) * n + o, nullptr, k, MPI_FLOAT, MPI_SUM, r, MPI_COMM_WORLD), "MPI_Reduce");
      }
    stats_.reduce_scatter_bytes += uint64_t(size_ - 1) * n * sizeof(float);
    stats_.calls++;
  }

  void allgather(float* recv, const float* send, size_t n) override {
    Op op(this, "all-gather");
    float* mine = recv + size_t(rank_) * n;
    if (mine != send) std::memmove(mine, send, n * sizeof(float));
    if (n <= bucket_) {
      check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, int(n), MPI_FLOAT, MPI_COMM_WORLD),
            "MPI_Allgather");
    } else {
      for (int r = 0; r < size_; ++r)
        for (size_t o = 0; o < n; o += bucket_)
          check(MPI_Bcast(recv + size_t(r) * n + o, int(std::min(bucket_, n - o)), MPI_FLOAT, r, MPI_COMM_WORLD),
                "MPI_Bcast");
    }
    stats_.allgather_bytes += uint64_t(size_ - 1) * n * sizeof(float);
    stats_.calls++;
  }

  void reduce_sum(float* data, size_t n, int root) override {
    Op op(this, "reduce");
    for (size_t o = 0; o < n; o += bucket_) {
      const int k = int(std::min(bucket_, n - o));
      if (rank_ == root)
        check(MPI_Reduce(MPI_IN_PLACE, data + o, k, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD), "MPI_Reduce");
      else
        check(MPI_Reduce(data + o, nullptr, k, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD), "MPI_Reduce");
    }
    if (rank_ != root) stats_.reduce_scatter_bytes += uint64_t(n) * sizeof(float);
    stats_.calls++;
  }

  void broadcast(void* data, size_t bytes, int root) override {
    Op op(this, "broadcast");
    auto* p = static_cast<char*>(data);
    for (size_t o = 0; o < bytes; o += size_t(INT_MAX))
      check(MPI_Bcast(p + o, int(std::min(size_t(INT_MAX), bytes - o)), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    if (rank_ == root) stats_.broadcast_bytes += uint64_t(size_ - 1) * bytes;
    stats_.calls++;
  }

  Handle ibroadcast(void* data, size_t bytes, int root) override {
    auto& reqs = start();
    auto* p = static_cast<char*>(data);
    for (size_t o = 0; o < bytes; o += size_t(INT_MAX)) {
      reqs.emplace_back();
      check(MPI_Ibcast(p + o, int(std::min(size_t(INT_MAX), bytes - o)), MPI_BYTE, root, MPI_COMM_WORLD, &reqs.back()),
            "MPI_Ibcast");
    }
    if (rank_ == root) stats_.broadcast_bytes += uint64_t(size_ - 1) * bytes;
    stats_.calls++;
    return next_handle_++;
  }

  Handle ireduce_sum(float* data, size_t n, int root) override {
    auto& reqs = start();
    for (size_t o = 0; o < n; o += bucket_) {
      const int k = int(std::min(bucket_, n - o));
      reqs.emplace_back();
      if (rank_ == root)
        check(MPI_Ireduce(MPI_IN_PLACE, data + o, k, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &reqs.back()),
              "MPI_Ireduce");
      else
        check(MPI_Ireduce(data + o, nullptr, k, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, &reqs.back()), "MPI_Ireduce");
    }
    if (rank_ != root) stats_.reduce_scatter_bytes += uint64_t(n) * sizeof(float);
    stats_.calls++;
    return next_handle_++;
  }

  Handle iallreduce_sum(float* data, size_t n) override {
    auto& reqs = start();
    for (size_t o = 0; o < n; o += bucket_) {
      reqs.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, data + o, int(std::min(bucket_, n - o)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                           &reqs.back()), "MPI_Iallreduce");
    }
    stats_.allreduce_bytes += 2 * uint64_t(size_ - 1) * n * sizeof(float) / uint64_t(size_);
    stats_.calls++;
    return next_handle_++;
  }

  void wait(Handle h) override {
    auto it = pending_.find(h);
    if (it == pending_.end()) return;
    Op op(this, "wait for a nonblocking collective");
    check(MPI_Waitall(int(it->second.size()), it->second.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    pending_.erase(it);
  }

  void progress() override {
    for (auto& [h, reqs] : pending_) {
      int done = 0;
      check(MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    }
  }

  [[noreturn]] void abort(int status) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
    std::_Exit(status);
  }

 private:
  // Marks a collective in flight for the watchdog.
  struct Op {
    MpiCommunicator* c;
    Op(MpiCommunicator* comm, const char* name) : c(comm) {
      c->op_name_ = name;
      c->op_start_ns_ = Clock::now().time_since_epoch().count();
    }
    ~Op() { c->op_start_ns_ = 0; }
  };

  void allreduce(void* data, size_t n, MPI_Datatype t, size_t elem) {
    Op op(this, "all-reduce");
    auto* p = static_cast<char*>(data);
    for (size_t o = 0; o < n; o += bucket_)
      check(MPI_Allreduce(MPI_IN_PLACE, p + o * elem, int(std::min(bucket_, n - o)), t, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
    stats_.allreduce_bytes += 2 * uint64_t(size_ - 1) * n * elem / uint64_t(size_);
    stats_.calls++;
  }

  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail("{} failed on rank {} of {} during {}: {}", what, rank_, size_, op_name_.load(), std::string(msg, size_t(len)));
  }

  // Ends the process when one collective has waited past the timeout: a peer died or stopped.
  void watch() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int64_t t0 = op_start_ns_;
      if (!t0) continue;
      const double waited = std::chrono::duration<double>(Clock::now().time_since_epoch() -
                                                          Clock::duration(t0)).count();
      if (waited > timeout_s_) {
        std::fprintf(stderr, "leantune: rank %d of %d: %s has waited %.0f s for the other ranks (timeout %.0f s, "
                     "LEANTUNE_DIST_TIMEOUT_S); a peer rank died or stopped. Exiting.\n", rank_, size_,
                     op_name_.load(), waited, timeout_s_);
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  // the requests of a new nonblocking collective (handle next_handle_)
  std::vector<MPI_Request>& start() { return pending_[next_handle_]; }

  int rank_ = 0, size_ = 1;
  size_t bucket_ = 0;
  std::map<Handle, std::vector<MPI_Request>> pending_;
  Handle next_handle_ = 1;
  double timeout_s_ = 0;
  std::atomic<const char*> op_name_{""};
  std::atomic<int64_t> op_start_ns_{0};
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace lt

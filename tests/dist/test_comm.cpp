// The communicator's collectives against their definitions, on whatever world() is: one process
// in the main suite (copies), two ranks under mpirun (MPI, with LEANTUNE_DIST_BUCKET_ELEMS small
// enough that every collective here is cut into several buckets).
#include <gtest/gtest.h>

#include <vector>

#include "dist/comm.h"
#include "dist/zero.h"

using namespace lt;

namespace {
// a value no two (rank, index) pairs share, exact in float
float val(int r, size_t i) { return float(r * 100003 + int(i % 4093)) * 0.25f; }
}  // namespace

TEST(DistComm, AllreduceSumsEveryRanksValues) {
  Communicator& c = world();
  const size_t n = 5003;  // odd: the last bucket is partial
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = val(c.rank(), i);
  c.allreduce_sum(x.data(), n);
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < c.size(); ++r) want += val(r, i);
    ASSERT_EQ(x[i], want) << "element " << i;
  }
  double d[2] = {double(c.rank()), 1.0};
  c.allreduce_sum(d, 2);
  EXPECT_EQ(d[0], c.size() * (c.size() - 1) / 2.0);
  EXPECT_EQ(d[1], double(c.size()));
}

TEST(DistComm, ReduceScatterGivesEachRankTheSumOfItsBlock) {
  Communicator& c = world();
  const size_t n = 2501, R = size_t(c.size());
  std::vector<float> send(R * n);
  for (size_t i = 0; i < R * n; ++i) send[i] = val(c.rank(), i);
  std::vector<float> recv(n, -1.0f);
  c.reduce_scatter_sum(recv.data(), send.data(), n);
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < c.size(); ++r) want += val(r, size_t(c.rank()) * n + i);
    ASSERT_EQ(recv[i], want) << "element " << i;
  }
  // in place: the result lands in this rank's own block
  c.reduce_scatter_sum(send.data() + size_t(c.rank()) * n, send.data(), n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(send[size_t(c.rank()) * n + i], recv[i]);
}

TEST(DistComm, AllgatherPlacesRankRsBlockAtRTimesN) {
  Communicator& c = world();
  const size_t n = 3001, R = size_t(c.size());
  std::vector<float> mine(n), all(R * n, -1.0f);
  for (size_t i = 0; i < n; ++i) mine[i] = val(c.rank(), i);
  c.allgather(all.data(), mine.data(), n);
  for (size_t r = 0; r < R; ++r)
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(all[r * n + i], val(int(r), i)) << "rank " << r << " element " << i;
  std::vector<float> in_place(R * n, -1.0f);
  for (size_t i = 0; i < n; ++i) in_place[size_t(c.rank()) * n + i] = val(c.rank(), i);
  c.allgather(in_place.data(), in_place.data() + size_t(c.rank()) * n, n);
  EXPECT_EQ(in_place, all);
}

TEST(DistComm, BroadcastCopiesTheRootsBytes) {
  Communicator& c = world();
  std::vector<int> x(1000, c.rank() + 7);
  c.broadcast(x.data(), x.size() * sizeof(int), 0);
  for (int v : x) ASSERT_EQ(v, 7);
  c.barrier();
}

TEST(DistComm, RingVolumesAreCounted) {
  Communicator& c = world();
  c.reset_stats();
  std::vector<float> x(1000, 1.0f), all(1000 * size_t(c.size()));
  c.allreduce_sum(x.data(), 1000);
  c.allgather(all.data(), x.data(), 1000);
  const uint64_t R = uint64_t(c.size());
  if (R == 1) {
    EXPECT_EQ(c.stats().total(), 0u);  // one process moves nothing
  } else {
    EXPECT_EQ(c.stats().allreduce_bytes, 2 * (R - 1) * 4000 / R);
    EXPECT_EQ(c.stats().allgather_bytes, (R - 1) * 4000);
  }
}

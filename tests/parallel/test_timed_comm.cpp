// The timing decorator: with a counter of its own for all-to-alls, an all-to-all adds to that one
// only and every other call to the other; with one counter, all of them add to it.
#include "parallel/timed_comm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

namespace meshtrain {
namespace {

// An alltoallv and an alltoall of `n` elements to every rank.
void exchange(Comm& comm, std::size_t n) {
  const std::size_t p = std::size_t(comm.size());
  std::vector<std::size_t> counts(p, n), displs(p);
  for (std::size_t q = 0; q < p; ++q) displs[q] = q * n;
  std::vector<float> send(n * p, 1.0f), recv(n * p);
  comm.alltoallv(send.data(), counts.data(), displs.data(), recv.data(), counts.data(), displs.data());
  std::vector<std::int64_t> told(n * p, 2), heard(n * p);
  comm.alltoall(told.data(), heard.data(), n);
  EXPECT_EQ(recv, send);
  EXPECT_EQ(heard, told);
}

TEST(TimedComm, TimesAllToAllsApartFromTheOtherCalls) {
  const std::size_t n = 1 << 16;
  double seconds = 0, all_to_all = 0;
  auto comm = make_timed_comm(make_mpi_comm(MPI_COMM_WORLD), seconds, all_to_all);
  exchange(*comm, n);
  EXPECT_GT(all_to_all, 0.0);
  EXPECT_EQ(seconds, 0.0);

  const double exchanged = all_to_all;
  std::vector<float> x(n, 1.0f);
  comm->allreduce_sum(x.data(), n);
  comm->iallreduce_sum(x.data(), n).wait();
  comm->barrier();
  EXPECT_GT(seconds, 0.0);
  EXPECT_EQ(all_to_all, exchanged);

  double total = 0;
  auto one_counter = make_timed_comm(make_mpi_comm(MPI_COMM_WORLD), total);
  exchange(*one_counter, n);
  EXPECT_GT(total, 0.0);
}

}  // namespace
}  // namespace meshtrain

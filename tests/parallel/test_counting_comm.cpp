// The counting decorator against counts worked out by hand: every call of the Comm interface, on
// the world of 1, 2 or 3 ranks, adds one call of its kind and the bytes of its whole buffer, and
// forwards to the real Comm (the results are those of the collective).
#include "parallel/counting_comm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

namespace meshtrain {
namespace {

TEST(CountingComm, CountsEveryCallByKindWithItsWholeBuffer) {
  GroupTraffic counts;
  auto comm = make_counting_comm(make_mpi_comm(MPI_COMM_WORLD), counts);
  const int p = comm->size(), me = comm->rank();
  const std::size_t n = 5;
  std::vector<float> f(n * std::size_t(p), 1.0f), g(n * std::size_t(p), 0.0f);
  std::vector<double> d(n, 1.0);
  std::vector<bf16> h(n * std::size_t(p), bf16(1.0f));
  std::vector<fp16> k(n * std::size_t(p), fp16(1.0f));

  comm->allreduce_sum(f.data(), n);                         // 20 B
  comm->iallreduce_sum(f.data(), n).wait();                 // 20 B
  comm->allreduce_max(d.data(), n);                         // 40 B
  comm->allreduce_sum(h.data(), n);                         // 10 B
  comm->reduce_scatter_sum(f.data(), g.data(), n);          // send buffer: p · 20 B
  comm->ireduce_scatter_sum(f.data(), g.data(), n).wait();  // p · 20 B
  comm->allgather(f.data(), g.data(), n);                   // receive buffer: p · 20 B
  comm->iallgather(k.data() + me * n, k.data(), n).wait();  // p · 10 B, in place
  comm->broadcast(f.data(), n, 0);                          // 20 B
  std::vector<bf16> out(n, bf16(2.0f)), in(n, bf16(0.0f));
  Request r = comm->irecv(in.data(), n, me, 3);  // 10 B
  comm->send(out.data(), n, me, 3);              // 10 B
  r.wait();
  comm->barrier();

  EXPECT_EQ(counts[Collective::allreduce], (TrafficCount{4, 20 + 20 + 40 + 10}));
  EXPECT_EQ(counts[Collective::reduce_scatter], (TrafficCount{2, 2 * p * 20}));
  EXPECT_EQ(counts[Collective::allgather], (TrafficCount{2, p * 20 + p * 10}));
  EXPECT_EQ(counts[Collective::broadcast], (TrafficCount{1, 20}));
  EXPECT_EQ(counts[Collective::send], (TrafficCount{1, 10}));
  EXPECT_EQ(counts[Collective::recv], (TrafficCount{1, 10}));
  EXPECT_EQ(counts[Collective::barrier], (TrafficCount{1, 0}));
  // Forwarded: p ones summed, then that summed again; the maximum of ones; the message.
  EXPECT_EQ(f[n - 1], float(p * p));
  EXPECT_EQ(d[0], 1.0);
  EXPECT_EQ(float(in[0]), 2.0f);
  EXPECT_STREQ(collective_name(Collective::reduce_scatter), "reduce_scatter");
  EXPECT_STREQ(collective_name(Collective::barrier), "barrier");
}

}  // namespace
}  // namespace meshtrain

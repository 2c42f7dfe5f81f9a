// The counting decorator against counts worked out by hand: every call of the Comm interface, on
// the world of 1, 2 or 3 ranks, adds one call of its kind and the bytes of its whole buffer (an
// all-to-all: of the blocks it sends to other ranks), and forwards to the real Comm (the results
// are those of the collective).
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
  // All-to-all: group rank q gets q + 1 + me floats, and 2 doubles, 3 bf16 and 1 fp16 values from
  // each rank; 4 token counts go to each peer. Only what leaves the rank counts: every block but
  // its own.
  const std::size_t ranks = std::size_t(p);
  std::vector<std::size_t> send_counts(ranks), send_displs(ranks), recv_counts(ranks), recv_displs(ranks);
  std::size_t sent = 0, received = 0;
  for (std::size_t q = 0; q < ranks; ++q) {
    send_counts[q] = q + 1 + std::size_t(me);
    recv_counts[q] = std::size_t(me) + 1 + q;
    send_displs[q] = sent;
    recv_displs[q] = received;
    sent += send_counts[q];
    received += recv_counts[q];
  }
  std::vector<float> fs(sent, 1.0f), fr(received, 0.0f);
  comm->alltoallv(fs.data(), send_counts.data(), send_displs.data(), fr.data(), recv_counts.data(), recv_displs.data());
  const std::vector<std::size_t> one(ranks, 1), two(ranks, 2), three(ranks, 3);
  std::vector<std::size_t> thirds(ranks);
  for (std::size_t q = 0; q < ranks; ++q) thirds[q] = 3 * q;
  std::vector<double> ds(3 * ranks, 4.0), dr(3 * ranks);
  std::vector<bf16> hs(3 * ranks, bf16(1.0f)), hr(3 * ranks);
  std::vector<fp16> ks(3 * ranks, fp16(1.0f)), kr(3 * ranks);
  comm->alltoallv(ds.data(), two.data(), thirds.data(), dr.data(), two.data(), thirds.data());
  comm->alltoallv(hs.data(), three.data(), thirds.data(), hr.data(), three.data(), thirds.data());
  comm->alltoallv(ks.data(), one.data(), thirds.data(), kr.data(), one.data(), thirds.data());
  std::vector<std::int64_t> told(4 * ranks, 9), heard(4 * ranks, 0);
  comm->alltoall(told.data(), heard.data(), 4);

  EXPECT_EQ(counts[Collective::allreduce], (TrafficCount{4, 20 + 20 + 40 + 10}));
  EXPECT_EQ(counts[Collective::reduce_scatter], (TrafficCount{2, 2 * p * 20}));
  EXPECT_EQ(counts[Collective::allgather], (TrafficCount{2, p * 20 + p * 10}));
  EXPECT_EQ(counts[Collective::broadcast], (TrafficCount{1, 20}));
  EXPECT_EQ(counts[Collective::send], (TrafficCount{1, 10}));
  EXPECT_EQ(counts[Collective::recv], (TrafficCount{1, 10}));
  EXPECT_EQ(counts[Collective::barrier], (TrafficCount{1, 0}));
  // Σ_{q ≠ me} (q + 1 + me) floats = p(p + 1)/2 + p·me − (2me + 1); then (p − 1) peers ×
  // (2 doubles + 3 bf16 + 1 fp16 + 4 int64) = (p − 1) · 56 B.
  const int own_floats = 2 * me + 1, floats = p * (p + 1) / 2 + p * me - own_floats;
  EXPECT_EQ(counts[Collective::alltoall], (TrafficCount{5, 4 * floats + (p - 1) * (2 * 8 + 3 * 2 + 1 * 2 + 4 * 8)}));
  // Forwarded: p ones summed, then that summed again; the maximum of ones; the message.
  EXPECT_EQ(f[n - 1], float(p * p));
  EXPECT_EQ(d[0], 1.0);
  EXPECT_EQ(float(in[0]), 2.0f);
  EXPECT_EQ(fr, std::vector<float>(received, 1.0f));
  EXPECT_EQ(heard, std::vector<std::int64_t>(4 * ranks, 9));
  EXPECT_STREQ(collective_name(Collective::reduce_scatter), "reduce_scatter");
  EXPECT_STREQ(collective_name(Collective::barrier), "barrier");
  EXPECT_STREQ(collective_name(Collective::alltoall), "alltoall");
}

}  // namespace
}  // namespace meshtrain

// How a Comm orders itself with the compute (parallel/comm.hpp), on 1 and 2 ranks.
// Comm::settle, where the host waits for a device backend's operations, runs under the watchdog's
// ticket of the group's latest operation (parallel/watched_comm.hpp).
// The compute-ordered MPI backend (parallel/compute_ordered_comm.hpp) waits for the compute before
// every call on backend memory, and only those: not before the all-to-all's host counts, nor a barrier.
// The device-stream stand-in (parallel/stream_standin.hpp) against the MPI backend it wraps: a result
// lands at its wait and not before (NaNs until then), equal to the MPI backend's; a write by the
// compute into an operation in flight, input or output, throws at the wait naming the operation; a
// request dropped without wait() is counted and its output stays NaN; the stand-in's own waits are not
// the host's (core/host_waits.hpp).
#include "core/watched_wait.hpp"
#include "parallel/comm_decorator.hpp"
#include "parallel/compute_ordered_comm.hpp"
#include "parallel/stream_standin.hpp"
#include "parallel/watched_comm.hpp"

#include "core/host_waits.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshtrain {
namespace {

int reported = 0;
void count_report(const char*) { ++reported; }

struct Fixture {
  std::unique_ptr<Comm> standin = make_stream_standin_comm(make_mpi_comm(MPI_COMM_WORLD));
  std::unique_ptr<Comm> mpi = make_mpi_comm(MPI_COMM_WORLD);
  int rank() const { return mpi->rank(); }
  int size() const { return mpi->size(); }
};

std::vector<float> values_of(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float(rank + 1) * 0.5f + float(i);
  return v;
}

bool all_nan(const std::vector<float>& v) {
  for (const float x : v) {
    if (!std::isnan(x)) return false;
  }
  return true;
}

TEST(ComputeOrderedComm, WaitsForTheComputeBeforeEveryCallOnBackendMemory) {
  int waits = 0;
  const std::unique_ptr<Comm> comm = make_compute_ordered_comm(make_mpi_comm(MPI_COMM_WORLD), [&] { ++waits; });
  const int p = comm->size(), r = comm->rank();
  std::vector<float> x = values_of(r, 6), gathered(6 * std::size_t(p));
  comm->allreduce_sum(x.data(), 6);
  comm->iallreduce_sum(x.data(), 6).wait();
  comm->allgather(x.data(), gathered.data(), 6);
  comm->reduce_scatter_sum(gathered.data(), x.data(), 6);
  comm->broadcast(x.data(), 6, 0);
  EXPECT_EQ(waits, 5) << "one wait before each call on backend memory";
  std::vector<std::int64_t> counts(std::size_t(p), 1);
  std::vector<std::int64_t> received(std::size_t(p), 0);
  comm->alltoall(counts.data(), received.data(), 1);
  EXPECT_EQ(waits, 6) << "the all-to-all's counts are the backend's memory too";
  comm->barrier();
  EXPECT_EQ(waits, 6) << "a barrier has no buffer";
  if (p >= 2 && r < 2) {
    std::vector<float> in(6);
    Request got = comm->irecv(in.data(), 6, 1 - r, 0);  // a receive overwrites what the compute may still read
    comm->send(x.data(), 6, 1 - r, 0);
    got.wait();
    EXPECT_EQ(waits, 8);
  }
}

// Notes the wait this thread is in when settle() reaches it.
class SettleWitness final : public CommDecorator {
 public:
  SettleWitness(std::unique_ptr<Comm> inner, std::optional<WaitRecord>& seen)
      : CommDecorator(std::move(inner)), seen_(seen) {}

 private:
  void around(const CallShape&, CallRef<void> call) override { call(); }
  Request started(const CallShape&, CallRef<Request> call) override { return call(); }
  void settling(CallRef<void> call) override {
    for (const WaitRecord& r : wait_records()) {
      if (r.active) seen_ = r;
    }
    call();
  }
  std::optional<WaitRecord>& seen_;
};

TEST(Settle, WatchedUnderTheTicketOfTheGroupsLatestOperation) {
  std::optional<WaitRecord> seen;
  WaitGroup& group = new_wait_group(MPI_COMM_WORLD, "settled");
  const std::unique_ptr<Comm> comm =
      make_watched_comm(std::make_unique<SettleWitness>(make_mpi_comm(MPI_COMM_WORLD), seen), group);
  std::vector<float> x = values_of(comm->rank(), 3), all(3 * std::size_t(comm->size()));
  comm->allreduce_sum(x.data(), 3);
  Request gathering = comm->iallgather(x.data(), all.data(), 3);
  comm->settle();
  ASSERT_TRUE(seen.has_value()) << "settle() was not watched";
  EXPECT_EQ(seen->ticket.group, &group);
  EXPECT_STREQ(seen->ticket.kind, "allgather");
  EXPECT_EQ(seen->ticket.seq, 2u) << "the latest operation's number";
  gathering.wait();
  for (const WaitRecord& r : wait_records()) EXPECT_FALSE(r.active) << "the bracket outlived settle()";
}

TEST(StreamStandIn, ResultsLandAtTheWaitEqualToTheBackends) {
  Fixture f;
  constexpr std::size_t n = 37;
  std::vector<float> expected = values_of(f.rank(), n), got = expected;
  f.mpi->allreduce_sum(expected.data(), n);
  Request r = f.standin->iallreduce_sum(got.data(), n);
  EXPECT_TRUE(all_nan(got)) << "an all-reduce's buffer before its wait";
  r.wait();
  EXPECT_EQ(got, expected);

  // Reduce-scatter and all-gather, out of place and (gather) in place.
  const std::vector<float> send = values_of(f.rank(), n * std::size_t(f.size()));
  std::vector<float> scattered(n, 0.0f), scattered_mpi(n, 0.0f);
  f.mpi->reduce_scatter_sum(send.data(), scattered_mpi.data(), n);
  r = f.standin->ireduce_scatter_sum(send.data(), scattered.data(), n);
  EXPECT_TRUE(all_nan(scattered));
  r.wait();
  EXPECT_EQ(scattered, scattered_mpi);

  std::vector<float> gathered(n * std::size_t(f.size()), 0.0f), gathered_mpi = gathered;
  const std::vector<float> mine = values_of(f.rank(), n);
  std::copy(mine.begin(), mine.end(), gathered.begin() + std::ptrdiff_t(n * std::size_t(f.rank())));
  f.mpi->allgather(mine.data(), gathered_mpi.data(), n);
  r = f.standin->iallgather(gathered.data() + n * std::size_t(f.rank()), gathered.data(), n);  // in place
  EXPECT_TRUE(all_nan(gathered));
  r.wait();
  EXPECT_EQ(gathered, gathered_mpi);
}

TEST(StreamStandIn, MessagesLandAtTheWait) {
  Fixture f;
  if (f.size() < 2) GTEST_SKIP() << "messages need two ranks";
  constexpr std::size_t n = 11;
  const int peer = 1 - f.rank() % 2;
  if (f.rank() > 1) return;
  std::vector<float> out = values_of(f.rank(), n), in(n, 0.0f);
  Request received = f.standin->irecv(in.data(), n, peer, 3);
  Request sent = f.standin->isend(out.data(), n, peer, 3);
  EXPECT_TRUE(all_nan(in));
  sent.wait();
  received.wait();
  EXPECT_EQ(in, values_of(peer, n));
}

TEST(StreamStandIn, AWriteIntoAnOperationInFlightThrowsAtItsWait) {
  Fixture f;
  constexpr std::size_t n = 8;
  std::vector<float> data = values_of(f.rank(), n);
  Request r = f.standin->iallreduce_sum(data.data(), n);
  data[3] = 1.0f;  // the compute writes the output before the wait
  try {
    r.wait();
    ADD_FAILURE() << "a write into an all-reduce in flight went unseen";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("iallreduce of 8 floats"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("wrote 4 bytes of its output"), std::string::npos) << e.what();
  }

  std::vector<float> send = values_of(f.rank(), n * std::size_t(f.size())), recv(n);
  r = f.standin->ireduce_scatter_sum(send.data(), recv.data(), n);
  send[0] += 1.0f;  // the compute changes the input before the operation is done with it
  EXPECT_THROW(r.wait(), std::logic_error);
}

TEST(StreamStandIn, ADroppedRequestLeavesItsOutputUnwritten) {
  Fixture f;
  constexpr std::size_t n = 5;
  std::vector<float> data = values_of(f.rank(), n);
  const StreamStandInCounts before = stream_standin_counts();
  { Request dropped = f.standin->iallreduce_sum(data.data(), n); }
  const StreamStandInCounts after = stream_standin_counts();
  EXPECT_EQ(after.started - before.started, 1);
  EXPECT_EQ(after.dropped - before.dropped, 1);
  EXPECT_EQ(after.completed, before.completed);
  EXPECT_TRUE(all_nan(data)) << "the result of an operation never waited on landed";
}

TEST(StreamStandIn, ItsWaitsAreNotTheHosts) {
  Fixture f;
  constexpr std::size_t n = 4;
  std::vector<float> data = values_of(f.rank(), n);
  reported = 0;
  set_host_wait_observer(&count_report);
  f.standin->iallreduce_sum(data.data(), n).wait();
  f.standin->allreduce_sum(data.data(), n);
  const int standin_reports = reported;
  f.mpi->iallreduce_sum(data.data(), n).wait();
  set_host_wait_observer(nullptr);
  EXPECT_EQ(standin_reports, 0);
  EXPECT_EQ(reported, 1) << "the MPI backend's wait is the host's";
}

}  // namespace
}  // namespace meshtrain

// The pointer audit (parallel/pointer_audit.hpp) over an MPI group: a host scalar, a std::vector
// and a freed View are refused, naming the call, the group and the pointer; a live View's data,
// a slice of it and its last element pass and give the sum; the all-to-all's host counts pass by
// contract. Controls: the same host scalar through the unaudited Comm is summed as usual, so only
// the audit refuses it.
#include "core/exec.hpp"
#include "parallel/pointer_audit.hpp"
#include "train/live_allocations.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

using namespace meshtrain;

namespace {

std::unique_ptr<Comm> audited_world() {
  record_live_allocations();
  return make_pointer_audit(make_mpi_comm(MPI_COMM_WORLD), "dp", inside_live_allocation);
}

// The message of the logic_error `f` throws; fails the test when it throws none.
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "the audit let the call through";
  return {};
}

}  // namespace

TEST(PointerAudit, RefusesAHostScalarNamingCallGroupAndPointer) {
  auto comm = audited_world();
  double loss = 1.0;
  const std::string message = refusal([&] { comm->allreduce_sum(&loss, 1); });
  EXPECT_NE(message.find("allreduce"), std::string::npos) << message;
  EXPECT_NE(message.find("group dp"), std::string::npos) << message;
  EXPECT_NE(message.find(fmt::format("{}", static_cast<const void*>(&loss))), std::string::npos) << message;
  EXPECT_EQ(loss, 1.0);  // refused before the call: nothing was summed

  // The control: without the audit the same call goes through (MPI takes host memory).
  auto plain = make_mpi_comm(MPI_COMM_WORLD);
  plain->allreduce_sum(&loss, 1);
  EXPECT_EQ(loss, double(plain->size()));
}

TEST(PointerAudit, RefusesVectorsAndFreedViews) {
  auto comm = audited_world();
  std::vector<float> host(8, 1.0f);
  EXPECT_FALSE(refusal([&] { comm->allreduce_sum(host.data(), host.size()); }).empty());
  EXPECT_FALSE(refusal([&] { comm->allgather(host.data(), host.data(), 1); }).empty());
  float* freed = nullptr;
  {
    Buffer<float> gone("gone", 8);
    freed = gone.data();
  }
  EXPECT_FALSE(refusal([&] { comm->allreduce_sum(freed, 8); }).empty());
}

TEST(PointerAudit, PassesLiveViewsAndTheirSlices) {
  auto comm = audited_world();
  const Kokkos::View<double, MemSpace> scalar("loss");
  Kokkos::deep_copy(scalar, 2.0);
  comm->allreduce_sum(scalar.data(), 1);
  double sum = 0;
  Kokkos::deep_copy(sum, scalar);
  EXPECT_EQ(sum, 2.0 * comm->size());

  Buffer<float> buf("grads", 1000);
  Kokkos::deep_copy(buf, 1.0f);
  comm->allreduce_sum(buf.data() + 500, 500);  // a slice ending at the View's end
  comm->allreduce_sum(buf.data() + 999, 1);    // its last element
  // A range running past the View's end is refused.
  EXPECT_FALSE(refusal([&] { comm->allreduce_sum(buf.data() + 900, 1000); }).empty());
}

// The expert exchange's token counts travel in the backend's memory like every buffer: host vectors
// are refused, Views pass and arrive.
TEST(PointerAudit, AllToAllCountsAreTheBackendsMemory) {
  auto comm = audited_world();
  const std::size_t P = std::size_t(comm->size());
  std::vector<std::int64_t> host_send(P, comm->rank()), host_recv(P, -1);
  EXPECT_FALSE(refusal([&] { comm->alltoall(host_send.data(), host_recv.data(), 1); }).empty());
  const Kokkos::View<std::int64_t*, MemSpace> send("told", P), recv("heard", P);
  Kokkos::deep_copy(send, std::int64_t(comm->rank()));
  comm->alltoall(send.data(), recv.data(), 1);
  const auto heard = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), recv);
  for (std::size_t p = 0; p < P; ++p) EXPECT_EQ(heard(p), std::int64_t(p));
}

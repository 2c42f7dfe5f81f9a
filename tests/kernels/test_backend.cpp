// The backend the kernels run on: the one the build was meant to have (MESHTRAIN_TEST_KOKKOS, set
// by the `openmp` test preset), every one of its threads taking part in a kernel, and the
// trainer's start line and wait-policy warning.
#include "core/exec.hpp"
#include "core/kernel_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#if defined(KOKKOS_ENABLE_OPENMP)
#include <omp.h>
#endif

namespace meshtrain {
namespace test_backend {

// "OpenMP 2": the backend's name and its thread count.
TEST(KernelBackend, IsTheOneTheTestRunExpects) {
  const char* expected = std::getenv("MESHTRAIN_TEST_KOKKOS");
  if (expected == nullptr) GTEST_SKIP() << "MESHTRAIN_TEST_KOKKOS (e.g. \"OpenMP 2\") is not set";
  std::istringstream in(expected);
  std::string name;
  int threads = 0;
  in >> name >> threads;
  EXPECT_EQ(ExecSpace::name(), name);
  EXPECT_EQ(ExecSpace().concurrency(), threads);
  const std::string said = name + ", " + std::to_string(threads) + " thread";
  EXPECT_NE(kernel_backend_line().find(said), std::string::npos) << kernel_backend_line();
}

#if defined(KOKKOS_ENABLE_OPENMP)
// Which OpenMP thread ran each index of a range kernel, and each team of a team kernel (the
// row-wise kernels' policy): every thread of the backend must show up in both. Written for
// Kokkos::OpenMP itself, so that it compiles where OpenMP is only the host space.
TEST(KernelBackend, KernelsRunOnEveryThread) {
  if (!std::is_same_v<ExecSpace, Kokkos::OpenMP>) GTEST_SKIP() << "the default space is " << ExecSpace::name();
  const Kokkos::OpenMP space;
  const int threads = space.concurrency();
  constexpr int n = 1 << 14;
  Kokkos::View<int*, Kokkos::HostSpace> by_index("by_index", n), by_team("by_team", n);
  Kokkos::parallel_for("test::backend::range", Kokkos::RangePolicy<Kokkos::OpenMP>(space, 0, n),
                       [=](int i) { by_index(i) = omp_get_thread_num(); });
  using Team = Kokkos::TeamPolicy<Kokkos::OpenMP>::member_type;
  Kokkos::parallel_for(
      "test::backend::teams", Kokkos::TeamPolicy<Kokkos::OpenMP>(space, n, Kokkos::AUTO), [=](const Team& team) {
        Kokkos::single(Kokkos::PerTeam(team), [&]() { by_team(team.league_rank()) = omp_get_thread_num(); });
      });
  space.fence();
  const std::set<int> range_threads(by_index.data(), by_index.data() + n);
  const std::set<int> team_threads(by_team.data(), by_team.data() + n);
  EXPECT_EQ(int(range_threads.size()), threads);
  EXPECT_EQ(int(team_threads.size()), threads);
}

// The kernels' team_policy: Kokkos' size by default, MESHTRAIN_TEAM_SIZE threads (at most the
// concurrency) when set, and then every thread of a team takes part in a TeamThreadRange.
TEST(KernelBackend, TeamsHaveTheRequestedSize) {
  if (!std::is_same_v<ExecSpace, Kokkos::OpenMP>) GTEST_SKIP() << "the default space is " << ExecSpace::name();
  const ExecSpace space;
  const auto policy = team_policy(space, 4);
  const char* requested = std::getenv("MESHTRAIN_TEAM_SIZE");
  const int expected = requested != nullptr ? std::min(std::atoi(requested), space.concurrency())
                                            : Kokkos::TeamPolicy<ExecSpace>(space, 4, Kokkos::AUTO).team_size();
  ASSERT_EQ(policy.team_size(), expected);
  constexpr int width = 256;
  Kokkos::View<int*, Kokkos::HostSpace> by_thread("by_thread", 4 * width);
  using Team = Kokkos::TeamPolicy<ExecSpace>::member_type;
  Kokkos::parallel_for("test::backend::team_threads", policy, [=](const Team& team) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, width),
                         [&](int c) { by_thread(team.league_rank() * width + c) = team.team_rank(); });
  });
  space.fence();
  const std::set<int> ranks(by_thread.data(), by_thread.data() + 4 * width);
  EXPECT_EQ(int(ranks.size()), expected);
}
#endif

TEST(KernelBackend, StartLineNamesTheBackend) {
  const std::string line = kernel_backend_line();
  EXPECT_EQ(line.rfind("kernels: Kokkos ", 0), 0u) << line;
  EXPECT_NE(line.find(ExecSpace::name()), std::string::npos) << line;
}

TEST(KernelBackend, WaitPolicyWarningOnlyWhereOpenMPThreadsSpin) {
  EXPECT_TRUE(wait_policy_warning("OpenMP", 2, nullptr, nullptr).has_value());
  EXPECT_TRUE(wait_policy_warning("OpenMP", 2, "active", nullptr).has_value());
  EXPECT_TRUE(wait_policy_warning("OpenMP", 2, "ACTIVE", "300000").has_value());
  EXPECT_FALSE(wait_policy_warning("OpenMP", 2, "passive", nullptr).has_value());
  EXPECT_FALSE(wait_policy_warning("OpenMP", 2, "PASSIVE", nullptr).has_value());
  EXPECT_FALSE(wait_policy_warning("OpenMP", 2, nullptr, "0").has_value());
  EXPECT_FALSE(wait_policy_warning("OpenMP", 1, nullptr, nullptr).has_value()) << "one thread has no one to wait for";
  EXPECT_FALSE(wait_policy_warning("Serial", 1, nullptr, nullptr).has_value());
  EXPECT_FALSE(wait_policy_warning("Cuda", 2, nullptr, nullptr).has_value());
  const std::string unset = *wait_policy_warning("OpenMP", 4, nullptr, nullptr);
  EXPECT_NE(unset.find("OMP_WAIT_POLICY is unset"), std::string::npos) << unset;
  EXPECT_NE(unset.find("4 OpenMP threads"), std::string::npos) << unset;
  EXPECT_NE(unset.find("export OMP_WAIT_POLICY=passive"), std::string::npos) << unset;
  const std::string active = *wait_policy_warning("OpenMP", 2, "active", nullptr);
  EXPECT_NE(active.find("OMP_WAIT_POLICY is 'active'"), std::string::npos) << active;
}

}  // namespace test_backend
}  // namespace meshtrain

// The Kokkos Tools hook of tests/common/kokkos_counters.hpp against kernels whose counts are known:
// so that the step-count test's numbers (test_step_counts.cpp) can be trusted, and can fail.
#include "common/kokkos_counters.hpp"

#include "core/exec.hpp"
#include "core/host_waits.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace meshtrain::test {

// The kernels live in named functions, not in the TEST bodies nor in lambdas: CUDA's extended
// lambdas may not be defined in private member functions (gtest's TestBody) or in other lambdas.
namespace known_kernels {

void fill_and_reduce(const ExecSpace& space, const Buffer<double>& x, const Kokkos::View<double, MemSpace>& on_device,
                     double& on_host) {
  for (int i = 0; i < 3; ++i) {
    Kokkos::parallel_for(
        "test::for", Kokkos::RangePolicy<ExecSpace>(space, 0, 100), KOKKOS_LAMBDA(long j) { x(j) = double(j); });
  }
  for (int i = 0; i < 2; ++i) {
    Kokkos::parallel_reduce(
        "test::reduce_to_host", Kokkos::RangePolicy<ExecSpace>(space, 0, 100),
        KOKKOS_LAMBDA(long j, double& acc) { acc += x(j); }, on_host);
  }
  Kokkos::parallel_reduce(
      "test::reduce_to_view", Kokkos::RangePolicy<ExecSpace>(space, 0, 100),
      KOKKOS_LAMBDA(long j, double& acc) { acc += x(j); }, on_device);
  Kokkos::parallel_scan(
      "test::scan", Kokkos::RangePolicy<ExecSpace>(space, 0, 100), KOKKOS_LAMBDA(long j, double& partial, bool final) {
        partial += 1.0;
        if (final) x(j) = partial;
      });
  // Team-level reductions are not launches: one launch for the whole team kernel.
  Kokkos::parallel_for(
      "test::team", team_policy(space, 4), KOKKOS_LAMBDA(const Kokkos::TeamPolicy<ExecSpace>::member_type& t) {
        double s = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(t, 10), [&](int j, double& acc) { acc += x(j); }, s);
      });
}

void one_empty_kernel(const ExecSpace& space, const char* name) {
  Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(space, 0, 1), KOKKOS_LAMBDA(long){});
}

}  // namespace known_kernels

namespace test_kokkos_counters {

TEST(KokkosCounters, CountsKnownLaunchesReductionsAndDeepCopies) {
  ExecSpace space;
  Buffer<double> x("test::x", 100);
  Kokkos::View<double, MemSpace> sum_on_device("test::sum");
  auto host = Kokkos::create_mirror_view(x);
  double sum = 0;
  const KokkosCounts c = count_kokkos([&] {
    known_kernels::fill_and_reduce(space, x, sum_on_device, sum);
    Kokkos::deep_copy(host, x);  // one copy
    Kokkos::deep_copy(x, 0.0);   // one fill (a ViewFill kernel under some Kokkos versions, a memset under others)
  });
  EXPECT_EQ(sum, 4950.0);
  ASSERT_EQ(c.kernels.count("test::for"), 1u);
  EXPECT_EQ(c.kernels.at("test::for").fors, 3);
  EXPECT_EQ(c.kernels.at("test::for").launches(), 3);
  EXPECT_EQ(c.kernels.at("test::reduce_to_host").reduces, 2);
  EXPECT_EQ(c.kernels.at("test::reduce_to_host").host_reductions, 2);
  EXPECT_EQ(c.kernels.at("test::reduce_to_view").reduces, 1);
  // Kokkos 3.4 reports no fences: every reduce counts as returning to the host there.
  EXPECT_EQ(c.kernels.at("test::reduce_to_view").host_reductions, KokkosCounters::fences_reported() ? 0 : 1);
  EXPECT_EQ(c.kernels.at("test::scan").scans, 1);
  EXPECT_EQ(c.kernels.at("test::team").launches(), 1);
  EXPECT_EQ(c.reductions(), 3);
  EXPECT_EQ(c.deep_copy_count(), 2);
  EXPECT_EQ(c.deep_copies.count("test::x <- Scalar"), 1u);
  // Whatever the fill launched (ViewFill or nothing), the rest is exactly the kernels above.
  long others = 0;
  for (const auto& [name, k] : c.kernels) {
    if (name.rfind("test::", 0) != 0) others += k.launches();
  }
  EXPECT_EQ(c.launches(), 3 + 2 + 1 + 1 + 1 + others);
  EXPECT_LE(others, 1);
  // The table names them.
  const std::string table = format_counts(c);
  EXPECT_NE(table.find("test::reduce_to_host"), std::string::npos) << table;
  EXPECT_NE(table.find("deep_copy test::x <- Scalar"), std::string::npos) << table;
}

TEST(KokkosCounters, CountsFencesWhereKokkosReportsThem) {
  ExecSpace space;
  const KokkosCounts c = count_kokkos([&] {
#if KOKKOS_VERSION >= 30500
    Kokkos::fence("test::global fence");
    space.fence("test::instance fence");
#else
    Kokkos::fence();
    space.fence();
#endif
  });
  if (!KokkosCounters::fences_reported()) {
    EXPECT_EQ(c.fence_count(), 0);
    EXPECT_TRUE(c.fences.empty());
    return;
  }
  EXPECT_EQ(c.fences.count("test::global fence"), 1u);
  EXPECT_EQ(c.fences.at("test::instance fence"), 1);
  EXPECT_GE(c.global_fences, 1);  // one per execution space type
  EXPECT_EQ(c.instance_fences, 1);
}

TEST(KokkosCounters, ResetStartsFromZero) {
  ExecSpace space;
  KokkosCounters::install();
  known_kernels::one_empty_kernel(space, "test::before_reset");
  KokkosCounters::reset();
  EXPECT_EQ(KokkosCounters::counts().launches(), 0);
  known_kernels::one_empty_kernel(space, "test::after_reset");
  const KokkosCounts c = KokkosCounters::counts();
  EXPECT_EQ(c.launches(), 1);
  EXPECT_EQ(c.kernels.count("test::before_reset"), 0u);
}

TEST(KokkosCounters, CountsEachInstanceOfARegion) {
  ExecSpace space;
  KokkosCounters::install();
  KokkosCounters::count_regions("test::counted");
  known_kernels::one_empty_kernel(space, "test::outside");
  for (int instance = 1; instance <= 2; ++instance) {
    Kokkos::Profiling::pushRegion("test::counted");
    Kokkos::Profiling::pushRegion("test::nested");  // inside the counted one: counted with it
    for (int i = 0; i < instance; ++i) known_kernels::one_empty_kernel(space, "test::inside");
    report_host_wait("test::a wait");
    Kokkos::Profiling::popRegion();
    Kokkos::Profiling::popRegion();
    known_kernels::one_empty_kernel(space, "test::between");
  }
  Kokkos::Profiling::pushRegion("test::other");
  known_kernels::one_empty_kernel(space, "test::inside");
  Kokkos::Profiling::popRegion();
  const std::vector<KokkosCounts> instances = KokkosCounters::region_counts();
  ASSERT_EQ(instances.size(), 2u);
  for (int instance = 1; instance <= 2; ++instance) {
    const KokkosCounts& c = instances[std::size_t(instance - 1)];
    EXPECT_EQ(c.launches(), instance);
    EXPECT_EQ(c.kernels.size(), 1u) << "only the region's kernel";
    EXPECT_EQ(c.kernels.at("test::inside").fors, instance);
    EXPECT_EQ(c.host_waits.at("test::a wait"), 1);
  }
}

TEST(KokkosCounters, KnowsTheLiveAllocations) {
  KokkosCounters::install();
  const std::string space = MemSpace::name();
  const void* data = nullptr;
  {
    Buffer<float> v("test::live", 1000);
    data = v.data();
    const auto ranges = KokkosCounters::live_ranges(space);
    const auto found =
        std::find_if(ranges.begin(), ranges.end(), [](const LiveRange& r) { return r.label == "test::live"; });
    ASSERT_NE(found, ranges.end());
    EXPECT_LE(found->begin, reinterpret_cast<std::uintptr_t>(v.data()));
    EXPECT_GE(found->end, reinterpret_cast<std::uintptr_t>(v.data() + 1000));
    EXPECT_TRUE(KokkosCounters::inside_live_allocation(space, v.data(), 1000 * sizeof(float)));
    EXPECT_TRUE(KokkosCounters::inside_live_allocation(space, v.data() + 999, sizeof(float)));
    // Past the end (the allocation may be padded, but not by a page).
    EXPECT_FALSE(KokkosCounters::inside_live_allocation(space, v.data() + 999, 4096 + sizeof(float)));
    float on_stack = 0;
    EXPECT_FALSE(KokkosCounters::inside_live_allocation(space, &on_stack, sizeof on_stack));
    EXPECT_FALSE(KokkosCounters::inside_live_allocation("no such space", v.data(), 1));
  }
  EXPECT_FALSE(KokkosCounters::inside_live_allocation(space, data, 1));
  for (const LiveRange& r : KokkosCounters::live_ranges(space)) EXPECT_NE(r.label, "test::live");
}

}  // namespace test_kokkos_counters
}  // namespace meshtrain::test

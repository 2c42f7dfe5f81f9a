// Gathering and summarising per-rank step times.
#include "train/rank_timing.hpp"

#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <vector>

namespace meshtrain {

void RankTiming::add_step(double step_seconds, double comm_seconds, double idle_seconds) {
  compute_ += step_seconds - comm_seconds - idle_seconds;
  comm_ += comm_seconds;
  idle_ += idle_seconds;
  ++steps_;
}

std::string RankTiming::report(MPI_Comm comm, std::int64_t last_step, double ideal_idle) {
  const int rank = mpi::rank_of(comm), world = mpi::size_of(comm);
  const std::int64_t steps = steps_;
  const std::array<double, 3> mine = {compute_ / std::max<std::int64_t>(1, steps),
                                      comm_ / std::max<std::int64_t>(1, steps),
                                      idle_ / std::max<std::int64_t>(1, steps)};
  compute_ = comm_ = idle_ = 0;
  steps_ = 0;
  std::vector<double> all(rank == 0 ? 3 * world : 0);
  const WatchedWait watched(collective_ticket(comm, "gather", 3));
  MESHTRAIN_MPI_CHECK(MPI_Gather(mine.data(), 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, 0, comm),
                      "the timing table is collective: every rank must report the same steps");
  if (rank != 0 || steps == 0) return {};

  std::string out = fmt::format("per-rank time per step, steps {}–{} ({} rank{}): min / median / max, slowest rank\n",
                                last_step - steps + 1, last_step, world, world == 1 ? "" : "s");
  const char* names[] = {"compute", "communication", "idle"};
  for (int k = 0; k < 3; ++k) {
    std::vector<int> order(world);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return all[3 * a + k] < all[3 * b + k]; });
    const double lo = all[3 * order.front() + k], hi = all[3 * order.back() + k];
    const double median = world % 2 ? all[3 * order[world / 2] + k]
                                    : 0.5 * (all[3 * order[world / 2 - 1] + k] + all[3 * order[world / 2] + k]);
    out += fmt::format("  {:<14} {:8.4f} / {:8.4f} / {:8.4f} s   rank {}\n", names[k], lo, median, hi, order.back());
  }
  if (ideal_idle >= 0) {
    double idle = 0, total = 0;
    for (int r = 0; r < world; ++r) {
      idle += all[3 * r + 2];
      total += all[3 * r] + all[3 * r + 1] + all[3 * r + 2];
    }
    out += fmt::format("  pipeline idle: {:.1f} % of rank time, schedule bubble (p − 1)/(m + p − 1) = {:.1f} %\n",
                       100.0 * idle / std::max(total, 1e-12), 100.0 * ideal_idle);
  }
  return out;
}

}  // namespace meshtrain

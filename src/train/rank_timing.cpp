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
namespace {

// The measures in the order they are gathered; all-to-all sits after communication in the table.
enum Measure { compute, communication, idle, all_to_all, measures };

}  // namespace

void RankTiming::add_step(double step_seconds, double comm_seconds, double idle_seconds, double all_to_all_seconds) {
  compute_ += step_seconds - comm_seconds - idle_seconds - all_to_all_seconds;
  comm_ += comm_seconds;
  idle_ += idle_seconds;
  all_to_all_ += all_to_all_seconds;
  ++steps_;
}

std::string RankTiming::report(MPI_Comm comm, std::int64_t last_step, double ideal_idle) {
  const int rank = mpi::rank_of(comm), world = mpi::size_of(comm);
  const std::int64_t steps = steps_;
  const double divisor = double(std::max<std::int64_t>(1, steps));
  const std::array<double, measures> mine = {compute_ / divisor, comm_ / divisor, idle_ / divisor,
                                             all_to_all_ / divisor};
  compute_ = comm_ = idle_ = all_to_all_ = 0;
  steps_ = 0;
  std::vector<double> all(rank == 0 ? measures * world : 0);
  const WatchedWait watched(collective_ticket(comm, "gather", measures));
  MESHTRAIN_MPI_CHECK(MPI_Gather(mine.data(), measures, MPI_DOUBLE, all.data(), measures, MPI_DOUBLE, 0, comm),
                      "the timing table is collective: every rank must report the same steps");
  if (rank != 0 || steps == 0) return {};
  const auto at = [&](int r, int k) { return all[std::size_t(measures * r + k)]; };

  std::string out = fmt::format("per-rank time per step, steps {}–{} ({} rank{}): min / median / max, slowest rank\n",
                                last_step - steps + 1, last_step, world, world == 1 ? "" : "s");
  bool any_all_to_all = false;
  for (int r = 0; r < world; ++r) any_all_to_all = any_all_to_all || at(r, all_to_all) > 0;
  std::vector<std::pair<Measure, const char*>> rows = {{compute, "compute"}, {communication, "communication"}};
  if (any_all_to_all) rows.emplace_back(all_to_all, "all-to-all");
  rows.emplace_back(idle, "idle");
  for (const auto& [k, row_name] : rows) {
    std::vector<int> order(world);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return at(a, k) < at(b, k); });
    const double lo = at(order.front(), k), hi = at(order.back(), k);
    const double median =
        world % 2 ? at(order[world / 2], k) : 0.5 * (at(order[world / 2 - 1], k) + at(order[world / 2], k));
    out += fmt::format("  {:<14} {:8.4f} / {:8.4f} / {:8.4f} s   rank {}\n", row_name, lo, median, hi, order.back());
  }
  if (ideal_idle >= 0) {
    double idle_total = 0, total = 0;
    for (int r = 0; r < world; ++r) {
      idle_total += at(r, idle);
      double rank_total = 0;
      for (int k = 0; k < measures; ++k) rank_total += at(r, k);
      total += rank_total;
    }
    out += fmt::format("  pipeline idle: {:.1f} % of rank time, schedule bubble (p − 1)/(m + p − 1) = {:.1f} %\n",
                       100.0 * idle_total / std::max(total, 1e-12), 100.0 * ideal_idle);
  }
  return out;
}

}  // namespace meshtrain

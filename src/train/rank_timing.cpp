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

// The measures in the order they are gathered; all-to-all sits after communication in the table. After
// them: the pipeline stage's compute per action kind, and the stage.
enum Measure { compute, communication, idle, all_to_all, measures };
enum PipelineMeasure { forward_s = measures, backward_input_s, backward_weight_s, stage_index, gathered };

// "stage 0 1.20 / 2.10 / 0.90 ms": a stage's costs per micro-batch.
std::string costs_text(const std::vector<ScheduleCosts>& costs) {
  std::string out;
  for (std::size_t s = 0; s < costs.size(); ++s) {
    out += fmt::format("{}stage {} {:.2f} / {:.2f} / {:.2f} ms", s == 0 ? "" : ", ", s, 1e3 * costs[s].forward,
                       1e3 * costs[s].backward_input, 1e3 * costs[s].backward_weight);
  }
  return out;
}

}  // namespace

void RankTiming::add_step(double step_seconds, double comm_seconds, double idle_seconds, double all_to_all_seconds,
                          const ScheduleCosts& pipeline_compute) {
  compute_ += step_seconds - comm_seconds - idle_seconds - all_to_all_seconds;
  pipeline_.forward += pipeline_compute.forward;
  pipeline_.backward_input += pipeline_compute.backward_input;
  pipeline_.backward_weight += pipeline_compute.backward_weight;
  comm_ += comm_seconds;
  idle_ += idle_seconds;
  all_to_all_ += all_to_all_seconds;
  ++steps_;
}

std::string RankTiming::report(MPI_Comm comm, std::int64_t last_step, const PipelineTiming* pipeline) {
  const int rank = mpi::rank_of(comm), world = mpi::size_of(comm);
  const std::int64_t steps = steps_;
  const double divisor = double(std::max<std::int64_t>(1, steps));
  const std::array<double, gathered> mine = {compute_ / divisor,
                                             comm_ / divisor,
                                             idle_ / divisor,
                                             all_to_all_ / divisor,
                                             pipeline_.forward / divisor,
                                             pipeline_.backward_input / divisor,
                                             pipeline_.backward_weight / divisor,
                                             pipeline != nullptr ? double(pipeline->stage) : 0.0};
  compute_ = comm_ = idle_ = all_to_all_ = 0;
  pipeline_ = {};
  steps_ = 0;
  std::vector<double> all(rank == 0 ? gathered * world : 0);
  const WatchedWait watched(collective_ticket(comm, "gather", gathered));
  MESHTRAIN_MPI_CHECK(MPI_Gather(mine.data(), gathered, MPI_DOUBLE, all.data(), gathered, MPI_DOUBLE, 0, comm),
                      "the timing table is collective: every rank must report the same steps");
  const auto at = [&](int r, int k) { return all[std::size_t(gathered * r + k)]; };
  if (rank != 0 || steps == 0) return {};

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
  if (pipeline != nullptr) {
    double idle_total = 0, total = 0;
    for (int r = 0; r < world; ++r) {
      idle_total += at(r, idle);
      double rank_total = 0;
      for (int k = 0; k < measures; ++k) rank_total += at(r, k);
      total += rank_total;
    }
    out += fmt::format("  pipeline idle: {:.1f} % of rank time, {} (p − 1)/(m + p − 1) = {:.1f} %\n",
                       100.0 * idle_total / std::max(total, 1e-12), pipeline->bubble_name, 100.0 * pipeline->bubble);
    // Each stage's compute per micro-batch, its ranks' mean.
    std::vector<ScheduleCosts> costs(std::size_t(pipeline->stages));
    std::vector<int> ranks(std::size_t(pipeline->stages), 0);
    for (int r = 0; r < world; ++r) {
      const auto s = std::size_t(at(r, stage_index));
      costs[s].forward += at(r, forward_s);
      costs[s].backward_input += at(r, backward_input_s);
      costs[s].backward_weight += at(r, backward_weight_s);
      ++ranks[s];
    }
    for (std::size_t s = 0; s < costs.size(); ++s) {
      const double per = double(std::max(1, ranks[s])) * pipeline->micros;
      costs[s] = {costs[s].forward / per, costs[s].backward_input / per, costs[s].backward_weight / per};
    }
    out += fmt::format(
        "  simulated at each stage's compute per micro-batch (forward / backward or its input gradient / weight "
        "gradient): "
        "{:.1f} % idle ({})\n",
        100.0 * pipeline->simulated_idle(costs), costs_text(costs));
  }
  return out;
}

}  // namespace meshtrain

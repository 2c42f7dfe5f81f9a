// Summing the routers' statistics over the world, and what the step's figures say.
#include "train/moe_metrics.hpp"

#include "core/mpi_check.hpp"

#include <algorithm>

namespace meshtrain {
namespace {

// Each MoE block's fields in the world sum: routed (E), kept (E), aux, z, passes.
std::size_t fields(int experts) { return 2 * std::size_t(experts) + 3; }

}  // namespace

double MoeStepMetrics::max_relative_load() const {
  double most = 0;
  for (const MoeBlockLoad& b : blocks) {
    double total = 0;
    for (double r : b.routed) total += r;
    if (total > 0) most = std::max(most, b.max * double(b.routed.size()) / total);
  }
  return most;
}

double MoeStepMetrics::min_relative_load() const {
  double least = blocks.empty() ? 0 : 1e300;
  for (const MoeBlockLoad& b : blocks) {
    double total = 0;
    for (double r : b.routed) total += r;
    if (total > 0) least = std::min(least, b.min * double(b.routed.size()) / total);
  }
  return least == 1e300 ? 0 : least;
}

std::optional<MoeStepMetrics> step_moe_metrics(const RouterStatistics& local, const ModelConfig& model, bool counted,
                                               MPI_Comm world) {
  const int blocks = model.moe_blocks(), E = model.experts;
  if (blocks == 0) return std::nullopt;
  const std::size_t F = fields(E);
  // MoE block ordinal i is global block i · moe_every (ModelConfig::is_moe_block).
  std::vector<double> sums(std::size_t(blocks) * F, 0.0);
  if (counted) {
    for (std::size_t b = 0; b < local.blocks.size(); ++b) {
      double* out = sums.data() + std::size_t(local.blocks[b] / model.moe_every) * F;
      for (int e = 0; e < E; ++e) {
        out[e] = local.routed_at(b, e);
        out[E + e] = local.kept_at(b, e);
      }
      out[2 * E] = local.aux_loss[b];
      out[2 * E + 1] = local.z_loss[b];
      out[2 * E + 2] = double(local.passes) / double(model.context_parallel);
    }
  }
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), int(sums.size()), MPI_DOUBLE, MPI_SUM, world),
                      "summing the routers' statistics");
  MoeStepMetrics m;
  double routed_all = 0, kept_all = 0;
  for (int i = 0; i < blocks; ++i) {
    const double* in = sums.data() + std::size_t(i) * F;
    MoeBlockLoad b;
    b.block = i * model.moe_every;
    b.routed.assign(in, in + E);
    b.min = *std::min_element(b.routed.begin(), b.routed.end());
    b.max = *std::max_element(b.routed.begin(), b.routed.end());
    double routed = 0, kept = 0;
    for (int e = 0; e < E; ++e) {
      routed += in[e];
      kept += in[E + e];
    }
    b.dropped = routed > 0 ? (routed - kept) / routed : 0;
    routed_all += routed;
    kept_all += kept;
    const double passes = in[2 * E + 2];
    if (passes > 0) {
      m.aux_loss += in[2 * E] / passes;
      m.z_loss += in[2 * E + 1] / passes;
    }
    m.blocks.push_back(std::move(b));
  }
  m.dropped = routed_all > 0 ? (routed_all - kept_all) / routed_all : 0;
  return m;
}

}  // namespace meshtrain

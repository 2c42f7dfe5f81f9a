// The step's mixture-of-experts figures (share/docs/usage.md, Metrics file): every rank's router
// statistics summed over the world into per-block expert loads, the dropped fraction and the
// auxiliary losses, for the metrics record and the progress line.
#pragma once

#include "core/config.hpp"
#include "model/router_statistics.hpp"

#include <mpi.h>

#include <optional>
#include <vector>

namespace meshtrain {

struct MoeBlockLoad {
  int block = 0;               // global block index
  std::vector<double> routed;  // assignments routed to each expert in the step, before capacity
  double min = 0, max = 0;     // of routed, over the experts
  double dropped = 0;          // fraction of the block's assignments dropped
};

struct MoeStepMetrics {
  double aux_loss = 0;  // Σ over MoE blocks of the mean over the step's micro-batches (no coefficient)
  double z_loss = 0;    // the same for the router z-loss
  double dropped = 0;   // fraction of all the step's assignments dropped
  std::vector<MoeBlockLoad> blocks;
  // The most and least loaded expert of any block, relative to an even load (1: balanced).
  double max_relative_load() const;
  double min_relative_load() const;
};

// Collective over `world`: the step's figures from each rank's `local` statistics, of which the
// ranks with `counted` (one per tensor-parallel group: their routers saw the same tokens) add in. Under
// context parallelism (model.context_parallel) each micro-batch's pass runs on cp ranks, whose losses and
// counts are parts of the micro-batch's (kernels/moe_router.hpp): they add up, and the pass counts once.
// Empty when the model has no MoE block.
std::optional<MoeStepMetrics> step_moe_metrics(const RouterStatistics& local, const ModelConfig& model, bool counted,
                                               MPI_Comm world);

}  // namespace meshtrain

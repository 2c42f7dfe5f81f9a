// A plan (`meshtrain plan`): for a config, a layout and a cluster, every rank's memory by category
// and its predicted peak resident memory, the step time and whether the job fits; and the search
// over every layout of a world size.
//
// Memory comes from planned_rank_memory (plan/memory_plan.hpp), the sizing code of the trainer's
// own allocations, plus the measured runtime overhead (plan/runtime_overhead.hpp) and the token
// shards every rank maps; the step time from plan/step_time.hpp.
#pragma once

#include "core/config.hpp"
#include "core/memory_ledger.hpp"
#include "parallel/topology.hpp"
#include "plan/cluster.hpp"
#include "plan/step_time.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

struct RankPlan {
  int rank = 0;
  GridPosition position;
  MemoryBytes memory;              // the trainer's allocations, by category
  std::int64_t runtime_bytes = 0;  // MPI, BLAS, Kokkos, HDF5, the binary (measured model)
  std::int64_t data_bytes = 0;     // the mapped token shards
  // Predicted peak resident set of the process: on a host-only cluster everything above; on a GPU
  // cluster the runtime and the data (the categories live on the device).
  std::int64_t peak_rss = 0;
  // What the rank needs of its device: the categories plus the GPU reserve (host-only: peak_rss).
  std::int64_t device_bytes = 0;
};

// Ranks of one (pp, tp) position whose figures are all equal: one row of plan_table.
struct RankKind {
  RankPlan figures;              // those of the kind's first rank (figures.rank)
  std::vector<int> first_ranks;  // the kind's lowest ranks, at most four
  std::int64_t count = 0;        // ranks of the kind
};

struct Plan {
  Config cfg;
  Cluster cluster;
  Layout layout;
  int accum = 1;
  // Every global rank, in rank order, under RankCoverage::every (what plan --json prints); empty
  // under RankCoverage::ends, whose plans hold only the kinds.
  std::vector<RankPlan> ranks;
  std::vector<RankKind> kinds;  // in (pp, tp, figures) order
  std::int64_t max_peak_rss = 0, max_device_bytes = 0;
  StepTime step;  // the slowest stage's
  double tokens_per_step = 0;
  double tokens_per_s = 0;
  double model_flops_per_s = 0;  // (6N + 6LCT) · tokens/s, over the whole job (LoRA: lora_stage_flops)
  // Memory against capacity: per device (GPU) or per node (host-only: the node's ranks together,
  // the shared token pages once).
  std::int64_t needed_bytes = 0;    // the largest need
  std::int64_t capacity_bytes = 0;  // what one device or node has
  int limiting_rank = 0;            // the rank (GPU) or the first rank of the node (host) that needs the most
  bool fits = false;
};

// The largest world `plan` plans for: eight times the largest training jobs published (16384 GPUs
// for Llama 3 405B), and small enough that a plan's pass over its ranks stays within a second.
inline constexpr int max_plan_world = 1 << 17;

// Which ranks a plan lists: every one (Plan::ranks, what plan --json prints), or — for the table
// and the search, which print kinds of ranks — none, and under background saves (whose snapshot is
// the rank's own ZeRO share) data-parallel ranks 2 … dp−2 take dp rank 1's figures (they differ
// only where a ZeRO partition leaves a remainder, which falls to the first or last shard). Either
// way each rank's memory is computed once per (stage, tp rank, ep rank, node size) it shares with
// others, and a plan's pass over its ranks is a few integer operations a rank.
enum class RankCoverage { every, ends };

// The plan of the layout cfg.parallel asks for on `world` ranks. InputError when that layout does
// not fit the model or the world (Topology::resolve), when global_batch is not a whole number of
// micro_batch × dp, or when parallel.ep does not divide dp and model.experts.
Plan make_plan(const Config& cfg, int world, const Cluster& cluster, RankCoverage coverage = RankCoverage::every);

// Full fine-tuning of a LoRA plan's model (its config without [lora]: full_training,
// plan/lora_plan.hpp) on the same world, cluster, layout and micro-batch: what `plan` puts beside it.
Plan full_training_plan(const Plan& lora, RankCoverage coverage = RankCoverage::every);

// Every (dp, tp, pp) with dp·tp·pp = world that Topology::resolve accepts, whose accumulation is
// whole and whose dp parallel.ep divides (the search keeps ep as the config gives it), each with tp > 1
// also under sequence parallelism where tp divides the micro-batch's token rows, ranked by predicted
// step time (fastest first); memory with RankCoverage::ends.
std::vector<Plan> search_layouts(const Config& cfg, const Cluster& cluster, int world);

// The (dp, tp, pp) candidates search_layouts considers, before ranking, in (tp, pp) order.
std::vector<Layout> valid_layouts(const Config& cfg, int world);

}  // namespace meshtrain

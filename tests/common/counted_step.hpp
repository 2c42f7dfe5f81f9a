// Real training steps on one rank, counted by the Kokkos Tools hook (common/kokkos_counters.hpp),
// and the per-step budgets of issue 23 they are held to. test_step_counts and bench_step_counts
// share it.
#pragma once

#include "common/kokkos_counters.hpp"
#include "core/config.hpp"

#include <string>
#include <vector>

namespace meshtrain::test {

// Builds the state, the groups (MPI backend on the stream stand-in, one rank) and a loader over a synthetic token shard
// written under `workdir`, runs `warmup` steps uncounted and then returns the counts of each of
// the next `counted` steps. cfg.train.global_batch / micro_batch micro-batches per step.
std::vector<KokkosCounts> count_training_steps(const Config& cfg, const std::string& workdir, int warmup = 1,
                                               int counted = 1);

// Issue 23's budgets for one step of `model` with `accum` micro-batches (GEMM calls are not Kokkos
// launches and so not counted):
//   launches            ≤ 30 per dense block + 50 per MoE block + 20
//   reductions + copies ≤ 3 per micro-batch + 3, + 1 routing read per MoE block and micro-batch
// "reductions" are all top-level parallel_reduce launches (as the issue counts them, 149 today),
// whether or not their result returns to the host.
//   host waits          ≤ 1 + 1 routing read per MoE block and micro-batch, on one rank with the
//                       collectives on the stream stand-in (core/host_waits.hpp: fences and request
//                       waits, by reason): the step's one read of the loss and the gradient norm, and
//                       the routing reads that issue 42's device-side MoE is to remove
struct StepBudget {
  long launches = 0;
  long reductions_and_copies = 0;
  long host_waits = 0;
};
StepBudget step_budget(const ModelConfig& model, int accum);

// What a step's counts exceed its budget by (0: within), item by item.
struct BudgetExcess {
  long launches = 0;
  long reductions_and_copies = 0;
  long host_waits = 0;
  bool within() const { return launches <= 0 && reductions_and_copies <= 0 && host_waits <= 0; }
};
BudgetExcess budget_excess(const KokkosCounts& counts, const StepBudget& budget);

}  // namespace meshtrain::test

// Where each rank's step time goes: compute, communication, (with expert parallelism) all-to-all
// and (with pipelines) idle, per step, summarised over ranks as min / median / max with the
// slowest rank named, as a user reads it to find the straggler or the collective that dominates.
#pragma once

#include "parallel/pipeline_schedule.hpp"

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace meshtrain {

// What the table says of a pipeline: the bubble of 1F1B and GPipe, (p − 1)/(m + p − 1), and the idle
// fraction the rank's schedule would have at the compute each stage measured.
struct PipelineTiming {
  double bubble = 0;
  const char* bubble_name = "schedule bubble";  // what the closed form is of, for this schedule
  int stage = 0;                                // this rank's
  int stages = 1;
  int micros = 1;  // micro-batches per step: each stage runs that many of each compute action
  // The schedule's idle fraction (simulate_schedule's) at each stage's costs per micro-batch.
  std::function<double(const std::vector<ScheduleCosts>&)> simulated_idle;
};

class RankTiming {
 public:
  // Adds one step: its wall time and the parts spent in communication (all-to-alls apart), idle
  // and in all-to-alls; compute is the rest. `pipeline_compute`: a pipeline stage's seconds in each kind of
  // compute action over the step (a whole backward's as backward_input).
  void add_step(double step_seconds, double comm_seconds, double idle_seconds = 0, double all_to_all_seconds = 0,
                const ScheduleCosts& pipeline_compute = {});
  // Collective over `comm`: the table of the steps added since the last call (first_step … last),
  // as rank 0 prints it ("" on other ranks and when no step was added). Resets the totals. The
  // all-to-all row appears when some rank spent time in one. With a pipeline, the measured idle
  // fraction beside the closed form, and beside the schedule simulated at each stage's mean compute per
  // micro-batch (its ranks' mean).
  std::string report(MPI_Comm comm, std::int64_t last_step, const PipelineTiming* pipeline = nullptr);

 private:
  double compute_ = 0, comm_ = 0, idle_ = 0, all_to_all_ = 0;
  ScheduleCosts pipeline_;
  std::int64_t steps_ = 0;
};

}  // namespace meshtrain

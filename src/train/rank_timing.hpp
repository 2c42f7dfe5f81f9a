// Where each rank's step time goes: compute, communication, (with expert parallelism) all-to-all
// and (with pipelines) idle, per step, summarised over ranks as min / median / max with the
// slowest rank named, as a user reads it to find the straggler or the collective that dominates.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

namespace meshtrain {

class RankTiming {
 public:
  // Adds one step: its wall time and the parts spent in communication (all-to-alls apart), idle
  // and in all-to-alls; compute is the rest.
  void add_step(double step_seconds, double comm_seconds, double idle_seconds = 0, double all_to_all_seconds = 0);
  // Collective over `comm`: the table of the steps added since the last call (first_step … last),
  // as rank 0 prints it ("" on other ranks and when no step was added). Resets the totals. The
  // all-to-all row appears when some rank spent time in one. With a pipeline, `ideal_idle` is the
  // schedule's bubble (p − 1)/(m + p − 1), printed beside the measured idle fraction (negative: no
  // pipeline).
  std::string report(MPI_Comm comm, std::int64_t last_step, double ideal_idle = -1);

 private:
  double compute_ = 0, comm_ = 0, idle_ = 0, all_to_all_ = 0;
  std::int64_t steps_ = 0;
};

}  // namespace meshtrain

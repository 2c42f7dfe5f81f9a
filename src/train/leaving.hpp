// Leaving before train.steps: on a signal, after train.stop_after steps of this job, or while one
// more step and a save still fit in train.time_limit; every rank leaves at the same step boundary.
#pragma once

#include "core/config.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>

namespace meshtrain {

// Why this rank would leave after `steps_this_job` steps, or nothing.
std::string reason_to_leave(const Config& cfg, std::int64_t steps_this_job, double elapsed_s, double longest_step_s,
                            double last_save_s);

// What every rank does after a step.
struct Leaving {
  bool leave = false;       // leave at this step boundary, saving first
  bool log_failed = false;  // because a log output could not be written: exit_code::log_failed
  std::string reason;       // this rank's account of why (another rank's when it has none)
};

// Every rank leaves at the same step boundary: if any rank has a reason (a signal reaches ranks at
// different moments, clocks differ) or could not write a log (`log_failure`, rank 0's), all leave.
// Collective over `comm`.
Leaving agree_to_leave(MPI_Comm comm, const std::string& mine, const std::string& log_failure);

}  // namespace meshtrain

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

// Every rank leaves at the same step boundary: if any rank has a reason (a signal reaches ranks at
// different moments, clocks differ), all leave. Returns this rank's account of why (another rank's
// when it has none), or nothing. Collective over `comm`.
std::string agree_to_leave(MPI_Comm comm, const std::string& mine);

}  // namespace meshtrain

// The training loop on one rank: data → forward → backward (accumulating) → clip → AdamW → metrics
// → checkpoints, with exact resumption and leaving in time (signals, stop_after, time_limit).
#pragma once

#include "core/config.hpp"

#include <mpi.h>

namespace meshtrain {

// Runs `meshtrain train` to its end or until the job must leave; returns the exit code
// (exit_code::finished or exit_code::requeue). Bad input throws InputError before anything is written.
int train(const Config& config, MPI_Comm comm);

}  // namespace meshtrain

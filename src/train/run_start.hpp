// Where a training run starts: a checkpoint to resume (checkpoint.resume), initial weights
// (checkpoint.init_weights), or a fresh initialisation from train.seed.
#pragma once

#include "checkpoint/checkpointer.hpp"
#include "core/config.hpp"
#include "state/model_state.hpp"
#include "train/data_order.hpp"

#include <mpi.h>

namespace meshtrain {

struct RunStart {
  TrainingProgress progress;     // the step the run continues from (0 when fresh)
  double initialization_s = -1;  // seconds of the fresh initialisation; -1 when the weights were loaded
};

// Checks checkpoint.dir (checkpoint/dir_checks.hpp), loads or initialises `state`, restores
// the loss scaler and moves `order` to the start. A directory or checkpoint that cannot be used is
// an AgreedInputError on every rank before anything is written, except that the checkpoint
// directory is made. Collective over `comm`.
RunStart start_run(const Config& cfg, MPI_Comm comm, Checkpointer& checkpointer, ModelState& state, DataOrder& order);

}  // namespace meshtrain

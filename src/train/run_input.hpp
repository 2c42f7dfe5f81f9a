// The input of a training run, agreed by every rank before anything is written: the grid, the
// gradient accumulation, the tokenizer, the training data and its order, and outputs that spare them.
#pragma once

#include "checkpoint/attributes.hpp"
#include "core/config.hpp"
#include "parallel/topology.hpp"
#include "train/training_data.hpp"

#include <mpi.h>

#include <optional>

namespace meshtrain {

struct RunInput {
  Layout grid;
  int accum = 0;              // micro-batches per rank per step
  TokenizerRecord tokenizer;  // data.tokenizer and its hash, the same on every rank (empty: byte-level)
  TrainingData data;
  std::optional<TrainingData> valid;  // data.valid (Validation), when set
};

// Everything that can reject the configuration or the data, checked on every rank; a refusal is an
// AgreedInputError on all of them (core/agreement.hpp), before any file is written.
RunInput agree_on_run_input(const Config& cfg, MPI_Comm comm);

}  // namespace meshtrain

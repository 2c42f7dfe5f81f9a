// Saving and loading training state (interface section 3) through io/'s layout-free HDF5 files.
//
// The model side of the contract lives here: which tensors a checkpoint holds (/model, and the
// AdamW moments under /optim), the root attributes, and the checks that a file fits the config.
// Everything below the tensor records is io/'s business.
#pragma once

#include "core/config.hpp"
#include "model/parameters.hpp"
#include "train/state_source.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>

namespace meshtrain {

inline constexpr const char* checkpoint_format = "meshtrain-checkpoint";
inline constexpr std::int64_t checkpoint_version = 1;

// What a checkpoint carries besides tensors. Data position and the schedule derive from `step`.
struct TrainingProgress {
  std::int64_t step = 0;    // completed optimizer steps
  std::int64_t tokens = 0;  // tokens consumed so far
  // fp16's dynamic loss scale and its count of clean steps (0: none stored, start afresh).
  double loss_scale = 0;
  std::int64_t loss_scale_clean_steps = 0;
};

// The flat states a checkpoint holds, as sources that know how each is stored (whole or sharded).
struct TrainingTensors {
  StateSource& weights;
  StateSource& exp_avg;
  StateSource& exp_avg_sq;
};

class Checkpointer {
 public:
  // Collective over `comm`. Ranks with writes_data write the tensors; the others (replicas, such as
  // data-parallel ranks other than the first) take part with empty pieces.
  Checkpointer(const Config& config, const ParameterLayout& layout, MPI_Comm comm, bool writes_data = true);

  // Writes <dir>/step_<step>.h5 (never visible under that name half-written), points `latest` at
  // it and prunes old ones. Returns the path written.
  std::string save(const TrainingTensors& state, const TrainingProgress& progress);

  // The checkpoint `checkpoint.resume` asks for, or "" for a fresh start.
  std::string resume_path() const;
  // Restores weights, moments and progress from `path`; the model shape must match the config.
  TrainingProgress load(const std::string& path, const TrainingTensors& state);
  // Loads only /model from `path` (checkpoint.init_weights, or any checkpoint).
  void load_weights(const std::string& path, StateSource& weights);
  void load_weights(const std::string& path, Vec<float> weights);

 private:
  const Config& config_;
  const ParameterLayout& layout_;
  MPI_Comm comm_;
  bool writes_data_;
};

// Reads the resolved config stored in a checkpoint (for sample and inspect).
Config read_checkpoint_config(const std::string& path, MPI_Comm comm);

}  // namespace meshtrain

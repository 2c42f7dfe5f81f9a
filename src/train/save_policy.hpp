// When the training loop saves a checkpoint, and how: every checkpoint.every steps, at the last
// step, and when the job leaves early; in the background (checkpoint.async) except the job's last
// save, which must be complete before the job leaves.
#pragma once

#include "core/config.hpp"
#include "train/checkpointing.hpp"
#include "train/model_state.hpp"

namespace meshtrain {

class SavePolicy {
 public:
  // Says so (rank 0) when checkpoint.async asks for background saves that this MPI cannot do.
  SavePolicy(const Config& cfg, Checkpointer& checkpointer, bool leader);

  bool background_saves() const { return background_saves_; }
  // The longest a save held training so far (seconds): what leaving in time must leave room for.
  double last_save_s() const { return last_save_s_; }

  // After a step: reports a background save that has finished, then saves if this step is one to
  // save at. Collective.
  void after_step(ModelState& state, TrainingProgress& progress, bool finished, bool leaving);

 private:
  void report_background_save();

  const Config& cfg_;
  Checkpointer& checkpointer_;
  const bool leader_;
  const bool background_saves_;
  double last_save_s_ = 0;
};

}  // namespace meshtrain

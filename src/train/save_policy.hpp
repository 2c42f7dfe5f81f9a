// When the training loop saves a checkpoint, and how: every checkpoint.every steps, at the last
// step, and when the job leaves early; in the background (checkpoint.async) except the job's last
// save, which must be complete before the job leaves. And what a save that cannot be written does
// (share/docs/usage.md, A full disk during a save): a periodic one warns and training goes on to
// the next save; the job's last save failing, or two saves in a row, ends the job (exit code 4).
#pragma once

#include "checkpoint/checkpointer.hpp"
#include "core/config.hpp"
#include "state/model_state.hpp"

#include <functional>
#include <string>
#include <vector>

namespace meshtrain {

// What the loop does after a step's saving.
enum class SaveOutcome { go_on, give_up };

class SavePolicy {
 public:
  // Says so (rank 0) when checkpoint.async asks for background saves that this MPI cannot do.
  SavePolicy(const Config& cfg, Checkpointer& checkpointer, bool leader);

  bool background_saves() const { return background_saves_; }
  // The longest a save held training so far (seconds): what leaving in time must leave room for.
  double last_save_s() const { return last_save_s_; }

  // After a step: reports a background save that has ended, then saves if this step is one to
  // save at (`leaving`: the job leaves after it). give_up (the same on every rank) when the job
  // must end with exit_code::save_failed; the failure's message is printed once either way.
  // Collective.
  SaveOutcome after_step(ModelState& state, TrainingProgress& progress, bool finished, bool leaving);

 private:
  struct Failure {
    std::string message;
    bool reporter;  // this rank prints it
  };
  // Runs one part of saving; a failed write is counted and kept for verdict(). Whether it worked.
  bool attempt(const std::function<void()>& part);
  void report_background_save();
  // Prints what failed since the last verdict, and whether the job ends.
  SaveOutcome verdict(bool last_save_failed);

  const Config& cfg_;
  Checkpointer& checkpointer_;
  const bool leader_;
  const bool background_saves_;
  double last_save_s_ = 0;
  int failures_in_a_row_ = 0;
  std::vector<Failure> failures_;  // learned since the last verdict
};

}  // namespace meshtrain

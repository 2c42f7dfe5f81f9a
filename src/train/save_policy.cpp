// The training loop's checkpoint saves: when, in the background or not, and their log lines.
#include "train/save_policy.hpp"

#include "io/checkpoint_dir.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace meshtrain {

SavePolicy::SavePolicy(const Config& cfg, Checkpointer& checkpointer, bool leader)
    : cfg_(cfg),
      checkpointer_(checkpointer),
      leader_(leader),
      background_saves_(cfg.checkpoint.async && checkpointer.background_possible()) {
  if (cfg.checkpoint.async && !background_saves_ && leader_) {
    fmt::print("checkpoint.async: this MPI library does not provide MPI_THREAD_MULTIPLE; saving synchronously\n");
  }
}

void SavePolicy::report_background_save() {
  if (!background_saves_) return;
  if (const auto done = checkpointer_.poll()) {
    last_save_s_ = std::max(last_save_s_, done->write_s);
    if (leader_) fmt::print("saved {} in the background ({:.3f}s)\n", done->path, done->write_s);
  }
}

void SavePolicy::after_step(ModelState& state, TrainingProgress& progress, bool finished, bool leaving) {
  report_background_save();
  const bool periodic = cfg_.checkpoint.every > 0 && progress.step % cfg_.checkpoint.every == 0;
  if (!finished && !periodic && !leaving) return;
  // The job's last save is synchronous: it must be complete before the job leaves.
  const bool background = background_saves_ && !finished && !leaving;
  state.save_scaler(progress);
  const std::string path = io::checkpoint_path(cfg_.checkpoint.dir, progress.step);
  const auto save_start = std::chrono::steady_clock::now();
  checkpointer_.wait();  // the previous background save, reported first
  report_background_save();
  checkpointer_.save(state.checkpoint_tensors(), progress, background);
  const double held_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - save_start).count();
  if (background) {
    if (leader_) fmt::print("saving {} in the background (training held {:.3f}s)\n", path, held_s);
  } else {
    last_save_s_ = held_s;
    if (leader_) fmt::print("saved {} ({:.3f}s)\n", path, held_s);
  }
}

}  // namespace meshtrain

// The training loop's checkpoint saves: when, in the background or not, their log lines, and what
// a failed one does to the job.
#include "train/save_policy.hpp"

#include "core/errors.hpp"
#include "io/checkpoint/directory.hpp"
#include "io/checkpoint/file.hpp"

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

bool SavePolicy::attempt(const std::function<void()>& part) {
  try {
    part();
    return true;
  } catch (const io::WriteFailed& e) {
    ++failures_in_a_row_;
    failures_.push_back(Failure{e.what(), e.reporter()});
    return false;
  }
}

void SavePolicy::report_background_save() {
  if (!background_saves_) return;
  if (const auto done = checkpointer_.poll()) {
    failures_in_a_row_ = 0;
    last_save_s_ = std::max(last_save_s_, done->write_s);
    if (leader_) fmt::print("saved {} in the background ({:.3f}s)\n", done->path, done->write_s);
  }
}

SaveOutcome SavePolicy::after_step(ModelState& state, TrainingProgress& progress, bool finished, bool leaving) {
  attempt([&] { report_background_save(); });
  const bool periodic = cfg_.checkpoint.every > 0 && progress.step % cfg_.checkpoint.every == 0;
  if (!finished && !periodic && !leaving) return verdict(false);
  // The job's last save is synchronous: it must be complete before the job leaves.
  const bool background = background_saves_ && !finished && !leaving;
  state.save_scaler(progress);
  const std::string path = io::checkpoint_path(cfg_.checkpoint.dir, progress.step);
  const auto save_start = std::chrono::steady_clock::now();
  attempt([&] { checkpointer_.wait(); });  // the previous background save, reported first
  attempt([&] { report_background_save(); });
  if (failures_in_a_row_ >= 2) return verdict(false);  // no third try
  const bool saved = attempt([&] { checkpointer_.save(state.checkpoint_tensors(), progress, background); });
  const double held_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - save_start).count();
  if (saved && background) {
    if (leader_) fmt::print("saving {} in the background (training held {:.3f}s)\n", path, held_s);
  } else if (saved) {
    failures_in_a_row_ = 0;
    last_save_s_ = held_s;
    if (leader_) fmt::print("saved {} ({:.3f}s)\n", path, held_s);
  }
  return verdict(!saved && (finished || leaving));
}

SaveOutcome SavePolicy::verdict(bool last_save_failed) {
  if (failures_.empty()) return SaveOutcome::go_on;
  const bool give_up = last_save_failed || failures_in_a_row_ >= 2;
  for (std::size_t i = 0; i < failures_.size(); ++i) {
    const Failure& f = failures_[i];
    if (!f.reporter) continue;
    if (give_up && i + 1 == failures_.size()) {
      fmt::print(stderr,
                 "meshtrain train: error: {}\n{}: the job ends (exit code {}); `latest` still names the last "
                 "checkpoint saved: make room, then resume with checkpoint.resume = auto\n",
                 f.message, last_save_failed ? "the job's last save failed" : "two saves in a row failed",
                 exit_code::save_failed);
    } else {
      fmt::print(stderr, "meshtrain train: warning: {}\ntraining goes on, and the next save tries again\n", f.message);
    }
  }
  std::fflush(stderr);
  failures_.clear();
  return give_up ? SaveOutcome::give_up : SaveOutcome::go_on;
}

}  // namespace meshtrain

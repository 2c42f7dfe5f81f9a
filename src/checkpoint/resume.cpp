// Checkpointer::resume_candidates: which checkpoints `checkpoint.resume` offers, best first.
#include "checkpoint/checkpointer.hpp"

#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/checkpoint/directory.hpp"

#include <fmt/format.h>

#include <filesystem>

namespace meshtrain {

std::vector<std::string> Checkpointer::resume_candidates() const {
  const std::string& resume = config_.checkpoint.resume.file;
  if (config_.checkpoint.resume.mode == ResumeMode::never) return {};
  if (config_.checkpoint.resume.mode == ResumeMode::file) {
    if (!std::filesystem::exists(resume)) {
      input_error("checkpoint.resume = '{}': no such file (valid: auto, never, or an existing checkpoint file)",
                  resume);
    }
    return {resume};
  }
  const std::string& dir = config_.checkpoint.dir;
  if (!std::filesystem::is_directory(dir)) return {};
  std::vector<std::string> candidates;
  std::string broken_latest;
  try {
    if (auto latest = io::read_latest(dir)) {
      candidates.push_back(*latest);
    } else if (!io::checkpoints_newest_first(dir).empty()) {
      // A job killed between its first checkpoint's rename and the first `latest`: that file is
      // complete (fsynced before the rename), and its checksums are verified as it loads.
      broken_latest = fmt::format("{}/latest does not exist", dir);
    }
  } catch (const InputError& e) {
    // A damaged `latest` is one more reason to fall back; the files themselves may be fine.
    broken_latest = e.what();
  }
  for (const std::string& path : io::checkpoints_newest_first(dir)) {
    if (candidates.empty() || !std::filesystem::equivalent(path, candidates.front())) candidates.push_back(path);
  }
  if (!broken_latest.empty()) {
    // A directory that had a `latest` had checkpoints: never start afresh over them unasked.
    if (candidates.empty()) {
      input_error(
          "checkpoint.resume = auto: {}; there is no other checkpoint in {} to fall back to\nHINT: delete "
          "{}/latest to start afresh",
          broken_latest, dir, dir);
    }
    int rank = 0;
    MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm_, &rank), "is the communicator valid?");
    if (rank == 0) fmt::print("checkpoint.resume = auto: {}; falling back to {}\n", broken_latest, candidates.front());
  }
  return candidates;
}

}  // namespace meshtrain

// The start-up checks of checkpoint.dir (checkpoint/dir_checks.hpp).
#include "checkpoint/dir_checks.hpp"

#include "core/errors.hpp"
#include "io/checkpoint/directory.hpp"
#include "io/checkpoint/storage_space.hpp"
#include "io/output_guard.hpp"

#include <fmt/format.h>

#include <filesystem>

namespace meshtrain {
namespace {

namespace fs = std::filesystem;

// A resume that never reads the directory must not write over what is in it.
void refuse_foreign_checkpoints(const std::string& dir) {
  const std::vector<std::string> found = io::checkpoints_newest_first(dir);
  std::error_code ec;
  const std::string latest = io::latest_path(dir);
  const std::string example = !found.empty() ? found.front() : fs::exists(latest, ec) ? latest : std::string();
  if (example.empty()) return;
  input_error(
      "checkpoint.resume = never, but checkpoint.dir {} already holds {}: this run's saves would replace "
      "another run's checkpoints\nHINT: give this run its own checkpoint.dir, or continue that run with "
      "checkpoint.resume = auto",
      dir, example);
}

// The bytes the directory's checkpoints take already: room they hold for the ones to come.
std::uint64_t bytes_of_checkpoints(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const std::string& path : io::checkpoints_newest_first(dir)) {
    const auto size = fs::file_size(path, ec);
    if (!ec) total += size;
  }
  return total;
}

void require_room(const std::string& dir, std::uint64_t checkpoint_bytes, int keep) {
  const auto free = io::free_bytes(dir);
  if (!free || checkpoint_bytes == 0) return;  // no statvfs here: the saves will tell
  if (*free < checkpoint_bytes) {
    input_error(
        "checkpoint.dir {}: a checkpoint of this model needs {}, but statvfs reports {} free on its file "
        "system\nHINT: make room there, or choose a checkpoint.dir with more space",
        dir, io::describe_bytes(checkpoint_bytes), io::describe_bytes(*free));
  }
  const std::uint64_t room = (*free + bytes_of_checkpoints(dir)) / checkpoint_bytes;
  if (keep > 0 && room < std::uint64_t(keep) + 1) {
    fmt::print(
        "warning: checkpoint.dir {} has room for {} checkpoint(s) of {} ({} free), fewer than "
        "checkpoint.keep + 1 = {}: a later save may fail (share/docs/usage.md, A full disk during a save)\n",
        dir, room, io::describe_bytes(checkpoint_bytes), io::describe_bytes(*free), keep + 1);
  }
}

}  // namespace

void check_checkpoint_dir(const Config& cfg, std::uint64_t checkpoint_bytes) {
  const std::string& dir = cfg.checkpoint.dir;
  if (cfg.checkpoint.resume.mode == ResumeMode::never) refuse_foreign_checkpoints(dir);
  io::require_writable_directory("checkpoint.dir", dir);
  require_room(dir, checkpoint_bytes, cfg.checkpoint.keep);
}

}  // namespace meshtrain

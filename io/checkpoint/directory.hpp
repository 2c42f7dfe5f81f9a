// Conventions of a checkpoint directory (share/docs/usage.md, Checkpoints):
//
//   <dir>/step_00000100.h5   one complete checkpoint per saved step (8-digit step, zero-padded)
//   <dir>/latest             one line: the file name of the newest complete checkpoint
//
// These functions touch the file system directly and know nothing of MPI: in a parallel run only
// one rank (global rank 0) should call write_latest, prune_checkpoints and ensure_directory, and
// the caller broadcasts or barriers as needed. read_latest may be called by any rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshtrain::io {

// "<dir>/step_%08d.h5" (just the file name if dir is empty). step must be >= 0.
std::string checkpoint_path(const std::string& dir, std::int64_t step);

// The step in a checkpoint file name such as "step_00000100.h5" (any directory part is ignored),
// or nothing if the name does not follow the convention.
std::optional<std::int64_t> checkpoint_step(const std::string& path);

// The full path (<dir>/<name>) of the checkpoint that <dir>/latest names, or nothing if there is
// no `latest` file (or no directory). Throws InputError if `latest` is empty, names something
// other than a plain file name, or names a file that does not exist.
std::optional<std::string> read_latest(const std::string& dir);

// "<dir>/latest", whether or not it exists.
std::string latest_path(const std::string& dir);

// Atomically (temporary file + rename) makes <dir>/latest name checkpoint_file, which may be given
// as a path or a file name; only its file name is stored.
void write_latest(const std::string& dir, const std::string& checkpoint_file);

// The step_*.h5 files of dir (full paths), newest step first; empty if there is no such directory.
std::vector<std::string> checkpoints_newest_first(const std::string& dir);

// Deletes all but the newest `keep` step_*.h5 files in dir (keep <= 0 keeps all), ordered by
// step; the file `latest` names is never deleted, whatever its age. Also deletes step_*.h5.tmp
// files that a killed job left behind (call it when no save is in flight). Other files are untouched.
void prune_checkpoints(const std::string& dir, int keep);

// Whether a file of this name in a checkpoint directory is one its saves write, replace or delete:
// step_*.h5 and `latest`, and their temporaries (step_*.h5.tmp, latest.tmp).
bool written_by_saves(const std::string& file_name);

// Creates dir (and its parents) if needed. Throws InputError if the path exists but is not a
// directory, or cannot be created.
void ensure_directory(const std::string& dir);

}  // namespace meshtrain::io

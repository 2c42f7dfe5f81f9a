// The one guard of every file meshtrain writes (share/docs/usage.md, Outputs that never destroy a
// file): the commands' --out, the trainer's log.metrics and log.traffic, and the files of
// checkpoint.dir. Checked before anything is read or written, so that a refused command or run
// leaves every file as it was and no temporary behind.
#pragma once

#include "io/file_kind.hpp"

#include <string>
#include <vector>

namespace meshtrain::io {

// A file the command or the run reads, named by the key or option that names it ("data.train").
struct NamedPath {
  std::string label;
  std::string path;
};

// A file the command or the run writes.
struct Output {
  std::string label;  // the key or option that names it: "--out", "log.metrics"
  std::string path;
  FileKind kind;                              // what is written there: an existing file must be of this kind, or empty
  bool appends = false;                       // appended to (log.metrics) rather than replaced
  std::vector<std::string> temporaries = {};  // what the writer creates on its way to `path`
};

// Whether `a` and `b` are the same file: std::filesystem::equivalent where both exist (so also
// through symbolic and hard links), the same absolute path (symbolic links of its directories
// resolved) otherwise.
bool same_file(const std::string& a, const std::string& b);

// Throws InputError naming out.label and out.path unless out.path and every one of its temporaries
//   - is none of `inputs` (same_file): writing would destroy what is being read;
//   - is not a directory or other non-regular file, where it exists;
//   - where it exists and is not empty, is a file of out.kind (file_kind: an HDF5 file, a token
//     shard, a tokenizer model, a safetensors file, a metrics or traffic log, a text are each
//     replaced or appended to only by the writer of their kind); a temporary may also be of no
//     known kind (what a killed writer left).
void require_safe_output(const Output& out, const std::vector<NamedPath>& inputs);

// Throws InputError naming out.label unless the directory out.path is written into exists: the
// commands create none.
void require_output_directory(const Output& out);

// Creates `dir` (and its parents) if needed and a probe file in it, then removes the probe: throws
// InputError naming `label` and the directory when it is not one, cannot be created or is not
// writable. Touches the file system: one rank.
void require_writable_directory(const std::string& label, const std::string& dir);

}  // namespace meshtrain::io

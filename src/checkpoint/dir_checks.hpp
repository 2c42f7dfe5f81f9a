// checkpoint.dir checked before the first step (share/docs/usage.md, A full disk during a save),
// so that a directory no save could use is refused at start rather than found at the first save.
#pragma once

#include "core/config.hpp"

#include <cstdint>

namespace meshtrain {

// Throws InputError (exit 2, for agree_on_input) naming the directory when
//   - checkpoint.resume = never and the directory already holds step_*.h5 files or `latest`
//     (another run's, which this run's saves and pruning would replace);
//   - the directory cannot be created, is no directory, or a probe file cannot be created in it;
//   - statvfs reports less free space than one checkpoint takes (checkpoint_bytes).
// With room for fewer than checkpoint.keep + 1 checkpoints (free space and the checkpoints already
// there) it prints a warning and goes on. Touches the file system: call it on one rank. (Inputs
// and logs with names the saves use are train/run_outputs.hpp's, checked on every rank before.)
void check_checkpoint_dir(const Config& cfg, std::uint64_t checkpoint_bytes);

}  // namespace meshtrain

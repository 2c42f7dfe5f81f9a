// What `export` and `prepare` may write over (share/docs/usage.md, Commands that never destroy
// their input): checked before anything is read or written, so a refused command leaves every file
// as it was and no temporary behind.
#pragma once

#include <string>
#include <vector>

namespace meshtrain::io {

// Throws InputError naming `option` (such as "--out") and the path unless `out` and every one of
// `temporaries` (the files the writer creates on its way to `out`):
//   - is none of `inputs`, compared with std::filesystem::equivalent (so also through symlinks
//     and hard links): writing would replace what is being read;
//   - is not a directory or other non-regular file, where it exists;
//   - is not an existing HDF5 file: a checkpoint is never the output of a conversion;
// and unless out's directory exists.
void require_safe_output(const std::string& option, const std::string& out, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& temporaries = {});

}  // namespace meshtrain::io

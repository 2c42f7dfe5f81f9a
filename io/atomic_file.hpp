// Files written whole or not at all: a temporary file in the same directory, written, fsynced and
// renamed over the final name, so that a reader never sees a partial file (token shards,
// tokenizer models).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace meshtrain::io {

// The temporary file write_file_atomically(path, ...) writes on its way to `path`.
std::string atomic_temporary_path(const std::string& path);

// Writes `path` through atomic_temporary_path(path): `produce` is called once with a function that
// appends bytes. A failure removes the temporary and throws InputError naming `what` ("token
// shard"), the path, the step that failed and the system's reason.
void write_file_atomically(const std::string& path, std::string_view what,
                           const std::function<void(const std::function<void(std::string_view)>&)>& produce);

}  // namespace meshtrain::io

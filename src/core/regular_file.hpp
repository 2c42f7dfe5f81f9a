// Files read as input are regular files (share/docs/usage.md, Files checked before they are used).
//
// A FIFO given where a file is expected blocks open(2) until a writer appears, for ever and deaf to
// SIGTERM; a directory reads as an empty file through std::ifstream; a device streams without
// end. So every input file — the --config file, token shards, checkpoints, initial weights,
// prepare's texts, `latest` — is stat'ed first and refused unless it is a regular file, and opened
// with O_NONBLOCK so that one swapped in after the check cannot block either.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace meshtrain {

// Why `path` cannot be read as a regular file (symlinks followed), or empty: "<what> '<path>' is a
// directory, not a regular file", "... is a FIFO (named pipe), ...", "<what> '<path>' does not
// exist". `what` names the role ("config file", "token shard", "checkpoint").
std::string regular_file_problem(const std::string& path, std::string_view what);

// Throws InputError with regular_file_problem's text unless path is a readable regular file.
void require_regular_file(const std::string& path, std::string_view what);

// Opens a regular file read-only (O_NONBLOCK | O_CLOEXEC) after checking it is one, and checks the
// opened descriptor again (the path may have been swapped). Returns the descriptor; InputError
// naming the file otherwise.
int open_regular_file(const std::string& path, std::string_view what);

// Reads a regular file (opened by open_regular_file) in chunks of up to 64 KiB, in order.
void read_regular_file(const std::string& path, std::string_view what,
                       const std::function<void(std::string_view)>& consume);
// The whole contents of a regular file.
std::string read_regular_file(const std::string& path, std::string_view what);

}  // namespace meshtrain

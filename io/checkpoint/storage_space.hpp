// The space a file system reports, and reserving it for a file before writing: what lets a save
// that cannot fit fail before any data is written, and what its message reports
// (share/docs/usage.md, A full disk during a save). Plain POSIX; knows nothing of MPI.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace meshtrain::io {

// Bytes an unprivileged writer may still use on the file system holding `path` (statvfs:
// f_bavail · f_frsize), or nothing if statvfs fails (no such path).
std::optional<std::uint64_t> free_bytes(const std::string& path);

// "12345678 bytes (11.8 MiB)": the exact count a script can read, and one a person can.
std::string describe_bytes(std::uint64_t bytes);

// Reserves the first `bytes` of the existing file `path` (fallocate, so the file system allocates
// blocks and charges quota now rather than at the write). Returns what went wrong ("No space left
// on device"), or nothing; a file system that cannot reserve (EOPNOTSUPP) is no failure: its
// writes are then the first to find a full disk.
std::string reserve_file_space(const std::string& path, std::uint64_t bytes);

}  // namespace meshtrain::io

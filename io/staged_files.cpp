// Files committed together (io/staged_files.hpp).
#include "io/staged_files.hpp"

#include "core/errors.hpp"
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

namespace meshtrain::io {

// Unique to this process: two writers of one path each stage their own file, and the last rename wins whole.
std::string staged_temporary_path(const std::string& path) { return atomic_temporary_path(path); }

StagedFiles::~StagedFiles() {
  if (!committed_) remove_all();
}

void StagedFiles::remove_all() {
  for (std::size_t i = 0; i < paths_.size(); ++i) {
    ::unlink((i < renamed_ ? paths_[i] : staged_temporary_path(paths_[i])).c_str());
  }
  paths_.clear();
  renamed_ = 0;
}

void StagedFiles::fail(const std::string& path, const char* step, int err) {
  const std::string named = path;  // `path` may be an element of paths_, which remove_all() clears
  remove_all();
  input_error("cannot write {} {}: {} failed: {}", what_, named, step, std::strerror(err));
}

void StagedFiles::write(const std::string& path, const std::function<void(const Append&)>& produce) {
  const std::string tmp = staged_temporary_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "creating its temporary", errno);
  paths_.push_back(path);  // from here on, its temporary is removed on failure
  // Closed once only: a descriptor closed twice may by then be another thread's.
  auto close_once = [&fd] {
    const int rc = fd >= 0 ? ::close(fd) : 0;
    fd = -1;
    return rc;
  };
  auto abandon = [&](const char* step) {
    const int err = errno;
    close_once();
    fail(path, step, err);
  };
  try {
    produce([&](std::string_view bytes) {
      while (!bytes.empty()) {
        const ssize_t w = ::write(fd, bytes.data(), bytes.size());
        if (w < 0) {
          if (errno == EINTR) continue;
          abandon("write");
        }
        bytes.remove_prefix(static_cast<std::size_t>(w));
      }
    });
  } catch (...) {
    close_once();
    remove_all();
    throw;
  }
  if (::fsync(fd) != 0) abandon("fsync");
  if (close_once() != 0) fail(path, "close", errno);
}

void StagedFiles::commit() {
  for (; renamed_ < paths_.size(); ++renamed_) {
    const std::string& path = paths_[renamed_];
    if (::rename(staged_temporary_path(path).c_str(), path.c_str()) != 0) fail(path, "rename", errno);
  }
  // The renames themselves reach the disk with their directories.
  std::set<std::string> dirs;
  for (const std::string& path : paths_) dirs.insert(std::filesystem::path(path).parent_path().string());
  for (const std::string& dir : dirs) {
    const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  committed_ = true;
}

}  // namespace meshtrain::io

// The lock of one output (io/output_lock.hpp).
#include "io/output_lock.hpp"

#include "core/errors.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace meshtrain::io {

namespace {

[[noreturn]] void refuse_held(const std::string& label, const std::string& path) {
  input_error(
      "{} '{}' is being written by another process (it holds the output's lock): wait for it to finish, or "
      "choose another {}",
      label, path, label);
}

}  // namespace

OutputLock::OutputLock(std::string label, const std::string& path) {
  std::error_code not_statable;  // then not a directory: the lock file's open names the problem
  if (std::filesystem::is_directory(path, not_statable)) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) input_error("{} '{}': cannot open the directory to lock it: {}", label, path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      refuse_held(label, path);
    }
    return;
  }
  lock_file_ = path + ".lock";
  // The holder unlinks the lock file on release: a file opened just before that unlink is locked in
  // vain, so the lock counts only while the name still leads to the locked file.
  for (;;) {
    fd_ = ::open(lock_file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      input_error("{} '{}': cannot create its lock file {}: {}", label, path, lock_file_, std::strerror(errno));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      refuse_held(label, path);
    }
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && held.st_size > 0) {
      ::close(fd_);  // lock files are empty: this one is somebody's file, and the release would remove it
      input_error("{} '{}': {} exists and is not an empty lock file: move it away", label, path, lock_file_);
    }
    if (::stat(lock_file_.c_str(), &named) == 0 && held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
      return;
    }
    ::close(fd_);
  }
}

OutputLock::~OutputLock() {
  if (!lock_file_.empty()) ::unlink(lock_file_.c_str());  // before the unlock: see the constructor
  ::close(fd_);
}

}  // namespace meshtrain::io

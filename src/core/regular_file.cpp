// Regular input files, checked before they are opened (core/regular_file.hpp).
#include "core/regular_file.hpp"

#include "core/errors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

namespace meshtrain {
namespace {

// What a file of this mode is, in words.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// Empty for a regular file.
std::string mode_problem(const std::string& path, std::string_view what, mode_t mode) {
  if (S_ISREG(mode)) return {};
  return fmt::format("{} '{}' is {}, not a regular file", what, path, kind_of(mode));
}

}  // namespace

std::string regular_file_problem(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return fmt::format("{} '{}' does not exist", what, path);
    return fmt::format("{} '{}': cannot access: {}", what, path, std::strerror(err));
  }
  return mode_problem(path, what, st.st_mode);
}

void require_regular_file(const std::string& path, std::string_view what) {
  const std::string problem = regular_file_problem(path, what);
  if (!problem.empty()) throw InputError(problem);
}

int open_regular_file(const std::string& path, std::string_view what) {
  require_regular_file(path, what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) input_error("cannot open {} '{}': {}", what, path, std::strerror(errno));
  struct stat st {};
  const bool statted = ::fstat(fd, &st) == 0;
  const int err = errno;
  if (!statted || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (!statted) input_error("cannot stat {} '{}': {}", what, path, std::strerror(err));
    throw InputError(mode_problem(path, what, st.st_mode));
  }
  return fd;
}

void read_regular_file(const std::string& path, std::string_view what,
                       const std::function<void(std::string_view)>& consume) {
  const int fd = open_regular_file(path, what);
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      input_error("cannot read {} '{}': {}", what, path, std::strerror(err));
    }
    if (n == 0) break;
    try {
      consume(std::string_view(buffer, static_cast<std::size_t>(n)));
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  ::close(fd);
}

std::string read_regular_file(const std::string& path, std::string_view what) {
  std::string text;
  read_regular_file(path, what, [&](std::string_view chunk) { text.append(chunk); });
  return text;
}

}  // namespace meshtrain

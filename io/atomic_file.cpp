// Atomic whole-file writes (io/atomic_file.hpp).
#include "io/atomic_file.hpp"

#include "core/errors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace meshtrain::io {

std::string atomic_temporary_path(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

void write_file_atomically(const std::string& path, std::string_view what,
                           const std::function<void(const std::function<void(std::string_view)>&)>& produce) {
  const std::string tmp = atomic_temporary_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) input_error("cannot create {} {}: {} (writing {})", what, path, std::strerror(errno), tmp);

  auto abandon = [&](const char* step, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    input_error("cannot write {} {}: {} failed: {}", what, path, step, std::strerror(err));
  };
  produce([&](std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t w = ::write(fd, bytes.data(), bytes.size());
      if (w < 0) {
        if (errno == EINTR) continue;
        abandon("write", errno);
      }
      bytes.remove_prefix(static_cast<std::size_t>(w));
    }
  });
  if (::fsync(fd) != 0) abandon("fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    input_error("cannot write {} {}: close failed: {}", what, path, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    input_error("cannot write {} {}: rename from {} failed: {}", what, path, tmp, std::strerror(err));
  }
}

}  // namespace meshtrain::io

// File-system space: statvfs and fallocate (io/checkpoint/storage_space.hpp).
#include "io/checkpoint/storage_space.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace meshtrain::io {

std::optional<std::uint64_t> free_bytes(const std::string& path) {
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) != 0) return std::nullopt;
  return std::uint64_t(fs.f_bavail) * std::uint64_t(fs.f_frsize);
}

std::string describe_bytes(std::uint64_t bytes) {
  return fmt::format("{} bytes ({:.1f} MiB)", bytes, double(bytes) / (1 << 20));
}

std::string reserve_file_space(const std::string& path, std::uint64_t bytes) {
  if (bytes == 0) return {};
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot open {} to reserve space: {}", path, std::strerror(errno));
  // Linux's fallocate, not posix_fallocate: where the file system cannot reserve, glibc's fallback
  // writes every block, which costs as much as the save itself.
  int result = 0;
  do {
    result = ::fallocate(fd, 0, 0, off_t(bytes));
  } while (result != 0 && errno == EINTR);
  const int err = result == 0 ? 0 : errno;
  ::close(fd);
  if (err == 0 || err == EOPNOTSUPP || err == ENOSYS) return {};
  return fmt::format("reserving {} for {}: {}", describe_bytes(bytes), path, std::strerror(err));
}

}  // namespace meshtrain::io

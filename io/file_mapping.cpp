// Read-only file mappings (io/file_mapping.hpp).
#include "io/file_mapping.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace meshtrain::io {

FileMapping::FileMapping(const std::string& path, std::string_view what) {
  const int fd = open_regular_file(path, what);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    input_error("cannot stat {} {}: {}", what, path, std::strerror(err));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* addr = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      input_error("cannot map {} {} ({} bytes): {}", what, path, size_, std::strerror(err));
    }
    data_ = static_cast<const unsigned char*>(addr);
  }
  ::close(fd);  // the mapping keeps the file open
}

FileMapping::~FileMapping() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

FileMapping::FileMapping(FileMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

}  // namespace meshtrain::io

// A whole file mapped read-only: its bytes are read from the page cache as they are touched, so
// reading part of a large file brings only that part into memory, and those pages stay reclaimable
// (clean, file-backed) rather than counting as the process's own copy. A file truncated by someone
// else while mapped ends the process with SIGBUS: inputs are not rewritten while read.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace meshtrain::io {

class FileMapping {
 public:
  // Checked to be a regular file before it is opened (a FIFO or device is refused, not waited on);
  // InputError naming `what` and the path when it cannot be opened or mapped. An empty file maps
  // to no bytes.
  FileMapping(const std::string& path, std::string_view what);
  ~FileMapping();
  FileMapping(FileMapping&& other) noexcept;
  FileMapping& operator=(FileMapping&&) = delete;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace meshtrain::io

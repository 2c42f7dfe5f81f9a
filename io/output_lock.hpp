// One writer at a time for an output made of several files (an export's directory, import's weights
// and INI): renames of unique temporaries make each file whole, but two processes renaming their
// files in turn could still leave a mix of both. The lock is flock(2), so a killed holder releases
// it with its last descriptor; the second writer is refused (InputError, exit 2) rather than kept
// waiting behind a job it knows nothing of.
#pragma once

#include <string>

namespace meshtrain::io {

class OutputLock {
 public:
  // Locks `path`: a directory itself, a file through `path`.lock beside it (created if missing,
  // removed on release). InputError naming `label` and `path` while another process holds it.
  OutputLock(std::string label, const std::string& path);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  int fd_ = -1;
  std::string lock_file_;  // empty for a directory: nothing to remove
};

}  // namespace meshtrain::io

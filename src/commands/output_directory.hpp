// The directory an export writes into (share/docs/usage.md, Outputs that never destroy a file): created
// with its parents where it does not exist, a refusal (exit 2 naming it) where it cannot be (a read-only
// mount), and removed again unless the export keeps it, so that a failed export leaves no directory it
// created. Its files are removed by their own writers on failure (io/staged_files.hpp), so it is empty
// by then; a directory that existed before is never removed. While the export writes, it holds the
// directory's lock (io/output_lock.hpp): a second export into it is refused (exit 2) rather than mixing
// its files with this one's.
#pragma once

#include "core/errors.hpp"
#include "io/output_lock.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace meshtrain {

class CreatedDirectory {
 public:
  explicit CreatedDirectory(std::string dir) : dir_(std::move(dir)), created_(!std::filesystem::exists(dir_)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) input_error("--out '{}': cannot create the directory: {}", dir_, ec.message());
    // Refused here, the directory stays: the export that holds the lock writes into it.
    lock_.emplace("--out", dir_);
  }
  ~CreatedDirectory() {
    std::error_code ignored;
    if (created_ && !kept_) std::filesystem::remove(dir_, ignored);  // only if empty
  }
  CreatedDirectory(const CreatedDirectory&) = delete;
  CreatedDirectory& operator=(const CreatedDirectory&) = delete;

  // The export is complete: the directory stays.
  void keep() { kept_ = true; }

 private:
  std::string dir_;
  bool created_;
  bool kept_ = false;
  std::optional<io::OutputLock> lock_;
};

}  // namespace meshtrain

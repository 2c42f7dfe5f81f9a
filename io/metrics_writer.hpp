// The metrics file (share/docs/usage.md, Metrics file): one JSON object per line, written as each
// step ends.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <stdexcept>
#include <string>

namespace meshtrain::io {

// A log output (log.metrics, log.traffic) could not be written after the start: a full disk, a
// quota, an I/O error. The training loop ends the job as after a failed save, with a checkpoint
// (share/docs/usage.md, A log that cannot be written).
class LogWriteFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends JSON records to a file, one line each, written through to the file system at once so
// that a killed job loses nothing already written. A writer made from an empty path (or
// default-constructed) is disabled: write() does nothing. Only one rank (global rank 0) should own
// an enabled writer. Move-only.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Opens path for appending, creating its parent directories. Throws InputError naming the path
  // if it cannot be opened.
  explicit MetricsWriter(const std::string& path);
  MetricsWriter(MetricsWriter&& other) noexcept;
  MetricsWriter& operator=(MetricsWriter&& other) noexcept;
  ~MetricsWriter();

  bool enabled() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // Writes record.dump() and a newline. On a write error the file is cut back to its last complete
  // record (no partial line for a resumed job to append after) and LogWriteFailed names the file
  // and the system's reason.
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace meshtrain::io

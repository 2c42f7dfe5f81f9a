// The metrics file (share/docs/usage.md, Metrics file): one JSON object per line, flushed as written.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdio>
#include <memory>
#include <string>

namespace meshtrain::io {

// Appends JSON records to a file, one line each, flushing every line so a killed job loses nothing
// already written. A writer made from an empty path (or default-constructed) is disabled: write()
// does nothing. Only one rank (global rank 0) should own an enabled writer.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Opens path for appending, creating its parent directories. Throws InputError naming the path
  // if it cannot be opened.
  explicit MetricsWriter(const std::string& path);

  bool enabled() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }

  // Writes record.dump() and a newline, then flushes. Throws std::runtime_error on a write error.
  void write(const nlohmann::json& record);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Close> file_;
};

}  // namespace meshtrain::io

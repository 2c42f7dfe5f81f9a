// JSON-lines metrics output.
#include "io/metrics_writer.hpp"

#include "core/errors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace meshtrain::io {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec)
      input_error("cannot create the directory {} for the metrics file {} (log.metrics): {}", parent.string(), path,
                  ec.message());
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    input_error("cannot open the metrics file {} (log.metrics) for appending: {}", path, std::strerror(errno));
}

MetricsWriter::MetricsWriter(MetricsWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (fd_ < 0) return;
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  struct stat before {};
  const bool sized = ::fstat(fd_, &before) == 0;
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      // A partial line would be glued to the next record a resumed job appends.
      if (sized && ::ftruncate(fd_, before.st_size) != 0) {
        throw LogWriteFailed(
            fmt::format("cannot write the metrics file {} (log.metrics): {}; nor cut its partial "
                        "last line back: {}",
                        path_, std::strerror(error), std::strerror(errno)));
      }
      throw LogWriteFailed(
          fmt::format("cannot write the metrics file {} (log.metrics): {}", path_, std::strerror(error)));
    }
    done += std::size_t(n);
  }
}

}  // namespace meshtrain::io

// JSON-lines metrics output.
#include "io/metrics_writer.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

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
  file_.reset(std::fopen(path.c_str(), "a"));
  if (!file_)
    input_error("cannot open the metrics file {} (log.metrics) for appending: {}", path, std::strerror(errno));
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!file_) return;
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() || std::fflush(file_.get()) != 0) {
    throw std::runtime_error(fmt::format("cannot write to the metrics file {}: {}", path_, std::strerror(errno)));
  }
}

}  // namespace meshtrain::io

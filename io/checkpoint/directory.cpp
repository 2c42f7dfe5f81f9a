// Checkpoint directory conventions: file names, the `latest` pointer, pruning.
#include "io/checkpoint/directory.hpp"

#include "core/errors.hpp"
#include "core/regular_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

namespace meshtrain::io {
namespace fs = std::filesystem;
namespace {

constexpr const char* latest_name = "latest";

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return (fs::path(dir) / name).string();
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

// The first line of <dir>/latest, trimmed; nothing if the file does not exist.
std::optional<std::string> latest_entry(const std::string& dir) {
  const std::string path = join(dir, latest_name);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  // A directory or a FIFO named `latest` is refused as what it is, not read as an empty file.
  const std::string text = read_regular_file(path, "checkpoint pointer");
  return trim(text.substr(0, text.find('\n')));
}

// Writes, fsyncs and closes; throws std::runtime_error naming path on failure.
void write_file_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  const char* p = text.data();
  std::size_t n = text.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  if (::close(fd) != 0 || !synced) {
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(synced ? errno : err)));
  }
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself has happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  if (step < 0) throw std::invalid_argument(fmt::format("checkpoint_path: step {} is negative", step));
  return join(dir, fmt::format("step_{:08d}.h5", step));
}

std::optional<std::int64_t> checkpoint_step(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  constexpr std::string_view prefix = "step_";
  constexpr std::string_view suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

std::optional<std::string> read_latest(const std::string& dir) {
  const auto entry = latest_entry(dir);
  if (!entry) return std::nullopt;
  const std::string latest_path = join(dir, latest_name);
  if (entry->empty()) {
    input_error("{} is empty; it should hold the file name of a checkpoint in {}, such as step_00000100.h5",
                latest_path, dir);
  }
  if (entry->find('/') != std::string::npos || *entry == "." || *entry == "..") {
    input_error("{} names '{}', but it should hold a plain file name of a checkpoint in {}, such as step_00000100.h5",
                latest_path, *entry, dir);
  }
  const std::string path = join(dir, *entry);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    input_error("{} names {}, which does not exist in {}; fix or delete {} (or resume from a named checkpoint)",
                latest_path, *entry, dir, latest_path);
  }
  return path;
}

std::string latest_path(const std::string& dir) { return join(dir, latest_name); }

void write_latest(const std::string& dir, const std::string& checkpoint_file) {
  const std::string name = fs::path(checkpoint_file).filename().string();
  if (name.empty()) throw std::invalid_argument(fmt::format("write_latest: '{}' has no file name", checkpoint_file));
  const std::string path = join(dir, latest_name);
  const std::string tmp = path + ".tmp";
  write_file_synced(tmp, name + "\n");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(err)));
  }
  sync_directory(dir);
}

std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    if (const auto step = checkpoint_step(entry.path().string())) found.emplace_back(*step, entry.path());
  }
  if (ec) throw std::runtime_error(fmt::format("cannot list checkpoint directory {}: {}", dir, ec.message()));
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
  std::vector<std::string> paths;
  for (const auto& [step, path] : found) paths.push_back(path.string());
  return paths;
}

void prune_checkpoints(const std::string& dir, int keep) {
  std::error_code ec;
  // Temporary files of saves that never committed (a killed job): never a checkpoint, only space.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".tmp") && checkpoint_step(name.substr(0, name.size() - 4))) fs::remove(entry.path(), ec);
  }
  if (keep <= 0) return;
  std::optional<std::string> protect;
  try {
    protect = latest_entry(dir);
  } catch (const InputError&) {
    // An unreadable `latest` protects nothing more; pruning still keeps the newest files.
  }
  const std::vector<std::string> found = checkpoints_newest_first(dir);
  for (std::size_t i = static_cast<std::size_t>(keep); i < found.size(); ++i) {
    const fs::path path = found[i];
    if (protect && path.filename() == *protect) continue;
    if (!fs::remove(path, ec) && ec) {
      throw std::runtime_error(fmt::format("cannot delete old checkpoint {}: {}", path.string(), ec.message()));
    }
  }
}

bool written_by_saves(const std::string& file_name) {
  const std::string name = file_name.ends_with(".tmp") ? file_name.substr(0, file_name.size() - 4) : file_name;
  return name == "latest" || checkpoint_step(name).has_value();
}

void ensure_directory(const std::string& dir) {
  if (dir.empty()) input_error("no directory given (checkpoint.dir is empty)");
  std::error_code ec;
  const auto status = fs::status(dir, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status))
      input_error("{} exists but is not a directory; checkpoint.dir must name a directory", dir);
    return;
  }
  fs::create_directories(dir, ec);
  if (ec) input_error("cannot create directory {}: {}", dir, ec.message());
}

}  // namespace meshtrain::io

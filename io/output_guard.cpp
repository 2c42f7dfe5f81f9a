// Outputs that would destroy an input or a file of another kind, refused (io/output_guard.hpp).
#include "io/output_guard.hpp"

#include "core/errors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace meshtrain::io {
namespace {

namespace fs = std::filesystem;

// The writer of each kind, for the message that refuses another kind.
std::string_view kind_noun(FileKind kind) {
  switch (kind) {
    case FileKind::token_shard: return "a token shard";
    case FileKind::sft_shard: return "a fine-tuning shard";
    case FileKind::safetensors: return "a safetensors file";
    case FileKind::tokenizer: return "a SentencePiece tokenizer model";
    case FileKind::tokenizer_json: return "a tokenizer.json";
    case FileKind::metrics_jsonl: return "a metrics file (JSON lines)";
    case FileKind::traffic_json: return "a traffic file (JSON)";
    case FileKind::hdf5: return "an HDF5 file";
    case FileKind::config_ini: return "a meshtrain INI";
    case FileKind::empty:
    case FileKind::other: break;
  }
  return "a file";
}

// Why writing `path` on the way to `out` would destroy something (empty if it would not).
std::string overwrite_problem(const std::string& path, bool temporary, const Output& out,
                              const std::vector<NamedPath>& inputs) {
  const std::string_view verb = out.appends && !temporary ? "appending to it" : "writing";
  for (const NamedPath& input : inputs) {
    if (same_file(path, input.path)) {
      return fmt::format("'{}' is the same file as {} '{}', which {} would destroy", path, input.label, input.path,
                         verb);
    }
  }
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return {};
  if (fs::is_directory(status)) return fmt::format("'{}' is a directory", path);
  if (!fs::is_regular_file(status)) return fmt::format("'{}' exists and is not a regular file", path);
  const FileKind found = file_kind(path);
  if (found == FileKind::empty || found == out.kind || (temporary && found == FileKind::other)) return {};
  return fmt::format("'{}' is {}, not {} ({} {})", path, describe(found), kind_noun(out.kind), out.label,
                     out.appends ? "appends only to its own kind" : "replaces only its own kind");
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  const fs::path x = fs::weakly_canonical(fs::absolute(a, ec), ec);
  const fs::path y = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return !ec && x == y;
}

void require_safe_output(const Output& out, const std::vector<NamedPath>& inputs) {
  std::vector<std::string> written = {out.path};
  written.insert(written.end(), out.temporaries.begin(), out.temporaries.end());
  for (std::size_t i = 0; i < written.size(); ++i) {
    const std::string problem = overwrite_problem(written[i], i > 0, out, inputs);
    if (!problem.empty()) {
      input_error("{} '{}': {}; refusing to {} it, nothing was written (name a new file)", out.label, out.path, problem,
                  out.appends ? "append to" : "write over");
    }
  }
}

void require_output_directory(const Output& out) {
  const fs::path parent = fs::absolute(out.path).parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    input_error("{} '{}': directory '{}' does not exist", out.label, out.path, parent.string());
}

void require_writable_directory(const std::string& label, const std::string& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (fs::exists(status) && !fs::is_directory(status)) {
    input_error("{}: {} exists but is not a directory; {} must be a directory", label, dir,
                label.ends_with(".dir") ? label : fmt::format("the directory of {}", label));
  }
  if (!fs::exists(status)) {
    fs::create_directories(dir, ec);
    if (ec) input_error("{}: cannot create directory {}: {}", label, dir, ec.message());
  }
  const std::string probe = (fs::path(dir) / fmt::format(".meshtrain-probe-{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    input_error("{}: directory {} is not writable: cannot create {}: {}\nHINT: choose a writable place for {}", label,
                dir, probe, std::strerror(errno), label);
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace meshtrain::io

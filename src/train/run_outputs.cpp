// The training run's outputs checked and its logs opened (train/run_outputs.hpp).
#include "train/run_outputs.hpp"

#include "core/errors.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint/directory.hpp"
#include "io/output_guard.hpp"

#include <fnmatch.h>

#include <filesystem>
#include <utility>

namespace meshtrain {
namespace {

namespace fs = std::filesystem;

// The files the run reads, each named by its key, but the checkpoints it resumes from.
std::vector<io::NamedPath> data_inputs(const Config& cfg, const std::vector<std::string>& shards) {
  std::vector<io::NamedPath> inputs;
  if (!cfg.config_file.empty()) inputs.push_back({"--config", cfg.config_file});
  for (const std::string& shard : shards) inputs.push_back({"data.train", shard});
  if (!cfg.data.tokenizer.empty()) inputs.push_back({"data.tokenizer", cfg.data.tokenizer});
  if (!cfg.checkpoint.init_weights.empty()) inputs.push_back({"checkpoint.init_weights", cfg.checkpoint.init_weights});
  return inputs;
}

// The checkpoints the run may resume from: the checkpoint.resume file, every checkpoint of
// checkpoint.dir and its `latest`.
std::vector<io::NamedPath> resume_inputs(const Config& cfg) {
  std::vector<io::NamedPath> inputs;
  if (cfg.checkpoint.resume.mode == ResumeMode::file)
    inputs.push_back({"checkpoint.resume", cfg.checkpoint.resume.file});
  const std::string& dir = cfg.checkpoint.dir;
  for (const std::string& checkpoint : io::checkpoints_newest_first(dir)) {
    inputs.push_back({"the checkpoint in checkpoint.dir", checkpoint});
  }
  std::error_code ec;
  if (fs::exists(io::latest_path(dir), ec)) inputs.push_back({"checkpoint.dir's latest", io::latest_path(dir)});
  return inputs;
}

std::vector<io::Output> log_outputs(const Config& cfg) {
  std::vector<io::Output> logs;
  if (!cfg.log.metrics.empty()) logs.push_back({"log.metrics", cfg.log.metrics, io::FileKind::metrics_jsonl, true});
  if (!cfg.log.traffic.empty()) {
    logs.push_back({"log.traffic",
                    cfg.log.traffic,
                    io::FileKind::traffic_json,
                    false,
                    {io::atomic_temporary_path(cfg.log.traffic)}});
  }
  return logs;
}

// Whether the saves into `dir` write, replace or delete `path`: by its own name, or, for a symbolic
// link, the name of the file it leads to.
bool written_by_saves(const std::string& dir, const std::string& path) {
  std::error_code ec;
  const fs::path home = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  const fs::path given = fs::absolute(path, ec);
  const fs::path as_named = fs::weakly_canonical(given.parent_path(), ec) / given.filename();
  const fs::path resolved = fs::weakly_canonical(given, ec);
  for (const fs::path& p : {as_named, resolved}) {
    if (p.parent_path() == home && io::written_by_saves(p.filename().string())) return true;
  }
  return false;
}

void check_checkpoint_dir_names(const Config& cfg, const std::vector<io::NamedPath>& files) {
  for (const io::NamedPath& file : files) {
    if (!written_by_saves(cfg.checkpoint.dir, file.path)) continue;
    input_error(
        "{} '{}' has a name in checkpoint.dir {} that the run's saves write, replace or delete (step_*.h5, latest); "
        "refusing to start, nothing was written\nHINT: move it out of the checkpoint directory, or choose another "
        "checkpoint.dir",
        file.label, file.path, cfg.checkpoint.dir);
  }
}

// A log that the data.train glob matches would be read as a shard by the next job (a resume).
void refuse_logs_in_data_glob(const std::string& pattern, const std::vector<io::Output>& logs) {
  if (pattern.find_first_of("*?[") == std::string::npos) return;
  const std::string absolute_pattern = fs::absolute(pattern).lexically_normal().string();
  for (const io::Output& log : logs) {
    const std::string path = fs::absolute(log.path).lexically_normal().string();
    if (::fnmatch(absolute_pattern.c_str(), path.c_str(), FNM_PATHNAME | FNM_PERIOD) != 0) continue;
    input_error(
        "{} '{}' is matched by the data.train glob '{}': the next job would read it as a token shard; refusing to "
        "start, nothing was written\nHINT: write the log elsewhere, or narrow the glob",
        log.label, log.path, pattern);
  }
}

}  // namespace

void check_run_outputs(const Config& cfg, const std::vector<std::string>& shards) {
  const std::vector<io::Output> logs = log_outputs(cfg);
  // The saves may replace or prune the checkpoints they resume from: only the other inputs and the
  // logs must keep out of their names.
  std::vector<io::NamedPath> inputs = data_inputs(cfg, shards);
  std::vector<io::NamedPath> spared = inputs;
  for (const io::Output& log : logs) spared.push_back({log.label, log.path});
  check_checkpoint_dir_names(cfg, spared);
  refuse_logs_in_data_glob(cfg.data.train, logs);
  for (io::NamedPath& checkpoint : resume_inputs(cfg)) inputs.push_back(std::move(checkpoint));
  for (const io::Output& log : logs) {
    std::vector<io::NamedPath> others = inputs;
    for (const io::Output& other : logs) {
      if (other.label != log.label) others.push_back({other.label, other.path});
    }
    io::require_safe_output(log, others);
  }
}

io::MetricsWriter open_run_logs(const Config& cfg, bool leader) {
  if (!leader) return {};
  for (const io::Output& log : log_outputs(cfg)) {
    const fs::path parent = fs::path(log.path).parent_path();
    io::require_writable_directory(log.label, parent.empty() ? "." : parent.string());
  }
  return io::MetricsWriter(cfg.log.metrics);
}

}  // namespace meshtrain

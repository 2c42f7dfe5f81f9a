// The run configuration: every key of interface section 2, parsed from an INI file and the command
// line (command line wins), validated, and printable back as INI for checkpoints and logs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain {

struct ModelConfig {
  int layers = 2;
  int heads = 2;
  int d_model = 64;
  int vocab = 256;
  int seq_len = 64;  // T: context length, and the rows of wpe
};

struct TrainConfig {
  int micro_batch = 4;
  int global_batch = 4;
  std::int64_t steps = 10;
  std::int64_t stop_after = 0;  // leave after this many steps in this job (0: run to the end)
  double time_limit = 0;        // minutes this job may run (0: no limit)
  std::int64_t seed = 1337;
  std::string precision = "fp32";
  std::string recompute = "none";
  double loss_scale = 65536;             // fp16: initial dynamic loss scale
  std::int64_t loss_scale_window = 1000;  // fp16: clean steps before the scale doubles
};

struct OptimConfig {
  double lr = 3e-4;
  double min_lr = 3e-5;
  std::int64_t warmup_steps = 2;
  std::string decay = "cosine";
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;
};

struct ParallelConfig {
  int dp = 0;  // 0: world / (tp × pp)
  int tp = 1;
  int pp = 1;
  int zero = 0;
  std::string schedule = "1f1b";
  std::string backend = "auto";
  double bucket_mb = 25;  // data-parallel gradient bucket size, MiB
};

struct DataConfig {
  std::string train;  // a token shard or a glob of them
  std::string order = "sequential";
};

struct CheckpointConfig {
  std::string dir = "checkpoints";
  std::int64_t every = 0;  // steps between saves (0: only when the job leaves)
  int keep = 3;            // newest checkpoints kept (0: all)
  std::string init_weights;
  std::string resume = "auto";
  bool async = false;  // write checkpoints on a background thread while training goes on
  std::string io = "independent";  // tensor data to the file: independent | collective (MPI-IO)
};

struct LogConfig {
  std::string metrics;     // JSON-lines file (empty: none)
  std::int64_t every = 1;  // steps between progress lines on stdout
  double peak_tflops = 0;  // per-rank peak for MFU (0: MFU not shown)
  std::int64_t timing_every = 100;  // steps between per-rank timing tables (0: only at the end)
  std::string traffic;     // JSON file of every rank's traffic in the last step (empty: none)
};

struct Config {
  ModelConfig model;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
  DataConfig data;
  CheckpointConfig checkpoint;
  LogConfig log;

  // The full resolved configuration as INI text (every key, sorted by section).
  std::string to_ini() const;
};

// Parses `--config FILE` and `--section.key value` arguments (the command's arguments only, no
// program name) and checks every value on its own (types, ranges, names). Throws InputError naming the key on any problem.
// Checks that depend on the world size (dp, tp, pp) are the Topology's.
Config parse_config(const std::vector<std::string>& args);

// Parses INI text as stored in a checkpoint (same keys, same checks).
Config config_from_ini(const std::string& ini_text, const std::string& origin);

// The option table as `meshtrain train --help` prints it.
std::string config_help();

}  // namespace meshtrain

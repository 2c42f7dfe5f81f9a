// The host waits of a training step across layouts, and the step's communication ordered as a device
// would order it (issue 42, 5(a) and 5(b)). The trainer itself (meshtrain::train, in this process,
// on every rank of the run) trains a few steps twice:
//   - on the MPI backend as CPU runs use it (the host waits for the compute before each call);
//   - on the device-stream stand-in (MESHTRAIN_STREAM_STANDIN=1, parallel/stream_standin.hpp): each
//     non-blocking operation's output holds NaNs until the compute is ordered after it, and a write
//     into an operation in flight throws. Its losses and gradient norms must equal the first run's
//     bit for bit: a missing wait computes with NaNs, a missing order throws.
// In the stand-in run, the Kokkos Tools hook counts what each step (the region
// "meshtrain::training_step") issues, host waits by reason among it (core/host_waits.hpp): the waits a
// device run would have. For gpt2, llama and MoE, fp32 and bf16, under dp 2 with ZeRO 0–3, pp 2,
// tp 2 and ep 2, each step after the first must wait as often as the next one, and no rank more often
// than its layout's ceiling: the one read of the loss and the gradient norm. Dropless MoE steps also
// read each MoE block's routing once per micro-batch (under ep with the exchanged counts in it), which
// sizes the grouped products and the exchange; padded to a capacity (model.pad_to_capacity) they read
// nothing more than the others. A wait added anywhere in the step fails the case that reaches it.
#include "common/kokkos_counters.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/exec.hpp"
#include "core/host_waits.hpp"
#include "io/token_shard.hpp"
#include "parallel/stream_standin.hpp"
#include "train/trainer.hpp"

#include <gtest/gtest.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace meshtrain::test {
namespace test_step_waits {

constexpr int kSteps = 3;  // the first warms up: the later two are compared

const std::vector<std::string> kGpt2 = {"--model.layers", "4",  "--model.heads",   "4", "--model.d_model", "32",
                                        "--model.vocab",  "67", "--model.seq_len", "16"};
const std::vector<std::string> kLlama = {
    "--model.arch",    "llama", "--model.layers",     "4",  "--model.heads", "4",  "--model.kv_heads", "2",
    "--model.d_model", "32",    "--model.ffn_hidden", "48", "--model.vocab", "67", "--model.seq_len",  "16"};
// Blocks 0 and 2 route to 4 experts (top 2) beside a shared one; blocks 1 and 3 are dense.
const std::vector<std::string> kMoe = [] {
  std::vector<std::string> m = kLlama;
  for (const char* key : {"--model.experts", "4", "--model.moe_every", "2", "--model.shared_experts", "1",
                          "--model.expert_hidden", "12"}) {
    m.emplace_back(key);
  }
  return m;
}();

struct WaitCase {
  const char* name;
  const std::vector<std::string>* model;
  std::vector<std::string> keys;  // precision and layout
  // Host waits a step on the rank that waits most: the one read of the loss and the gradient norm;
  // dropless MoE steps also each MoE block's routing counts read per micro-batch.
  long ceiling;
};

std::string token_shard(const std::string& dir) {
  const std::string path = dir + "/tokens.bin";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::filesystem::create_directories(dir);
    std::vector<std::uint16_t> tokens(16 * 1024);
    std::uint32_t x = 7;
    for (auto& t : tokens) {
      x = x * 1664525u + 1013904223u;
      t = std::uint16_t((x >> 8) % 67u);
    }
    io::write_token_shard(path, tokens);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

struct StepRecord {
  double loss = 0, grad_norm = 0;
  bool operator==(const StepRecord&) const = default;
};
void PrintTo(const StepRecord& r, std::ostream* out) { *out << "{loss " << r.loss << ", norm " << r.grad_norm << "}"; }

std::vector<StepRecord> metrics_of(const std::string& path) {
  std::vector<StepRecord> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line);
    // A non-finite value is written as null.
    const auto number = [&](const char* key) {
      const auto& v = record.at(key);
      return v.is_null() ? std::nan("") : v.get<double>();
    };
    steps.push_back({number("loss"), number("grad_norm")});
  }
  return steps;
}

struct CountedRun {
  std::vector<KokkosCounts> steps;  // each step's counts on this rank
  std::vector<StepRecord> metrics;  // the run's losses and norms
};

// The trainer's run of `c` to its end, on the stream stand-in or not.
CountedRun train_counted(const WaitCase& c, const std::string& dir, bool standin) {
  std::vector<std::string> args = *c.model;
  std::string run_dir = dir + "/" + c.name + (standin ? " stand-in" : "");
  std::replace(run_dir.begin() + std::ptrdiff_t(dir.size()), run_dir.end(), ' ', '_');
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::filesystem::remove_all(run_dir);  // an earlier run's checkpoints
  for (const std::string& a :
       {std::string("--data.train"), token_shard(dir), std::string("--checkpoint.dir"), run_dir + "/ckpt",
        std::string("--checkpoint.resume"), std::string("never"), std::string("--train.steps"), std::to_string(kSteps),
        std::string("--train.micro_batch"), std::string("2"), std::string("--train.global_batch"), std::string("8"),
        std::string("--log.every"), std::string("100"), std::string("--log.metrics"), run_dir + "/metrics.jsonl",
        // Several gradient buckets (the overlapped reduction's path), not one for the whole model.
        std::string("--parallel.bucket_mb"), std::string("0.02")}) {
    args.push_back(a);
  }
  args.insert(args.end(), c.keys.begin(), c.keys.end());
  const Config cfg = parse_config(args);
  KokkosCounters::install();
  KokkosCounters::count_regions("meshtrain::training_step");
  if (standin) setenv("MESHTRAIN_STREAM_STANDIN", "1", 1);
  const int code = train(cfg, MPI_COMM_WORLD);
  unsetenv("MESHTRAIN_STREAM_STANDIN");
  EXPECT_EQ(code, exit_code::finished) << c.name << (standin ? " on the stream stand-in" : "");
  CountedRun run{KokkosCounters::region_counts(), {}};
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 has written the metrics
  run.metrics = metrics_of(run_dir + "/metrics.jsonl");
  return run;
}

long max_over_ranks(long value) {
  long worst = 0;
  MPI_Allreduce(&value, &worst, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

std::string waits_table(const KokkosCounts& c) {
  std::string out;
  for (const auto& [reason, n] : c.host_waits) out += "  " + std::to_string(n) + "  " + reason + "\n";
  return out;
}

void check(const WaitCase& c) {
  SCOPED_TRACE(c.name);
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ASSERT_EQ(size, 2) << "the layouts are of 2 ranks";
  const std::string dir = testing::TempDir() + "meshtrain_step_waits";
  const CountedRun host = train_counted(c, dir, false);
  const StreamStandInCounts before = stream_standin_counts();
  const CountedRun device = train_counted(c, dir, true);
  const StreamStandInCounts after = stream_standin_counts();
  ASSERT_EQ(host.metrics.size(), std::size_t(kSteps));
  EXPECT_EQ(device.metrics, host.metrics) << "the stream stand-in's losses or norms differ from the MPI backend's";
  EXPECT_EQ(after.dropped, before.dropped) << "a request dropped without wait(): its result never lands";
  const auto& steps = device.steps;
  ASSERT_EQ(steps.size(), std::size_t(kSteps)) << "one region a step: is the trainer's region still there?";
  const KokkosCounts& counted = steps[1];
  EXPECT_EQ(counted.host_waits, steps[2].host_waits) << "a later step waits otherwise";
  EXPECT_GT(counted.launches(), 0) << "the hook saw no launch in the step";
  const long worst = max_over_ranks(counted.host_wait_count());
  if (rank == 0) {
    std::printf(
        "\n== %s: host waits a step (this rank %ld, the most on a rank %ld, ceiling %ld; %ld operations "
        "started on the stand-in, %ld waited on) ==\n%s",
        c.name, counted.host_wait_count(), worst, c.ceiling, after.started - before.started,
        after.completed - before.completed, waits_table(counted).c_str());
    std::fflush(stdout);
  }
  EXPECT_LE(worst, c.ceiling) << "a step waits on the host more often than " << c.ceiling << " times on some rank";
}

// host_fence runs the hook first on the thread that set it: a device backend's groups settle there,
// watched (train/training_groups.cpp).
TEST(StepWaits, HostFencesRunTheSettlingHookFirst) {
  static int settled = 0;
  settled = 0;
  set_before_host_fence([](void*) { ++settled; }, nullptr);
  host_fence(ExecSpace(), "test: a fence");
  std::thread([] { host_fence(ExecSpace(), "test: another thread's fence"); }).join();
  set_before_host_fence(nullptr, nullptr);
  EXPECT_EQ(settled, 1) << "once, on the thread that set it";
}

TEST(StepWaits, DataParallelZero) {
  check({"gpt2 fp32 dp2 ZeRO-0", &kGpt2, {}, 1});
  check({"gpt2 bf16 dp2 ZeRO-1", &kGpt2, {"--train.precision", "bf16", "--parallel.zero", "1"}, 1});
  check({"llama fp32 dp2 ZeRO-2", &kLlama, {"--parallel.zero", "2"}, 1});
  check({"llama bf16 dp2 ZeRO-3", &kLlama, {"--train.precision", "bf16", "--parallel.zero", "3"}, 1});
}

TEST(StepWaits, PipelineAndTensorParallel) {
  check({"gpt2 fp32 pp2", &kGpt2, {"--parallel.pp", "2"}, 1});
  check({"llama bf16 pp2", &kLlama, {"--train.precision", "bf16", "--parallel.pp", "2"}, 1});
  check({"gpt2 bf16 tp2", &kGpt2, {"--train.precision", "bf16", "--parallel.tp", "2"}, 1});
}

// Two MoE blocks, two micro-batches a step: 1 + 2·2. Under ep the counts travel on the device before
// that read (13 while they went through a host all-to-all).
TEST(StepWaits, MixtureOfExperts) {
  check({"moe fp32 dp2 ep1", &kMoe, {}, 5});
  check({"moe bf16 dp2 ep2", &kMoe, {"--train.precision", "bf16", "--parallel.ep", "2"}, 5});
  check({"moe fp32 dp2 ep2 ZeRO-3", &kMoe, {"--parallel.ep", "2", "--parallel.zero", "3"}, 5});
}

// Padded to a capacity of 20 rows an expert (⌈1.25 · 32 · 2 / 4⌉), every size of the grouped products and
// the exchange is known before the routing: the step's one read, whatever ep and ZeRO.
TEST(StepWaits, MixtureOfExpertsPaddedToCapacity) {
  const std::vector<std::string> padded = {"--model.capacity_factor", "1.25", "--model.pad_to_capacity", "true"};
  const auto with = [&](std::vector<std::string> keys) {
    keys.insert(keys.end(), padded.begin(), padded.end());
    return keys;
  };
  check({"moe padded fp32 dp2 ep1", &kMoe, with({}), 1});
  check({"moe padded bf16 dp2 ep2", &kMoe, with({"--train.precision", "bf16", "--parallel.ep", "2"}), 1});
  check({"moe padded fp32 dp2 ep2 ZeRO-3", &kMoe, with({"--parallel.ep", "2", "--parallel.zero", "3"}), 1});
}

}  // namespace test_step_waits
}  // namespace meshtrain::test

// The host waits of a training step across layouts (issue 42, 5(b)): the trainer itself
// (meshtrain::train, in this process, on every rank of the run) trains a few steps, and the Kokkos
// Tools hook counts what each step — the region "meshtrain::training_step" — issues, host waits by
// reason among it (core/host_waits.hpp: fences and request waits). For gpt2, llama and MoE, fp32
// and bf16, under dp 2 with ZeRO 0–3, pp 2, tp 2 and ep 2, each step after the first must wait as
// often as the next one, and no rank more often than its layout's ceiling: today's counts, which
// the communication stream and device-side MoE (issue 42, parts 1–3) bring down to the one read a
// step. A wait added anywhere in the step fails the case that reaches it.
#include "common/kokkos_counters.hpp"
#include "core/config.hpp"
#include "io/token_shard.hpp"
#include "train/trainer.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
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
  long ceiling;                   // host waits a step, on the rank that waits most: today's
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

// Each counted step's host waits on this rank, after the trainer ran `c` to its end.
std::vector<KokkosCounts> train_counted(const WaitCase& c, const std::string& dir) {
  std::vector<std::string> args = *c.model;
  std::string run_dir = dir + "/" + c.name;
  std::replace(run_dir.begin() + std::ptrdiff_t(dir.size()), run_dir.end(), ' ', '_');
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::filesystem::remove_all(run_dir);  // an earlier run's checkpoints
  for (const std::string& a :
       {std::string("--data.train"), token_shard(dir), std::string("--checkpoint.dir"), run_dir + "/ckpt",
        std::string("--checkpoint.resume"), std::string("never"), std::string("--train.steps"), std::to_string(kSteps),
        std::string("--train.micro_batch"), std::string("2"), std::string("--train.global_batch"), std::string("8"),
        std::string("--log.every"), std::string("100"),
        // Several gradient buckets (the overlapped reduction's path), not one for the whole model.
        std::string("--parallel.bucket_mb"), std::string("0.02")}) {
    args.push_back(a);
  }
  args.insert(args.end(), c.keys.begin(), c.keys.end());
  const Config cfg = parse_config(args);
  KokkosCounters::install();
  KokkosCounters::count_regions("meshtrain::training_step");
  train(cfg, MPI_COMM_WORLD);
  return KokkosCounters::region_counts();
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
  const auto steps = train_counted(c, testing::TempDir() + "meshtrain_step_waits");
  ASSERT_EQ(steps.size(), std::size_t(kSteps)) << "one region a step: is the trainer's region still there?";
  const KokkosCounts& counted = steps[1];
  EXPECT_EQ(counted.host_waits, steps[2].host_waits) << "a later step waits otherwise";
  EXPECT_GT(counted.launches(), 0) << "the hook saw no launch in the step";
  const long worst = max_over_ranks(counted.host_wait_count());
  if (rank == 0) {
    std::printf("\n== %s: host waits a step (this rank %ld, the most on a rank %ld, ceiling %ld) ==\n%s", c.name,
                counted.host_wait_count(), worst, c.ceiling, waits_table(counted).c_str());
    std::fflush(stdout);
  }
  EXPECT_LE(worst, c.ceiling) << "a step waits on the host more often than " << c.ceiling << " times on some rank";
}

TEST(StepWaits, DataParallelZero) {
  check({"gpt2 fp32 dp2 ZeRO-0", &kGpt2, {}, 50});
  check({"gpt2 bf16 dp2 ZeRO-1", &kGpt2, {"--train.precision", "bf16", "--parallel.zero", "1"}, 42});
  check({"llama fp32 dp2 ZeRO-2", &kLlama, {"--parallel.zero", "2"}, 70});
  check({"llama bf16 dp2 ZeRO-3", &kLlama, {"--train.precision", "bf16", "--parallel.zero", "3"}, 103});
}

TEST(StepWaits, PipelineAndTensorParallel) {
  check({"gpt2 fp32 pp2", &kGpt2, {"--parallel.pp", "2"}, 13});
  check({"llama bf16 pp2", &kLlama, {"--train.precision", "bf16", "--parallel.pp", "2"}, 12});
  check({"gpt2 bf16 tp2", &kGpt2, {"--train.precision", "bf16", "--parallel.tp", "2"}, 86});
}

TEST(StepWaits, MixtureOfExperts) {
  check({"moe fp32 dp2 ep1", &kMoe, {}, 42});
  check({"moe bf16 dp2 ep2", &kMoe, {"--train.precision", "bf16", "--parallel.ep", "2"}, 94});
  check({"moe fp32 dp2 ep2 ZeRO-3", &kMoe, {"--parallel.ep", "2", "--parallel.zero", "3"}, 196});
}

}  // namespace test_step_waits
}  // namespace meshtrain::test

// Counted training steps (common/counted_step.hpp): the trainer's own pieces, set up as
// train/trainer.cpp does for one rank without a pipeline, and its training_step().
#include "common/counted_step.hpp"

#include "io/token_shard.hpp"
#include "parallel/topology.hpp"
#include "state/model_state.hpp"
#include "train/batch_loader.hpp"
#include "train/data_order.hpp"
#include "train/training_groups.hpp"
#include "train/training_step.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace meshtrain::test {

std::vector<KokkosCounts> count_training_steps(const Config& cfg, const std::string& workdir, int warmup, int counted) {
  // Installed before the state is allocated, so that its allocations are live ranges too.
  KokkosCounters::install();
  const int micro_batch = cfg.train.micro_batch, seq_len = cfg.model.seq_len;
  const int accum = cfg.train.global_batch / micro_batch;

  // Tokens enough for every step's windows, below the vocabulary.
  const int steps = warmup + counted;
  const std::size_t tokens = std::size_t(steps) * cfg.train.global_batch * seq_len + 1;
  std::vector<std::uint16_t> data(tokens);
  std::uint32_t x = 12345;
  for (auto& t : data) {
    x = x * 1664525u + 1013904223u;
    t = std::uint16_t((x >> 8) % std::uint32_t(cfg.model.vocab));
  }
  std::filesystem::create_directories(workdir);
  // One file per process (test passes may run side by side), gone once mapped.
  const std::string shard =
      (std::filesystem::path(workdir) / ("counted_step_tokens_" + std::to_string(::getpid()) + ".bin")).string();
  io::write_token_shard(shard, data);
  const io::TokenStream stream = io::TokenStream::open(shard);
  std::filesystem::remove(shard);
  DataOrder order(stream.size(), seq_len, cfg.train.global_batch, SampleOrder::sequential, 1);

  ExecSpace space;
  const Topology topology(MPI_COMM_WORLD, Layout{});
  // The device path's waits: the collectives ordered as a device orders them (parallel/stream_standin.hpp),
  // not the host fences of the MPI backend.
  setenv("MESHTRAIN_STREAM_STANDIN", "1", 1);
  TrainingGroups groups(CommBackend::mpi, topology, space, "", cfg.model.ties_output_head());
  unsetenv("MESHTRAIN_STREAM_STANDIN");
  BatchLoader loader(stream, order, micro_batch, seq_len);
  ModelState state(
      space, cfg,
      StateGroups{groups.tp.get(), groups.dp.get(), groups.tied.get(), MPI_COMM_WORLD, groups.ep.get(), &groups.edp()},
      StagePlace{});
  state.initialize(std::uint64_t(cfg.train.seed));
  const StepShape shape{accum, 1, 1, false, gradient_scale(micro_batch, seq_len, accum, 1)};

  // A skipped step (non-finite values) would issue another step's work: refuse to count it.
  const auto run = [&](std::int64_t step) {
    const StepResult r = training_step(cfg, shape, step, state, loader, groups);
    if (!r.applied() || !std::isfinite(r.loss)) {
      throw std::runtime_error("count_training_steps: step " + std::to_string(step) + " was not applied (loss " +
                               std::to_string(r.loss) + ")");
    }
  };
  std::int64_t step = 0;
  for (; step < warmup; ++step) run(step);
  std::vector<KokkosCounts> counts;
  for (; step < steps; ++step) counts.push_back(count_kokkos([&] { run(step); }));
  return counts;
}

StepBudget step_budget(const ModelConfig& model, int accum) {
  const long moe = model.moe_blocks(), dense = model.layers - moe;
  return {30 * dense + 50 * moe + 20, 3L * accum + 3 + moe * accum, 1 + moe * accum};
}

BudgetExcess budget_excess(const KokkosCounts& counts, const StepBudget& budget) {
  return {counts.launches() - budget.launches,
          counts.reductions() + counts.deep_copy_count() - budget.reductions_and_copies,
          counts.host_wait_count() - budget.host_waits};
}

}  // namespace meshtrain::test

// The training loop: set-up, the step (forward, backward, reduction, update), metrics, leaving.
#include "train/trainer.hpp"

#include "core/agreement.hpp"
#include "core/errors.hpp"
#include "core/kernel_backend.hpp"
#include "io/checkpoint_dir.hpp"
#include "io/metrics_writer.hpp"
#include "io/token_shard.hpp"
#include "kernels/blas_info.hpp"
#include "model/gpt2.hpp"
#include "optim/schedule.hpp"
#include "parallel/comm.hpp"
#include "parallel/schedule.hpp"
#include "parallel/timed_comm.hpp"
#include "parallel/topology.hpp"
#include "core/accumulation.hpp"
#include "train/batch_loader.hpp"
#include "train/checkpointing.hpp"
#include "train/data_order.hpp"
#include "train/memory_report.hpp"
#include "train/model_state.hpp"
#include "state/state_memory.hpp"
#include "train/pipeline_executor.hpp"
#include "train/process_age.hpp"
#include "train/progress.hpp"
#include "train/rank_timing.hpp"
#include "train/stop_signals.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace meshtrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

io::TokenStream open_training_data(const Config& cfg) {
  if (cfg.data.train.empty()) {
    input_error("data.train is not set: give a token shard or a glob of them (make one with meshtrain prepare)");
  }
  io::TokenStream stream = io::TokenStream::open(cfg.data.train);
  stream.require_vocab(cfg.model.vocab);
  return stream;
}

// Why a job leaves before train.steps, or nothing.
std::string reason_to_leave(const Config& cfg, std::int64_t steps_this_job, double elapsed_s, double longest_step_s,
                            double last_save_s) {
  if (int sig = stop_signal_received()) return fmt::format("received signal {}", sig);
  if (cfg.train.stop_after > 0 && steps_this_job >= cfg.train.stop_after) {
    return fmt::format("train.stop_after = {} steps reached", cfg.train.stop_after);
  }
  // Leave while one more step and a save still fit in the limit.
  if (cfg.train.time_limit > 0 && elapsed_s + longest_step_s + last_save_s > cfg.train.time_limit * 60.0) {
    return fmt::format("train.time_limit = {} min would be exceeded by another step", cfg.train.time_limit);
  }
  return {};
}

// The first and the last stage of one pipeline (same dp and tp rank): they share the tied wte.
MPI_Comm tied_embedding_comm(const Topology& topology) {
  const int stage = topology.position().pp_rank, last = topology.layout().pp - 1;
  MPI_Comm tied = MPI_COMM_NULL;
  MPI_Comm_split(topology.pp_comm(), stage == 0 || stage == last ? 0 : MPI_UNDEFINED, stage, &tied);
  return tied;
}

// NCCL serves tensors in GPU memory; it needs a CUDA build that has it.
#if defined(MESHTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
constexpr bool nccl_usable = true;
#else
constexpr bool nccl_usable = false;
#endif

// The collectives of one group: parallel.backend `nccl`, or `auto` on a build whose tensors live
// on the GPU, use NCCL on the execution space's stream; otherwise MPI.
std::unique_ptr<Comm> open_group(const std::string& backend, MPI_Comm group, const ExecSpace& space) {
#if defined(MESHTRAIN_HAVE_NCCL) && defined(KOKKOS_ENABLE_CUDA)
  if (backend != "mpi") return make_nccl_comm(group, space.cuda_stream());
#endif
  (void)backend;
  (void)space;
  return make_mpi_comm(group);
}

// Every rank leaves at the same step boundary: if any rank has a reason (a signal reaches ranks at
// different moments, clocks differ), all leave. Returns rank 0's account of why, or nothing.
std::string agree_to_leave(MPI_Comm comm, const std::string& mine) {
  int leave = mine.empty() ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &leave, 1, MPI_INT, MPI_MAX, comm);
  if (leave == 0) return {};
  return mine.empty() ? std::string("another rank asked to leave") : mine;
}

// Loads the first candidate that loads and verifies. Under checkpoint.resume = auto a checkpoint
// that cannot be used (corrupt, truncated, missing) gives way to the next newest, saying so; a named
// one is used or refused. Collective; a refusal is an AgreedInputError on every rank.
TrainingProgress resume(Checkpointer& checkpointer, const std::vector<std::string>& candidates, const Config& cfg,
                        const TrainingTensors& tensors, bool leader) {
  std::vector<std::string> refused;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    try {
      const auto start = Clock::now();
      const TrainingProgress progress = checkpointer.load(candidates[i], tensors);
      if (leader) {
        fmt::print("resumed from {} at step {} (read and verified in {:.3f}s)\n", candidates[i], progress.step,
                   seconds_since(start));
        if (progress.samples != progress.step * std::int64_t(cfg.train.global_batch)) {
          fmt::print("train.global_batch = {} differs from the checkpoint's run: the data continues at sample {} of "
                     "the data order\n",
                     cfg.train.global_batch, progress.samples);
        }
      }
      return progress;
    } catch (const AgreedInputError& e) {
      if (cfg.checkpoint.resume != "auto") throw;
      refused.push_back(fmt::format("{}: {}", candidates[i], e.what()));
      if (leader && i + 1 < candidates.size()) {
        fmt::print("checkpoint.resume = auto: {} is unusable ({}); falling back to {}\n", candidates[i], e.what(),
                   candidates[i + 1]);
        std::fflush(stdout);
      }
    }
  }
  input_error("checkpoint.resume = auto: no checkpoint in {} can be used:\n  {}\nHINT: move them away to start "
              "afresh, or name one with checkpoint.resume",
              cfg.checkpoint.dir, fmt::join(refused, "\n  "));
}

}  // namespace

int train(const Config& cfg, MPI_Comm comm) {
  // From the start, so that Slurm's warning during a long set-up is not fatal.
  install_stop_signal_handlers();
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const bool leader = rank == 0;
  const int B = cfg.train.micro_batch, T = cfg.model.seq_len;

  // Everything that can reject the input happens before anything is written, and all ranks agree
  // on the verdict before going further.
  Layout grid;
  int accum = 0;
  io::TokenStream stream = agree_on_input(comm, [&] {
    if (cfg.parallel.backend == "nccl" && !nccl_usable) {
      input_error("parallel.backend = nccl needs a CUDA build of meshtrain with NCCL; this one keeps tensors in host "
                  "memory (valid here: mpi, auto)");
    }
    grid = Topology::resolve(cfg.parallel, cfg.model, world);
    accum = accumulation_steps(cfg, grid.dp);
    require_model_fits(cfg.model, B, 3, "the config", parse_recompute(cfg.train.recompute));
    return open_training_data(cfg);
  });
  DataOrder order = agree_on_input(comm, [&] {
    return DataOrder(stream.size(), T, cfg.train.global_batch, cfg.data.order, cfg.train.seed);
  });
  const Topology topology(comm, grid);
  const int dp = grid.dp, dp_rank = topology.position().dp_rank;
  ExecSpace space;
  double comm_seconds = 0;  // time inside collectives, all groups together
  const std::unique_ptr<Comm> dp_comm =
      make_timed_comm(open_group(cfg.parallel.backend, topology.dp_comm(), space), comm_seconds);
  const std::unique_ptr<Comm> tp_comm =
      make_timed_comm(open_group(cfg.parallel.backend, topology.tp_comm(), space), comm_seconds);
  double idle_seconds = 0;  // time a pipeline stage waits for its neighbours
  const std::unique_ptr<Comm> pp_comm =
      make_timed_comm(open_group(cfg.parallel.backend, topology.pp_comm(), space), idle_seconds);
  const std::unique_ptr<Comm> model_comm =
      make_timed_comm(open_group(cfg.parallel.backend, topology.model_comm(), space), comm_seconds);
  const StagePlace place{topology.position().pp_rank, grid.pp};
  // The first and last stage both hold the tied wte; their gradients are summed between them.
  std::unique_ptr<Comm> tied_comm;
  if (grid.pp > 1) {
    MPI_Comm tied = tied_embedding_comm(topology);  // collective over the pipeline group
    if (tied != MPI_COMM_NULL) {
      tied_comm = make_timed_comm(open_group(cfg.parallel.backend, tied, space), comm_seconds);
      MPI_Comm_free(&tied);  // the Comm keeps a duplicate
    }
  }
  const std::vector<Action> schedule =
      grid.pp > 1 ? pipeline_schedule(cfg.parallel.schedule, grid.pp, place.stage, accum) : std::vector<Action>();
  RankTiming timing;

  // This rank's micro-batches are samples dp_rank·(accum·B) … of each step (interface section 4).
  BatchLoader loader(stream, order, B, T, dp_rank * accum);
  const auto allocation_start = Clock::now();
  ModelState state(space, cfg, StateGroups{tp_comm.get(), dp_comm.get(), tied_comm.get(), comm}, place,
                   PipelineParts{schedule, &loader, pp_comm.get()});
  const ParameterLayout& layout = state.layout();
  const double allocation_s = seconds_since(allocation_start);

  Checkpointer checkpointer(cfg, layout, comm);
  bool fresh = true;  // neither resumed nor given initial weights
  const TrainingProgress start = agree_on_input(comm, [&] {
    TrainingProgress progress;
    const std::vector<std::string> candidates = checkpointer.resume_candidates();
    fresh = candidates.empty() && cfg.checkpoint.init_weights.empty();
    if (!candidates.empty()) {
      progress = resume(checkpointer, candidates, cfg, state.checkpoint_tensors(), leader);
    } else if (!cfg.checkpoint.init_weights.empty()) {
      checkpointer.load_weights(cfg.checkpoint.init_weights, state.checkpoint_tensors().weights);
      if (leader) fmt::print("initial weights from {}\n", cfg.checkpoint.init_weights);
    }
    // The checkpoint directory must be usable before any work is done that would need saving.
    if (leader) io::ensure_directory(cfg.checkpoint.dir);
    return progress;
  });
  // Collective under ZeRO (gathers), so outside the agreement above, which may leave early on one rank's error.
  double initialization_s = -1;
  if (fresh) {
    const auto initialization_start = Clock::now();
    state.initialize(cfg.train.seed);
    initialization_s = seconds_since(initialization_start);
  } else {
    state.loaded();
  }
  TrainingProgress progress = start;
  state.restore_scaler(start);
  order.continue_from(start.step, std::uint64_t(start.samples));
  const bool background_saves = cfg.checkpoint.async && checkpointer.background_possible();
  if (cfg.checkpoint.async && !background_saves && leader) {
    fmt::print("checkpoint.async: this MPI library does not provide MPI_THREAD_MULTIPLE; saving synchronously\n");
  }
  const std::size_t snapshot =
      background_saves ? checkpoint_snapshot_bytes(layout, dp, dp_rank, ZeroStage{cfg.parallel.zero}) : 0;
  const MemoryBytes memory =
      state.memory() + MemoryBytes::of(MemoryCategory::workspace, std::int64_t(loader.bytes() + snapshot));

  const std::string grid_table = topology.describe();
  if (leader) {
    fmt::print("{}\n", grid_table);
    fmt::print("{}\n", kernel_backend_line());
    if (const auto warning = wait_policy_warning()) fmt::print("{}\n", *warning);
    fmt::print("model: {} layers, {} heads, d_model {}, vocab {}, seq_len {}: {:.2f}M parameters\n", cfg.model.layers,
               cfg.model.heads, cfg.model.d_model, cfg.model.vocab, T, ParameterLayout(cfg.model).total() / 1e6);
    // Where the work runs, as this build resolved it (a GPU check reads it rather than guessing).
    fmt::print("compute: Kokkos {} ({}), collectives {}\n", ExecSpace::name(), MemSpace::name(), dp_comm->backend());
    fmt::print("data: {} tokens in {} shard(s), {} windows, order {}\n", stream.size(), stream.paths().size(),
               order.windows(), cfg.data.order);
    fmt::print("{}\n", effective_batch_line(B, dp, accum, T));
    // The library behind every GEMM, and the fix when OpenBLAS runs generic kernels here.
    const BlasInfo blas = blas_info();
    fmt::print("{}\n", blas_line(blas));
    const std::string blas_advice = blas_warning(blas, host_cpu_vectors());
    if (!blas_advice.empty()) fmt::print("{}\n", blas_advice);
  }
  const std::string memory_start = memory_table(comm, grid, memory, "at start");
  if (leader) {
    fmt::print("{}", memory_start);
    fmt::print("{}\n", startup_line(process_age_s(), allocation_s, initialization_s));
    std::fflush(stdout);
  }
  if (progress.step >= cfg.train.steps) {
    if (leader) fmt::print("nothing to do: the checkpoint is at step {} of train.steps = {}\n", progress.step, cfg.train.steps);
    return exit_code::finished;
  }

  io::MetricsWriter metrics =
      agree_on_input(comm, [&] { return io::MetricsWriter(leader ? cfg.log.metrics : std::string()); });
  const double flops_token = flops_per_token(layout);
  const std::int64_t tokens_per_step = std::int64_t(cfg.train.global_batch) * T;
  // Each rank's gradients are its share of the mean over the global batch; the dp sum completes it.
  const float grad_scale = 1.0f / float(std::int64_t(B) * T * accum * dp);

  const auto job_start = Clock::now();
  double longest_step_s = 0, last_save_s = 0;
  std::int64_t steps_this_job = 0;
  std::string leave_reason;
  while (progress.step < cfg.train.steps) {
    const auto step_start = Clock::now();
    const double comm_before = comm_seconds, idle_before = idle_seconds;
    const std::int64_t i = progress.step;  // 0-based index of this update

    state.zero_grads();
    double loss = 0;
    if (grid.pp == 1) {
      for (int micro = 0; micro < accum; ++micro) {
        loader.load(i, micro);
        loss += state.forward(loader.inputs(), loader.targets(), grad_scale);
        if (micro == accum - 1) state.arm();  // the last pass finishes the gradients
        state.backward(loader.inputs());
      }
    } else {
      loss = state.run_pipeline(i, grad_scale);  // the last stage's; the others add zero below
      pp_comm->allreduce_sum(&loss, 1);
    }
    state.finish_gradients();
    dp_comm->allreduce_sum(&loss, 1);
    loss /= double(accum) * dp;

    const double grad_norm = state.grad_norm();
    const double lr = learning_rate(cfg.optim, cfg.train.steps, i);
    const double clip = clip_scale(grad_norm, cfg.optim.grad_clip);
    const bool applied = state.update(cfg.optim, lr, clip, i, grad_norm);
    if (!applied && leader) {
      fmt::print("step {}: fp16 gradients overflowed: update skipped, loss scale backs off to {:g}\n", i + 1,
                  state.loss_scale());
    }
    space.fence();
    ++progress.step;
    ++steps_this_job;
    progress.tokens += tokens_per_step;
    progress.samples += cfg.train.global_batch;

    const double step_s = seconds_since(step_start);
    longest_step_s = std::max(longest_step_s, step_s);
    timing.add_step(step_s, comm_seconds - comm_before, idle_seconds - idle_before);
    const double elapsed = seconds_since(job_start);
    StepReport report{};
    report.step = progress.step;
    report.steps = cfg.train.steps;
    report.loss = loss;
    report.lr = lr;
    report.grad_norm = grad_norm;
    report.tokens = progress.tokens;
    report.step_time_s = step_s;
    report.tokens_per_s = tokens_per_step / step_s;
    report.model_flops_per_s = report.tokens_per_s * flops_token;
    report.mfu = cfg.log.peak_tflops > 0 ? report.model_flops_per_s / (cfg.log.peak_tflops * 1e12 * world) : 0;
    report.elapsed_s = elapsed;
    report.eta_s = elapsed / steps_this_job * double(cfg.train.steps - progress.step);
    report.memory = &memory;
    report.loss_scale = cfg.train.precision == "fp16" ? state.loss_scale() : 0.0;
    report.skipped = !applied;
    report.peak_rss = peak_rss_bytes();
    if (leader) {
      metrics.write(metrics_record(report));
      if (progress.step % cfg.log.every == 0 || progress.step == cfg.train.steps || progress.step == 1) {
        fmt::print("{}\n", progress_line(report));
        std::fflush(stdout);
      }
    }
    if (!std::isfinite(loss)) {
      // Saving a diverged state would overwrite a good `latest`; stop with what was last saved.
      throw std::runtime_error(fmt::format("loss became {} at step {}: training diverged (try a lower optim.lr)", loss,
                                           progress.step));
    }

    const bool finished = progress.step == cfg.train.steps;
    if (finished || (cfg.log.timing_every > 0 && progress.step % cfg.log.timing_every == 0)) {
      const std::string table =
          timing.report(comm, progress.step, grid.pp > 1 ? ideal_bubble_fraction(grid.pp, accum) : -1.0);
      if (leader) fmt::print("{}", table);
    }
    leave_reason = finished ? std::string()
                            : agree_to_leave(comm, reason_to_leave(cfg, steps_this_job, elapsed, longest_step_s,
                                                                   last_save_s));
    const auto report_background_save = [&] {
      if (!background_saves) return;
      if (const auto done = checkpointer.poll()) {
        last_save_s = std::max(last_save_s, done->write_s);
        if (leader) fmt::print("saved {} in the background ({:.3f}s)\n", done->path, done->write_s);
      }
    };
    report_background_save();
    const bool periodic = cfg.checkpoint.every > 0 && progress.step % cfg.checkpoint.every == 0;
    if (finished || periodic || !leave_reason.empty()) {
      // The job's last save is synchronous: it must be complete before the job leaves.
      const bool background = background_saves && !finished && leave_reason.empty();
      state.save_scaler(progress);
      const std::string path = io::checkpoint_path(cfg.checkpoint.dir, progress.step);
      const auto save_start = Clock::now();
      checkpointer.wait();  // the previous background save, reported first
      report_background_save();
      checkpointer.save(state.checkpoint_tensors(), progress, background);
      const double held_s = seconds_since(save_start);
      if (background) {
        if (leader) fmt::print("saving {} in the background (training held {:.3f}s)\n", path, held_s);
      } else {
        last_save_s = held_s;
        if (leader) fmt::print("saved {} ({:.3f}s)\n", path, held_s);
      }
    }
    if (!leave_reason.empty()) {
      const std::string memory_end = memory_table(comm, grid, memory, "at the end");
      if (leader) {
        fmt::print("{}", memory_end);
        fmt::print("leaving at step {} of {}: {}; resume with checkpoint.resume = auto (exit code {})\n", progress.step,
                   cfg.train.steps, leave_reason, exit_code::requeue);
      }
      return exit_code::requeue;
    }
  }
  const std::string memory_end = memory_table(comm, grid, memory, "at the end");
  if (leader) {
    fmt::print("{}", memory_end);
    fmt::print("finished {} steps in {}\n", cfg.train.steps, format_duration(seconds_since(job_start)));
  }
  return exit_code::finished;
}

}  // namespace meshtrain

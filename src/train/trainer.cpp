// The training loop, as phases: set-up (the parallelisms applied as ordered steps, in the
// constructor of TrainingRun), the start (resume or initialise), then per step the step itself,
// its metrics, the save, and the decision to leave. share/docs/design.md, "The training loop".
#include "train/trainer.hpp"

#include "checkpoint/checkpointer.hpp"
#include "core/agreement.hpp"
#include "core/elapsed.hpp"
#include "core/errors.hpp"
#include "core/kernel_backend.hpp"
#include "core/lora_targets.hpp"
#include "core/mpi_check.hpp"
#include "io/metrics_writer.hpp"
#include "io/tokenizer.hpp"
#include "kernels/blas_info.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "parallel/topology.hpp"
#include "parallel/watchdog.hpp"
#include "plan/lora_plan.hpp"
#include "state/model_state.hpp"
#include "state/state_memory.hpp"
#include "train/batch_loader.hpp"
#include "train/leaving.hpp"
#include "train/memory_report.hpp"
#include "train/process_age.hpp"
#include "train/progress.hpp"
#include "train/rank_timing.hpp"
#include "train/run_input.hpp"
#include "train/run_outputs.hpp"
#include "train/run_start.hpp"
#include "train/save_policy.hpp"
#include "train/stop_signals.hpp"
#include "train/training_groups.hpp"
#include "train/training_step.hpp"
#include "train/validation.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace meshtrain {
namespace {

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is MPI initialized, and the communicator valid?");
  return rank;
}

// Where this rank's rows of each sequence sit: its cp rank's two chunks, or the whole sequence at cp 1.
ContextChunks context_chunks(const Layout& grid, const GridPosition& position, int seq_len) {
  return grid.cp > 1 ? ContextChunks::of_rank(position.cp_rank, grid.cp, seq_len) : ContextChunks{};
}

int comm_size(MPI_Comm comm) {
  int size = 1;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size), "is MPI initialized, and the communicator valid?");
  return size;
}

// The schedule of this rank's pipeline stage, or none without a pipeline.
std::vector<Action> stage_schedule(const Config& cfg, const Layout& grid, StagePlace place, int accum) {
  if (grid.pp == 1) return {};
  return pipeline_schedule(cfg.parallel.schedule, grid.pp, place.stage, accum);
}

// One training run on this rank. The members are the set-up's steps, made in declaration order.
class TrainingRun {
 public:
  TrainingRun(const Config& cfg, MPI_Comm comm);
  int run();

 private:
  void print_start(double initialization_s) const;
  int nothing_to_do(const TrainingProgress& progress) const;
  // Per step: the metrics record (every step) and the progress line (every log.every). Why the
  // record could not be written (rank 0), or nothing.
  std::string log_step(io::MetricsWriter& metrics, const StepReport& report) const;
  StepReport step_report(const StepResult& result, const TrainingProgress& progress, double step_s, double elapsed_s,
                         std::int64_t steps_this_job) const;
  void print_timing(std::int64_t step, bool finished);
  int leave_early(const TrainingProgress& progress, const std::string& reason) const;
  // A log output could not be written: the job has saved and leaves (share/docs/usage.md, A log
  // that cannot be written).
  int leave_log_failed(const TrainingProgress& progress) const;
  // A skipped step's line; stopping on a non-finite step (share/docs/usage.md, Non-finite values).
  void report_skip(const StepResult& result, std::int64_t step) const;
  int stop_nonfinite(const StepResult& result, std::int64_t step, const std::string& log_failure) const;
  int finish(Clock::time_point job_start) const;

  const Config& cfg_;
  const MPI_Comm comm_;
  const int world_;
  const bool leader_;
  // 1. The input, before anything is written: every check that can refuse the config or the data
  //    runs on every rank, and all agree on the verdict, so a bad input leaves nothing on disk.
  RunInput input_;
  // 2. The grid before the groups: the Topology splits the world into the dp, tp and pp groups of
  //    the layout that step 1 resolved (and checked against the world size).
  const Topology topology_;
  const StagePlace place_;
  ExecSpace space_;
  // 3. The groups before the state: the model's layers (tp), the gradient reducer and the ZeRO
  //    shards (dp) and the pipeline (pp) are built around them. The tied-embedding group is split
  //    from the pipeline group, so it comes last (training_groups.cpp).
  TrainingGroups groups_;
  // 4. The schedule before the state: it sizes the activation slots the model allocates (one per
  //    micro-batch a stage holds at once).
  const std::vector<Action> schedule_;
  // 5. The loader before the state, which hands it to the pipeline executor: this rank's
  //    micro-batches are samples dp_rank·(accum·B) … of each step (share/docs/usage.md, Data).
  BatchLoader loader_;
  const StepShape shape_;
  // 5b. Validation's own loader over data.valid (none without it): this rank's share of each pass.
  Validation validation_;
  // 6. The state: weights, gradients, optimizer moments, ZeRO shards and activations, allocated
  //    once. Its allocation time is reported in the start-up line.
  const Clock::time_point allocation_start_ = Clock::now();
  ModelState state_;
  const double allocation_s_;
  // 7. The checkpointer after the state: it plans its pieces from the state's layout.
  Checkpointer checkpointer_;
  MemoryBytes memory_;  // the state's and the workspace's, once the start has settled the saves
  RankTiming timing_;
};

TrainingRun::TrainingRun(const Config& cfg, MPI_Comm comm)
    : cfg_(cfg),
      comm_(comm),
      world_(comm_size(comm)),
      leader_(comm_rank(comm) == 0),
      input_(agree_on_run_input(cfg, comm)),
      topology_(comm, input_.grid),
      place_{topology_.position().pp_rank, input_.grid.pp},
      // No tied group under LoRA: the frozen wte has no gradient for the first and last stage to sum.
      groups_(cfg.parallel.backend, topology_, space_, cfg.log.traffic,
              cfg.model.ties_output_head() && !cfg.model.lora.enabled()),
      schedule_(stage_schedule(cfg, input_.grid, place_, input_.accum)),
      loader_(input_.data, cfg.train.micro_batch, cfg.model.seq_len, topology_.position().dp_rank * input_.accum,
              space_, context_chunks(input_.grid, topology_.position(), cfg.model.seq_len)),
      shape_{input_.accum,
             input_.grid.dp,
             input_.grid.cp,
             input_.grid.pp > 1,
             gradient_scale(cfg.train.micro_batch, cfg.model.seq_len, input_.accum, input_.grid.dp),
             cfg.train.global_batch},
      validation_(cfg, input_.valid ? &*input_.valid : nullptr, input_.grid, topology_.position().dp_rank, space_,
                  context_chunks(input_.grid, topology_.position(), cfg.model.seq_len)),
      state_(space_, cfg,
             StateGroups{groups_.tp.get(), groups_.dp.get(), groups_.tied.get(), comm, groups_.ep.get(), &groups_.edp(),
                         groups_.cp.get()},
             place_, PipelineParts{schedule_, &loader_, groups_.pp.get()},
             input_.data.packed() ? LossTerm::token_sum : LossTerm::micro_batch_mean),
      allocation_s_(seconds_since(allocation_start_)),
      checkpointer_(cfg, state_.layout(), comm, input_.tokenizer) {}

int TrainingRun::run() {
  const RunStart start = start_run(cfg_, comm_, checkpointer_, state_, input_.data.order());
  SavePolicy saves(cfg_, checkpointer_, leader_);
  const std::size_t snapshot =
      saves.background_saves()
          ? checkpoint_snapshot_bytes(state_.layout(), input_.grid.replicas(),
                                      topology_.position().replica_rank(input_.grid), ZeroStage{cfg_.parallel.zero})
          : 0;
  memory_ = state_.memory() +
            MemoryBytes::of(MemoryCategory::workspace, std::int64_t(loader_.bytes() + validation_.bytes() + snapshot));
  print_start(start.initialization_s);
  TrainingProgress progress = start.progress;
  if (progress.step >= cfg_.train.steps) return nothing_to_do(progress);

  io::MetricsWriter metrics = agree_on_input(comm_, [&] { return open_run_logs(cfg_, leader_); });
  const auto job_start = Clock::now();
  double longest_step_s = 0;
  std::int64_t steps_this_job = 0;
  while (progress.step < cfg_.train.steps) {
    // The step.
    const auto step_start = Clock::now();
    const double comm_before = groups_.comm_seconds, idle_before = groups_.idle_seconds,
                 all_to_all_before = groups_.all_to_all_seconds;
    groups_.traffic.begin_step();
    // One Kokkos Tools region a step, so that a profiler (bench/gpu/kernel_timer.cpp) tells the step's
    // kernels and fences from start-up's, validation's and saving's. Free without a tool.
    Kokkos::Profiling::pushRegion("meshtrain::training_step");
    const StepResult result = training_step(cfg_, shape_, progress.step, state_, loader_, groups_);
    Kokkos::Profiling::popRegion();
    std::string log_failure;  // rank 0's: a log that could not be written ends the job after a save
    try {
      groups_.traffic.end_step(comm_, topology_.position(), progress.step + 1 == cfg_.train.steps);
    } catch (const io::LogWriteFailed& e) {
      log_failure = e.what();
    }
    report_skip(result, progress.step + 1);
    ++progress.step;
    ++steps_this_job;
    progress.tokens += std::int64_t(cfg_.train.global_batch) * cfg_.model.seq_len;
    progress.samples += cfg_.train.global_batch;

    // Its metrics.
    const double step_s = seconds_since(step_start);
    longest_step_s = std::max(longest_step_s, step_s);
    timing_.add_step(step_s, groups_.comm_seconds - comm_before, groups_.idle_seconds - idle_before,
                     groups_.all_to_all_seconds - all_to_all_before, state_.take_pipeline_seconds());
    const double elapsed = seconds_since(job_start);
    const std::optional<MoeStepMetrics> moe =
        step_moe_metrics(state_.router_statistics(), cfg_.model, topology_.position().tp_rank == 0, comm_);
    StepReport report = step_report(result, progress, step_s, elapsed, steps_this_job);
    if (moe) report.moe = &*moe;
    if (result.outcome != StepOutcome::stopped && validation_.due(progress.step)) {
      report.validation = validation_.evaluate(state_, groups_, shape_.pipelined, space_);
    }
    const std::string metrics_failure = log_step(metrics, report);
    if (log_failure.empty()) log_failure = metrics_failure;
    if (result.outcome == StepOutcome::stopped) return stop_nonfinite(result, progress.step, log_failure);
    const bool finished = progress.step == cfg_.train.steps;
    print_timing(progress.step, finished);

    // Leave or go on, saving first where the policy says so. A log that cannot be written ends the
    // job like a failed save would, but with this step saved first.
    const Leaving leaving = agree_to_leave(
        comm_,
        finished ? std::string() : reason_to_leave(cfg_, steps_this_job, elapsed, longest_step_s, saves.last_save_s()),
        log_failure);
    if (leaving.log_failed && leader_) {
      fmt::print(stderr, "meshtrain train: error: {}\nsaving a checkpoint at step {}, then leaving (exit code {})\n",
                 leaving.reason, progress.step, exit_code::log_failed);
      std::fflush(stderr);
    }
    if (saves.after_step(state_, progress, finished, leaving.leave && !finished) == SaveOutcome::give_up) {
      return exit_code::save_failed;  // SavePolicy has said why
    }
    if (leaving.log_failed) return leave_log_failed(progress);
    if (leaving.leave && !finished) return leave_early(progress, leaving.reason);
  }
  return finish(job_start);
}

// The start banner: the grid, where the work runs, the model, the data, the batch, the GEMM
// library, the memory by category and the start-up times.
void TrainingRun::print_start(double initialization_s) const {
  const std::string grid_table = topology_.describe();
  if (leader_) {
    fmt::print("{}\n", grid_table);
    fmt::print("{}\n", kernel_backend_line());
    if (const auto warning = wait_policy_warning()) fmt::print("{}\n", *warning);
    fmt::print("model: {} layers, {} heads, d_model {}, vocab {}, seq_len {}: {}\n", cfg_.model.layers,
               cfg_.model.heads, cfg_.model.d_model, cfg_.model.vocab, cfg_.model.seq_len,
               parameter_count_text(cfg_.model));
    if (cfg_.model.lora.enabled()) {
      // What PEFT's print_trainable_parameters tells: the share LoRA trains.
      const LoraConfig& lora = cfg_.model.lora;
      const std::int64_t trainable = lora_trainable_parameters(cfg_.model);
      const std::int64_t all = full_trainable_parameters(cfg_.model) + trainable;
      fmt::print("LoRA: rank {} on {}, alpha {}{}: {} trainable parameters of {} ({:.3f} %), the base frozen in {}\n",
                 lora.rank, fmt::join(lora_target_names(cfg_.model), ","), lora.alpha, lora.rslora ? " (rsLoRA)" : "",
                 trainable, all, 100.0 * double(trainable) / double(all), cfg_.train.precision);
    }
    // Where the work runs, as this build resolved it (a GPU check reads it rather than guessing).
    fmt::print("compute: Kokkos {} ({}), collectives {}\n", ExecSpace::name(), MemSpace::name(), groups_.dp->backend());
    fmt::print("{}\n", input_.data.summary(cfg_.data.order));
    if (validation_.enabled()) fmt::print("{}\n", validation_.summary());
    if (!input_.tokenizer.path.empty()) {
      fmt::print("tokenizer: {} (xxh64 {})\n", input_.tokenizer.path, io::hash_hex(input_.tokenizer.hash));
    }
    fmt::print("{}\n", effective_batch_line(cfg_.train.micro_batch, input_.grid.dp, input_.accum, cfg_.model.seq_len));
    // The library behind every GEMM, and the fix when OpenBLAS runs generic kernels here.
    const BlasInfo blas = blas_info();
    fmt::print("{}\n", blas_line(blas));
    const std::string blas_advice = blas_warning(blas, host_cpu_vectors());
    if (!blas_advice.empty()) fmt::print("{}\n", blas_advice);
  }
  const std::string memory_start = memory_table(comm_, input_.grid, memory_, "at start");
  if (leader_) {
    fmt::print("{}", memory_start);
    fmt::print("{}\n", startup_line(process_age_s(), allocation_s_, initialization_s));
    std::fflush(stdout);
  }
}

int TrainingRun::nothing_to_do(const TrainingProgress& progress) const {
  if (leader_) {
    fmt::print("nothing to do: the checkpoint is at step {} of train.steps = {}\n", progress.step, cfg_.train.steps);
  }
  return exit_code::finished;
}

StepReport TrainingRun::step_report(const StepResult& result, const TrainingProgress& progress, double step_s,
                                    double elapsed_s, std::int64_t steps_this_job) const {
  StepReport report{};
  report.step = progress.step;
  report.steps = cfg_.train.steps;
  report.loss = result.loss;
  report.lr = result.lr;
  report.grad_norm = result.grad_norm;
  report.tokens = progress.tokens;
  report.loss_targets = result.loss_targets;
  report.step_time_s = step_s;
  report.tokens_per_s = std::int64_t(cfg_.train.global_batch) * cfg_.model.seq_len / step_s;
  // The FLOPs the run computes per token: LoRA's base computes no weight gradients (plan/lora_plan.hpp).
  report.model_flops_per_s = report.tokens_per_s * training_stage_flops(cfg_.model, 0, 1).total;
  report.mfu = cfg_.log.peak_tflops > 0 ? report.model_flops_per_s / (cfg_.log.peak_tflops * 1e12 * world_) : 0;
  report.elapsed_s = elapsed_s;
  report.eta_s = elapsed_s / steps_this_job * double(cfg_.train.steps - progress.step);
  report.memory = &memory_;
  report.loss_scale = cfg_.train.precision == Precision::fp16 ? state_.loss_scale() : 0.0;
  report.skipped = result.outcome == StepOutcome::overflow_skipped || result.outcome == StepOutcome::nonfinite_skipped;
  report.nonfinite = result.outcome == StepOutcome::nonfinite_skipped || result.outcome == StepOutcome::stopped;
  report.peak_rss = peak_rss_bytes();
  return report;
}

std::string TrainingRun::log_step(io::MetricsWriter& metrics, const StepReport& report) const {
  if (!leader_) return {};
  std::string failure;
  const nlohmann::json record = metrics_record(report);
  try {
    metrics.write(record);
  } catch (const io::LogWriteFailed& e) {
    // The record goes to the job's log instead, so that the step's figures are not lost.
    failure = fmt::format("{}; the record of step {} that it lacks: {}", e.what(), report.step, record.dump());
  }
  if (report.step % cfg_.log.every == 0 || report.step == cfg_.train.steps || report.step == 1 || report.validation) {
    fmt::print("{}\n", progress_line(report));
    std::fflush(stdout);
  }
  return failure;
}

// The per-rank timing table, every log.timing_every steps and at the end. Collective.
void TrainingRun::print_timing(std::int64_t step, bool finished) {
  if (!finished && (cfg_.log.timing_every <= 0 || step % cfg_.log.timing_every != 0)) return;
  const int pp = input_.grid.pp, micros = input_.accum;
  const PipelineSchedule schedule = cfg_.parallel.schedule;
  // The measured idle beside 1F1B's closed form and the schedule's lists simulated at the measured compute, with
  // sends as the executor posts them (eager: it waits for a send only where its buffer is written next).
  const PipelineTiming pipeline{ideal_bubble_fraction(pp, micros),
                                schedule == PipelineSchedule::zero_bubble_h1 ? "1F1B's bubble" : "schedule bubble",
                                topology_.position().pp_rank,
                                pp,
                                micros,
                                [&](const std::vector<ScheduleCosts>& costs) {
                                  std::vector<std::vector<Action>> lists;
                                  for (int s = 0; s < pp; ++s)
                                    lists.push_back(pipeline_schedule(schedule, pp, s, micros));
                                  return simulate_schedule(lists, costs, SendSemantics::eager).idle_fraction;
                                }};
  const std::string table = timing_.report(comm_, step, pp > 1 ? &pipeline : nullptr);
  if (leader_) fmt::print("{}", table);
}

int TrainingRun::leave_early(const TrainingProgress& progress, const std::string& reason) const {
  const std::string memory_end = memory_table(comm_, input_.grid, memory_, "at the end");
  if (leader_) {
    fmt::print("{}", memory_end);
    fmt::print("leaving at step {} of {}: {}; resume with checkpoint.resume = auto (exit code {})\n", progress.step,
               cfg_.train.steps, reason, exit_code::requeue);
  }
  return exit_code::requeue;
}

int TrainingRun::leave_log_failed(const TrainingProgress& progress) const {
  const std::string memory_end = memory_table(comm_, input_.grid, memory_, "at the end");
  if (leader_) {
    fmt::print("{}", memory_end);
    std::fflush(stdout);
    const bool finished = progress.step == cfg_.train.steps;
    fmt::print(stderr,
               "meshtrain train: {} at step {} of {} with its checkpoint saved, but a log output could not be written "
               "(the message above names it): make room for it{} (exit code {})\n",
               finished ? "training finished" : "leaving", progress.step, cfg_.train.steps,
               finished ? "" : ", then resume with checkpoint.resume = auto", exit_code::log_failed);
  }
  return exit_code::log_failed;
}

void TrainingRun::report_skip(const StepResult& result, std::int64_t step) const {
  if (!leader_) return;
  if (result.outcome == StepOutcome::overflow_skipped) {
    fmt::print("step {}: fp16 gradients overflowed: update skipped, loss scale backs off to {:g}\n", step,
               state_.loss_scale());
  } else if (result.outcome == StepOutcome::nonfinite_skipped) {
    fmt::print("{}\n", state_.describe(result.outcome, step, result.values()));
  }
}

// Saving a diverged state would overwrite a good `latest`: every rank has the same verdict and
// leaves here with what was last saved.
int TrainingRun::stop_nonfinite(const StepResult& result, std::int64_t step, const std::string& log_failure) const {
  if (leader_) {
    std::fflush(stdout);
    if (!log_failure.empty()) fmt::print(stderr, "meshtrain train: warning: {}\n", log_failure);
    fmt::print(stderr, "meshtrain train: {}\n", state_.describe(result.outcome, step, result.values()));
  }
  return exit_code::nonfinite;
}

int TrainingRun::finish(Clock::time_point job_start) const {
  const std::string memory_end = memory_table(comm_, input_.grid, memory_, "at the end");
  if (leader_) {
    fmt::print("{}", memory_end);
    fmt::print("finished {} steps in {}\n", cfg_.train.steps, format_duration(seconds_since(job_start)));
  }
  return exit_code::finished;
}

}  // namespace

int train(const Config& cfg, MPI_Comm comm) {
  // From the start, so that Slurm's warning during a long set-up is not fatal.
  install_stop_signal_handlers();
  const Watchdog watchdog(comm, cfg.parallel.timeout);  // from the set-up on: its collectives can hang too
  TrainingRun run(cfg, comm);
  return run.run();
}

}  // namespace meshtrain

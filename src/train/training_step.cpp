// One optimizer step, as the training loop runs it.
#include "train/training_step.hpp"

#include "core/injected_fault.hpp"
#include "core/mpi_check.hpp"
#include "optim/lr_schedule.hpp"

#include <mpi.h>

#include <chrono>
#include <limits>
#include <thread>

namespace meshtrain {
namespace {

// Whether test fault `name` (core/injected_fault.hpp) fires in step `i` (0-based) on this rank of
// `world`, the run's world communicator.
bool fault_fires_in(const char* name, std::int64_t i, MPI_Comm world) {
  if (injected_faults().empty()) return false;
  return fault_fires(name, i + 1, mpi::rank_of(world));
}

// A rank that is alive but slow, or stuck outside communication, for the watchdog to report.
void stall_if_injected(const Config& cfg, std::int64_t i, MPI_Comm world) {
  if (!fault_fires_in("stall", i, world)) return;
  const double seconds = cfg.parallel.timeout > 0 ? 3 * cfg.parallel.timeout : 4.0;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// The weights of the step's terms (share/docs/usage.md, Packing and the fine-tuning loss). Plain data:
// every target carries loss, each rank's share of the global batch's mean is shape.grad_scale per
// target. Fine-tuning data: the step's objective is the sum over its global batch's loss-carrying
// targets divided by their count, which every rank counts alike from the packing, so no layout can
// change it; a step without any weighs nothing. MoE auxiliary losses weigh as a micro-batch's mean on both.
LossWeights step_weights(const StepShape& shape, const BatchLoader& loader, std::int64_t i, std::int64_t& targets) {
  const double micro_batches = double(shape.accum) * double(shape.dp);
  if (!loader.packed()) {
    targets = 0;
    return {shape.grad_scale, 1.0 / micro_batches};
  }
  targets = loader.step_loss_targets(i, shape.global_batch);
  return {targets > 0 ? 1.0 / double(targets) : 0.0, 1.0 / micro_batches};
}

}  // namespace

float gradient_scale(int micro_batch, int seq_len, int accum, int dp) {
  return 1.0f / float(std::int64_t(micro_batch) * seq_len * accum * dp);
}

StepResult training_step(const Config& cfg, const StepShape& shape, std::int64_t i, ModelState& state,
                         BatchLoader& loader, TrainingGroups& groups) {
  StepResult r;
  stall_if_injected(cfg, i, groups.world);
  state.zero_grads();
  if (fault_fires_in("nan_gradient", i, groups.world)) state.poison_next_gradient();
  // The micro-batches' mean losses are summed in device memory and summed over the groups there
  // (a device backend's Comm takes no host pointer); the host reads the sum once, at the end.
  const LossSum& loss = state.step_loss();
  const LossWeights weights = step_weights(shape, loader, i, r.loss_targets);
  if (!shape.pipelined) {
    for (int micro = 0; micro < shape.accum; ++micro) {
      loader.load(i, micro);
      state.forward(loader.batch(), weights);
      if (micro == shape.accum - 1) state.arm();  // the last pass finishes the gradients
      state.backward(loader.inputs());
    }
  } else {
    state.run_pipeline(i, weights);  // the last stage's sum; the others add zero below
    groups.pp->allreduce_sum(loss.data(), 1);
  }
  state.finish_gradients();
  // A rank that skips it goes on to the gradient norm's all-reduce over the world and waits there.
  if (!fault_fires_in("skip_collective", i, groups.world)) groups.dp->allreduce_sum(loss.data(), 1);
  // The step's one wait for the device: the loss sum with the gradient's Σ g². The sum of the
  // micro-batches' means over accum·dp of them (each cp rank's mean over its rows, 1/cp of the micro-batch's:
  // accum·dp·cp of those), or of token losses over their count.
  const ModelState::StepSums sums = state.read_step_sums();
  const double total = sums.loss;
  if (loss.term() == LossTerm::micro_batch_mean) {
    r.loss = total / (double(shape.accum) * shape.dp * shape.cp);
  } else {
    r.loss = r.loss_targets > 0 ? total / double(r.loss_targets) : 0.0;
  }
  if (fault_fires_in("inf_loss", i, groups.world)) r.loss = std::numeric_limits<double>::infinity();

  const StepValues agreed = state.agreed_values(r.loss, sums.grad_squared_norm);
  r.loss = agreed.loss;
  r.grad_norm = agreed.grad_norm;
  r.lr = learning_rate(cfg.optim, cfg.train.steps, i);
  const double clip = clip_scale(r.grad_norm, cfg.optim.grad_clip);
  r.outcome = state.update(cfg.optim, r.lr, clip, i, agreed);
  return r;
}

}  // namespace meshtrain

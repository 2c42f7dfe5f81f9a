// One optimizer step: the micro-batches forward and backward (or the pipeline schedule), the
// gradients' reduction, the global norm and clipping, and the AdamW update.
#pragma once

#include "core/config.hpp"
#include "state/model_state.hpp"
#include "train/batch_loader.hpp"
#include "train/training_groups.hpp"

#include <cstdint>

namespace meshtrain {

// The step's shape: the same every step of a run.
struct StepShape {
  int accum = 1;           // micro-batches per rank
  int dp = 1;              // data-parallel ranks
  int cp = 1;              // context-parallel ranks: each holds 1/cp of every micro-batch's positions
  bool pipelined = false;  // parallel.pp > 1: the schedule runs the micro-batches
  // 1 / (B·T·accum·dp), T the whole sequence: each rank's share of the global batch's mean per target (plain
  // data; a context-parallel rank's targets weigh as any other's).
  float grad_scale = 1.0f;
  int global_batch = 1;  // G: the step's samples (fine-tuning data counts their loss-carrying targets)
};

struct StepResult {
  double loss =
      0;  // mean over the global batch's loss-carrying targets, the same on every rank (agreed when non-finite)
  std::int64_t loss_targets = 0;  // how many (fine-tuning data; 0 on plain data, where every target is)
  double lr = 0;
  double grad_norm = 0;  // before clipping
  StepOutcome outcome = StepOutcome::applied;
  bool applied() const { return outcome == StepOutcome::applied; }
  StepValues values() const { return {loss, grad_norm}; }
};

// Step `i` (0-based). Collective over every group. The host waits for the device once, for the loss
// and the gradient norm (ModelState::read_step_sums); the update it enqueues then is not waited for.
StepResult training_step(const Config& cfg, const StepShape& shape, std::int64_t i, ModelState& state,
                         BatchLoader& loader, TrainingGroups& groups);

// 1 / (B·T·accum·dp): each rank's gradients are its share of the mean over the global batch; the dp
// sum completes it.
float gradient_scale(int micro_batch, int seq_len, int accum, int dp);

}  // namespace meshtrain

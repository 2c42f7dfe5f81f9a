// The model states of one rank — weights, gradients, AdamW moments — and the model that computes
// with them, for any ZeRO stage and precision. The training loop talks to this one object; whether
// the states are whole (stage 0: flat buffers, gradients all-reduced in buckets that overlap
// backward) or sharded over the data-parallel group (stages 1–3, train/zero_state.hpp), and whether
// the model computes on them (fp32) or on a 16-bit copy of them (bf16/fp16,
// train/low_precision_copy.hpp), is decided here once.
#pragma once

#include "core/config.hpp"
#include "model/gpt2.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"
#include "train/checkpointing.hpp"
#include "train/gradient_reducer.hpp"
#include "train/loss_scaler.hpp"
#include "train/low_precision_copy.hpp"
#include "train/pipeline_executor.hpp"
#include "train/memory_ledger.hpp"
#include "train/state_source.hpp"
#include "train/zero_state.hpp"

#include <memory>
#include <optional>

namespace meshtrain {

// The groups a rank's model states talk to.
struct StateGroups {
  Comm* tp = nullptr;    // tensor-parallel group (inside the model's layers)
  Comm* dp = nullptr;    // data-parallel group (gradient reduction, ZeRO shards)
  Comm* tied = nullptr;  // first and last pipeline stage of one pipeline (the tied wte), or none
  MPI_Comm world = MPI_COMM_NULL;  // every rank: the gradient norm's sum
};

class ModelState {
 public:
  // `pipeline`: the stage's schedule (its activation slots), loader and group; empty without pipeline.
  ModelState(const ExecSpace& space, const Config& cfg, const StateGroups& groups, StagePlace place,
             const PipelineParts& pipeline = {});
  ~ModelState();

  const ParameterLayout& layout() const { return layout_; }
  MemoryBytes memory() const;

  void initialize(std::uint64_t seed);
  // The states as checkpoints read and write them (fp32 master weights); after a load, call loaded().
  TrainingTensors checkpoint_tensors();
  void loaded();

  // One micro-batch through the model (without pipeline): mean loss; gradients scaled by grad_scale.
  double forward(CVec<int> inputs, CVec<int> targets, double grad_scale);
  void backward(CVec<int> inputs);
  // One step of the pipeline schedule: Σ of the micro-batches' mean losses (last stage; 0 elsewhere).
  double run_pipeline(std::int64_t step, double grad_scale);

  // One step's gradients: zero_grads(); arm() before the last backward pass of the step (pipeline
  // schedules, which interleave micro-batches, never arm); backward reports to ready_from();
  // finish_gradients() completes the data-parallel mean and the tied wte sum.
  void zero_grads();
  void arm();
  Gpt2<float>::ReadyFrom ready_from();
  void finish_gradients();

  // Global L2 norm of the gradient, every parameter counted once. Collective over the world.
  double grad_norm();
  // AdamW step `i` (0-based) at rate `lr`, gradients scaled by `clip`, unless the gradients
  // overflowed (grad_norm not finite) under fp16 loss scaling: then the step is skipped, the scale
  // backs off, and update() returns false.
  bool update(const OptimConfig& optim, double lr, double clip, std::int64_t i, double grad_norm);
  double loss_scale() const { return scaler_.scale(); }
  // The loss scaler's state for a checkpoint (progress.loss_scale 0 under fp32/bf16), and back.
  void save_scaler(TrainingProgress& progress) const;
  void restore_scaler(const TrainingProgress& progress);

 private:
  float* master(const TensorInfo& t);
  float* fp32_grad(const TensorInfo& t);

  ExecSpace space_;
  StateGroups groups_;
  int zero_;
  std::unique_ptr<ZeroState> sharded_;  // stages 1–3
  ParameterLayout layout_;
  std::unique_ptr<Gpt2<float>> model_;  // fp32: computes on the states
  std::optional<PipelineExecutor<float>> executor_;
  // Stage 0 only: whole buffers (fp32: the model's weights and gradients; else master weights and
  // fp32 gradients here), the moments, the bucketed reducer and the checkpoint sources.
  Buffer<float> master_, grads32_;
  Buffer<float> exp_avg_, exp_avg_sq_;
  std::optional<GradientReducer> reducer_;
  std::unique_ptr<FlatSource> sources_[3];
  std::unique_ptr<LowPrecisionCopy> low_;  // bf16/fp16: the model computes on this copy
  bool fp16_;
  LossScaler scaler_;
};

}  // namespace meshtrain

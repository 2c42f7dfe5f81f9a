// The model states of one rank — weights, gradients, AdamW moments — and the model that computes
// with them, for any ZeRO stage and precision. The training loop talks to this one object, which
// composes three parts and decides nothing itself:
//
//   OptimizerState (state/optimizer_state.hpp)  the fp32 side: master weights, fp32 gradients and
//                  their data-parallel reduction, moments, held as the ZeRO stage says;
//   WorkingCopy<Real> (state/working_copy.hpp)  where the model computes: the fp32 states
//                  themselves, or their 16-bit copy;
//   the model family's LanguageModel<Real> over that copy, and with pipeline parallelism its stage's
//   executor.
#pragma once

#include "checkpoint/checkpointer.hpp"
#include "core/config.hpp"
#include "model/language_model.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"
#include "state/loss_scaler.hpp"
#include "state/nonfinite_policy.hpp"
#include "state/optimizer_state.hpp"
#include "train/pipeline_executor.hpp"

#include <functional>
#include <memory>

namespace meshtrain {

// The groups a rank's model states talk to.
struct StateGroups {
  Comm* tp = nullptr;              // tensor-parallel group (inside the model's layers)
  Comm* dp = nullptr;              // the replicas (gradient reduction, ZeRO shards): dp × cp ranks under cp
  Comm* tied = nullptr;            // first and last pipeline stage of one pipeline (the tied wte), or none
  MPI_Comm world = MPI_COMM_NULL;  // every rank: the gradient norm's sum
  // Expert parallelism (parallel.ep): the ep ranks of the dp group that split each MoE block's
  // experts (its rank: which experts this rank holds; none: ep 1), and the expert-data-parallel
  // group, the dp / ep ranks holding the same experts, which reduces and shards them (none: dp).
  Comm* ep = nullptr;
  Comm* edp = nullptr;
  // Context parallelism (parallel.cp): the ranks holding one sequence's chunks, around which attention
  // passes K/V blocks (none: cp 1).
  Comm* cp = nullptr;
};

// A pipeline stage's schedule, its micro-batches and its group (none without pipeline).
struct PipelineParts {
  std::vector<Action> schedule;
  BatchLoader* loader = nullptr;
  Comm* pp = nullptr;
};

// The model in its precision over its WorkingCopy (state/model_state.cpp).
class Computation {
 public:
  virtual ~Computation() = default;
  // Adds the micro-batch's loss term to `sum` (device memory); dlogits scaled by
  // weights.per_target · loss_scale, its MoE auxiliary losses by weights.per_micro_batch · loss_scale.
  virtual void forward(const MicroBatch& batch, const LossWeights& weights, double loss_scale, const LossSum& sum) = 0;
  // Backward; each finished range reaches the reduction (through fp32, ÷ loss_scale, for 16 bits).
  virtual void backward(CVec<int> inputs, double loss_scale) = 0;
  // One step of the pipeline schedule: adds the micro-batches' loss terms to `sum` (last stage only).
  virtual void run_pipeline(std::int64_t step, const LossWeights& weights, double loss_scale, const LossSum& sum) = 0;
  // Forward only (validation): the micro-batch's loss term joins `sum`; no gradient is kept.
  virtual void evaluate(const MicroBatch& batch, const LossSum& sum) = 0;
  // The same for `micro_batches` micro-batches of `loader`'s step 0 through the pipeline stages, one
  // after another (the last stage's sum; the others add nothing).
  virtual void evaluate_pipeline(BatchLoader& loader, int micro_batches, const LossSum& sum) = 0;
  // The master weights changed: the model's weights agree with them on return.
  virtual void publish() = 0;
  // LoRA: the frozen base's layout (null without LoRA), and its weights from `read`, which loads a
  // checkpoint's tensors of that layout into the source it is given.
  virtual const ParameterLayout* frozen_layout() const = 0;
  virtual void load_frozen_base(const std::function<void(const ParameterLayout&, StateSource&)>& read) = 0;
  // Test-only (injected fault nan_gradient): the next backward pass turns the first element of this
  // rank's first counted gradient tensor into NaN before the data-parallel reduction hears of it.
  virtual void poison_next_gradient() = 0;
  // Bytes: the typed copy, activations, GEMM workspace.
  virtual MemoryBytes memory() const = 0;
  // What the stage's routers saw since the step began (model/router_statistics.hpp).
  virtual RouterStatistics router_statistics() const = 0;
  virtual void clear_router_statistics() = 0;
  // A pipeline stage's compute seconds by action kind since the last call (PipelineExecutor's; none
  // without a pipeline).
  virtual ScheduleCosts take_pipeline_seconds() = 0;
};

class ModelState {
 public:
  // `pipeline`: the stage's schedule (its activation slots), loader and group; empty without pipeline.
  // `term`: what each micro-batch adds to step_loss() (its mean on plain data, its sum on fine-tuning data).
  ModelState(const ExecSpace& space, const Config& cfg, const StateGroups& groups, StagePlace place,
             const PipelineParts& pipeline = {}, LossTerm term = LossTerm::micro_batch_mean);
  ~ModelState();

  // The trainable tensors' layout: the model's, or under LoRA (model.lora) its adapters'.
  const ParameterLayout& layout() const { return optimizer_.layout(); }
  // LoRA: the frozen base's layout (null without LoRA) and its weights from `read` (see Computation).
  const ParameterLayout* frozen_layout() const { return compute_->frozen_layout(); }
  void load_frozen_base(const std::function<void(const ParameterLayout&, StateSource&)>& read) {
    compute_->load_frozen_base(read);
  }
  MemoryBytes memory() const { return optimizer_.memory() + compute_->memory(); }

  void initialize(std::uint64_t seed);
  // The states as checkpoints read and write them (fp32 master weights); after a load, call loaded().
  TrainingTensors checkpoint_tensors() { return optimizer_.checkpoint_tensors(); }
  void loaded() { compute_->publish(); }

  // One micro-batch through the model (without pipeline): its loss term joins step_loss(); its
  // terms weigh `weights` in the step's objective.
  void forward(const MicroBatch& batch, const LossWeights& weights) {
    compute_->forward(batch, weights, scaler_.scale(), loss_);
  }
  void backward(CVec<int> inputs) { compute_->backward(inputs, scaler_.scale()); }
  // One step of the pipeline schedule: the micro-batches' loss terms join step_loss() on the last
  // stage (the others' stays 0).
  void run_pipeline(std::int64_t step, const LossWeights& weights) {
    compute_->run_pipeline(step, weights, scaler_.scale(), loss_);
  }
  // Validation (train/validation.hpp): forward passes only, their loss terms into `sum`.
  void evaluate(const MicroBatch& batch, const LossSum& sum) { compute_->evaluate(batch, sum); }
  void evaluate_pipeline(BatchLoader& loader, int micro_batches, const LossSum& sum) {
    compute_->evaluate_pipeline(loader, micro_batches, sum);
  }
  // Σ of the step's micro-batch loss terms so far, in device memory (kernels/loss_sum.hpp): their
  // means on plain data, their sums on fine-tuning data (ModelState's `term`).
  const LossSum& step_loss() const { return loss_; }

  // One step's gradients: zero_grads() (which also zeroes step_loss()); arm() before the last
  // backward pass of the step (pipeline schedules, which interleave micro-batches, never arm);
  // finish_gradients() completes the data-parallel mean and the tied wte sum.
  void zero_grads() {
    optimizer_.reduction().start_step();
    compute_->clear_router_statistics();
    loss_.clear(space_);
  }
  // The step's router statistics of this rank's MoE blocks (empty without them).
  RouterStatistics router_statistics() const { return compute_->router_statistics(); }
  ScheduleCosts take_pipeline_seconds() { return compute_->take_pipeline_seconds(); }
  void arm() { optimizer_.reduction().arm(); }
  void finish_gradients() { optimizer_.reduction().finish(groups_.tied); }

  // The step's one wait for the device (issue 42): the loss sum (step_loss(), once the groups have
  // summed it) and this rank's share of the gradient's Σ g², copied to the host together.
  struct StepSums {
    double loss = 0;
    double grad_squared_norm = 0;
  };
  StepSums read_step_sums() const;
  // The step's values every rank decides on, collective over the world (a host all-reduce of two
  // doubles): the global L2 norm of the gradient (every parameter counted once, from each rank's
  // `grad_squared_norm`) and `loss`, this rank's mean loss of the step, or a non-finite value on
  // every rank when it is non-finite on any.
  StepValues agreed_values(double loss, double grad_squared_norm) const;
  // AdamW step `i` (0-based) at rate `lr`, gradients scaled by `clip`, unless the policy
  // (state/nonfinite_policy.hpp) says otherwise: then the weights and moments stay as they are.
  StepOutcome update(const OptimConfig& optim, double lr, double clip, std::int64_t i, const StepValues& values);
  // The line a skipped or stopped step prints (`step` 1-based).
  std::string describe(StepOutcome outcome, std::int64_t step, const StepValues& values) const {
    return nonfinite_.describe(outcome, step, values);
  }
  // Test-only: MESHTRAIN_INJECT_FAULT=nan_gradient (core/injected_fault.hpp), for the coming backward.
  void poison_next_gradient() { compute_->poison_next_gradient(); }
  double loss_scale() const { return scaler_.scale(); }
  // The loss scaler's state for a checkpoint (progress.loss_scale 0 under fp32/bf16), and back.
  void save_scaler(TrainingProgress& progress) const;
  void restore_scaler(const TrainingProgress& progress);

 private:
  ExecSpace space_;
  StateGroups groups_;
  OptimizerState optimizer_;
  std::unique_ptr<Computation> compute_;
  bool fp16_;
  LossScaler scaler_;
  NonfinitePolicy nonfinite_;
  LossSum loss_;
};

}  // namespace meshtrain

// The model states of one rank — weights, gradients, AdamW moments — and the model that computes
// with them, for any ZeRO stage. The training loop talks to this one object; whether the states
// are whole (stage 0: the model owns flat buffers, gradients are all-reduced in buckets that overlap
// backward) or sharded over the data-parallel group (stages 1–3, train/zero_state.hpp) is decided
// here once.
#pragma once

#include "core/config.hpp"
#include "model/gpt2.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"
#include "train/checkpointing.hpp"
#include "train/gradient_reducer.hpp"
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
  // `slots`: activation sets the pipeline schedule keeps alive (1 without pipeline).
  ModelState(const ExecSpace& space, const Config& cfg, const StateGroups& groups, StagePlace place, int slots);

  Gpt2<float>& model() { return model_; }
  const ParameterLayout& layout() const { return model_.layout(); }
  MemoryBytes memory() const;

  void initialize(std::uint64_t seed);
  // The states as checkpoints read and write them; after a load, call loaded().
  TrainingTensors checkpoint_tensors();
  void loaded();

  // One step's gradients: zero_grads(); arm() before the last backward pass of the step (pipeline
  // schedules, which interleave micro-batches, never arm); backward reports to ready_from();
  // finish_gradients() completes the data-parallel mean and the tied wte sum.
  void zero_grads();
  void arm();
  Gpt2<float>::ReadyFrom ready_from();
  void finish_gradients();

  // Global L2 norm of the gradient, every parameter counted once. Collective over the world.
  double grad_norm();
  // AdamW step `i` (0-based) at rate `lr`, gradients scaled by `clip`.
  void update(const OptimConfig& optim, double lr, double clip, std::int64_t i);

 private:
  ExecSpace space_;
  StateGroups groups_;
  int zero_;
  std::unique_ptr<ZeroState> sharded_;  // stages 1–3
  Gpt2<float> model_;
  // Stage 0 only: the whole moments, the bucketed reducer and the checkpoint sources.
  Buffer<float> exp_avg_, exp_avg_sq_;
  std::optional<GradientReducer> reducer_;
  std::unique_ptr<FlatSource> sources_[3];
};

}  // namespace meshtrain

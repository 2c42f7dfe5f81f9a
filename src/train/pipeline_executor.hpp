// Runs one stage's pipeline schedule (parallel/pipeline_schedule.hpp) for one optimizer step: receives and
// sends activations and gradients point-to-point over the pipeline group, and runs the stage's
// forward and backward per micro-batch, each micro-batch's activations in a slot of their own. A zero-bubble
// list's split backward runs as LanguageModel::stage_backward_input, then stage_backward_weight, which frees
// the slot and reports backward's progress to the data-parallel reduction.
//
// Semantics, as the schedule generators and their simulator assume: actions run strictly in list
// order; messages between two stages match in order (the micro-batch is the tag). A send is posted
// in its place and completes later (never later than its buffer's next write), which can only let a
// stage run ahead of the simulator's blocking sends, never wait where it would not.
#pragma once

#include "model/language_model.hpp"
#include "parallel/comm.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "train/batch_loader.hpp"

#include <utility>
#include <vector>

namespace meshtrain {

// Over a LanguageModel<Real> of any precision: activations and gradients travel in Real.
template <class Real>
class PipelineExecutor {
 public:
  // `ready_from` receives backward's progress reports (ZeRO-2/3 reduce each unit as it finishes).
  // `seed` (train.seed) keys the draws of the micro-batches it runs (LanguageModel::set_micro_batch_draw).
  PipelineExecutor(std::vector<Action> actions, LanguageModel<Real>& model, BatchLoader& loader, Comm& pipeline,
                   typename LanguageModel<Real>::ReadyFrom ready_from = {}, std::uint64_t seed = 0);

  // Runs the step's schedule with the terms weighed by `weights` (the fp16 loss scale included); the
  // last stage adds each micro-batch's loss term to `sum` (in device memory), the others add nothing.
  void run(std::int64_t step, const LossWeights& weights, const LossSum& sum);
  // Forward only (validation): `micro_batches` micro-batches of `loader`'s step 0, one after
  // another through the stages in slot 0 — receive, forward, send — each stage running the same
  // count; the last stage adds their loss terms to `sum`.
  void evaluate(BatchLoader& loader, int micro_batches, const LossSum& sum);
  // The wall seconds of run()'s compute actions since the last call, by kind (a whole backward's as
  // backward_input): the host's time, which is the compute's where kernels run on the host.
  ScheduleCosts take_compute_seconds() { return std::exchange(compute_seconds_, ScheduleCosts{}); }

 private:
  int take_slot(int micro);
  // Loads micro-batch `micro` of `step` again and names its documents and draw for its slot's backward.
  void reload(std::int64_t step, int micro);
  // The elements a stage passes on per micro-batch: all its rows, or this tp rank's block of them under
  // sequence parallelism (the stage's input buffer, as large as its output).
  std::size_t activation_elements() const { return model_.stage_input(0).extent(0); }

  std::vector<Action> actions_;
  LanguageModel<Real>& model_;
  BatchLoader& loader_;
  Comm& pipeline_;
  typename LanguageModel<Real>::ReadyFrom ready_from_;
  std::uint64_t seed_;
  std::vector<int> slot_of_;
  std::vector<int> free_slots_;
  std::vector<Request> activation_sends_;  // by slot: the activation send in flight from stage_output(slot)
  ScheduleCosts compute_seconds_;
};

// Activation slots a schedule needs at most, and how many of them wait for their weight gradients at once.
inline ActivationSlots pipeline_slots(const std::vector<Action>& actions) {
  return {peak_live_activations(actions), peak_deferred_weights(actions)};
}

extern template class PipelineExecutor<float>;
extern template class PipelineExecutor<bf16>;
extern template class PipelineExecutor<fp16>;

}  // namespace meshtrain

// Runs one stage's pipeline schedule (parallel/schedule.hpp) for one optimizer step: receives and
// sends activations and gradients point-to-point over the pipeline group, and runs the stage's
// forward and backward per micro-batch, each micro-batch's activations in a slot of their own.
//
// Semantics, as the schedule generators and their simulator assume: actions run strictly in list
// order; sends may block until the neighbour receives; messages between two stages match in order
// (the micro-batch is the tag).
#pragma once

#include "model/gpt2.hpp"
#include "parallel/comm.hpp"
#include "parallel/schedule.hpp"
#include "train/batch_loader.hpp"

#include <vector>

namespace meshtrain {

class PipelineExecutor {
 public:
  // `ready_from` receives backward's progress reports (ZeRO-2/3 reduce each unit as it finishes).
  PipelineExecutor(std::vector<Action> actions, Gpt2<float>& model, BatchLoader& loader, Comm& pipeline,
                   Gpt2<float>::ReadyFrom ready_from = {});

  // Activation slots the schedule needs at most.
  static int slots_needed(const std::vector<Action>& actions) { return peak_live_activations(actions); }

  // Runs the step's schedule; returns Σ over micro-batches of their mean loss (last stage; 0 elsewhere).
  double run(std::int64_t step, float grad_scale);

 private:
  int take_slot(int micro);

  std::vector<Action> actions_;
  Gpt2<float>& model_;
  BatchLoader& loader_;
  Comm& pipeline_;
  Gpt2<float>::ReadyFrom ready_from_;
  std::vector<int> slot_of_;
  std::vector<int> free_slots_;
};

}  // namespace meshtrain

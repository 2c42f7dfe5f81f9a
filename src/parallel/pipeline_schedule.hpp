// Pipeline schedules as data (share/docs/design.md, Parallelism): a generator lists, for one stage, the
// actions it performs in order; an executor runs the list; the bubble and the activation memory
// can be computed from the lists and compared with what the timers measure.
#pragma once

#include "core/config.hpp"

#include <string>
#include <vector>

namespace meshtrain {

enum class ActionKind {
  recv_activation,  // from the previous stage, for micro-batch `micro`
  forward,
  send_activation,  // to the next stage
  recv_gradient,    // from the next stage
  backward,
  send_gradient,  // to the previous stage
};

struct Action {
  ActionKind kind;
  int micro;  // micro-batch index, 0-based
  bool operator==(const Action&) const = default;
};

// The actions of `stage` (0-based) of `stages` for `micros` micro-batches. The first stage has no
// recv_activation/send_gradient, the last no send_activation/recv_gradient.
std::vector<Action> gpipe_schedule(int stages, int stage, int micros);
std::vector<Action> one_f_one_b_schedule(int stages, int stage, int micros);
// The schedule parallel.schedule names.
std::vector<Action> pipeline_schedule(PipelineSchedule schedule, int stages, int stage, int micros);

// Most micro-batches whose activations a stage holds at once (forwarded, not yet backwarded).
int peak_live_activations(const std::vector<Action>& actions);
// The same for pipeline_schedule(schedule, stages, stage, micros), without building its O(micros)
// actions: gpipe holds every micro-batch, 1f1b min(stages − stage, micros).
int live_activations(PipelineSchedule schedule, int stages, int stage, int micros);

struct ScheduleTiming {
  double makespan;       // time until the last stage's last action ends
  double idle_fraction;  // Σ idle time over stages / (stages · makespan)
};

// Runs all stages' lists against each other with blocking point-to-point semantics (a send
// completes when the matching receive is posted), forward costing `forward_cost` and backward
// `backward_cost`, communication free. Throws std::logic_error naming the stuck actions when the
// lists deadlock or do not match.
ScheduleTiming simulate_schedule(const std::vector<std::vector<Action>>& stages, double forward_cost,
                                 double backward_cost);

// (p − 1) / (m + p − 1): the idle fraction of GPipe and 1F1B with equal stages.
double ideal_bubble_fraction(int stages, int micros);

std::string to_string(const Action& action);

}  // namespace meshtrain

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
  backward,         // the input's gradient and the weights' together
  send_gradient,    // to the previous stage
  // Zero-bubble schedules split backward in two: the input's gradient (what send_gradient sends on), and
  // the weights' gradients, which wait for an idle slot. The activations live until the second.
  backward_input,
  backward_weight,
};

struct Action {
  ActionKind kind;
  int micro;  // micro-batch index, 0-based
  // Interleaved schedules: which of the rank's model chunks, 0-based; chunk c of stage s is virtual stage
  // c · stages + s, whose activations go to virtual stage c · stages + s + 1 (stage 0's chunk c + 1 after
  // the last stage's chunk c).
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

// The actions of `stage` (0-based) of `stages` for `micros` micro-batches. The first stage has no
// recv_activation/send_gradient, the last no send_activation/recv_gradient.
std::vector<Action> gpipe_schedule(int stages, int stage, int micros);
std::vector<Action> one_f_one_b_schedule(int stages, int stage, int micros);
// The schedule parallel.schedule names.
std::vector<Action> pipeline_schedule(PipelineSchedule schedule, int stages, int stage, int micros);

// Schedules with smaller bubbles (parallel/pipeline_bubble_schedules.cpp). Their lists are safe under
// eager sends (SendSemantics::eager), not synchronous ones.
// Megatron-LM's interleaved 1F1B: each stage holds `chunks` model chunks; micros a multiple of stages.
std::vector<Action> interleaved_schedule(int stages, int stage, int micros, int chunks);
// ZB-H1 (Qi et al., zero bubble pipeline parallelism): 1F1B with each backward split into its input
// gradient, sent on at once, and its weight gradients, of which stage s defers s into the cool-down.
std::vector<Action> zero_bubble_h1_schedule(int stages, int stage, int micros);

// Most micro-batches whose activations a stage holds at once (forwarded, not yet backwarded; under a
// zero-bubble schedule, not yet through backward_weight); of an interleaved list, chunk-micro-batches.
int peak_live_activations(const std::vector<Action>& actions);
// The same for pipeline_schedule(schedule, stages, stage, micros), without building its O(micros)
// actions: gpipe holds every micro-batch, 1f1b min(stages − stage, micros), zb-h1 min(stages, micros).
int live_activations(PipelineSchedule schedule, int stages, int stage, int micros);
// Most micro-batches whose weight gradients wait at once (through backward_input, not yet through
// backward_weight), and the same for pipeline_schedule's list: zb-h1 min(stage + 1, micros), the others none.
int peak_deferred_weights(const std::vector<Action>& actions);
int deferred_weights(PipelineSchedule schedule, int stages, int stage, int micros);

struct ScheduleTiming {
  double makespan;                 // time until the last stage's last action ends
  double idle_fraction;            // Σ idle time over stages / (stages · makespan)
  std::vector<double> stage_idle;  // each stage's makespan − its compute
};

// What each compute action costs: backward is backward_input + backward_weight.
struct ScheduleCosts {
  double forward = 0, backward_input = 0, backward_weight = 0;
};

// synchronous: a send completes when the matching receive is posted (the worst case; see the source).
// eager: a send completes at once and its data is there from then on (an isend waited later).
enum class SendSemantics { synchronous, eager };

// Runs all stages' lists against each other, communication free. Throws std::logic_error naming the
// stuck actions when the lists deadlock or do not match.
ScheduleTiming simulate_schedule(const std::vector<std::vector<Action>>& stages, const ScheduleCosts& costs,
                                 SendSemantics sends = SendSemantics::synchronous);
// The same with each stage's own costs (stage_costs[s] for stages[s]: stages of unequal work, as measured).
ScheduleTiming simulate_schedule(const std::vector<std::vector<Action>>& stages,
                                 const std::vector<ScheduleCosts>& stage_costs,
                                 SendSemantics sends = SendSemantics::synchronous);
// Synchronous sends, forward costing `forward_cost` and backward `backward_cost`.
ScheduleTiming simulate_schedule(const std::vector<std::vector<Action>>& stages, double forward_cost,
                                 double backward_cost);

// (p − 1) / (m + p − 1): the idle fraction of GPipe and 1F1B with equal stages.
double ideal_bubble_fraction(int stages, int micros);
// (p − 1) / (v·m + p − 1): interleaved 1F1B's with v chunks per stage (its bubble ÷ v).
double interleaved_bubble_fraction(int stages, int micros, int chunks);
// ZB-H1's idle time per stage, (p − 1)(F + B − W) for W ≤ F (1F1B's is (p − 1)(F + B + W)), m ≥ p.
double zero_bubble_h1_idle(int stages, const ScheduleCosts& costs);

std::string to_string(const Action& action);
// A list as its actions' to_string, space-separated ("F0 sendA0 recvG0 B0").
std::string to_string(const std::vector<Action>& actions);

}  // namespace meshtrain

// Pipeline schedules as data: the GPipe and 1F1B generators, and a simulator that runs all stages'
// lists against each other to check them and to time them.
//
// What an executor must do with a list (the simulator models exactly this):
//   - Each stage runs its own list strictly in order, one action at a time.
//   - forward/backward compute micro-batch `micro` on this stage.
//   - send_activation(i) on stage s is received by recv_activation(i) on stage s + 1;
//     send_gradient(i) on stage s is received by recv_gradient(i) on stage s − 1. Activations only
//     flow s → s + 1 and gradients only s + 1 → s, so messages on one directed pair match in list
//     order (FIFO: MPI's non-overtaking rule with one tag is enough; tagging by micro-batch adds a
//     check). The simulator insists that the matched actions name the same micro-batch.
//   - recv_* blocks until the data has arrived.
//   - send_* may be synchronous: it may block until the peer has posted the matching recv (MPI_Ssend,
//     MPI_Send of a large message, ncclSend in stream order). The simulator assumes this worst case,
//     and the generators order the lists so that they complete under it: a list set that completes
//     with synchronous sends is "safe" in MPI's sense, so it also completes, in no more time, when a
//     send returns early (buffered MPI_Send, MPI_Isend waited later, or an adjacent send/recv pair
//     fused into one batched isend/irecv as Megatron's batch_isend_irecv does). An executor that
//     returns early from sends keeps the sent buffer alive until the send completes.
//   - Communication is free in the simulator: a matched send/recv pair completes at the later of
//     the two stages' arrival times, and both stages continue from there.
//
// The classic deadlock of 1F1B with synchronous sends: in the steady state stage s sends activation
// i forward while stage s + 1 sends gradient k back, and both wait for a receive that is never
// posted. Megatron avoids it with fused send+recv pairs. Here each such pair is two adjacent
// actions, activation first on both sides: stage s runs send_activation(i), recv_gradient(k) and
// stage s + 1 runs recv_activation(i), send_gradient(k), so the two stages meet on the activation
// and then on the gradient. Delaying send_gradient(k) behind recv_activation(i) costs nothing:
// stage s waits for that gradient only after its send_activation(i) has been received.
#include "parallel/pipeline_schedule.hpp"

#include "parallel/impl/schedule_lists.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>

namespace meshtrain {
namespace {

void require_valid(const char* what, int stages, int stage, int micros) {
  if (stages < 1 || stage < 0 || stage >= stages || micros < 1) {
    throw std::invalid_argument(
        fmt::format("{}: need stages ≥ 1, 0 ≤ stage < stages and micros ≥ 1, got stages {}, "
                    "stage {}, micros {}",
                    what, stages, stage, micros));
  }
}

using schedule_lists::ListBuilder;

bool is_compute(ActionKind k) {
  return k == ActionKind::forward || k == ActionKind::backward || k == ActionKind::backward_input ||
         k == ActionKind::backward_weight;
}

// The stage a communication action talks to, and the action it must meet there.
struct Counterpart {
  int stage;
  Action action;
};

// Activations go from virtual stage c·p + s to c·p + s + 1: to stage s + 1's chunk c, or from the last stage to
// stage 0's chunk c + 1; gradients come back the same way. Past the first or last virtual stage (of `chunks`
// per stage) the counterpart is a stage out of range.
Counterpart counterpart(int stage, const Action& a, int stages, int chunks) {
  const int m = a.micro, c = a.chunk;
  const bool last = stage == stages - 1 && c + 1 < chunks, first = stage == 0;
  switch (a.kind) {
    case ActionKind::send_activation:
      return last ? Counterpart{0, {ActionKind::recv_activation, m, c + 1}}
                  : Counterpart{stage + 1, {ActionKind::recv_activation, m, c}};
    case ActionKind::recv_activation:
      return first && c > 0 ? Counterpart{stages - 1, {ActionKind::send_activation, m, c - 1}}
                            : Counterpart{stage - 1, {ActionKind::send_activation, m, c}};
    case ActionKind::send_gradient:
      return first && c > 0 ? Counterpart{stages - 1, {ActionKind::recv_gradient, m, c - 1}}
                            : Counterpart{stage - 1, {ActionKind::recv_gradient, m, c}};
    case ActionKind::recv_gradient:
      return last ? Counterpart{0, {ActionKind::send_gradient, m, c + 1}}
                  : Counterpart{stage + 1, {ActionKind::send_gradient, m, c}};
    default: break;
  }
  throw std::logic_error("counterpart of a compute action");
}

}  // namespace

// GPipe: every forward, then every backward. The backwards run m − 1 … 0, the reverse of the
// forwards, as in the GPipe paper's figure and in torchgpipe, where autograd runs the whole
// mini-batch's backward as the mirror of its forward: the last stage starts with the micro-batch
// it forwarded last, whose activations are the most recently touched. (torch.distributed.pipelining's
// ScheduleGPipe runs 0 … m − 1; bubble and peak memory are the same either way.) So gpipe
// accumulates gradients in the order m − 1 … 0 and 1f1b in 0 … m − 1: the fp32 sums of the two
// schedules may differ in the last bits.
std::vector<Action> gpipe_schedule(int stages, int stage, int micros) {
  require_valid("gpipe_schedule", stages, stage, micros);
  ListBuilder list(stages, stage);

  // All forwards.
  for (int i = 0; i < micros; ++i) {
    list.recv_activation(i);
    list.forward(i);
    list.send_activation(i);
  }

  // All backwards, last micro-batch first.
  for (int i = micros - 1; i >= 0; --i) {
    list.recv_gradient(i);
    list.backward(i);
    list.send_gradient(i);
  }
  return list.take();
}

// Megatron's non-interleaved 1F1B (forward_backward_pipelining_without_interleaving): a stage runs
// stages − stage − 1 forwards ahead (fewer if there are fewer micro-batches), then alternates one
// forward and one backward, then finishes the backwards it still owes. Backwards run 0 … m − 1.
// A stage holds at most min(stages − stage, micros) micro-batches' activations.
std::vector<Action> one_f_one_b_schedule(int stages, int stage, int micros) {
  require_valid("one_f_one_b_schedule", stages, stage, micros);
  ListBuilder list(stages, stage);
  const int warmup = std::min(stages - stage - 1, micros);
  const int steady = micros - warmup;

  // Warm-up forwards: micro-batches 0 … warmup − 1.
  for (int i = 0; i < warmup; ++i) {
    list.recv_activation(i);
    list.forward(i);
    list.send_activation(i);
  }

  // Steady 1F1B: forward warmup + k, backward k. Each send/recv pair with the neighbours is two
  // adjacent actions, activation first (see the header comment).
  if (steady > 0) list.recv_activation(warmup);
  for (int k = 0; k < steady; ++k) {
    const int f = warmup + k;
    list.forward(f);
    list.send_activation(f);
    list.recv_gradient(k);
    list.backward(k);
    if (k + 1 < steady) list.recv_activation(f + 1);
    list.send_gradient(k);
  }

  // Cool-down backwards: micro-batches steady … micros − 1.
  for (int k = steady; k < micros; ++k) {
    list.recv_gradient(k);
    list.backward(k);
    list.send_gradient(k);
  }
  return list.take();
}

std::vector<Action> pipeline_schedule(PipelineSchedule schedule, int stages, int stage, int micros) {
  switch (schedule) {
    case PipelineSchedule::gpipe: return gpipe_schedule(stages, stage, micros);
    case PipelineSchedule::one_f_one_b: return one_f_one_b_schedule(stages, stage, micros);
    case PipelineSchedule::zero_bubble_h1: return zero_bubble_h1_schedule(stages, stage, micros);
  }
  throw std::invalid_argument(fmt::format("unknown pipeline schedule {}", int(schedule)));
}

int peak_live_activations(const std::vector<Action>& actions) {
  int live = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::forward) peak = std::max(peak, ++live);
    if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_weight) --live;
  }
  return peak;
}

int peak_deferred_weights(const std::vector<Action>& actions) {
  int waiting = 0, peak = 0;
  for (const Action& a : actions) {
    if (a.kind == ActionKind::backward_input) peak = std::max(peak, ++waiting);
    if (a.kind == ActionKind::backward_weight) --waiting;
  }
  return peak;
}

int live_activations(PipelineSchedule schedule, int stages, int stage, int micros) {
  require_valid("live_activations", stages, stage, micros);
  switch (schedule) {
    case PipelineSchedule::gpipe: return micros;
    case PipelineSchedule::one_f_one_b: return std::min(stages - stage, micros);
    // Stage s's warm-up of p − s − 1 forwards, then one more before each input gradient, s weight gradients late.
    case PipelineSchedule::zero_bubble_h1: return std::min(stages, micros);
  }
  throw std::invalid_argument(fmt::format("unknown pipeline schedule {}", int(schedule)));
}

int deferred_weights(PipelineSchedule schedule, int stages, int stage, int micros) {
  require_valid("deferred_weights", stages, stage, micros);
  // ZB-H1: stage s runs micro-batch k − s's weight gradients after k's input gradient.
  return schedule == PipelineSchedule::zero_bubble_h1 ? std::min(stage + 1, micros) : 0;
}

// Event simulation: a stage's clock is the time its next action may start. Compute advances the
// clock by its cost. Under synchronous sends a communication action waits until the counterpart stage's
// next action is the matching one; both then complete at the later of the two clocks. Under eager sends a
// send completes at once, leaving its message with its time, and a receive waits for the message and
// completes at the later of its clock and the message's time. Any order of advancing the stages gives the
// same times, because each action's time depends only on its predecessors.
ScheduleTiming simulate_schedule(const std::vector<std::vector<Action>>& stages, const ScheduleCosts& costs,
                                 SendSemantics sends) {
  return simulate_schedule(stages, std::vector<ScheduleCosts>(stages.size(), costs), sends);
}

ScheduleTiming simulate_schedule(const std::vector<std::vector<Action>>& stages,
                                 const std::vector<ScheduleCosts>& stage_costs, SendSemantics sends) {
  if (stage_costs.size() != stages.size()) {
    throw std::invalid_argument(
        fmt::format("simulate_schedule: {} stages' lists and {} stages' costs", stages.size(), stage_costs.size()));
  }
  for (const ScheduleCosts& costs : stage_costs) {
    if (!(costs.forward >= 0) || !(costs.backward_input >= 0) || !(costs.backward_weight >= 0)) {
      throw std::invalid_argument(
          fmt::format("simulate_schedule: costs must be ≥ 0, got forward {}, backward_input {} and backward_weight {}",
                      costs.forward, costs.backward_input, costs.backward_weight));
    }
  }
  const int p = int(stages.size());
  int chunks = 1;
  for (const std::vector<Action>& list : stages) {
    for (const Action& a : list) chunks = std::max(chunks, a.chunk + 1);
  }
  const auto counterpart_of = [&](int s, const Action& a) { return counterpart(s, a, p, chunks); };
  for (int s = 0; s < p; ++s) {
    for (std::size_t i = 0; i < stages[s].size(); ++i) {
      const Action& a = stages[s][i];
      if (is_compute(a.kind)) continue;
      const int peer = counterpart_of(s, a).stage;
      if (peer < 0 || peer >= p) {
        throw std::logic_error(
            fmt::format("pipeline schedule: stage {} action #{} {} talks to stage {}, which does not "
                        "exist ({} stages)",
                        s, i, to_string(a), peer, p));
      }
    }
  }
  const auto cost_of = [&](int s, ActionKind k) {
    const ScheduleCosts& costs = stage_costs[std::size_t(s)];
    switch (k) {
      case ActionKind::forward: return costs.forward;
      case ActionKind::backward: return costs.backward_input + costs.backward_weight;
      case ActionKind::backward_input: return costs.backward_input;
      default: return costs.backward_weight;
    }
  };

  std::vector<std::size_t> pc(p, 0);
  std::vector<double> clock(p, 0.0), busy(p, 0.0);
  // Eager sends: each stage's messages not yet received, as the receive they meet and their time.
  std::vector<std::vector<std::pair<Action, double>>> inbox(p);
  auto done = [&](int s) { return pc[s] == stages[s].size(); };
  const auto is_send = [](ActionKind k) { return k == ActionKind::send_activation || k == ActionKind::send_gradient; };

  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (!done(s)) {
        const Action& a = stages[s][pc[s]];
        if (is_compute(a.kind)) {
          const double cost = cost_of(s, a.kind);
          clock[s] += cost;
          busy[s] += cost;
          ++pc[s];
          progress = true;
          continue;
        }
        const Counterpart c = counterpart_of(s, a);
        if (sends == SendSemantics::eager) {
          if (is_send(a.kind)) {
            inbox[c.stage].emplace_back(c.action, clock[s]);
          } else {
            auto& mine = inbox[s];
            const auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& m) { return m.first == a; });
            if (it == mine.end()) break;
            clock[s] = std::max(clock[s], it->second);
            mine.erase(it);
          }
          ++pc[s];
          progress = true;
          continue;
        }
        if (done(c.stage) || !(stages[c.stage][pc[c.stage]] == c.action)) break;
        const double met = std::max(clock[s], clock[c.stage]);
        clock[s] = clock[c.stage] = met;
        ++pc[s];
        ++pc[c.stage];
        progress = true;
      }
    }
  }

  std::string stuck;
  for (int s = 0; s < p; ++s) {
    if (done(s)) continue;
    const Action& a = stages[s][pc[s]];
    const int peer = counterpart_of(s, a).stage;
    const std::string there = done(peer) ? std::string("has finished its list")
                                         : fmt::format("is at #{} {}", pc[peer], to_string(stages[peer][pc[peer]]));
    stuck += fmt::format("{}stage {} waits at #{} {} (stage {} {})", stuck.empty() ? "" : "; ", s, pc[s], to_string(a),
                         peer, there);
  }
  if (!stuck.empty()) throw std::logic_error("pipeline schedule deadlocks or does not match: " + stuck);

  ScheduleTiming t{0.0, 0.0, {}};
  for (int s = 0; s < p; ++s) t.makespan = std::max(t.makespan, clock[s]);
  double idle = 0;
  for (int s = 0; s < p; ++s) {
    t.stage_idle.push_back(t.makespan - busy[s]);
    idle += t.stage_idle.back();
  }
  if (t.makespan > 0) t.idle_fraction = idle / (p * t.makespan);
  return t;
}

ScheduleTiming simulate_schedule(const std::vector<std::vector<Action>>& stages, double forward_cost,
                                 double backward_cost) {
  if (!(forward_cost >= 0) || !(backward_cost >= 0)) {
    throw std::invalid_argument(fmt::format("simulate_schedule: costs must be ≥ 0, got forward {} and backward {}",
                                            forward_cost, backward_cost));
  }
  return simulate_schedule(stages, ScheduleCosts{forward_cost, backward_cost, 0.0}, SendSemantics::synchronous);
}

double ideal_bubble_fraction(int stages, int micros) {
  if (stages < 1 || micros < 1) {
    throw std::invalid_argument(
        fmt::format("ideal_bubble_fraction: need stages ≥ 1 and micros ≥ 1, got {} and {}", stages, micros));
  }
  return double(stages - 1) / double(micros + stages - 1);
}

double interleaved_bubble_fraction(int stages, int micros, int chunks) {
  if (chunks < 1) throw std::invalid_argument(fmt::format("interleaved_bubble_fraction: chunks {} < 1", chunks));
  return ideal_bubble_fraction(stages, micros * chunks);
}

double zero_bubble_h1_idle(int stages, const ScheduleCosts& costs) {
  if (stages < 1 || !(costs.backward_weight <= costs.forward)) {
    throw std::invalid_argument(
        fmt::format("zero_bubble_h1_idle: need stages ≥ 1 and backward_weight ≤ forward, got {} stages, costs {}, {}",
                    stages, costs.forward, costs.backward_weight));
  }
  return (stages - 1) * (costs.forward + costs.backward_input - costs.backward_weight);
}

std::string to_string(const Action& action) {
  const char* name = "";
  switch (action.kind) {
    case ActionKind::recv_activation: name = "recvA"; break;
    case ActionKind::forward: name = "F"; break;
    case ActionKind::send_activation: name = "sendA"; break;
    case ActionKind::recv_gradient: name = "recvG"; break;
    case ActionKind::backward: name = "B"; break;
    case ActionKind::send_gradient: name = "sendG"; break;
    case ActionKind::backward_input: name = "BI"; break;
    case ActionKind::backward_weight: name = "BW"; break;
  }
  // A chunk other than 0 follows the micro-batch: "F3.1" is micro-batch 3's forward through chunk 1.
  return action.chunk == 0 ? fmt::format("{}{}", name, action.micro)
                           : fmt::format("{}{}.{}", name, action.micro, action.chunk);
}

std::string to_string(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

}  // namespace meshtrain

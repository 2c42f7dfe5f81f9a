// Pipeline schedules (share/docs/design.md, Parallelism): the GPipe and 1F1B generators against lists worked
// out by hand, structural invariants over a grid of stage and micro-batch counts, the activation
// bound, and simulate_schedule against the closed-form bubble (p − 1)/(m + p − 1) and against an
// independent evaluator written here (a longest-path recursion over the matched actions instead
// of an event loop), under both synchronous and buffered sends.
#include "parallel/pipeline_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace meshtrain {
namespace {

using List = std::vector<Action>;
using Lists = std::vector<List>;

const std::vector<std::string> kSchedules = {"gpipe", "1f1b"};

Lists all_stages(const std::string& name, int p, int m) {
  Lists lists;
  for (int s = 0; s < p; ++s) lists.push_back(pipeline_schedule(parse_name<PipelineSchedule>(name), p, s, m));
  return lists;
}

std::string where(const std::string& name, int p, int m) {
  return name + " p=" + std::to_string(p) + " m=" + std::to_string(m);
}

// Every micro-batch 0 … m − 1 forwarded once and backwarded once, the forward first. Returns the
// first problem found, or "".
std::string check_compute(const List& list, int m) {
  std::vector<int> forwarded(m, -1), backwarded(m, -1);
  for (int i = 0; i < int(list.size()); ++i) {
    const Action& a = list[i];
    if (a.kind != ActionKind::forward && a.kind != ActionKind::backward) continue;
    if (a.micro < 0 || a.micro >= m) return "micro-batch out of range: " + to_string(a);
    auto& seen = a.kind == ActionKind::forward ? forwarded : backwarded;
    if (seen[a.micro] >= 0) return "twice: " + to_string(a);
    seen[a.micro] = i;
    if (a.kind == ActionKind::backward && forwarded[a.micro] < 0) return "backward before forward: " + to_string(a);
  }
  for (int i = 0; i < m; ++i) {
    if (forwarded[i] < 0) return "never forwarded: " + std::to_string(i);
    if (backwarded[i] < 0) return "never backwarded: " + std::to_string(i);
  }
  return "";
}

std::vector<int> micros_of(const List& list, ActionKind kind) {
  std::vector<int> out;
  for (const Action& a : list)
    if (a.kind == kind) out.push_back(a.micro);
  return out;
}

int position(const List& list, ActionKind kind, int micro) {
  for (int i = 0; i < int(list.size()); ++i)
    if (list[i].kind == kind && list[i].micro == micro) return i;
  return -1;
}

// Communication between stages: the first stage receives no activations and sends no gradients,
// the last sends no activations and receives no gradients; the sends of one stage and the receives
// of its neighbour match one to one, in order; every stage receives a micro-batch's activation
// before its forward and sends it after, and likewise for gradients around the backward.
std::string check_communication(const Lists& lists, int m) {
  const int p = int(lists.size());
  std::vector<int> all(m);
  for (int i = 0; i < m; ++i) all[i] = i;
  for (int s = 0; s < p; ++s) {
    const List& l = lists[s];
    const std::string at = "stage " + std::to_string(s) + ": ";
    const auto recv_a = micros_of(l, ActionKind::recv_activation), send_a = micros_of(l, ActionKind::send_activation);
    const auto recv_g = micros_of(l, ActionKind::recv_gradient), send_g = micros_of(l, ActionKind::send_gradient);
    if (s == 0 && (!recv_a.empty() || !send_g.empty())) return at + "the first stage talks to a previous stage";
    if (s == p - 1 && (!send_a.empty() || !recv_g.empty())) return at + "the last stage talks to a next stage";
    if (s > 0) {
      auto sorted = recv_a;
      std::sort(sorted.begin(), sorted.end());
      if (sorted != all) return at + "does not receive every activation exactly once";
      if (micros_of(lists[s - 1], ActionKind::send_activation) != recv_a)
        return at + "activations received differ from those sent by the previous stage, or their order";
      if (micros_of(lists[s - 1], ActionKind::recv_gradient) != send_g)
        return at + "gradients sent differ from those received by the previous stage, or their order";
    }
    for (int i = 0; i < m; ++i) {
      const int f = position(l, ActionKind::forward, i), b = position(l, ActionKind::backward, i);
      if (s > 0 && position(l, ActionKind::recv_activation, i) > f) return at + "recvA after F " + std::to_string(i);
      if (s < p - 1 && position(l, ActionKind::send_activation, i) < f)
        return at + "sendA before F " + std::to_string(i);
      if (s < p - 1 && position(l, ActionKind::recv_gradient, i) > b) return at + "recvG after B " + std::to_string(i);
      if (s > 0 && position(l, ActionKind::send_gradient, i) < b) return at + "sendG before B " + std::to_string(i);
    }
  }
  return "";
}

// Independent timing: each action's end time by recursion over its predecessors (the previous
// action of its stage, and for communication the action it is matched with, matched by order on
// each directed channel). Synchronous: both ends of a message complete when the later of the two
// arrives. Buffered: a send completes on arrival, a receive when it and its send have arrived.
// nullopt on a cycle (deadlock) or an unmatched message.
enum class Sends { synchronous, buffered };

class Evaluator {
 public:
  Evaluator(const Lists& lists, double f, double b, Sends sends)
      : lists_(lists), f_(f), b_(b), sends_(sends), state_(lists.size()), end_(lists.size()), partner_(lists.size()) {
    for (std::size_t s = 0; s < lists.size(); ++s) {
      state_[s].assign(lists[s].size(), 0);
      end_[s].assign(lists[s].size(), 0.0);
      partner_[s].assign(lists[s].size(), {-1, -1});
    }
    // Channel key: (from, to, is_gradient); sends and receives pair up in order.
    std::map<std::tuple<int, int, bool>, std::vector<std::pair<int, int>>> sent, received;
    const int p = int(lists.size());
    for (int s = 0; s < p; ++s) {
      for (int i = 0; i < int(lists[s].size()); ++i) {
        switch (lists[s][i].kind) {
          case ActionKind::send_activation: sent[{s, s + 1, false}].push_back({s, i}); break;
          case ActionKind::recv_activation: received[{s - 1, s, false}].push_back({s, i}); break;
          case ActionKind::send_gradient: sent[{s, s - 1, true}].push_back({s, i}); break;
          case ActionKind::recv_gradient: received[{s + 1, s, true}].push_back({s, i}); break;
          default: break;
        }
      }
    }
    for (const auto& [channel, sends_on] : sent) {
      const auto& recvs = received[channel];
      for (std::size_t k = 0; k < std::min(sends_on.size(), recvs.size()); ++k) {
        const auto [ss, si] = sends_on[k];
        const auto [rs, ri] = recvs[k];
        if (lists[ss][si].micro != lists[rs][ri].micro) continue;  // left unmatched
        partner_[ss][si] = {rs, ri};
        partner_[rs][ri] = {ss, si};
      }
    }
  }

  // Makespan, or nullopt if some action can never complete.
  std::optional<double> makespan() {
    double last = 0;
    for (int s = 0; s < int(lists_.size()); ++s) {
      if (lists_[s].empty()) continue;
      const auto t = end(s, int(lists_[s].size()) - 1);
      if (!t) return std::nullopt;
      last = std::max(last, *t);
    }
    return last;
  }

 private:
  std::optional<double> start(int s, int i) { return i == 0 ? std::optional<double>(0.0) : end(s, i - 1); }

  std::optional<double> end(int s, int i) {
    if (state_[s][i] == 2) return end_[s][i];
    if (state_[s][i] == 1) return std::nullopt;  // a cycle: deadlock
    state_[s][i] = 1;
    const Action& a = lists_[s][i];
    std::optional<double> t = start(s, i);
    if (t && (a.kind == ActionKind::forward || a.kind == ActionKind::backward)) {
      *t += a.kind == ActionKind::forward ? f_ : b_;
    } else if (t) {
      const auto [ps, pi] = partner_[s][i];
      const bool is_send = a.kind == ActionKind::send_activation || a.kind == ActionKind::send_gradient;
      if (ps < 0) {
        t = std::nullopt;
      } else if (!(is_send && sends_ == Sends::buffered)) {
        const auto other = start(ps, pi);
        t = other ? std::optional<double>(std::max(*t, *other)) : std::nullopt;
      }
    }
    if (!t) return std::nullopt;  // leaves state 1: a later visit also fails
    state_[s][i] = 2;
    end_[s][i] = *t;
    return t;
  }

  const Lists& lists_;
  double f_, b_;
  Sends sends_;
  std::vector<std::vector<int>> state_;  // 0 unvisited, 1 in progress or failed, 2 done
  std::vector<std::vector<double>> end_;
  std::vector<std::vector<std::pair<int, int>>> partner_;
};

std::optional<double> evaluate(const Lists& lists, double f, double b, Sends sends) {
  return Evaluator(lists, f, b, sends).makespan();
}

// The message of the logic_error simulate_schedule throws, or "" if it does not throw.
std::string simulation_error(const Lists& lists) {
  try {
    simulate_schedule(lists, 1.0, 2.0);
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Lists worked out by hand.

TEST(PipelineSchedule, ActionNames) {
  EXPECT_EQ(to_string({ActionKind::forward, 3}), "F3");
  EXPECT_EQ(to_string({ActionKind::backward, 0}), "B0");
  EXPECT_EQ(to_string({ActionKind::recv_activation, 2}), "recvA2");
  EXPECT_EQ(to_string({ActionKind::send_activation, 2}), "sendA2");
  EXPECT_EQ(to_string({ActionKind::recv_gradient, 1}), "recvG1");
  EXPECT_EQ(to_string({ActionKind::send_gradient, 11}), "sendG11");
}

TEST(PipelineSchedule, GpipeByHand) {
  // All forwards, then all backwards from the last micro-batch down.
  EXPECT_EQ(to_string(gpipe_schedule(1, 0, 3)), "F0 F1 F2 B2 B1 B0");

  EXPECT_EQ(to_string(gpipe_schedule(2, 0, 3)), "F0 sendA0 F1 sendA1 F2 sendA2 recvG2 B2 recvG1 B1 recvG0 B0");
  EXPECT_EQ(to_string(gpipe_schedule(2, 1, 3)), "recvA0 F0 recvA1 F1 recvA2 F2 B2 sendG2 B1 sendG1 B0 sendG0");

  EXPECT_EQ(to_string(gpipe_schedule(3, 0, 4)),
            "F0 sendA0 F1 sendA1 F2 sendA2 F3 sendA3 recvG3 B3 recvG2 B2 recvG1 B1 recvG0 B0");
  EXPECT_EQ(to_string(gpipe_schedule(3, 1, 4)),
            "recvA0 F0 sendA0 recvA1 F1 sendA1 recvA2 F2 sendA2 recvA3 F3 sendA3 "
            "recvG3 B3 sendG3 recvG2 B2 sendG2 recvG1 B1 sendG1 recvG0 B0 sendG0");
  EXPECT_EQ(to_string(gpipe_schedule(3, 2, 4)),
            "recvA0 F0 recvA1 F1 recvA2 F2 recvA3 F3 B3 sendG3 B2 sendG2 B1 sendG1 B0 sendG0");
}

TEST(PipelineSchedule, OneFOneBByHand) {
  // One stage: no warm-up, forward and backward alternate.
  EXPECT_EQ(to_string(one_f_one_b_schedule(1, 0, 3)), "F0 B0 F1 B1 F2 B2");

  // p = 2, m = 3. Stage 0: warm-up F0; steady (F1, B0), (F2, B1); cool-down B2.
  EXPECT_EQ(to_string(one_f_one_b_schedule(2, 0, 3)), "F0 sendA0 F1 sendA1 recvG0 B0 F2 sendA2 recvG1 B1 recvG2 B2");
  // Stage 1 (last): no warm-up; after each backward it receives the next activation, then sends
  // the gradient (activation first, matching stage 0's sendA, recvG).
  EXPECT_EQ(to_string(one_f_one_b_schedule(2, 1, 3)), "recvA0 F0 B0 recvA1 sendG0 F1 B1 recvA2 sendG1 F2 B2 sendG2");

  // p = 3, m = 4. Warm-up 2, 1, 0 forwards.
  EXPECT_EQ(to_string(one_f_one_b_schedule(3, 0, 4)),
            "F0 sendA0 F1 sendA1 "                      // warm-up
            "F2 sendA2 recvG0 B0 F3 sendA3 recvG1 B1 "  // steady
            "recvG2 B2 recvG3 B3");                     // cool-down
  EXPECT_EQ(to_string(one_f_one_b_schedule(3, 1, 4)),
            "recvA0 F0 sendA0 "                                                            // warm-up
            "recvA1 F1 sendA1 recvG0 B0 recvA2 sendG0 F2 sendA2 recvG1 B1 recvA3 sendG1 "  // steady
            "F3 sendA3 recvG2 B2 sendG2 "                                                  // last steady pair
            "recvG3 B3 sendG3");                                                           // cool-down
  EXPECT_EQ(to_string(one_f_one_b_schedule(3, 2, 4)),
            "recvA0 F0 B0 recvA1 sendG0 F1 B1 recvA2 sendG1 F2 B2 recvA3 sendG2 F3 B3 sendG3");

  // Fewer micro-batches than stages (p = 4, m = 2): warm-up is capped at m.
  EXPECT_EQ(to_string(one_f_one_b_schedule(4, 0, 2)), "F0 sendA0 F1 sendA1 recvG0 B0 recvG1 B1");
  EXPECT_EQ(to_string(one_f_one_b_schedule(4, 1, 2)),
            "recvA0 F0 sendA0 recvA1 F1 sendA1 recvG0 B0 sendG0 recvG1 B1 sendG1");
  EXPECT_EQ(to_string(one_f_one_b_schedule(4, 2, 2)),
            "recvA0 F0 sendA0 recvA1 F1 sendA1 recvG0 B0 sendG0 recvG1 B1 sendG1");
  EXPECT_EQ(to_string(one_f_one_b_schedule(4, 3, 2)), "recvA0 F0 B0 recvA1 sendG0 F1 B1 sendG1");
}

TEST(PipelineSchedule, ByName) {
  // The names are parallel.schedule's (core/config.hpp); parse_name refuses any other.
  const auto by_name = [](const std::string& name, int stages, int stage, int micros) {
    return pipeline_schedule(parse_name<PipelineSchedule>(name), stages, stage, micros);
  };
  EXPECT_EQ(by_name("gpipe", 3, 1, 4), gpipe_schedule(3, 1, 4));
  EXPECT_EQ(by_name("1f1b", 3, 1, 4), one_f_one_b_schedule(3, 1, 4));
  EXPECT_EQ(by_name("zb-h1", 3, 1, 4), zero_bubble_h1_schedule(3, 1, 4));
  EXPECT_NE(by_name("gpipe", 3, 1, 4), by_name("1f1b", 3, 1, 4));
  for (const std::string bad : {"GPipe", "1F1B", "ZB-H1", ""}) {
    EXPECT_THROW(by_name(bad, 2, 0, 2), InputError) << "'" << bad << "'";
  }
  try {
    by_name("interleaved", 2, 0, 2);
    ADD_FAILURE() << "no exception";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("interleaved"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpipe, 1f1b, zb-h1"), std::string::npos) << e.what();
  }
}

TEST(PipelineSchedule, RejectsBadArguments) {
  for (const std::string& name : kSchedules) {
    const PipelineSchedule schedule = parse_name<PipelineSchedule>(name);
    EXPECT_THROW(pipeline_schedule(schedule, 0, 0, 4), std::invalid_argument) << name;
    EXPECT_THROW(pipeline_schedule(schedule, 2, 2, 4), std::invalid_argument) << name;
    EXPECT_THROW(pipeline_schedule(schedule, 2, -1, 4), std::invalid_argument) << name;
    EXPECT_THROW(pipeline_schedule(schedule, 2, 0, 0), std::invalid_argument) << name;
  }
  EXPECT_THROW(ideal_bubble_fraction(0, 4), std::invalid_argument);
  EXPECT_THROW(simulate_schedule(all_stages("1f1b", 2, 2), -1.0, 2.0), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Invariants over a grid.

TEST(PipelineSchedule, CheckersCatchBrokenLists) {
  // The invariant checkers below must be able to fail.
  const List good = one_f_one_b_schedule(3, 1, 4);
  ASSERT_EQ(check_compute(good, 4), "");
  List no_backward = good;
  std::erase(no_backward, Action{ActionKind::backward, 2});
  EXPECT_NE(check_compute(no_backward, 4), "");
  List twice = good;
  twice.push_back({ActionKind::forward, 1});
  EXPECT_NE(check_compute(twice, 4), "");
  List backward_first = gpipe_schedule(1, 0, 2);  // F0 F1 B1 B0
  std::swap(backward_first[0], backward_first[3]);
  EXPECT_NE(check_compute(backward_first, 2), "");

  const Lists lists = all_stages("1f1b", 3, 4);
  ASSERT_EQ(check_communication(lists, 4), "");
  Lists swapped = lists;  // stage 0 sends activations 0 and 1 in the wrong order
  std::swap(swapped[0][1], swapped[0][3]);
  EXPECT_NE(check_communication(swapped, 4), "");
  Lists early_send = lists;                       // stage 1 sends gradient 0 before its backward 0
  std::swap(early_send[1][7], early_send[1][9]);  // … recvG0 B0 recvA2 sendG0 → recvG0 sendG0 recvA2 B0
  ASSERT_EQ(to_string(early_send[1][7]), "sendG0");
  EXPECT_NE(check_communication(early_send, 4), "");
  Lists first_receives = lists;
  first_receives[0].insert(first_receives[0].begin(), {ActionKind::recv_activation, 0});
  EXPECT_NE(check_communication(first_receives, 4), "");
}

TEST(PipelineSchedule, EveryMicroBatchOncePerStageAndMessagesMatch) {
  for (const std::string& name : kSchedules) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        const Lists lists = all_stages(name, p, m);
        for (int s = 0; s < p; ++s) {
          EXPECT_EQ(check_compute(lists[s], m), "")
              << where(name, p, m) << " stage " << s << ": " << to_string(lists[s]);
        }
        EXPECT_EQ(check_communication(lists, m), "") << where(name, p, m);
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBBackwardsInOrder) {
  for (int p = 1; p <= 6; ++p) {
    for (int m = 1; m <= 12; ++m) {
      for (int s = 0; s < p; ++s) {
        std::vector<int> in_order(m);
        for (int i = 0; i < m; ++i) in_order[i] = i;
        const List l = one_f_one_b_schedule(p, s, m);
        EXPECT_EQ(micros_of(l, ActionKind::backward), in_order) << where("1f1b", p, m) << " stage " << s;
        EXPECT_EQ(micros_of(l, ActionKind::forward), in_order) << where("1f1b", p, m) << " stage " << s;
        // Warm-up: the first backward comes after min(p − s, m) forwards.
        const int first_b = position(l, ActionKind::backward, 0);
        const auto before = std::count_if(l.begin(), l.begin() + first_b,
                                          [](const Action& a) { return a.kind == ActionKind::forward; });
        EXPECT_EQ(before, std::min(p - s, m)) << where("1f1b", p, m) << " stage " << s;
      }
    }
  }
}

TEST(PipelineSchedule, PeakLiveActivations) {
  EXPECT_EQ(peak_live_activations({}), 0);
  EXPECT_EQ(peak_live_activations(gpipe_schedule(1, 0, 3)), 3);  // F0 F1 F2 B2 B1 B0
  EXPECT_EQ(peak_live_activations(one_f_one_b_schedule(1, 0, 3)), 1);
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(peak_live_activations(gpipe_schedule(p, s, m)), m) << where("gpipe", p, m) << " stage " << s;
        const int one_f = peak_live_activations(one_f_one_b_schedule(p, s, m));
        EXPECT_EQ(one_f, std::min(p - s, m)) << where("1f1b", p, m) << " stage " << s;
        EXPECT_LE(one_f, p);
        // The closed forms plan uses, against the lists the executor runs.
        for (const PipelineSchedule kind :
             {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zero_bubble_h1}) {
          const std::vector<Action> list = pipeline_schedule(kind, p, s, m);
          EXPECT_EQ(live_activations(kind, p, s, m), peak_live_activations(list))
              << where(std::string(name_of(kind)), p, m) << " stage " << s;
          EXPECT_EQ(deferred_weights(kind, p, s, m), peak_deferred_weights(list))
              << where(std::string(name_of(kind)), p, m) << " stage " << s;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Simulation.

TEST(PipelineSimulation, SmallestPipelineByHand) {
  // p = 2, m = 1, forward 1, backward 2: stage 0 F [0,1]; stage 1 F [1,2], B [2,4]; stage 0 B [4,6].
  // Each stage is busy 3 of 6: idle 1/2 = (p − 1)/(m + p − 1).
  for (const std::string& name : kSchedules) {
    const ScheduleTiming t = simulate_schedule(all_stages(name, 2, 1), 1.0, 2.0);
    EXPECT_DOUBLE_EQ(t.makespan, 6.0) << name;
    EXPECT_DOUBLE_EQ(t.idle_fraction, 0.5) << name;
  }
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(2, 1), 0.5);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(1, 5), 0.0);
}

TEST(PipelineSimulation, StagesOfTheirOwnCostsByHand) {
  // p = 2, m = 1; stage 0 F 1, B 2; stage 1 twice as slow: stage 0 F [0,1]; stage 1 F [1,3], B [3,7]; stage 0
  // B [7,9]. Stage 0 busy 3 of 9, stage 1 6 of 9: idle (6 + 3) / 18.
  const std::vector<ScheduleCosts> costs = {{1, 2, 0}, {2, 3, 1}};
  for (const std::string& name : kSchedules) {
    const ScheduleTiming t = simulate_schedule(all_stages(name, 2, 1), costs);
    EXPECT_DOUBLE_EQ(t.makespan, 9.0) << name;
    EXPECT_DOUBLE_EQ(t.idle_fraction, 0.5) << name;
    ASSERT_EQ(t.stage_idle.size(), 2u);
    EXPECT_DOUBLE_EQ(t.stage_idle[0], 6.0) << name;
    EXPECT_DOUBLE_EQ(t.stage_idle[1], 3.0) << name;
  }
  // Equal costs per stage are the one-costs simulation; a stage without costs is refused.
  const Lists lists = all_stages("1f1b", 3, 5);
  const ScheduleTiming one = simulate_schedule(lists, ScheduleCosts{1, 1.5, 0.5});
  const ScheduleTiming each = simulate_schedule(lists, std::vector<ScheduleCosts>(3, ScheduleCosts{1, 1.5, 0.5}));
  EXPECT_DOUBLE_EQ(one.makespan, each.makespan);
  EXPECT_DOUBLE_EQ(one.idle_fraction, each.idle_fraction);
  EXPECT_THROW(simulate_schedule(lists, std::vector<ScheduleCosts>(2)), std::invalid_argument);
}

TEST(PipelineSimulation, IdleFractionIsTheIdealBubble) {
  for (const std::string& name : kSchedules) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 12; ++m) {
        const Lists lists = all_stages(name, p, m);
        ScheduleTiming t{};
        ASSERT_NO_THROW(t = simulate_schedule(lists, 1.0, 2.0)) << where(name, p, m);
        EXPECT_NEAR(t.idle_fraction, double(p - 1) / double(m + p - 1), 1e-12) << where(name, p, m);
        EXPECT_NEAR(t.idle_fraction, ideal_bubble_fraction(p, m), 1e-12) << where(name, p, m);
        EXPECT_NEAR(t.makespan, 3.0 * (m + p - 1), 1e-12) << where(name, p, m);
      }
    }
  }
}

TEST(PipelineSimulation, AgreesWithIndependentEvaluatorUnderBothSendSemantics) {
  // The lists complete with synchronous sends (the simulator's semantics) and with buffered ones,
  // in the same time: an executor may use either.
  for (const std::string& name : kSchedules) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 12; ++m) {
        const Lists lists = all_stages(name, p, m);
        for (const auto& [f, b] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{0.7, 3.1}}) {
          const double simulated = simulate_schedule(lists, f, b).makespan;
          const auto sync = evaluate(lists, f, b, Sends::synchronous);
          const auto buffered = evaluate(lists, f, b, Sends::buffered);
          ASSERT_TRUE(sync.has_value()) << where(name, p, m);
          ASSERT_TRUE(buffered.has_value()) << where(name, p, m);
          EXPECT_NEAR(simulated, *sync, 1e-9) << where(name, p, m) << " f " << f << " b " << b;
          EXPECT_NEAR(*buffered, *sync, 1e-9) << where(name, p, m) << " f " << f << " b " << b;
          EXPECT_NEAR(*sync, (m + p - 1) * (f + b), 1e-9) << where(name, p, m) << " f " << f << " b " << b;
        }
      }
    }
  }
}

TEST(PipelineSimulation, MissingSendThrowsNamingTheStuckActions) {
  Lists lists = all_stages("1f1b", 3, 4);
  std::erase(lists[0], Action{ActionKind::send_activation, 1});
  const std::string error = simulation_error(lists);
  ASSERT_NE(error, "");
  EXPECT_NE(error.find("stage 1 waits at #3 recvA1"), std::string::npos) << error;
  EXPECT_FALSE(evaluate(lists, 1.0, 2.0, Sends::buffered).has_value());
}

TEST(PipelineSimulation, MismatchedListsThrow) {
  {  // A receive with no send at all: stage 2 expects a fifth activation.
    Lists lists = all_stages("gpipe", 3, 4);
    lists[2].insert(lists[2].begin() + 8, {ActionKind::recv_activation, 4});
    const std::string error = simulation_error(lists);
    EXPECT_NE(error.find("recvA4"), std::string::npos) << error;
  }
  {  // Activations sent in a different order than received.
    Lists lists = all_stages("gpipe", 2, 3);
    std::swap(lists[0][1], lists[0][3]);  // sendA1 where sendA0 was
    const std::string error = simulation_error(lists);
    EXPECT_NE(error.find("sendA1"), std::string::npos) << error;
    EXPECT_NE(error.find("recvA0"), std::string::npos) << error;
  }
  {  // A message to a stage that does not exist.
    Lists lists = all_stages("1f1b", 2, 2);
    lists[1].push_back({ActionKind::send_activation, 0});
    const std::string error = simulation_error(lists);
    EXPECT_NE(error.find("stage 2, which does not exist"), std::string::npos) << error;
  }
  {  // A send left over at the end: its receiver has finished.
    Lists lists = all_stages("1f1b", 2, 2);
    lists[0].push_back({ActionKind::send_activation, 2});
    const std::string error = simulation_error(lists);
    EXPECT_NE(error.find("stage 1 has finished its list"), std::string::npos) << error;
  }
}

TEST(PipelineSimulation, SendFirstSteadyStateDeadlocksWithSynchronousSends) {
  // The classic 1F1B deadlock: stage 1 sends its gradient before receiving the next activation,
  // while stage 0 sends the activation before receiving that gradient. Buffered sends would get
  // through; synchronous ones, which the simulator models, do not.
  Lists lists = all_stages("1f1b", 2, 3);
  ASSERT_EQ(to_string(lists[1]), "recvA0 F0 B0 recvA1 sendG0 F1 B1 recvA2 sendG1 F2 B2 sendG2");
  std::swap(lists[1][3], lists[1][4]);  // sendG0 recvA1
  const std::string error = simulation_error(lists);
  EXPECT_NE(error.find("stage 0 waits at #3 sendA1 (stage 1 is at #3 sendG0)"), std::string::npos) << error;
  EXPECT_NE(error.find("stage 1 waits at #3 sendG0 (stage 0 is at #3 sendA1)"), std::string::npos) << error;
  EXPECT_FALSE(evaluate(lists, 1.0, 2.0, Sends::synchronous).has_value());
  EXPECT_TRUE(evaluate(lists, 1.0, 2.0, Sends::buffered).has_value());
}

TEST(PipelineSimulation, IdleFractionCountsEveryStage) {
  // A list set that is not balanced: stage 1 computes twice as much. p = 2, m = 1, costs 1 and 2,
  // with stage 1 running an extra F/B pair of its own micro-batch 1 after micro-batch 0.
  Lists lists = all_stages("gpipe", 2, 1);
  lists[1].push_back({ActionKind::forward, 1});
  lists[1].push_back({ActionKind::backward, 1});
  // Stage 0: F [0,1], waits, B [4,6]. Stage 1: F [1,2], B [2,4], F [4,5], B [5,7]. Makespan 7;
  // busy 3 and 6: idle (4 + 1) / 14.
  const ScheduleTiming t = simulate_schedule(lists, 1.0, 2.0);
  EXPECT_DOUBLE_EQ(t.makespan, 7.0);
  EXPECT_DOUBLE_EQ(t.idle_fraction, 5.0 / 14.0);
}

}  // namespace
}  // namespace meshtrain

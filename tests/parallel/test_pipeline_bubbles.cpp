// Pipeline schedules with smaller bubbles (parallel/pipeline_bubble_schedules.cpp; issue 44): interleaved
// 1F1B and ZB-H1 against lists worked out by hand, every micro-batch through every chunk once, ZB-H1's
// forwards and input gradients in 1F1B's order, and the eager simulation against the closed forms — interleaved's idle
// fraction (p − 1)/(v·m + p − 1), ZB-H1's idle time (p − 1)(F + B − W) beside 1F1B's (p − 1)(F + B + W) — and their
// activation peaks; synchronous sends deadlock the interleaved lists, which is why they are eager.
#include "parallel/pipeline_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace meshtrain {
namespace {

using List = std::vector<Action>;
using Lists = std::vector<List>;

Lists interleaved(int p, int m, int v) {
  Lists lists;
  for (int s = 0; s < p; ++s) lists.push_back(interleaved_schedule(p, s, m, v));
  return lists;
}

Lists zero_bubble(int p, int m) {
  Lists lists;
  for (int s = 0; s < p; ++s) lists.push_back(zero_bubble_h1_schedule(p, s, m));
  return lists;
}

bool is_compute(ActionKind k) {
  return k == ActionKind::forward || k == ActionKind::backward || k == ActionKind::backward_input ||
         k == ActionKind::backward_weight;
}

List computes(const List& list) {
  List out;
  for (const Action& a : list) {
    if (is_compute(a.kind)) out.push_back(a);
  }
  return out;
}

// Each (micro-batch, chunk) forwarded once and backwarded once (input then weights where split), in that order.
void expect_every_pass_once(const List& list, int m, int v, const std::string& where) {
  std::map<std::tuple<int, int, ActionKind>, int> at;
  for (int i = 0; i < int(list.size()); ++i) {
    const Action& a = list[i];
    if (!is_compute(a.kind)) continue;
    ASSERT_TRUE(a.micro >= 0 && a.micro < m && a.chunk >= 0 && a.chunk < v) << where << ": " << to_string(a);
    ASSERT_TRUE(at.emplace(std::tuple{a.micro, a.chunk, a.kind}, i).second) << where << ": twice " << to_string(a);
  }
  for (int i = 0; i < m; ++i) {
    for (int c = 0; c < v; ++c) {
      const auto index = [&](ActionKind k) {
        const auto it = at.find({i, c, k});
        return it == at.end() ? -1 : it->second;
      };
      const int f = index(ActionKind::forward), b = index(ActionKind::backward);
      const int bi = index(ActionKind::backward_input), bw = index(ActionKind::backward_weight);
      ASSERT_GE(f, 0) << where << ": no forward of " << i << "." << c;
      if (b >= 0) {
        EXPECT_TRUE(bi < 0 && bw < 0 && b > f) << where << ": " << i << "." << c;
      } else {
        EXPECT_TRUE(bi > f && bw > bi) << where << ": " << i << "." << c << " forward, input, weights at " << f << ", "
                                       << bi << ", " << bw;
      }
    }
  }
}

TEST(InterleavedSchedule, WorkedByHand) {
  // p 2, v 2, m 2: micro-batches = stages, so every forward warms up. Forwards go group by group through
  // chunk 0, then chunk 1; backwards chunk 1 first. Stage 0's chunk 1 is virtual stage 2 of 4: it receives
  // from stage 1's chunk 0 and sends to stage 1's chunk 1.
  EXPECT_EQ(to_string(interleaved_schedule(2, 0, 2, 2)),
            "F0 sendA0 F1 sendA1 recvA0.1 F0.1 sendA0.1 recvA1.1 F1.1 sendA1.1 "
            "recvG0.1 B0.1 sendG0.1 recvG1.1 B1.1 sendG1.1 recvG0 B0 recvG1 B1");
  EXPECT_EQ(to_string(interleaved_schedule(2, 1, 2, 2)),
            "recvA0 F0 sendA0 recvA1 F1 sendA1 recvA0.1 F0.1 recvA1.1 F1.1 "
            "B0.1 sendG0.1 B1.1 sendG1.1 recvG0 B0 sendG0 recvG1 B1 sendG1");
}

TEST(InterleavedSchedule, EveryMicroBatchThroughEveryChunkOnce) {
  for (const int p : {1, 2, 3, 4}) {
    for (const int v : {1, 2, 3}) {
      for (const int m : {p, 2 * p, 3 * p}) {
        for (int s = 0; s < p; ++s) {
          expect_every_pass_once(interleaved_schedule(p, s, m, v), m, v,
                                 "p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m) +
                                     " stage " + std::to_string(s));
        }
      }
    }
  }
}

TEST(InterleavedSchedule, BubbleIsTheClosedForm) {
  // Chunk costs: a chunk holds 1/v of a stage's blocks.
  for (const auto& [forward, backward] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}, std::pair{2.0, 3.0}}) {
    for (const int p : {2, 4, 8}) {
      for (const int v : {1, 2, 4}) {
        for (const int m : {p, 2 * p, 4 * p}) {
          const ScheduleTiming t =
              simulate_schedule(interleaved(p, m, v), {forward / v, backward / v, 0.0}, SendSemantics::eager);
          EXPECT_NEAR(t.idle_fraction, interleaved_bubble_fraction(p, m, v), 1e-12)
              << "p " << p << " v " << v << " m " << m << " F " << forward << " B " << backward;
          EXPECT_NEAR(t.makespan, (m * v + p - 1) * (forward + backward) / v, 1e-9);
        }
      }
    }
  }
  EXPECT_NEAR(interleaved_bubble_fraction(4, 8, 2), 3.0 / 19.0, 1e-15);
}

TEST(InterleavedSchedule, ActivationPeakInChunkMicroBatches) {
  // Stage s holds its warm-up 2(p − s − 1) + (v − 1)p forwards and the steady state's one more (all m·v when
  // m = p), as Megatron-LM's interleaved schedule does.
  for (const int p : {2, 4}) {
    for (const int v : {1, 2, 3}) {
      for (const int m : {p, 2 * p, 4 * p}) {
        for (int s = 0; s < p; ++s) {
          const int want = m == p ? m * v : std::min(2 * (p - s - 1) + (v - 1) * p + 1, m * v);
          EXPECT_EQ(peak_live_activations(interleaved_schedule(p, s, m, v)), want)
              << "p " << p << " v " << v << " m " << m << " stage " << s;
        }
      }
    }
  }
}

TEST(InterleavedSchedule, SynchronousSendsDeadlockIt) {
  // Neighbours that each send before they receive (the steady state's forward then backward): the lists are
  // for eager sends.
  try {
    simulate_schedule(interleaved(2, 4, 2), {1.0, 2.0, 0.0}, SendSemantics::synchronous);
    ADD_FAILURE() << "completed under synchronous sends";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocks"), std::string::npos) << e.what();
  }
}

TEST(InterleavedSchedule, RefusesWhatItCannotRun) {
  EXPECT_THROW(interleaved_schedule(4, 0, 6, 2), std::invalid_argument);  // micros not a multiple of stages
  EXPECT_THROW(interleaved_schedule(2, 0, 4, 0), std::invalid_argument);
  EXPECT_THROW(interleaved_schedule(2, 2, 4, 2), std::invalid_argument);
}

TEST(ZeroBubbleH1Schedule, WorkedByHand) {
  // p 2, m 2: stage 0 warms up with one forward and runs each weight gradient right after its input's; the
  // last stage defers one, into its cool-down.
  EXPECT_EQ(to_string(zero_bubble_h1_schedule(2, 0, 2)), "F0 sendA0 F1 sendA1 recvG0 BI0 BW0 recvG1 BI1 BW1");
  EXPECT_EQ(to_string(zero_bubble_h1_schedule(2, 1, 2)), "recvA0 F0 BI0 sendG0 recvA1 F1 BI1 sendG1 BW0 BW1");
}

TEST(ZeroBubbleH1Schedule, EveryMicroBatchOnceWeightsInOrder) {
  for (const int p : {1, 2, 3, 4, 8}) {
    for (const int m : {1, 2, p, 2 * p + 1}) {
      for (int s = 0; s < p; ++s) {
        const List list = zero_bubble_h1_schedule(p, s, m);
        const std::string where = "p " + std::to_string(p) + " m " + std::to_string(m) + " stage " + std::to_string(s);
        expect_every_pass_once(list, m, 1, where);
        int next = 0;
        for (const Action& a : list) {
          if (a.kind == ActionKind::backward_weight) {
            EXPECT_EQ(a.micro, next++) << where;
          }
        }
        // Its forwards and input gradients in 1F1B's order.
        List order;
        for (Action a : computes(list)) {
          if (a.kind == ActionKind::backward_weight) continue;
          if (a.kind == ActionKind::backward_input) a.kind = ActionKind::backward;
          order.push_back(a);
        }
        EXPECT_EQ(to_string(order), to_string(computes(one_f_one_b_schedule(p, s, m)))) << where;
        EXPECT_LE(peak_live_activations(list), std::min(p, m)) << where << ": more than 1F1B's stage 0 holds";
      }
      EXPECT_EQ(peak_live_activations(zero_bubble_h1_schedule(p, 0, m)), std::min(p, m));
    }
  }
}

TEST(ZeroBubbleH1Schedule, IdleTimeIsTheClosedForm) {
  // F, B, W with W ≤ F; beside 1F1B with whole backwards of B + W on the same costs.
  const ScheduleCosts costs[] = {{1, 1, 1}, {1, 2, 1}, {2, 2, 1}, {1, 1, 0.5}, {1, 1.5, 1}, {3, 2, 1}};
  for (const ScheduleCosts& c : costs) {
    for (const int p : {2, 4, 8}) {
      for (const int m : {p, 2 * p, 4 * p}) {
        const double work = m * (c.forward + c.backward_input + c.backward_weight);
        const ScheduleTiming zb = simulate_schedule(zero_bubble(p, m), c, SendSemantics::eager);
        EXPECT_NEAR(zb.makespan - work, zero_bubble_h1_idle(p, c), 1e-9)
            << "p " << p << " m " << m << " F " << c.forward << " B " << c.backward_input << " W " << c.backward_weight;
        Lists one_f_one_b;
        for (int s = 0; s < p; ++s) one_f_one_b.push_back(one_f_one_b_schedule(p, s, m));
        const ScheduleTiming classic = simulate_schedule(one_f_one_b, c);
        EXPECT_NEAR(classic.makespan - work, (p - 1) * (c.forward + c.backward_input + c.backward_weight), 1e-9);
      }
    }
  }
  EXPECT_THROW(zero_bubble_h1_idle(4, {1, 1, 2}), std::invalid_argument);
}

TEST(Simulation, EagerSendsNeverSlowASynchronousList) {
  for (const int p : {2, 4}) {
    for (const int m : {1, p, 3 * p}) {
      for (const auto& schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
        Lists lists;
        for (int s = 0; s < p; ++s) lists.push_back(pipeline_schedule(schedule, p, s, m));
        const ScheduleCosts c{1.0, 1.5, 0.5};
        EXPECT_LE(simulate_schedule(lists, c, SendSemantics::eager).makespan,
                  simulate_schedule(lists, c, SendSemantics::synchronous).makespan + 1e-12);
      }
    }
  }
}

TEST(Simulation, NamesChunksAndSplitBackwards) {
  EXPECT_EQ(to_string({ActionKind::forward, 3, 1}), "F3.1");
  EXPECT_EQ(to_string({ActionKind::backward_input, 0}), "BI0");
  EXPECT_EQ(to_string({ActionKind::backward_weight, 2}), "BW2");
  // The last virtual stage (stage 1's chunk 1 of 2) sends nowhere: a list that does names a stage out of range.
  const Lists lists = {{{ActionKind::forward, 0, 1}},
                       {{ActionKind::forward, 0, 1}, {ActionKind::send_activation, 0, 1}}};
  try {
    simulate_schedule(lists, {1, 1, 0}, SendSemantics::eager);
    ADD_FAILURE() << "accepted a send past the last virtual stage";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshtrain

// Building one stage's action list (parallel/pipeline_schedule.hpp): the generators append computes and
// the communication around them, which the first and last virtual stages have none of. Internal to
// parallel/.
#pragma once

#include "parallel/pipeline_schedule.hpp"

#include <utility>
#include <vector>

namespace meshtrain::schedule_lists {

class ListBuilder {
 public:
  // Stage `stage` of `stages`, holding `chunks` model chunks (interleaved schedules; 1 otherwise).
  ListBuilder(int stages, int stage, int chunks = 1) : stages_(stages), stage_(stage), chunks_(chunks) {}

  void recv_activation(int i, int c = 0) {
    if (!first(c)) add(ActionKind::recv_activation, i, c);
  }
  void forward(int i, int c = 0) { add(ActionKind::forward, i, c); }
  void send_activation(int i, int c = 0) {
    if (!last(c)) add(ActionKind::send_activation, i, c);
  }
  void recv_gradient(int i, int c = 0) {
    if (!last(c)) add(ActionKind::recv_gradient, i, c);
  }
  void backward(int i, int c = 0) { add(ActionKind::backward, i, c); }
  void backward_input(int i, int c = 0) { add(ActionKind::backward_input, i, c); }
  void backward_weight(int i, int c = 0) { add(ActionKind::backward_weight, i, c); }
  void send_gradient(int i, int c = 0) {
    if (!first(c)) add(ActionKind::send_gradient, i, c);
  }

  std::vector<Action> take() { return std::move(actions_); }

 private:
  // The first and last of the stages × chunks virtual stages.
  bool first(int c) const { return stage_ == 0 && c == 0; }
  bool last(int c) const { return stage_ == stages_ - 1 && c == chunks_ - 1; }
  void add(ActionKind kind, int micro, int chunk) { actions_.push_back({kind, micro, chunk}); }

  int stages_, stage_, chunks_;
  std::vector<Action> actions_;
};

}  // namespace meshtrain::schedule_lists

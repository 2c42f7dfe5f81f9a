// What a step does when its loss or gradient norm is not finite: the one place that decides,
// for every precision (share/docs/usage.md, Non-finite values).
//
//   fp32, bf16  a non-finite loss or gradient norm is train.nonfinite's: `stop` ends the run
//               (exit 6, nothing saved), `skip` drops the update, up to train.nonfinite_skips in a row;
//   fp16        a non-finite gradient norm with a finite loss is the loss scaler's overflow (skip,
//               back off; state/loss_scaler.hpp), as before; a non-finite loss is train.nonfinite's,
//               because the scale multiplies only the loss gradient and backing it off cannot mend
//               a forward pass that overflowed.
//
// The values judged are the world's agreed ones (ModelState::agreed_values), so every rank reaches
// the same verdict and all leave, or skip, together.
#pragma once

#include "core/config.hpp"
#include "state/loss_scaler.hpp"

#include <cstdint>
#include <string>

namespace meshtrain {

// A step's loss and gradient norm as every rank of the world agreed on them.
struct StepValues {
  double loss = 0;
  double grad_norm = 0;
};

enum class StepOutcome {
  applied,            // the update ran
  overflow_skipped,   // fp16: the gradients overflowed, the update was skipped and the scale backs off
  nonfinite_skipped,  // train.nonfinite = skip: the update was dropped
  stopped,            // train.nonfinite = stop, or the skips ran out: the run ends with exit 6
};

class NonfinitePolicy {
 public:
  NonfinitePolicy(NonFinite action, std::int64_t allowed_skips);

  // The verdict on one step; `scaler` hears of the steps whose loss is finite (under fp16 it
  // decides on their gradients' overflow; disabled, it lets every one through).
  StepOutcome judge(const StepValues& values, LossScaler& scaler);

  // The line a skipped or stopped step prints: "step 3: the loss is inf: ..." (`step` 1-based).
  std::string describe(StepOutcome outcome, std::int64_t step, const StepValues& values) const;

 private:
  StepOutcome nonfinite();

  NonFinite action_;
  std::int64_t allowed_skips_;
  std::int64_t in_a_row_ = 0;  // consecutive non-finite steps up to the one judged last
};

}  // namespace meshtrain

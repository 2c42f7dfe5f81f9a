// The verdict on a step's non-finite values (state/nonfinite_policy.hpp).
#include "state/nonfinite_policy.hpp"

#include "core/errors.hpp"

#include <fmt/format.h>

#include <cmath>

namespace meshtrain {
namespace {

// "the loss is inf", "the gradient norm is nan", or both.
std::string nonfinite_values(const StepValues& v) {
  std::string out;
  if (!std::isfinite(v.loss)) out = fmt::format("the loss is {}", v.loss);
  if (!std::isfinite(v.grad_norm)) {
    out += fmt::format("{}the gradient norm is {}", out.empty() ? "" : " and ", v.grad_norm);
  }
  return out;
}

}  // namespace

NonfinitePolicy::NonfinitePolicy(NonFinite action, std::int64_t allowed_skips)
    : action_(action), allowed_skips_(allowed_skips) {}

StepOutcome NonfinitePolicy::judge(const StepValues& values, LossScaler& scaler) {
  if (!std::isfinite(values.loss)) return nonfinite();
  const bool finite_gradients = std::isfinite(values.grad_norm);
  if (!finite_gradients && !scaler.enabled()) return nonfinite();
  in_a_row_ = 0;  // a step that ran, or an fp16 overflow the scaler handled, ends a run of non-finite ones
  return scaler.update(finite_gradients) ? StepOutcome::applied : StepOutcome::overflow_skipped;
}

StepOutcome NonfinitePolicy::nonfinite() {
  ++in_a_row_;
  if (action_ == NonFinite::stop || in_a_row_ > allowed_skips_) return StepOutcome::stopped;
  return StepOutcome::nonfinite_skipped;
}

std::string NonfinitePolicy::describe(StepOutcome outcome, std::int64_t step, const StepValues& values) const {
  const std::string what = nonfinite_values(values);
  if (outcome == StepOutcome::nonfinite_skipped) {
    return fmt::format("step {}: {}: update skipped (train.nonfinite = skip, {} of at most {} in a row)", step, what,
                       in_a_row_, allowed_skips_);
  }
  const std::string why =
      action_ == NonFinite::stop
          ? std::string("train.nonfinite = stop")
          : fmt::format("{} non-finite steps in a row, train.nonfinite_skips = {}", in_a_row_, allowed_skips_);
  return fmt::format(
      "step {}: {} ({}): training diverged; stopping without saving, `latest` still names the last checkpoint "
      "saved (try a lower optim.lr; exit code {})",
      step, what, why, exit_code::nonfinite);
}

}  // namespace meshtrain

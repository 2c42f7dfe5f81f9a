// What a user watches: the effective-batch line, one progress line per step, and the metrics record.
#pragma once

#include "core/accumulation.hpp"
#include "core/memory_ledger.hpp"
#include "train/moe_metrics.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace meshtrain {

// A validation pass (train/validation.hpp).
struct ValidationResult {
  double loss = 0;                // over the pass's loss-carrying targets
  std::int64_t loss_targets = 0;  // how many
  double seconds = 0;
};

struct StepReport {
  std::int64_t step;   // completed steps (1-based)
  std::int64_t steps;  // total steps of the run
  double loss;
  double lr;
  double grad_norm;
  std::int64_t tokens;            // cumulative
  std::int64_t loss_targets = 0;  // fine-tuning data: the step's loss-carrying targets (0: plain data)
  double step_time_s;
  double tokens_per_s;
  double model_flops_per_s;                    // (6N + 6LCT) · tokens/s
  double mfu;                                  // fraction of the configured peak (0 when no peak is set)
  double elapsed_s;                            // since this job started training
  double eta_s;                                // for the remaining steps at the recent pace
  const MemoryBytes* memory = nullptr;         // the rank's allocations by category, if reported
  std::int64_t peak_rss = 0;                   // the process's peak resident memory so far
  double loss_scale = 0;                       // fp16: the dynamic loss scale after this step (else 0)
  bool skipped = false;                        // the update was skipped (fp16 overflow, or train.nonfinite = skip)
  bool nonfinite = false;                      // the loss or the gradient norm was not finite
  const MoeStepMetrics* moe = nullptr;         // the step's expert loads and auxiliary losses (MoE models)
  std::optional<ValidationResult> validation;  // a validation pass after this step
};

// `start-up 3.12 s (process start to the first step): state allocated in 2.01 s, weights initialised in
// 0.61 s`; a negative time is left out (unknown, or not initialised: resumed).
std::string startup_line(double since_process_start_s, double allocation_s, double initialization_s);

// `step    12/200 | loss 3.2154 | lr 3.00e-04 | norm 1.234 | 12.3k tok/s | 1.2 GFLOP/s | MFU 12.3% | 1m02s, ETA 3m10s`,
// and for an MoE model before the times `moe aux 1.013 drop 0.4% load 0.82-1.31` (the experts'
// least and most load relative to an even one).
std::string progress_line(const StepReport& r);

// One JSON-lines record: step, loss, lr, grad_norm, tokens, step_time_s, tokens_per_s, mfu, ...
nlohmann::json metrics_record(const StepReport& r);

// 75 → "1m15s", 3725 → "1h02m05s".
std::string format_duration(double seconds);

}  // namespace meshtrain

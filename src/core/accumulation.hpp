// Gradient accumulation (share/docs/usage.md, Keys): accum = global_batch / (micro_batch × dp), which must
// be whole. Shared by the trainer and the planner (`meshtrain plan`), so both refuse the same configs.
#pragma once

#include "core/config.hpp"
#include "core/errors.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace meshtrain {

// Gradient accumulation steps: global_batch / (micro_batch × dp); InputError when not whole.
inline int accumulation_steps(const Config& cfg, int dp) {
  // In 64 bits: micro_batch × dp wraps an int (to 0 at 2^20 × 2^12) well inside the keys' ranges.
  const std::int64_t per_pass = std::int64_t(cfg.train.micro_batch) * dp;
  if (cfg.train.global_batch % per_pass != 0) {
    input_error(
        "train.global_batch = {} is not divisible by train.micro_batch {} × dp {} = {}: choose a multiple of {}",
        cfg.train.global_batch, cfg.train.micro_batch, dp, per_pass, per_pass);
  }
  return int(cfg.train.global_batch / per_pass);
}

// The effective batch the way a user checks it by hand (the trainer's start line, the plan):
// `effective batch = micro_batch 4 × dp 2 × accum 4 = 32 sequences (32768 tokens)`
inline std::string effective_batch_line(int micro_batch, int dp, int accum, int seq_len) {
  const long sequences = long(micro_batch) * dp * accum;
  return fmt::format("effective batch = micro_batch {} × dp {} × accum {} = {} sequences ({} tokens)", micro_batch, dp,
                     accum, sequences, sequences * seq_len);
}

}  // namespace meshtrain

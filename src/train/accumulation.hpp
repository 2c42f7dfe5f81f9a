// Gradient accumulation (share/docs/usage.md, Keys): accum = global_batch / (micro_batch × dp), which must
// be whole. Shared by the trainer and the planner (`meshtrain plan`), so both refuse the same configs.
#pragma once

#include "core/config.hpp"
#include "core/errors.hpp"

namespace meshtrain {

// Gradient accumulation steps: global_batch / (micro_batch × dp); InputError when not whole.
inline int accumulation_steps(const Config& cfg, int dp) {
  const int per_pass = cfg.train.micro_batch * dp;
  if (cfg.train.global_batch % per_pass != 0) {
    input_error("train.global_batch = {} is not divisible by train.micro_batch {} × dp {} = {}: choose a multiple of {}",
                cfg.train.global_batch, cfg.train.micro_batch, dp, per_pass, per_pass);
  }
  return cfg.train.global_batch / per_pass;
}

}  // namespace meshtrain

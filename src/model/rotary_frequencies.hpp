// The rotary frequencies of a llama model: θ^(−2i/hs) as published, rescaled as model.rope_scaling
// says for a context longer than the pre-training one (share/docs/usage.md, Model families):
//   linear: every frequency divided by rope_factor (positions interpolated);
//   llama3 (Llama 3.1): with wavelength λ = 2π/f, L = rope_original_max_position,
//     λ > L / low_freq_factor  (long):   f / factor
//     λ < L / high_freq_factor (short):  f
//     otherwise (the band between):      (1 − s) · f / factor + s · f,
//                                        s = (L/λ − low_freq_factor) / (high_freq_factor − low_freq_factor)
// in double, as the table (kernels/rotary.hpp) is.
#pragma once

#include "core/config.hpp"

#include <vector>

namespace meshtrain {

std::vector<double> rotary_frequencies(const ModelConfig& m);

}  // namespace meshtrain

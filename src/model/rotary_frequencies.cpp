#include "model/rotary_frequencies.hpp"

#include "kernels/rotary.hpp"

#include <numbers>

namespace meshtrain {

std::vector<double> rotary_frequencies(const ModelConfig& m) {
  std::vector<double> f = rotary_frequencies(m.head_size(), m.rope_theta);
  switch (m.rope_scaling) {
    case RopeScaling::none: break;
    case RopeScaling::linear:
      for (double& x : f) x /= m.rope_factor;
      break;
    case RopeScaling::llama3: {
      const double L = m.rope_original_max_position, low = m.rope_low_freq_factor, high = m.rope_high_freq_factor;
      for (double& x : f) {
        const double wavelength = 2 * std::numbers::pi / x;
        if (wavelength > L / low) {
          x /= m.rope_factor;
        } else if (wavelength >= L / high) {
          const double s = (L / wavelength - low) / (high - low);
          x = (1 - s) * x / m.rope_factor + s * x;
        }
      }
      break;
    }
  }
  return f;
}

}  // namespace meshtrain

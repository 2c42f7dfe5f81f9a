// AdamW exactly as torch.optim.AdamW (share/docs/usage.md, Model and optimizer), over flat buffers.
//
// For update t = i + 1 and each element:
//   p ← p·(1 − lr·wd)                 (only tensors with decay)
//   m ← β1·m + (1 − β1)·g,  v ← β2·v + (1 − β2)·g²     (g already multiplied by the clip scale)
//   p ← p − lr·(m / (1 − β1ᵗ)) / (sqrt(v / (1 − β2ᵗ)) + eps)
#pragma once

#include "core/config.hpp"
#include "core/exec.hpp"

#include <cmath>
#include <cstdint>

namespace meshtrain {

struct AdamWStep {
  double lr;
  double weight_decay;  // 0 for tensors without decay
  double beta1, beta2, eps;
  std::int64_t t;     // 1-based update count
  double grad_scale;  // clipping factor applied to every gradient
};

template <class Real>
void adamw_update(const ExecSpace& space, Vec<Real> param, Vec<Real> exp_avg, Vec<Real> exp_avg_sq, CVec<Real> grad,
                  std::size_t n, const AdamWStep& s) {
  static_assert(reachable_v<Vec<Real>>);
  const Real lr = Real(s.lr);
  const Real decay = Real(1.0 - s.lr * s.weight_decay);
  const Real beta1 = Real(s.beta1), beta2 = Real(s.beta2), eps = Real(s.eps);
  const Real bias1 = Real(1.0 - std::pow(s.beta1, double(s.t)));
  const Real bias2_sqrt = Real(std::sqrt(1.0 - std::pow(s.beta2, double(s.t))));
  const Real step_size = lr / bias1;
  const Real scale = Real(s.grad_scale);
  Kokkos::parallel_for(
      "meshtrain::adamw::update", Kokkos::RangePolicy<ExecSpace>(space, 0, n), KOKKOS_LAMBDA(std::size_t i) {
        const Real g = grad(i) * scale;
        const Real m = beta1 * exp_avg(i) + (Real(1) - beta1) * g;
        const Real v = beta2 * exp_avg_sq(i) + (Real(1) - beta2) * g * g;
        exp_avg(i) = m;
        exp_avg_sq(i) = v;
        const Real denom = kmath::sqrt(v) / bias2_sqrt + eps;
        param(i) = param(i) * decay - step_size * m / denom;
      });
}

}  // namespace meshtrain

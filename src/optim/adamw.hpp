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
  double weight_decay;  // of the tensors that decay (OptimizerState::update: TensorInfo::decays)
  double beta1, beta2, eps;
  std::int64_t t;     // 1-based update count
  double grad_scale;  // clipping factor applied to every gradient
};

// One step's constants, rounded to Real once, and the update of one element: the arithmetic every
// AdamW kernel shares, so that an update over many tensors at once (state/optimizer_state.cpp) is
// bitwise the update tensor by tensor. `decay` is 1 − lr·wd of the element's tensor: Real(1) exactly
// without weight decay, which leaves p·decay = p.
template <class Real>
struct AdamWElement {
  Real decay, beta1, beta2, eps, bias2_sqrt, step_size, scale;

  explicit AdamWElement(const AdamWStep& s)
      : decay(Real(1.0 - s.lr * s.weight_decay)),
        beta1(Real(s.beta1)),
        beta2(Real(s.beta2)),
        eps(Real(s.eps)),
        bias2_sqrt(Real(std::sqrt(1.0 - std::pow(s.beta2, double(s.t))))),
        step_size(Real(s.lr) / Real(1.0 - std::pow(s.beta1, double(s.t)))),
        scale(Real(s.grad_scale)) {}

  KOKKOS_INLINE_FUNCTION void operator()(Real& param, Real& exp_avg, Real& exp_avg_sq, Real grad, Real decay_of) const {
    const Real g = grad * scale;
    const Real m = beta1 * exp_avg + (Real(1) - beta1) * g;
    const Real v = beta2 * exp_avg_sq + (Real(1) - beta2) * g * g;
    exp_avg = m;
    exp_avg_sq = v;
    const Real denom = kmath::sqrt(v) / bias2_sqrt + eps;
    param = param * decay_of - step_size * m / denom;
  }
};

// One range, every element with the step's weight decay: the per-tensor form, which the tests hold
// the update of all owned runs at once against.
template <class Real>
void adamw_update(const ExecSpace& space, Vec<Real> param, Vec<Real> exp_avg, Vec<Real> exp_avg_sq, CVec<Real> grad,
                  std::size_t n, const AdamWStep& s) {
  static_assert(reachable_v<Vec<Real>>);
  const AdamWElement<Real> update(s);
  Kokkos::parallel_for(
      "meshtrain::adamw::update", Kokkos::RangePolicy<ExecSpace>(space, 0, n),
      KOKKOS_LAMBDA(std::size_t i) { update(param(i), exp_avg(i), exp_avg_sq(i), grad(i), update.decay); });
}

}  // namespace meshtrain

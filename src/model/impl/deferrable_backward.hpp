// The backward kernels with weight gradients, as the families' listings call them: while no backward is deferred
// (model/impl/deferred_weight_gradients.hpp) each runs whole, the fused kernels as ever; while one is, its input
// gradient runs now and its weight gradients are queued, over held copies of what the scratch overwrites before
// they run. Each takes the queue first and then the kernel's own arguments (kernels/matmul.hpp, layernorm.hpp,
// rmsnorm.hpp). Internal to model/.
#pragma once

#include "kernels/layernorm.hpp"
#include "kernels/matmul.hpp"
#include "kernels/rmsnorm.hpp"
#include "model/impl/deferred_weight_gradients.hpp"

#include <stdexcept>

namespace meshtrain::deferrable {

// A fused gradient the deferred path cannot split off: the caller hands it to the product it belongs to.
inline void require_unfused(const void* fused, const char* what) {
  if (fused != nullptr) {
    throw std::logic_error(std::string("a deferred backward cannot fuse ") + what + " into its input gradient");
  }
}

// Queues a product's weight and bias gradients, weight_backward(dweight, dbias, dout, inp), over held copies of
// its output gradient and input; a gradient nobody keeps (LoRA's frozen base: DeferredWeightGradients::trains) is
// left out, and with neither kept nothing is queued or held.
template <class Real, class WeightBackward>
void defer_product(DeferredWeightGradients<Real>& later, const ExecSpace& space, Vec<Real> dweight, Vec<Real> dbias,
                   CVec<Real> dout, CVec<Real> inp, WeightBackward weight_backward) {
  const Vec<Real> dw = later.trains(dweight) ? dweight : Vec<Real>(), db = later.trains(dbias) ? dbias : Vec<Real>();
  if (dw.data() == nullptr && db.data() == nullptr) return;
  later.add([=, dout = later.hold(space, dout), inp = later.hold(space, inp)] { weight_backward(dw, db, dout, inp); });
}

template <class Real>
void matmul_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                     Vec<Real> dbias, Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight,
                     int N, int IC, int OC) {
  if (!later.deferring())
    return meshtrain::matmul_backward<Real>(space, dinp, dweight, dbias, partials, dout, inp, weight, N, IC, OC);
  matmul_input_backward<Real>(space, dinp, dout, weight, N, IC, OC);
  defer_product<Real>(later, space, dweight, dbias, dout, inp,
                      [=](Vec<Real> dw, Vec<Real> db, CVec<Real> y, CVec<Real> x) {
                        weight_and_bias_backward<Real>(space, dw, db, partials, y, x, N, IC, OC);
                      });
}

// Deferred, dpre_bias (c_fc's bias) must be empty: the caller passes it to c_fc's product instead, whose output
// gradient dpre is and which holds it already.
template <class Real>
void matmul_backward_gelu(DeferredWeightGradients<Real>& later, const ExecSpace& space, Vec<Real> dpre,
                          Vec<Real> dpre_bias, Vec<Real> dweight, Vec<Real> dbias, Vec<accum_t<Real>> partials,
                          CVec<Real> dout, CVec<Real> inp, CVec<Real> pre, CVec<Real> weight, int N, int IC, int OC) {
  if (!later.deferring()) {
    return meshtrain::matmul_backward_gelu<Real>(space, dpre, dpre_bias, dweight, dbias, partials, dout, inp, pre,
                                                 weight, N, IC, OC);
  }
  require_unfused(dpre_bias.data(), "the GELU input's bias gradient");
  matmul_gelu_input_backward<Real>(space, dpre, dout, pre, weight, N, IC, OC);
  defer_product<Real>(later, space, dweight, dbias, dout, inp,
                      [=](Vec<Real> dw, Vec<Real> db, CVec<Real> y, CVec<Real> x) {
                        weight_and_bias_backward<Real>(space, dw, db, partials, y, x, N, IC, OC);
                      });
}

template <class Real>
void linear_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                     Vec<Real> dbias, Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight,
                     int N, int IC, int OC) {
  if (!later.deferring())
    return meshtrain::linear_backward<Real>(space, dinp, dweight, dbias, partials, dout, inp, weight, N, IC, OC);
  linear_input_backward<Real>(space, dinp, dout, weight, N, IC, OC);
  defer_product<Real>(later, space, dweight, dbias, dout, inp,
                      [=](Vec<Real> dw, Vec<Real> db, CVec<Real> y, CVec<Real> x) {
                        linear_weight_backward<Real>(space, dw, db, partials, y, x, N, IC, OC);
                      });
}

template <class Real>
void linear_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                     CVec<Real> dout, CVec<Real> inp, CVec<Real> weight, int N, int IC, int OC) {
  linear_backward<Real>(later, space, dinp, dweight, Vec<Real>(), Vec<accum_t<Real>>(), dout, inp, weight, N, IC, OC);
}

// Deferred, residual_bias must be empty: the caller passes it to the product whose output gradient dinp is.
template <class Real>
void layernorm_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                        Vec<Real> dbias, Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp,
                        CVec<Real> weight, CVec<accum_t<Real>> mean, CVec<accum_t<Real>> rstd, int N, int C,
                        Vec<Real> residual_bias = {}) {
  if (!later.deferring()) {
    return meshtrain::layernorm_backward<Real>(space, dinp, dweight, dbias, partials, dout, inp, weight, mean, rstd, N,
                                               C, residual_bias);
  }
  require_unfused(residual_bias.data(), "a residual product's bias gradient");
  layernorm_input_backward<Real>(space, dinp, dout, inp, weight, mean, rstd, N, C);
  if (!later.trains(dweight)) return;  // frozen (LoRA): its bias with it
  later.add([=, dout = later.hold(space, dout), inp = later.hold(space, inp), mean = later.hold_statistics(space, mean),
             rstd = later.hold_statistics(space, rstd)]() {
    layernorm_weight_backward<Real>(space, dweight, dbias, partials, dout, inp, mean, rstd, N, C);
  });
}

template <class Real>
void rmsnorm_backward(DeferredWeightGradients<Real>& later, const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                      Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight,
                      CVec<accum_t<Real>> rstd, int N, int C) {
  if (!later.deferring()) {
    return meshtrain::rmsnorm_backward<Real>(space, dinp, dweight, partials, dout, inp, weight, rstd, N, C);
  }
  rmsnorm_input_backward<Real>(space, dinp, dout, inp, weight, rstd, N, C);
  if (!later.trains(dweight)) return;  // frozen (LoRA)
  later.add(
      [=, dout = later.hold(space, dout), inp = later.hold(space, inp), rstd = later.hold_statistics(space, rstd)]() {
        rmsnorm_weight_backward<Real>(space, dweight, partials, dout, inp, rstd, N, C);
      });
}

}  // namespace meshtrain::deferrable

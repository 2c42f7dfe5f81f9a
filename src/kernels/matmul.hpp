// Fully connected layers: Y = X W + b, with W in Conv1D layout [in, out] (gpt2, share/docs/usage.md,
// Checkpoints), and Y = X Wᵀ with W in torch Linear layout [out, in] (llama).
//
// Size letters: N rows (B·T), IC input channels, OC output channels.
#pragma once

#include "kernels/bias.hpp"
#include "kernels/gemm.hpp"

namespace meshtrain {

// out (N, OC) = inp (N, IC) · weight (IC, OC) + bias (OC); bias may be empty (no bias).
template <class Real>
void matmul_forward(const ExecSpace& space, Vec<Real> out, CVec<Real> inp, CVec<Real> weight, CVec<Real> bias, int N,
                    int IC, int OC) {
  gemm<Real>(space, Trans::no, Trans::no, {N, OC, IC}, accum_t<Real>(1), inp.data(), IC, weight.data(), OC,
             accum_t<Real>(0), out.data(), OC);
  if (bias.data() != nullptr) add_bias(space, out, bias, N, OC);
}

// dinp (N, IC) = dout · weightᵀ (overwritten); dweight += inpᵀ · dout; dbias += column sums of dout
// (partials: bias_backward's workspace, column_sum_workspace(N, OC) elements).
template <class Real>
void matmul_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, Vec<Real> dbias,
                     Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight, int N, int IC,
                     int OC) {
  gemm<Real>(space, Trans::no, Trans::yes, {N, IC, OC}, accum_t<Real>(1), dout.data(), OC, weight.data(), OC,
             accum_t<Real>(0), dinp.data(), IC);
  gemm<Real>(space, Trans::yes, Trans::no, {IC, OC, N}, accum_t<Real>(1), inp.data(), IC, dout.data(), OC,
             accum_t<Real>(1), dweight.data(), OC);
  if (dbias.data() != nullptr) bias_backward(space, dbias, partials, dout, N, OC);
}

// Torch Linear layout [out, in] without bias (the llama family): out (N, OC) = inp (N, IC) · weightᵀ.
template <class Real>
void linear_forward(const ExecSpace& space, Vec<Real> out, CVec<Real> inp, CVec<Real> weight, int N, int IC, int OC) {
  gemm<Real>(space, Trans::no, Trans::yes, {N, OC, IC}, accum_t<Real>(1), inp.data(), IC, weight.data(), IC,
             accum_t<Real>(0), out.data(), OC);
}

// dinp (N, IC) = dout · weight (overwritten); dweight (OC, IC) += doutᵀ · inp.
template <class Real>
void linear_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, CVec<Real> dout, CVec<Real> inp,
                     CVec<Real> weight, int N, int IC, int OC) {
  gemm<Real>(space, Trans::no, Trans::no, {N, IC, OC}, accum_t<Real>(1), dout.data(), OC, weight.data(), IC,
             accum_t<Real>(0), dinp.data(), IC);
  gemm<Real>(space, Trans::yes, Trans::no, {OC, IC, N}, accum_t<Real>(1), dout.data(), OC, inp.data(), IC,
             accum_t<Real>(1), dweight.data(), IC);
}

}  // namespace meshtrain

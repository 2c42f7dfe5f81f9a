// Fully connected layers: Y = X W + b, with W in Conv1D layout [in, out] (gpt2, share/docs/usage.md,
// Checkpoints), and Y = X Wᵀ with W in torch Linear layout [out, in] (llama).
//
// Size letters: N rows (B·T), IC input channels, OC output channels.
//
// Where a bias or GELU sits next to a product, CUDA builds fuse it into the GEMM (a cuBLASLt
// epilogue, kernels/gemm.hpp gemm_fused) and host builds, or a product cuBLASLt refuses, run the
// kernels after it.
#pragma once

#include "kernels/bias.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"

namespace meshtrain {

// out (N, OC) = inp (N, IC) · weight (IC, OC) + bias (OC); bias may be empty (no bias).
template <class Real>
void matmul_forward(const ExecSpace& space, Vec<Real> out, CVec<Real> inp, CVec<Real> weight, CVec<Real> bias, int N,
                    int IC, int OC) {
  using A = accum_t<Real>;
  const GemmShape shape{N, OC, IC};
  if (bias.data() != nullptr &&
      gemm_fused<Real>(space, Trans::no, Trans::no, shape, A(1), inp.data(), IC, weight.data(), OC, A(0), out.data(),
                       OC, GemmEpilogue::bias, {.bias = bias.data()})) {
    return;
  }
  gemm<Real>(space, Trans::no, Trans::no, shape, A(1), inp.data(), IC, weight.data(), OC, A(0), out.data(), OC);
  if (bias.data() != nullptr) add_bias(space, out, bias, N, OC);
}

// pre (N, OC) = inp · weight + bias, GELU's input, kept for backward; out = GELU(pre) (gpt2's c_fc).
template <class Real>
void matmul_bias_gelu_forward(const ExecSpace& space, Vec<Real> pre, Vec<Real> out, CVec<Real> inp, CVec<Real> weight,
                              CVec<Real> bias, int N, int IC, int OC) {
  using A = accum_t<Real>;
  const GemmShape shape{N, OC, IC};
  if (gemm_fused<Real>(space, Trans::no, Trans::no, shape, A(1), inp.data(), IC, weight.data(), OC, A(0), out.data(),
                       OC, GemmEpilogue::gelu_aux_bias, {.bias = bias.data(), .aux = pre.data(), .ld_aux = OC})) {
    return;
  }
  gemm<Real>(space, Trans::no, Trans::no, shape, A(1), inp.data(), IC, weight.data(), OC, A(0), pre.data(), OC);
  bias_gelu_forward(space, pre, out, bias, N, OC);
}

// dweight (IC, OC) += inpᵀ · dout unless it is empty (a frozen weight: LoRA's base) and, when dbias is not
// empty, dbias += column sums of dout: on CUDA the sums are the weight product's epilogue (the column sums
// of its B operand, dout).
template <class Real>
void weight_and_bias_backward(const ExecSpace& space, Vec<Real> dweight, Vec<Real> dbias, Vec<accum_t<Real>> partials,
                              CVec<Real> dout, CVec<Real> inp, int N, int IC, int OC) {
  using A = accum_t<Real>;
  if (dweight.data() == nullptr) {
    if (dbias.data() != nullptr) bias_backward(space, dbias, partials, dout, N, OC);
    return;
  }
  const GemmShape shape{IC, OC, N};
  if (dbias.data() != nullptr &&
      gemm_fused<Real>(space, Trans::yes, Trans::no, shape, A(1), inp.data(), IC, dout.data(), OC, A(1), dweight.data(),
                       OC, GemmEpilogue::bgrad_b, {.bias_grad = dbias.data()})) {
    return;
  }
  gemm<Real>(space, Trans::yes, Trans::no, shape, A(1), inp.data(), IC, dout.data(), OC, A(1), dweight.data(), OC);
  if (dbias.data() != nullptr) bias_backward(space, dbias, partials, dout, N, OC);
}

// matmul_backward's input gradient alone: dinp (N, IC) = dout · weightᵀ (overwritten).
template <class Real>
void matmul_input_backward(const ExecSpace& space, Vec<Real> dinp, CVec<Real> dout, CVec<Real> weight, int N, int IC,
                           int OC) {
  using A = accum_t<Real>;
  gemm<Real>(space, Trans::no, Trans::yes, {N, IC, OC}, A(1), dout.data(), OC, weight.data(), OC, A(0), dinp.data(),
             IC);
}

// dinp (N, IC) = dout · weightᵀ (overwritten); dweight += inpᵀ · dout unless it is empty; dbias += column
// sums of dout (partials: bias_backward's workspace, column_sum_workspace(N, OC) elements).
template <class Real>
void matmul_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, Vec<Real> dbias,
                     Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight, int N, int IC,
                     int OC) {
  matmul_input_backward<Real>(space, dinp, dout, weight, N, IC, OC);
  weight_and_bias_backward<Real>(space, dweight, dbias, partials, dout, inp, N, IC, OC);
}

// matmul_backward_gelu's input gradient alone: dpre (N, IC) = (dout · weightᵀ) ⊙ GELU'(pre), for schedules
// that run the weight gradients later (c_fc's bias gradient then comes with its weight's).
template <class Real>
void matmul_gelu_input_backward(const ExecSpace& space, Vec<Real> dpre, CVec<Real> dout, CVec<Real> pre,
                                CVec<Real> weight, int N, int IC, int OC) {
  matmul_input_backward<Real>(space, dpre, dout, weight, N, IC, OC);
  gelu_backward(space, dpre, pre, CVec<Real>(dpre), long(N) * IC);
}

// The backward of out = GELU(pre) · weight + bias through the GELU (gpt2's c_proj after c_fc):
// dpre (N, IC) = (dout · weightᵀ) ⊙ GELU'(pre) (overwritten); dpre_bias += column sums of dpre
// (c_fc's bias gradient); dweight += GELU(pre)ᵀ · dout unless it is empty (inp = GELU(pre), as the forward
// kept it);
// dbias, when not empty, += column sums of dout.
template <class Real>
void matmul_backward_gelu(const ExecSpace& space, Vec<Real> dpre, Vec<Real> dpre_bias, Vec<Real> dweight,
                          Vec<Real> dbias, Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> pre,
                          CVec<Real> weight, int N, int IC, int OC) {
  using A = accum_t<Real>;
  const GemmShape shape{N, IC, OC};
  weight_and_bias_backward<Real>(space, dweight, dbias, partials, dout, inp, N, IC, OC);
  if (gemm_fused<Real>(space, Trans::no, Trans::yes, shape, A(1), dout.data(), OC, weight.data(), OC, A(0), dpre.data(),
                       IC, GemmEpilogue::dgelu_bgrad,
                       // aux is only read by this epilogue
                       {.bias_grad = dpre_bias.data(), .aux = const_cast<Real*>(pre.data()), .ld_aux = IC})) {
    return;
  }
  gemm<Real>(space, Trans::no, Trans::yes, shape, A(1), dout.data(), OC, weight.data(), OC, A(0), dpre.data(), IC);
  gelu_backward_bias(space, dpre, dpre_bias, partials, pre, dpre, N, IC);
}

// Torch Linear layout [out, in] (the llama family): out (N, OC) = inp (N, IC) · weightᵀ + bias (OC); bias
// may be empty (no bias, llama's every product but Qwen2's q|k|v).
template <class Real>
void linear_forward(const ExecSpace& space, Vec<Real> out, CVec<Real> inp, CVec<Real> weight, CVec<Real> bias, int N,
                    int IC, int OC) {
  using A = accum_t<Real>;
  const GemmShape shape{N, OC, IC};
  if (bias.data() != nullptr &&
      gemm_fused<Real>(space, Trans::no, Trans::yes, shape, A(1), inp.data(), IC, weight.data(), IC, A(0), out.data(),
                       OC, GemmEpilogue::bias, {.bias = bias.data()})) {
    return;
  }
  gemm<Real>(space, Trans::no, Trans::yes, shape, A(1), inp.data(), IC, weight.data(), IC, A(0), out.data(), OC);
  if (bias.data() != nullptr) add_bias(space, out, bias, N, OC);
}

template <class Real>
void linear_forward(const ExecSpace& space, Vec<Real> out, CVec<Real> inp, CVec<Real> weight, int N, int IC, int OC) {
  linear_forward<Real>(space, out, inp, weight, CVec<Real>(), N, IC, OC);
}

// dinp (N, IC) = dout · weight (overwritten); dweight (OC, IC) += doutᵀ · inp unless it is empty (a frozen
// weight: LoRA's base); dbias, when not empty, += column sums of dout (partials: bias_backward's workspace,
// column_sum_workspace(N, OC) elements).
// Its two halves, for schedules that run a backward's weight gradients later than its input gradient.
template <class Real>
void linear_input_backward(const ExecSpace& space, Vec<Real> dinp, CVec<Real> dout, CVec<Real> weight, int N, int IC,
                           int OC) {
  gemm<Real>(space, Trans::no, Trans::no, {N, IC, OC}, accum_t<Real>(1), dout.data(), OC, weight.data(), IC,
             accum_t<Real>(0), dinp.data(), IC);
}
template <class Real>
void linear_weight_backward(const ExecSpace& space, Vec<Real> dweight, Vec<Real> dbias, Vec<accum_t<Real>> partials,
                            CVec<Real> dout, CVec<Real> inp, int N, int IC, int OC) {
  if (dweight.data() != nullptr) {
    gemm<Real>(space, Trans::yes, Trans::no, {OC, IC, N}, accum_t<Real>(1), dout.data(), OC, inp.data(), IC,
               accum_t<Real>(1), dweight.data(), IC);
  }
  if (dbias.data() != nullptr) bias_backward(space, dbias, partials, dout, N, OC);
}
template <class Real>
void linear_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, Vec<Real> dbias,
                     Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight, int N, int IC,
                     int OC) {
  linear_input_backward<Real>(space, dinp, dout, weight, N, IC, OC);
  linear_weight_backward<Real>(space, dweight, dbias, partials, dout, inp, N, IC, OC);
}

template <class Real>
void linear_backward(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, CVec<Real> dout, CVec<Real> inp,
                     CVec<Real> weight, int N, int IC, int OC) {
  linear_backward<Real>(space, dinp, dweight, Vec<Real>(), Vec<accum_t<Real>>(), dout, inp, weight, N, IC, OC);
}

}  // namespace meshtrain

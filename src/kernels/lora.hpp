// LoRA's two low-rank products beside a frozen linear layer (share/docs/usage.md, LoRA):
//   y += s · (x Aᵀ) Bᵀ,   A (r, in), B (out, r) in torch Linear layout, s = alpha / r (or alpha / sqrt(r)),
// split into the down product h = x Aᵀ (N, r), which backward reads and the model keeps, and the up
// product. x and y may be column ranges of wider row-major buffers (a fused q|k|v product's q columns):
// each takes its row stride. Every function is GEMMs (kernels/gemm.hpp) with alpha and beta, so the 16-bit
// types accumulate in fp32 as every product does, and nothing here allocates.
//
// Size letters: N rows (B·T), in and out the layer's input and output columns on this rank, r the rank.
#pragma once

#include "kernels/gemm.hpp"

namespace meshtrain {

// One module's adapter on this rank: A (r, in_l), B (out_l, r) and their gradients; all empty where the
// module is not adapted.
template <class Real>
struct LoraAdapter {
  Vec<Real> A, B, dA, dB;
  bool active() const { return A.extent(0) > 0; }
};

// h (N, r) = x (N, in; row stride ldx) · Aᵀ.
template <class Real>
void lora_down_forward(const ExecSpace& space, Vec<Real> h, const Real* x, int ldx, CVec<Real> A, int N, int in,
                       int r) {
  using Acc = accum_t<Real>;
  gemm<Real>(space, Trans::no, Trans::yes, {N, r, in}, Acc(1), x, ldx, A.data(), in, Acc(0), h.data(), r);
}

// y (N, out; row stride ldy) += s · h · Bᵀ.
template <class Real>
void lora_up_forward(const ExecSpace& space, Real* y, int ldy, CVec<Real> h, CVec<Real> B, double s, int N, int out,
                     int r) {
  using Acc = accum_t<Real>;
  gemm<Real>(space, Trans::no, Trans::yes, {N, out, r}, Acc(s), h.data(), r, B.data(), r, Acc(1), y, ldy);
}

// The up product's backward in two halves, for schedules that run the weight gradients later: dB (out, r) +=
// s · dyᵀ · h alone, and dh (N, r) = s · dy · B (overwritten) alone, dy (N, out; row stride ldy) the gradient of y.
template <class Real>
void lora_up_input_backward(const ExecSpace& space, Vec<Real> dh, const Real* dy, int ldy, CVec<Real> B, double s,
                            int N, int out, int r) {
  using Acc = accum_t<Real>;
  gemm<Real>(space, Trans::no, Trans::no, {N, r, out}, Acc(s), dy, ldy, B.data(), r, Acc(0), dh.data(), r);
}
template <class Real>
void lora_up_weight_backward(const ExecSpace& space, Vec<Real> dB, const Real* dy, int ldy, CVec<Real> h, double s,
                             int N, int out, int r) {
  using Acc = accum_t<Real>;
  gemm<Real>(space, Trans::yes, Trans::no, {out, r, N}, Acc(s), dy, ldy, h.data(), r, Acc(1), dB.data(), r);
}

// The whole up product's backward: both halves.
template <class Real>
void lora_up_backward(const ExecSpace& space, Vec<Real> dh, Vec<Real> dB, const Real* dy, int ldy, CVec<Real> h,
                      CVec<Real> B, double s, int N, int out, int r) {
  lora_up_weight_backward<Real>(space, dB, dy, ldy, h, s, N, out, r);
  lora_up_input_backward<Real>(space, dh, dy, ldy, B, s, N, out, r);
}

// The down product's input gradient: dx (N, in; row stride lddx) += dh · A.
template <class Real>
void lora_input_backward(const ExecSpace& space, Real* dx, int lddx, CVec<Real> dh, CVec<Real> A, int N, int in,
                         int r) {
  using Acc = accum_t<Real>;
  gemm<Real>(space, Trans::no, Trans::no, {N, in, r}, Acc(1), dh.data(), r, A.data(), in, Acc(1), dx, lddx);
}

// The same into g (N, in; contiguous, overwritten): g = dh · A, for the gradient through lora.dropout
// (kernels/lora_dropout.hpp), which masks it before it adds to dx.
template <class Real>
void lora_input_product(const ExecSpace& space, Vec<Real> g, CVec<Real> dh, CVec<Real> A, int N, int in, int r) {
  using Acc = accum_t<Real>;
  gemm<Real>(space, Trans::no, Trans::no, {N, in, r}, Acc(1), dh.data(), r, A.data(), in, Acc(0), g.data(), in);
}

// The down product's weight gradient: dA (r, in) += dhᵀ · x (x row stride ldx).
template <class Real>
void lora_weight_backward(const ExecSpace& space, Vec<Real> dA, CVec<Real> dh, const Real* x, int ldx, int N, int in,
                          int r) {
  using Acc = accum_t<Real>;
  gemm<Real>(space, Trans::yes, Trans::no, {r, in, N}, Acc(1), dh.data(), r, x, ldx, Acc(1), dA.data(), in);
}

}  // namespace meshtrain

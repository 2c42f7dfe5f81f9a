// LoRA's products beside the routed experts' grouped linear layers (kernels/grouped_linear.hpp): the rows
// of group g use expert g.weight's adapter, A_e (r, in) and B_e (out, r), each of the products in
// kernels/lora.hpp one grouped GEMM over the groups (their dA and dB ones in waves, as the grouped layers'
// dW: several groups may name one expert).
//
//   forward:  h[g] = x[g] A_eᵀ,  y[g] += s · h[g] B_eᵀ
//   backward: dB_e += s · dy[g]ᵀ h[g],  dh[g] = s · dy[g] B_e,  dx[g] += dh[g] A_e,  dA_e += dh[g]ᵀ x[g]
//
// x, y, dx and dy are row-major with row strides; h and dh are (rows, r). `adapters` holds each expert's
// A, B and their gradients by its local index.
#pragma once

#include "kernels/grouped_linear.hpp"
#include "kernels/lora.hpp"

#include <span>
#include <vector>

namespace meshtrain {

namespace detail {

// One GEMM per group with rows, in one grouped call; `waves`: as many calls as groups share an expert,
// each taking every expert's next group (the products add into the expert's dA or dB).
template <class Real, class Make>
void lora_grouped_products(const ExecSpace& space, Trans trans_a, Trans trans_b, std::span<const RowGroup> groups,
                           Make make, double alpha, double beta, bool waves) {
  using Acc = accum_t<Real>;
  if (!waves) {
    std::vector<GemmProblem<Real>> problems;
    for (const RowGroup& g : groups) {
      if (g.rows > 0) problems.push_back(make(g));
    }
    gemm_grouped<Real>(space, trans_a, trans_b, problems, Acc(alpha), Acc(beta));
    return;
  }
  const std::vector<int> wave = grouped_linear_waves(groups);
  std::vector<GemmProblem<Real>> problems;
  for (int w = 0;; ++w) {
    problems.clear();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (wave[g] == w) problems.push_back(make(groups[g]));
    }
    if (problems.empty()) break;
    gemm_grouped<Real>(space, trans_a, trans_b, problems, Acc(alpha), Acc(beta));
  }
}

}  // namespace detail

// h (rows, r) = x · A_eᵀ per group (x row stride ldx).
template <class Real>
void lora_grouped_down_forward(const ExecSpace& space, const std::vector<LoraAdapter<Real>>& adapters,
                               std::span<const RowGroup> groups, Vec<Real> h, const Real* x, int ldx, int in, int r) {
  detail::lora_grouped_products<Real>(
      space, Trans::no, Trans::yes, groups,
      [&](const RowGroup& g) {
        return GemmProblem<Real>{{g.rows, r, in},
                                 x + long(g.begin) * ldx,
                                 ldx,
                                 adapters[std::size_t(g.weight)].A.data(),
                                 in,
                                 h.data() + long(g.begin) * r,
                                 r};
      },
      1.0, 0.0, false);
}

// y (rows, out; row stride ldy) += s · h · B_eᵀ per group.
template <class Real>
void lora_grouped_up_forward(const ExecSpace& space, const std::vector<LoraAdapter<Real>>& adapters,
                             std::span<const RowGroup> groups, Real* y, int ldy, CVec<Real> h, double s, int out,
                             int r) {
  detail::lora_grouped_products<Real>(
      space, Trans::no, Trans::yes, groups,
      [&](const RowGroup& g) {
        return GemmProblem<Real>{{g.rows, out, r},
                                 h.data() + long(g.begin) * r,
                                 r,
                                 adapters[std::size_t(g.weight)].B.data(),
                                 r,
                                 y + long(g.begin) * ldy,
                                 ldy};
      },
      s, 1.0, false);
}

// The up product's backward: dB_e += s · dyᵀ h and dh (rows, r) = s · dy · B_e (overwritten).
template <class Real>
void lora_grouped_up_backward(const ExecSpace& space, const std::vector<LoraAdapter<Real>>& adapters,
                              std::span<const RowGroup> groups, Vec<Real> dh, const Real* dy, int lddy, CVec<Real> h,
                              double s, int out, int r) {
  detail::lora_grouped_products<Real>(
      space, Trans::yes, Trans::no, groups,
      [&](const RowGroup& g) {
        return GemmProblem<Real>{{out, r, g.rows},
                                 dy + long(g.begin) * lddy,
                                 lddy,
                                 h.data() + long(g.begin) * r,
                                 r,
                                 adapters[std::size_t(g.weight)].dB.data(),
                                 r};
      },
      s, 1.0, true);
  detail::lora_grouped_products<Real>(
      space, Trans::no, Trans::no, groups,
      [&](const RowGroup& g) {
        return GemmProblem<Real>{{g.rows, r, out},
                                 dy + long(g.begin) * lddy,
                                 lddy,
                                 adapters[std::size_t(g.weight)].B.data(),
                                 r,
                                 dh.data() + long(g.begin) * r,
                                 r};
      },
      s, 0.0, false);
}

// The down product's input gradient: dx (rows, in; row stride lddx) += dh · A_e (`beta` 0: dx = dh · A_e, for
// lora.dropout's mask to pass it on).
template <class Real>
void lora_grouped_input_backward(const ExecSpace& space, const std::vector<LoraAdapter<Real>>& adapters,
                                 std::span<const RowGroup> groups, CVec<Real> dh, Real* dx, int lddx, int in, int r,
                                 double beta = 1.0) {
  detail::lora_grouped_products<Real>(
      space, Trans::no, Trans::no, groups,
      [&](const RowGroup& g) {
        return GemmProblem<Real>{{g.rows, in, r},
                                 dh.data() + long(g.begin) * r,
                                 r,
                                 adapters[std::size_t(g.weight)].A.data(),
                                 in,
                                 dx + long(g.begin) * lddx,
                                 lddx};
      },
      1.0, beta, false);
}

// The down product's weight gradient: dA_e += dhᵀ · x (x row stride ldx).
template <class Real>
void lora_grouped_weight_backward(const ExecSpace& space, const std::vector<LoraAdapter<Real>>& adapters,
                                  std::span<const RowGroup> groups, CVec<Real> dh, const Real* x, int ldx, int in,
                                  int r) {
  detail::lora_grouped_products<Real>(
      space, Trans::yes, Trans::no, groups,
      [&](const RowGroup& g) {
        return GemmProblem<Real>{{r, in, g.rows},
                                 dh.data() + long(g.begin) * r,
                                 r,
                                 x + long(g.begin) * ldx,
                                 ldx,
                                 adapters[std::size_t(g.weight)].dA.data(),
                                 in};
      },
      1.0, 1.0, true);
}

}  // namespace meshtrain

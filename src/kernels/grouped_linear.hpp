// The routed experts' linear layers: one torch Linear matrix per group of contiguous rows, all the
// groups' products in one grouped GEMM (share/docs/usage.md, Mixture of experts).
//
// Size letters: IC input channels, OC output channels; inp, dinp [rows, IC] and out, dout [rows, OC]
// row-major over all groups' rows. Group g's rows [begin, begin + rows) use W_g = weights +
// weight · weight_stride, a [OC, IC] matrix (Y = X Wᵀ, as linear_forward in kernels/matmul.hpp):
//   forward:  out[g] = inp[g] · W_gᵀ
//   backward: dinp[g] = dout[g] · W_g,   dW_g += dout[g]ᵀ · inp[g]
// Groups without rows are skipped. Several groups may name one weight (an expert's rows from several
// source ranks under expert parallelism): their dW products add in group order, so they go in waves,
// wave w holding each weight's w-th group, one grouped GEMM per wave.
#pragma once

#include "kernels/gemm.hpp"

#include <span>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace meshtrain {

// Rows [begin, begin + rows) of the row-major operands use weight matrix number `weight`.
struct RowGroup {
  int begin, rows, weight;
};

namespace detail {

// The groups with rows, in order, each with its wave: how many earlier such groups share its weight.
// Groups without rows get −1.
inline std::vector<int> grouped_linear_waves(std::span<const RowGroup> groups) {
  std::vector<int> wave(groups.size(), -1);
  std::unordered_map<int, int> seen;  // weight → its groups so far
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].rows > 0) wave[g] = seen[groups[g].weight]++;
  }
  return wave;
}

// The first element of group g's rows in a row-major operand of `width` columns.
template <class T>
T* group_rows(T* base, const RowGroup& g, int width) {
  return base + static_cast<long>(g.begin) * width;
}

// One product per group with rows (make(group) builds it), through one grouped GEMM.
template <class Real, class Make>
void grouped_products(const ExecSpace& space, Trans trans_a, Trans trans_b, std::span<const RowGroup> groups, Make make,
                      accum_t<Real> beta) {
  std::vector<GemmProblem<Real>> problems;
  for (const RowGroup& g : groups) {
    if (g.rows > 0) problems.push_back(make(g));
  }
  gemm_grouped<Real>(space, trans_a, trans_b, problems, accum_t<Real>(1), beta);
}

}  // namespace detail

// out [Σ rows, OC] is written (=) on every group's rows.
template <class Real>
void grouped_linear_forward(const ExecSpace& space, Vec<Real> out, CVec<std::type_identity_t<Real>> inp,
                            const std::type_identity_t<Real>* weights, long weight_stride,
                            std::span<const RowGroup> groups, int IC, int OC) {
  const auto product = [&](const RowGroup& g) {
    return GemmProblem<Real>{.shape = {g.rows, OC, IC},
                             .a = detail::group_rows(inp.data(), g, IC),
                             .lda = IC,
                             .b = weights + g.weight * weight_stride,
                             .ldb = IC,
                             .c = detail::group_rows(out.data(), g, OC),
                             .ldc = OC};
  };
  detail::grouped_products<Real>(space, Trans::no, Trans::yes, groups, product, accum_t<Real>(0));
}

// dinp [Σ rows, IC] is written (=) on every group's rows; dW_g [OC, IC] at dweights + weight ·
// weight_stride accumulates (+=), unless dweights is null (frozen experts: LoRA's base).
template <class Real>
void grouped_linear_backward(const ExecSpace& space, Vec<Real> dinp, std::type_identity_t<Real>* dweights,
                             long weight_stride, CVec<std::type_identity_t<Real>> dout,
                             CVec<std::type_identity_t<Real>> inp, const std::type_identity_t<Real>* weights,
                             std::span<const RowGroup> groups, int IC, int OC) {
  const auto input_gradient = [&](const RowGroup& g) {
    return GemmProblem<Real>{.shape = {g.rows, IC, OC},
                             .a = detail::group_rows(dout.data(), g, OC),
                             .lda = OC,
                             .b = weights + g.weight * weight_stride,
                             .ldb = IC,
                             .c = detail::group_rows(dinp.data(), g, IC),
                             .ldc = IC};
  };
  const auto weight_gradient = [&](const RowGroup& g) {
    return GemmProblem<Real>{.shape = {OC, IC, g.rows},
                             .a = detail::group_rows(dout.data(), g, OC),
                             .lda = OC,
                             .b = detail::group_rows(inp.data(), g, IC),
                             .ldb = IC,
                             .c = dweights + g.weight * weight_stride,
                             .ldc = IC};
  };
  detail::grouped_products<Real>(space, Trans::no, Trans::no, groups, input_gradient, accum_t<Real>(0));
  if (dweights == nullptr) return;
  const std::vector<int> wave = detail::grouped_linear_waves(groups);
  std::vector<RowGroup> in_wave;
  for (int w = 0;; ++w) {
    in_wave.clear();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (wave[g] == w) in_wave.push_back(groups[g]);
    }
    if (in_wave.empty()) break;
    detail::grouped_products<Real>(space, Trans::yes, Trans::no, in_wave, weight_gradient, accum_t<Real>(1));
  }
}

}  // namespace meshtrain

// How Gpt2 lays its activations and backward's scratch out in one flat buffer each: the carving
// code runs once to count (gpt2_activation_elements, the constructor's sizes) and once over the
// allocated buffer, so the counts and the views cannot disagree. Internal to model/gpt2.cpp.
#pragma once

#include "core/model_sizes.hpp"
#include "kernels/encoder.hpp"
#include "model/gpt2.hpp"
#include "model/impl/carver.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace meshtrain::carving {

// Sizes of this rank's activations: C, T and B whole; heads, MLP columns and vocabulary rows its share.
struct LocalDims {
  std::size_t B, T, C, NH, N, Vl;            // NH: local heads; Vl: local (padded) vocabulary rows
  std::size_t Cl() const { return C / tp; }  // channels of the local heads
  std::size_t tp;
  int layers;  // blocks of this pipeline stage
  bool head;   // the stage ends in ln_f, the output head and the loss (the last stage)
};

inline LocalDims local_dims(const ModelConfig& m, int batch, int tp, int layers, bool head) {
  const std::size_t padded = std::size_t(padded_vocab(m, tp).value());
  return {std::size_t(batch),
          std::size_t(m.seq_len),
          std::size_t(m.d_model),
          std::size_t(m.heads / tp),
          std::size_t(batch) * m.seq_len,
          padded / tp,
          std::size_t(tp),
          layers,
          head};
}

// One block's activations: the fields `take` names from `c`, the others the views of `other`.
template <class Real>
BlockActivations<Real> carve_block(Carver<Real>& c, const LocalDims& d, BlockFields take,
                                   const BlockActivations<Real>& other = {}) {
  const std::size_t B = d.B, T = d.T, C = d.C, Cl = d.Cl(), NH = d.NH, N = d.N;
  auto pick = [&](bool taken, std::size_t count, const Vec<Real>& view) { return taken ? c.take(count) : view; };
  // Per-row statistics are kept in the accumulation type (fp32 for 16-bit models).
  auto pick_stat = [&](bool taken, std::size_t count, const Vec<accum_t<Real>>& view) {
    return taken ? c.template take_as<accum_t<Real>>(count) : view;
  };
  BlockActivations<Real> b;
  b.ln1 = pick(take.rest, N * C, other.ln1);
  b.ln1_mean = pick_stat(take.rest, N, other.ln1_mean);
  b.ln1_rstd = pick_stat(take.rest, N, other.ln1_rstd);
  b.qkv = pick(take.rest, N * 3 * Cl, other.qkv);
  b.atty = pick(take.rest, N * Cl, other.atty);
  b.att = pick(take.att, B * NH * T * T, other.att);
  b.residual2 = pick(take.rest, N * C, other.residual2);
  b.ln2 = pick(take.rest, N * C, other.ln2);
  b.ln2_mean = pick_stat(take.rest, N, other.ln2_mean);
  b.ln2_rstd = pick_stat(take.rest, N, other.ln2_rstd);
  b.fch = pick(take.rest, N * 4 * Cl, other.fch);
  b.fch_gelu = pick(take.rest, N * 4 * Cl, other.fch_gelu);
  b.residual3 = pick(take.output, N * C, other.residual3);
  return b;
}

// One micro-batch's activations; its blocks keep what `recompute` says and share the rest.
template <class Real>
ActivationTensors<Real> carve_activations(Carver<Real>& c, const LocalDims& d, Recompute recompute,
                                          const BlockActivations<Real>& shared) {
  const std::size_t C = d.C, V = d.Vl, N = d.N;
  ActivationTensors<Real> a;
  a.encoded = c.take(N * C);
  for (int l = 0; l < d.layers; ++l) a.blocks.push_back(carve_block(c, d, kept_fields(recompute), shared));
  a.proj = c.take(N * C);
  if (!d.head) return a;
  a.lnf = c.take(N * C);
  a.lnf_mean = c.template take_as<accum_t<Real>>(N);
  a.lnf_rstd = c.template take_as<accum_t<Real>>(N);
  a.logits = c.take(N * V);
  a.losses = c.template take_as<accum_t<Real>>(N);
  a.row_max = c.template take_as<accum_t<Real>>(N);
  a.partials = c.template take_as<accum_t<Real>>(2 * N);
  return a;
}

template <class Real>
BackwardScratch<Real> carve_scratch(Carver<Real>& c, const LocalDims& d) {
  const std::size_t B = d.B, T = d.T, C = d.C, Cl = d.Cl(), NH = d.NH, N = d.N;
  BackwardScratch<Real> s;
  s.dresidual = c.take(N * C);
  s.dln = c.take(N * C);
  s.datty = c.take(N * Cl);
  s.dqkv = c.take(N * 3 * Cl);
  s.datt = c.take(B * NH * T * T);
  s.dfch = c.take(N * 4 * Cl);
  // The widest column sum: c_fc's bias, or a LayerNorm's two with the c_proj bias its backward adds.
  s.column_partials =
      c.template take_as<accum_t<Real>>(std::max({column_sum_workspace(N, 4 * Cl), column_sum_workspace(N, 3 * Cl),
                                                  column_sum_workspace(N, C, 3), encoder_backward_workspace(B, T, C)}));
  s.token_order = c.template take_as<int>(token_order_workspace(N));
  return s;
}

// What a rank holds once, whatever its slots: backward's scratch and the shared block set.
template <class Real>
struct RankScratch {
  BackwardScratch<Real> backward;
  BlockActivations<Real> shared;  // empty under Recompute::none
};

template <class Real>
RankScratch<Real> carve_rank_scratch(Carver<Real>& c, const LocalDims& d, Recompute recompute) {
  RankScratch<Real> s{carve_scratch(c, d), {}};
  if (recompute != Recompute::none) s.shared = carve_block(c, d, shared_fields(recompute));
  return s;
}

template <class Real>
std::vector<ActivationTensors<Real>> carve_slots(Carver<Real>& c, const LocalDims& d, int slots, Recompute recompute,
                                                 const BlockActivations<Real>& shared) {
  std::vector<ActivationTensors<Real>> sets;
  for (int k = 0; k < slots; ++k) sets.push_back(carve_activations(c, d, recompute, shared));
  return sets;
}

}  // namespace meshtrain::carving

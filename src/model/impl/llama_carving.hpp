// How Llama lays its activations and backward's scratch out in one flat buffer each (the pattern
// of model/impl/activation_carving.hpp: counted once, then carved over the allocation). Internal
// to model/llama.cpp.
#pragma once

#include "kernels/column_sum.hpp"
#include "kernels/encoder.hpp"
#include "model/impl/carver.hpp"
#include "model/llama.hpp"

#include <vector>

namespace meshtrain::carving {

// The sizes one block's activations take: its dense SwiGLU's columns (an MoE block: the shared
// experts'), and whether it routes experts. The one set shared under recomputation takes the
// widest of the stage's blocks.
struct BlockShape {
  std::size_t dense_cols;
  bool moe;
};

inline BlockShape block_shape(const LlamaDims& d, int l) { return {d.dense_cols(l), d.moe(l)}; }
inline BlockShape widest_block_shape(const LlamaDims& d) { return {d.widest_dense_cols(), d.any_moe()}; }

template <class Real>
MoeActivations<Real> carve_moe(Carver<Real>& c, const LlamaDims& d) {
  using A = accum_t<Real>;
  const std::size_t N = d.N, C = d.C, R = d.R;
  MoeActivations<Real> m;
  m.probs = c.template take_as<A>(N * d.E);
  m.lse = c.template take_as<A>(N);
  m.gate = c.template take_as<A>(N * d.k);
  m.expert = c.template take_as<int>(N * d.k);
  m.slot = c.template take_as<int>(N * d.k);
  m.row_token = c.template take_as<int>(R);
  m.counts = c.template take_as<int>(2 * d.E + 1);
  m.xs = c.take(R * C);
  m.received = d.ep > 1 ? c.take(d.Rr * C) : m.xs;
  m.gate_up = c.take(d.Rr * 2 * d.Hel);
  m.act = c.take(d.Rr * d.Hel);
  m.ys = c.take(R * C);
  return m;
}

template <class Real>
LlamaBlockActivations<Real> carve_llama_block(Carver<Real>& c, const LlamaDims& d, BlockFields take, BlockShape shape,
                                              const LlamaBlockActivations<Real>& other = {}) {
  const std::size_t N = d.N, C = d.C;
  auto pick = [&](bool taken, std::size_t count, const Vec<Real>& view) { return taken ? c.take(count) : view; };
  auto pick_stat = [&](bool taken, std::size_t count, const Vec<accum_t<Real>>& view) {
    return taken ? c.template take_as<accum_t<Real>>(count) : view;
  };
  LlamaBlockActivations<Real> b;
  b.ln1 = pick(take.rest, N * C, other.ln1);
  b.ln1_rstd = pick_stat(take.rest, N, other.ln1_rstd);
  b.qkv = pick(take.rest, N * d.qkv_cols(), other.qkv);
  b.atty = pick(take.rest, N * d.q_cols(), other.atty);
  b.att = pick(take.att, d.B * d.NHl * d.T * d.T, other.att);
  b.residual2 = pick(take.rest, N * C, other.residual2);
  b.ln2 = pick(take.rest, N * C, other.ln2);
  b.ln2_rstd = pick_stat(take.rest, N, other.ln2_rstd);
  b.gate_up = pick(take.rest, N * 2 * shape.dense_cols, other.gate_up);
  b.swiglu = pick(take.rest, N * shape.dense_cols, other.swiglu);
  if (shape.moe) b.moe = take.rest ? carve_moe(c, d) : other.moe;
  b.residual3 = pick(take.output, N * C, other.residual3);
  return b;
}

template <class Real>
LlamaActivations<Real> carve_llama_activations(Carver<Real>& c, const LlamaDims& d, Recompute recompute,
                                               const LlamaBlockActivations<Real>& shared) {
  const std::size_t N = d.N, C = d.C;
  LlamaActivations<Real> a;
  a.encoded = c.take(N * C);
  for (int l = 0; l < d.layers; ++l) {
    a.blocks.push_back(carve_llama_block(c, d, kept_fields(recompute), block_shape(d, l), shared));
  }
  a.proj = c.take(N * C);
  if (!d.head) return a;
  a.norm = c.take(N * C);
  a.norm_rstd = c.template take_as<accum_t<Real>>(N);
  a.logits = c.take(N * d.Vl);
  a.losses = c.template take_as<accum_t<Real>>(N);
  a.row_max = c.template take_as<accum_t<Real>>(N);
  a.partials = c.template take_as<accum_t<Real>>(2 * N);
  return a;
}

// What a rank holds once, whatever its slots: backward's scratch and the shared block set.
template <class Real>
struct LlamaRankScratch {
  LlamaScratch<Real> backward;
  LlamaBlockActivations<Real> shared;  // empty under Recompute::none
};

template <class Real>
LlamaRankScratch<Real> carve_llama_rank_scratch(Carver<Real>& c, const LlamaDims& d, Recompute recompute) {
  const std::size_t N = d.N, C = d.C;
  LlamaRankScratch<Real> r;
  LlamaScratch<Real>& s = r.backward;
  s.dresidual = c.take(N * C);
  s.dln = c.take(N * C);
  s.datty = c.take(N * d.q_cols());
  s.dqkv = c.take(N * d.qkv_cols());
  s.datt = c.take(d.B * d.NHl * d.T * d.T);
  s.dswiglu = c.take(N * d.widest_dense_cols());
  s.dgate_up = c.take(N * 2 * d.widest_dense_cols());
  s.column_partials = c.template take_as<accum_t<Real>>(column_sum_workspace(N, C));
  s.token_order = c.template take_as<int>(token_order_workspace(N));
  if (d.any_moe()) {
    s.router_logits = c.template take_as<accum_t<Real>>(N * d.E);
    s.dgate = c.template take_as<accum_t<Real>>(N * d.k);
    s.drows = c.take(d.R * C);
    s.dreceived = d.ep > 1 ? c.take(d.Rr * C) : s.drows;
    s.dexpert_act = c.take(d.Rr * d.Hel);
    s.dexpert_gate_up = c.take(d.Rr * 2 * d.Hel);
  }
  if (recompute != Recompute::none) {
    r.shared = carve_llama_block(c, d, shared_fields(recompute), widest_block_shape(d));
  }
  return r;
}

template <class Real>
std::vector<LlamaActivations<Real>> carve_llama_slots(Carver<Real>& c, const LlamaDims& d, int slots,
                                                      Recompute recompute, const LlamaBlockActivations<Real>& shared) {
  std::vector<LlamaActivations<Real>> sets;
  for (int k = 0; k < slots; ++k) sets.push_back(carve_llama_activations(c, d, recompute, shared));
  return sets;
}

}  // namespace meshtrain::carving

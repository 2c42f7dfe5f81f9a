// The GPT-2 family's tensors, their views and its activations' layout in the flat buffers (the
// carving runs once to count and once over the allocation, model/impl/carver.hpp); the stage's
// instantiation. Its forward and backward listings: gpt2_forward.cpp, gpt2_backward.cpp.
#include "model/families/gpt2.hpp"

#include "core/model_sizes.hpp"
#include "kernels/column_sum.hpp"
#include "kernels/encoder.hpp"
#include "kernels/fused_attention.hpp"
#include "model/impl/decoder_stage_impl.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace meshtrain {

Gpt2Family::Dims Gpt2Family::dims(const ModelConfig& m, int batch, const ParameterLayout& layout, int /*ep*/) {
  const std::size_t tp = std::size_t(layout.tp()), padded = std::size_t(padded_vocab(m, layout.tp()).value());
  const std::size_t T = local_positions(m), N = std::size_t(batch) * T;
  return {std::size_t(batch),
          T,
          std::size_t(m.d_model),
          std::size_t(m.heads) / tp,
          N,
          padded / tp,
          tp,
          residual_rows(m, N, int(tp)),
          m.attention == AttentionKernel::fused,
          m.context_parallel > 1};
}

std::vector<GemmShape> Gpt2Family::gemm_products(const ModelConfig& m, int batch, int tp) {
  const int T = int(local_positions(m)), N = batch * T, C = m.d_model, Cl = C / tp, hs = C / m.heads;
  const int Vl = int(padded_vocab(m, tp).value() / tp);  // this rank's (padded) vocabulary rows
  std::vector<GemmShape> products = {
      {N, Vl, C},     {N, C, Vl},     {Vl, C, N},      // tied output head: logits, dlnf, dwte
      {N, 3 * Cl, C}, {N, C, 3 * Cl}, {C, 3 * Cl, N},  // c_attn: forward, input and weight gradients
      {N, C, Cl},     {N, Cl, C},     {Cl, C, N},      // attn c_proj
      {N, 4 * Cl, C}, {N, C, 4 * Cl}, {C, 4 * Cl, N},  // c_fc
      {N, C, 4 * Cl}, {N, 4 * Cl, C}, {4 * Cl, C, N},  // mlp c_proj
  };
  // Materialized attention's products, per sequence and head (fused attention's tiles widen their
  // operands into its own workspace).
  if (m.attention == AttentionKernel::materialized) products.insert(products.end(), {{T, T, hs}, {T, hs, T}});
  return products;
}

void Gpt2Family::list_tensors(ParameterLayout& layout) {
  const ModelConfig& m = layout.model();
  const StagePlace& place = layout.place();
  const std::uint64_t C = m.d_model;
  // The first stage embeds, the last stage's head reuses wte: both hold it (tied, gradients summed).
  if (place.first() || place.last()) {
    layout.start_unit("wte", -1);
    layout.add_vocabulary_table("wte.weight", TableRole::tied);
  }
  if (place.first()) {
    layout.start_unit("wpe", -1);
    layout.add_replicated("wpe.weight", {std::uint64_t(m.seq_len), C}, InitKind::normal);
  }
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    const std::string h = fmt::format("h.{}.", l);
    layout.start_unit(fmt::format("h.{}", l), l);
    layout.add_replicated(h + "ln_1.weight", {C}, InitKind::ones);
    layout.add_replicated(h + "ln_1.bias", {C}, InitKind::zeros);
    layout.add_split(h + "attn.c_attn.weight", {C, 3 * C}, 1, 3, InitKind::normal);  // column-parallel, by heads
    layout.add_split(h + "attn.c_attn.bias", {3 * C}, 0, 3, InitKind::zeros);
    layout.add_split(h + "attn.c_proj.weight", {C, C}, 0, 1, InitKind::normal_residual);  // row-parallel
    layout.add_replicated(h + "attn.c_proj.bias", {C}, InitKind::zeros);
    layout.add_replicated(h + "ln_2.weight", {C}, InitKind::ones);
    layout.add_replicated(h + "ln_2.bias", {C}, InitKind::zeros);
    layout.add_split(h + "mlp.c_fc.weight", {C, 4 * C}, 1, 1, InitKind::normal);  // column-parallel
    layout.add_split(h + "mlp.c_fc.bias", {4 * C}, 0, 1, InitKind::zeros);
    layout.add_split(h + "mlp.c_proj.weight", {4 * C, C}, 0, 1, InitKind::normal_residual);  // row-parallel
    layout.add_replicated(h + "mlp.c_proj.bias", {C}, InitKind::zeros);
  }
  if (place.last()) {
    layout.start_unit("ln_f", -1);
    layout.add_replicated("ln_f.weight", {C}, InitKind::ones);
    layout.add_replicated("ln_f.bias", {C}, InitKind::zeros);
  }
}

template <class Real>
Gpt2Family::Weights<Real> Gpt2Family::bind(const TensorViews<Real>& v) {
  const ParameterLayout& layout = v.layout();
  Weights<Real> p;
  p.embed = v.lookup_table();
  p.positions = v.view("wpe.weight");
  for (int l = layout.first_layer(); l < layout.first_layer() + layout.stage_layers(); ++l) {
    const std::string h = fmt::format("h.{}.", l);
    BlockWeights<Real> b;
    b.ln1_w = v.view(h + "ln_1.weight");
    b.ln1_b = v.view(h + "ln_1.bias");
    b.qkv_w = v.view(h + "attn.c_attn.weight");
    b.qkv_b = v.view(h + "attn.c_attn.bias");
    b.attproj_w = v.view(h + "attn.c_proj.weight");
    b.attproj_b = v.view(h + "attn.c_proj.bias");
    b.ln2_w = v.view(h + "ln_2.weight");
    b.ln2_b = v.view(h + "ln_2.bias");
    b.fc_w = v.view(h + "mlp.c_fc.weight");
    b.fc_b = v.view(h + "mlp.c_fc.bias");
    b.fcproj_w = v.view(h + "mlp.c_proj.weight");
    b.fcproj_b = v.view(h + "mlp.c_proj.bias");
    p.blocks.push_back(b);
  }
  p.lnf_w = v.view("ln_f.weight");
  p.lnf_b = v.view("ln_f.bias");
  p.output = v.output_table();
  return p;
}

template <class Real>
Gpt2Family::Block<Real> Gpt2Family::carve_block(carving::Carver<Real>& c, const Dims& d, carving::BlockFields take,
                                                int /*l*/, const Block<Real>& other) {
  const std::size_t B = d.B, T = d.T, C = d.C, Cl = d.Cl(), NH = d.NH, N = d.N, Nl = d.Nl;
  Block<Real> b;
  b.ln1 = c.take_if(take.rest, N * C, other.ln1);
  b.ln1_mean = c.take_as_if(take.rest, Nl, other.ln1_mean);
  b.ln1_rstd = c.take_as_if(take.rest, Nl, other.ln1_rstd);
  b.qkv = c.take_if(take.rest, N * 3 * Cl, other.qkv);
  b.atty = c.take_if(take.rest, N * Cl, other.atty);
  if (d.fused_attention) {
    b.lse = c.take_as_if(take.rest, B * NH * T, other.lse);
  } else {
    b.att = c.take_if(take.att, B * NH * T * T, other.att);
  }
  b.residual2 = c.take_if(take.rest, Nl * C, other.residual2);
  b.ln2 = c.take_if(take.rest, N * C, other.ln2);
  b.ln2_mean = c.take_as_if(take.rest, Nl, other.ln2_mean);
  b.ln2_rstd = c.take_as_if(take.rest, Nl, other.ln2_rstd);
  b.fch = c.take_if(take.rest, N * 4 * Cl, other.fch);
  b.fch_gelu = c.take_if(take.rest, N * 4 * Cl, other.fch_gelu);
  b.residual3 = c.take_if(take.output, Nl * C, other.residual3);
  return b;
}

template <class Real>
Gpt2Family::Scratch<Real> Gpt2Family::carve_scratch(carving::Carver<Real>& c, const Dims& d,
                                                    const carving::CarveFn<Real>& beside_mlp) {
  const std::size_t B = d.B, T = d.T, C = d.C, Cl = d.Cl(), NH = d.NH, N = d.N, Nl = d.Nl;
  Scratch<Real> s;
  s.dresidual = c.take(Nl * C);
  s.dln = c.take(N * C);
  s.datty = c.take(N * Cl);
  s.dqkv = c.take(N * 3 * Cl);
  if (d.fused_attention) {
    // The ring (context parallelism) works in buffers of its own (beside_mlp).
    const std::size_t workspace =
        d.ring_attention ? 0 : fused_attention_workspace<Real>(int(B), int(T), int(NH), int(d.hs()));
    s.attention_workspace = c.template take_as<accum_t<Real>>(workspace);
  } else {
    s.datt = c.take(B * NH * T * T);
  }
  c.overlay([&](carving::Carver<Real>& over) { s.dfch = over.take(N * 4 * Cl); }, beside_mlp);
  // The widest column sum: c_fc's bias, or a LayerNorm's two with the c_proj bias its backward adds.
  s.column_partials =
      c.template take_as<accum_t<Real>>(std::max({column_sum_workspace(N, 4 * Cl), column_sum_workspace(N, 3 * Cl),
                                                  column_sum_workspace(N, C, 3), encoder_backward_workspace(B, T, C)}));
  s.token_order = c.template take_as<int>(token_order_workspace(N));
  return s;
}

MESHTRAIN_DECODER_STAGE(Gpt2Family)

}  // namespace meshtrain

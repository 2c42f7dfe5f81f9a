// GPT-2's backward listings (model/gpt2.hpp): a block and ln_f, in the mirror order of
// gpt2_forward.cpp, each tensor-parallel mapping's backward at the mirror place of its forward.
#include "model/families/gpt2.hpp"

#include "kernels/attention.hpp"
#include "kernels/fused_attention.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/matmul.hpp"
#include "model/impl/deferrable_backward.hpp"

namespace meshtrain {

template <class Real>
void Gpt2Family::block_backward(Parts<Real>& m, int slot, int l, CVec<Real> x) {
  const Dims& dm = m.dims;
  const int B = int(dm.B), T = int(dm.T), C = int(dm.C), N = int(dm.N), Cl = int(dm.Cl()), NH = int(dm.NH);
  const int Nl = int(dm.Nl);
  // Sequence parallelism: each rank's norm weight gradients come from its rows, summed over the group at the
  // end; the attention c_proj's bias gradient comes from the gathered rows (all of them) in its product.
  const bool sequence_parallel = m.sequence_parallel();
  if (sequence_parallel) m.later.add([&m] { m.clear_norm_grads(); });
  const auto& w = m.params.blocks[std::size_t(l)];
  const auto& dw = m.dparams.blocks[std::size_t(l)];
  const auto& s = m.slots[std::size_t(slot)].blocks[std::size_t(l)];
  const auto& d = m.scratch;
  const Vec<Real> no_bias;
  // Bias gradients fused into a neighbour's kernel (c_fc's into GELU's backward, the attention c_proj's into ln_2's)
  // come with their product's weight gradient instead when it is deferred (model/impl/deferrable_backward.hpp).
  const bool deferring = m.later.deferring();
  // MLP branch; d.dresidual becomes dL/d residual2. The c_proj biases' gradients are column sums of
  // d.dresidual: the attention's is added by ln_2's backward, which leaves it; the MLP's is summed
  // here, with c_proj's weight gradient (on CUDA in that product's epilogue), inside the block, because under ZeRO 2/3
  // a block's gradients live in its working room only while the block's own backward runs (the next block's ln_1 must
  // not write them).
  // Under sequence parallelism the MLP's output gradient is gathered into dln, free until c_fc's backward.
  const Vec<Real> dmlp = m.leave_region_backward(d.dresidual, d.dln);
  if (lora_adapts(m.lora, l, lora_mlp_proj)) {
    // The adapter's input gradient joins GELU's output gradient before GELU's derivative: unfused.
    deferrable::matmul_backward<Real>(m.later, m.space, d.dfch, dw.fcproj_w, dw.fcproj_b, d.column_partials, dmlp,
                                      s.fch_gelu, w.fcproj_w, N, 4 * Cl, C);
    lora_row_backward<Real>(m.later, m.space, m.lora, slot, l, lora_mlp_proj, s.fch_gelu, 4 * Cl, dmlp.data(), C,
                            d.dfch.data());
    if (deferring) {
      gelu_backward(m.space, d.dfch, s.fch, CVec<Real>(d.dfch), long(N) * 4 * Cl);
    } else {
      gelu_backward_bias(m.space, d.dfch, dw.fc_b, d.column_partials, s.fch, d.dfch, N, 4 * Cl);
    }
  } else {
    deferrable::matmul_backward_gelu<Real>(m.later, m.space, d.dfch, deferring ? no_bias : dw.fc_b, dw.fcproj_w,
                                           dw.fcproj_b, d.column_partials, dmlp, s.fch_gelu, s.fch, w.fcproj_w, N,
                                           4 * Cl, C);
  }
  deferrable::matmul_backward<Real>(m.later, m.space, d.dln, dw.fc_w, deferring ? dw.fc_b : no_bias, d.column_partials,
                                    d.dfch, s.ln2, w.fc_w, N, C, 4 * Cl);
  lora_column_backward<Real>(m.later, m.space, m.tp, m.lora, slot, l, lora_c_fc, s.ln2, C, d.dfch.data(), 4 * Cl,
                             4 * Cl, d.dln.data());
  const Vec<Real> dln2 = m.enter_region_backward(d.dln, m.norm_rows);
  const bool attproj_bias_in_ln2 = !sequence_parallel && !deferring;
  deferrable::layernorm_backward<Real>(m.later, m.space, d.dresidual, sequence_parallel ? m.norm_grad(0) : dw.ln2_w,
                                       sequence_parallel ? m.norm_grad(1) : dw.ln2_b, d.column_partials, dln2,
                                       s.residual2, w.ln2_w, s.ln2_mean, s.ln2_rstd, Nl, C,
                                       attproj_bias_in_ln2 ? dw.attproj_b : no_bias);
  // Attention branch; d.dresidual becomes dL/d x.
  const Vec<Real> dattended = m.leave_region_backward(d.dresidual, d.dln);
  deferrable::matmul_backward<Real>(m.later, m.space, d.datty, dw.attproj_w,
                                    attproj_bias_in_ln2 ? no_bias : dw.attproj_b, d.column_partials, dattended, s.atty,
                                    w.attproj_w, N, Cl, C);
  lora_row_backward<Real>(m.later, m.space, m.lora, slot, l, lora_attn_proj, s.atty, Cl, dattended.data(), C,
                          d.datty.data());
  if (dm.fused_attention) {
    m.fused_attention_backward(slot, d.dqkv, d.datty, s.qkv, s.atty, s.lse, NH, NH, Cl / NH, d.attention_workspace);
  } else {
    attention_backward(m.space, d.dqkv, d.datt, d.datty, s.qkv, s.att, B, T, Cl, NH);
  }
  deferrable::matmul_backward<Real>(m.later, m.space, d.dln, dw.qkv_w, dw.qkv_b, d.column_partials, d.dqkv, s.ln1,
                                    w.qkv_w, N, C, 3 * Cl);
  lora_column_backward<Real>(m.later, m.space, m.tp, m.lora, slot, l, lora_c_attn, s.ln1, C, d.dqkv.data(), 3 * Cl,
                             3 * Cl, d.dln.data());
  const Vec<Real> dln1 = m.enter_region_backward(d.dln, m.norm_rows);
  deferrable::layernorm_backward<Real>(m.later, m.space, d.dresidual, sequence_parallel ? m.norm_grad(2) : dw.ln1_w,
                                       sequence_parallel ? m.norm_grad(3) : dw.ln1_b, d.column_partials, dln1, x,
                                       w.ln1_w, s.ln1_mean, s.ln1_rstd, Nl, C);
  if (sequence_parallel) m.later.add([&m, &dw] { m.add_norm_grads({dw.ln2_w, dw.ln2_b, dw.ln1_w, dw.ln1_b}); });
}

// What a deferred backward holds of a block: the output gradients of its products (the c_projs' twice N·C,
// c_fc's, c_attn's) and of its two LayerNorms, which the scratch overwrites; under full recomputation also what the
// weight gradients read of the block's shared set (c_proj's GELU output, ln_2's input, output and statistics, the
// attention output, ln_1's output and statistics).
HeldElements Gpt2Family::held_per_block(const Dims& d, int, Recompute recompute) {
  const std::size_t N = d.N, C = d.C, Cl = d.Cl(), Nl = d.Nl;
  HeldElements held{2 * N * C + N * 4 * Cl + N * 3 * Cl + 2 * Nl * C, 0};
  if (recompute == Recompute::full) held += {N * 4 * Cl + N * C + Nl * C + N * Cl + N * C, 4 * Nl};
  return held;
}

template <class Real>
void Gpt2Family::final_norm_backward(Parts<Real>& m, const FinalNorm<Real>& f, CVec<Real> x) {
  const auto& d = m.scratch;
  const int Nl = int(m.dims.Nl), C = int(m.dims.C);
  if (!m.sequence_parallel()) {
    deferrable::layernorm_backward<Real>(m.later, m.space, d.dresidual, m.dparams.lnf_w, m.dparams.lnf_b,
                                         d.column_partials, d.dln, x, m.params.lnf_w, f.mean, f.rstd, Nl, C);
    return;
  }
  m.later.add([&m] { m.clear_norm_grads(); });
  deferrable::layernorm_backward<Real>(m.later, m.space, d.dresidual, m.norm_grad(0), m.norm_grad(1), d.column_partials,
                                       m.final_norm_gradient(), x, m.params.lnf_w, f.mean, f.rstd, Nl, C);
  m.later.add([&m] { m.add_norm_grads({m.dparams.lnf_w, m.dparams.lnf_b}); });
}

#define MESHTRAIN_GPT2_BACKWARD(Real)                                                             \
  template void Gpt2Family::block_backward<Real>(Gpt2Family::Parts<Real>&, int, int, CVec<Real>); \
  template void Gpt2Family::final_norm_backward<Real>(Gpt2Family::Parts<Real>&, const FinalNorm<Real>&, CVec<Real>);
MESHTRAIN_GPT2_BACKWARD(float)
MESHTRAIN_GPT2_BACKWARD(double)
MESHTRAIN_GPT2_BACKWARD(bf16)
MESHTRAIN_GPT2_BACKWARD(fp16)
#undef MESHTRAIN_GPT2_BACKWARD

}  // namespace meshtrain

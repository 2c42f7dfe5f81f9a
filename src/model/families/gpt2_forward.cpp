// GPT-2's forward listings (model/gpt2.hpp): a block, its attention probabilities for selective
// recomputation, and ln_f; the embedding, the head and the loss are the stage's
// (model/decoder_stage.hpp).
#include "model/families/gpt2.hpp"

#include "kernels/attention.hpp"
#include "kernels/fused_attention.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/matmul.hpp"
#include "kernels/residual.hpp"

namespace meshtrain {

// c_attn and c_fc are column-parallel (Y = XA + b, A = [A_1 … A_p] split by columns, rank r computing
// Y_r = X A_r + b_r from the whole X), both c_proj row-parallel (Y = Σ_r X_r A_r + b, A split by
// rows, X_r the rank's columns of the column-parallel product before it). Under sequence parallelism
// the norms and residual adds run on this rank's Nl rows: X gathered, Y's sum scattered (DecoderParts).
template <class Real>
void Gpt2Family::block_forward(Parts<Real>& m, int slot, int l, CVec<Real> x, const Block<Real>& s, Vec<Real> proj,
                               bool to_output) {
  const Dims& d = m.dims;
  const int B = int(d.B), T = int(d.T), C = int(d.C), N = int(d.N), Cl = int(d.Cl()), NH = int(d.NH), Nl = int(d.Nl);
  const auto& w = m.params.blocks[std::size_t(l)];
  const CVec<Real> no_bias;
  // The norms run on this rank's rows (all of them without sequence parallelism), then enter the region.
  const bool sequence_parallel = m.sequence_parallel();
  const Vec<Real> ln1_rows = sequence_parallel ? m.norm_rows : s.ln1;
  layernorm_forward(m.space, ln1_rows, s.ln1_mean, s.ln1_rstd, x, w.ln1_w, w.ln1_b, Nl, C);
  m.enter_region(ln1_rows, s.ln1);
  matmul_forward<Real>(m.space, s.qkv, s.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  lora_column_forward<Real>(m.space, m.lora, slot, l, lora_c_attn, s.ln1, C, s.qkv.data(), 3 * Cl, 3 * Cl);
  if (d.fused_attention) {
    m.fused_attention(slot, s.atty, s.lse, s.qkv, NH, NH, Cl / NH, m.scratch.attention_workspace);
  } else {
    attention_forward(m.space, s.atty, s.att, s.qkv, B, T, Cl, NH);
  }
  // The row-parallel products are summed over the group before their bias joins (once), fused
  // with the residual add and the LayerNorm after it.
  matmul_forward<Real>(m.space, proj, s.atty, w.attproj_w, no_bias, N, Cl, C);
  lora_row_forward<Real>(m.space, m.tp, m.lora, slot, l, lora_attn_proj, s.atty, Cl, proj.data(), C);
  const Vec<Real> attended = m.leave_region(proj, m.proj_rows);
  const Vec<Real> ln2_rows = sequence_parallel ? m.norm_rows : s.ln2;
  residual_layernorm_forward(m.space, s.residual2, ln2_rows, s.ln2_mean, s.ln2_rstd, x, attended, w.attproj_b, w.ln2_w,
                             w.ln2_b, Nl, C);
  m.enter_region(ln2_rows, s.ln2);
  if (lora_adapts(m.lora, l, lora_c_fc)) {
    // c_fc's adapter adds to GELU's input: the product alone, the adapter's term, then the bias and GELU.
    matmul_forward<Real>(m.space, s.fch, s.ln2, w.fc_w, no_bias, N, C, 4 * Cl);
    lora_column_forward<Real>(m.space, m.lora, slot, l, lora_c_fc, s.ln2, C, s.fch.data(), 4 * Cl, 4 * Cl);
    bias_gelu_forward(m.space, s.fch, s.fch_gelu, w.fc_b, N, 4 * Cl);
  } else {
    matmul_bias_gelu_forward<Real>(m.space, s.fch, s.fch_gelu, s.ln2, w.fc_w, w.fc_b, N, C, 4 * Cl);
  }
  if (to_output) matmul_forward<Real>(m.space, proj, s.fch_gelu, w.fcproj_w, no_bias, N, 4 * Cl, C);
  // h also under recomputation, which skips the output: backward reads it.
  lora_row_forward<Real>(m.space, m.tp, m.lora, slot, l, lora_mlp_proj, s.fch_gelu, 4 * Cl, proj.data(), C, to_output);
  if (!to_output) return;
  const Vec<Real> mlp = m.leave_region(proj, m.proj_rows);
  residual_forward(m.space, s.residual3, s.residual2, mlp, w.fcproj_b, Nl, C);
}

template <class Real>
void Gpt2Family::recompute_attention(Parts<Real>& m, const Block<Real>& s) {
  const Dims& d = m.dims;
  attention_probabilities(m.space, s.att, s.qkv, int(d.B), int(d.T), int(d.Cl()), int(d.NH));
}

template <class Real>
void Gpt2Family::final_norm_forward(Parts<Real>& m, const FinalNorm<Real>& f, CVec<Real> x) {
  const auto& p = m.params;
  layernorm_forward(m.space, m.final_norm_rows(f), f.mean, f.rstd, x, p.lnf_w, p.lnf_b, int(m.dims.Nl), int(m.dims.C));
}

#define MESHTRAIN_GPT2_FORWARD(Real)                                                                             \
  template void Gpt2Family::block_forward<Real>(Gpt2Family::Parts<Real>&, int, int, CVec<Real>,                  \
                                                const Gpt2Family::Block<Real>&, Vec<Real>, bool);                \
  template void Gpt2Family::recompute_attention<Real>(Gpt2Family::Parts<Real>&, const Gpt2Family::Block<Real>&); \
  template void Gpt2Family::final_norm_forward<Real>(Gpt2Family::Parts<Real>&, const FinalNorm<Real>&, CVec<Real>);
MESHTRAIN_GPT2_FORWARD(float)
MESHTRAIN_GPT2_FORWARD(double)
MESHTRAIN_GPT2_FORWARD(bf16)
MESHTRAIN_GPT2_FORWARD(fp16)
#undef MESHTRAIN_GPT2_FORWARD

}  // namespace meshtrain

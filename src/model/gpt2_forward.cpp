// GPT-2's forward pass: a pipeline stage's embedding, blocks and output head, the recomputation of
// a block for backward, and the single-stage entry points (the loss is in gpt2_loss.cpp).
#include "model/gpt2.hpp"

#include "kernels/attention.hpp"
#include "kernels/encoder.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/matmul.hpp"
#include "kernels/residual.hpp"

namespace meshtrain {

template <class Real>
CVec<Real> Gpt2<Real>::stage_output(int slot) const {
  const auto& a = slots_[slot];
  return a.blocks.empty() ? CVec<Real>(a.encoded) : CVec<Real>(a.blocks.back().residual3);
}

template <class Real>
void Gpt2<Real>::stage_forward(int slot, CVec<int> inputs) {
  const auto& m = model();
  const StagePlace& place = layout_.place();
  const int B = batch_, T = m.seq_len, C = m.d_model, N = B * T;
  const int Vl = layout_.padded_vocab() / layout_.tp();
  auto& a = slots_[slot];
  const auto& p = params_;
  if (place.first()) {
    // Vocabulary-parallel embedding: each rank looks up the tokens of its rows, zeros for the others.
    const TensorInfo& wte = layout_.find("wte.weight");
    const VocabRange vocab{int(wte.piece.offset[0]), int(wte.piece.block[0]), layout_.tp_rank() == 0};
    encoder_forward(space_, a.encoded, inputs, p.wte, p.wpe, B, T, C, vocab);
    reduce_from_.forward(span_of(a.encoded));
  }
  CVec<Real> x = a.encoded;
  for (int l = 0; l < layout_.stage_layers(); ++l) {
    need_block(l);
    block_forward(l, x, a.blocks[l], a.proj, true);
    x = a.blocks[l].residual3;
  }
  resident_ = {slot, layout_.stage_layers() - 1};
  if (!place.last()) return;
  layernorm_forward(space_, a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnf_w, p.lnf_b, N, C);
  // Tied output head, column-parallel: logits = lnf · wteᵀ, this rank's vocabulary columns.
  copy_to_.forward(span_of(a.lnf));
  gemm<Real>(space_, Trans::no, Trans::yes, {N, Vl, C}, Real(1), a.lnf.data(), C, p.wte.data(), C, Real(0),
             a.logits.data(), Vl);
}

// c_attn and c_fc are column-parallel (Y = XA + b, A = [A_1 … A_p] split by columns, rank r computing
// Y_r = X A_r + b_r from the whole X), both c_proj row-parallel (Y = Σ_r X_r A_r + b, A split by
// rows, X_r the rank's columns of the column-parallel product before it).
template <class Real>
void Gpt2<Real>::block_forward(int l, CVec<Real> x, const BlockActivations<Real>& s, Vec<Real> proj, bool to_output) {
  const auto& m = model();
  const int B = batch_, T = m.seq_len, C = m.d_model, N = B * T;
  const int Cl = C / layout_.tp(), NH = m.heads / layout_.tp();
  const auto& w = params_.blocks[l];
  const CVec<Real> no_bias;
  layernorm_forward(space_, s.ln1, s.ln1_mean, s.ln1_rstd, x, w.ln1_w, w.ln1_b, N, C);
  copy_to_.forward(span_of(s.ln1));
  matmul_forward<Real>(space_, s.qkv, s.ln1, w.qkv_w, w.qkv_b, N, C, 3 * Cl);
  attention_forward(space_, s.atty, s.att, s.qkv, B, T, Cl, NH);
  // The row-parallel products are summed over the group before their bias joins (once), fused
  // with the residual add and the LayerNorm after it.
  matmul_forward<Real>(space_, proj, s.atty, w.attproj_w, no_bias, N, Cl, C);
  reduce_from_.forward(span_of(proj));
  residual_layernorm_forward(space_, s.residual2, s.ln2, s.ln2_mean, s.ln2_rstd, x, proj, w.attproj_b, w.ln2_w, w.ln2_b,
                             N, C);
  copy_to_.forward(span_of(s.ln2));
  matmul_bias_gelu_forward<Real>(space_, s.fch, s.fch_gelu, s.ln2, w.fc_w, w.fc_b, N, C, 4 * Cl);
  if (!to_output) return;
  matmul_forward<Real>(space_, proj, s.fch_gelu, w.fcproj_w, no_bias, N, 4 * Cl, C);
  reduce_from_.forward(span_of(proj));
  residual_forward(space_, s.residual3, s.residual2, proj, w.fcproj_b, N, C);
}

template <class Real>
void Gpt2<Real>::recompute_block(int slot, int l) {
  if (recompute_ == Recompute::none || resident_ == std::pair{slot, l}) return;
  const auto& m = model();
  const auto& a = slots_[slot];
  const auto& s = a.blocks[l];
  if (recompute_ == Recompute::selective) {
    attention_probabilities(space_, s.att, s.qkv, batch_, m.seq_len, m.d_model / layout_.tp(), m.heads / layout_.tp());
  } else {
    block_forward(l, l == 0 ? a.encoded : a.blocks[l - 1].residual3, s, a.proj, false);
  }
  resident_ = {slot, l};
}

template <class Real>
CVec<Real> Gpt2<Real>::forward_logits(CVec<int> inputs) {
  stage_forward(0, inputs);
  space_.fence();
  return slots_[0].logits;
}

// Each member is instantiated in the file that defines it (the class's own in gpt2.cpp).
#define MESHTRAIN_GPT2_FORWARD(Real)                                                                        \
  template CVec<Real> Gpt2<Real>::stage_output(int) const;                                                  \
  template void Gpt2<Real>::stage_forward(int, CVec<int>);                                                  \
  template void Gpt2<Real>::block_forward(int, CVec<Real>, const BlockActivations<Real>&, Vec<Real>, bool); \
  template void Gpt2<Real>::recompute_block(int, int);                                                      \
  template CVec<Real> Gpt2<Real>::forward_logits(CVec<int>);
MESHTRAIN_GPT2_FORWARD(float)
MESHTRAIN_GPT2_FORWARD(double)
MESHTRAIN_GPT2_FORWARD(bf16)
MESHTRAIN_GPT2_FORWARD(fp16)
#undef MESHTRAIN_GPT2_FORWARD

}  // namespace meshtrain

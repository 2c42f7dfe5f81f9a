// Llama's forward pass: a pipeline stage's embedding, blocks, final norm and output head, the
// recomputation of a block for backward, inference, and the loss (model/impl/output_loss.hpp).
#include "model/llama.hpp"

#include "kernels/attention.hpp"
#include "kernels/encoder.hpp"
#include "kernels/matmul.hpp"
#include "kernels/residual.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rotary.hpp"
#include "kernels/swiglu.hpp"
#include "model/impl/output_loss.hpp"

namespace meshtrain {

// The embed_tokens rows this rank holds (first stage); no position table, so nothing else is added.
template <class Real>
VocabRange Llama<Real>::embedding_rows() const {
  const TensorInfo& t = layout_.find("embed_tokens.weight");
  return {int(t.piece.offset[0]), int(t.piece.block[0]), false};
}

template <class Real>
CVec<Real> Llama<Real>::stage_output(int slot) const {
  const auto& a = slots_[slot];
  return a.blocks.empty() ? CVec<Real>(a.encoded) : CVec<Real>(a.blocks.back().residual3);
}

template <class Real>
void Llama<Real>::stage_forward(int slot, CVec<int> inputs) {
  const LlamaDims& d = dims_;
  const int N = int(d.N), C = int(d.C), Vl = int(d.Vl);
  auto& a = slots_[slot];
  const auto& p = params_;
  if (layout_.place().first()) {
    // Vocabulary-parallel lookup: each rank its rows, zeros for the others, summed over the group.
    encoder_forward(space_, a.encoded, inputs, p.embed, CVec<Real>(), int(d.B), int(d.T), C, embedding_rows());
    reduce_from_.forward(span_of(a.encoded));
  }
  CVec<Real> x = a.encoded;
  for (int l = 0; l < layout_.stage_layers(); ++l) {
    need_block(l);
    block_forward(slot, l, x, a.blocks[l], a.proj, true);
    x = a.blocks[l].residual3;
  }
  resident_ = {slot, layout_.stage_layers() - 1};
  if (dims_.any_moe()) ++router_statistics_.passes;
  if (!layout_.place().last()) return;
  rmsnorm_forward(space_, a.norm, a.norm_rstd, x, p.norm, N, C, model().norm_eps);
  // Output head, column-parallel by vocabulary rows: logits = norm · lm_headᵀ.
  copy_to_.forward(span_of(a.norm));
  linear_forward<Real>(space_, a.logits, a.norm, p.lm_head, N, C, Vl);
}

// x → residual2 = x + o(attention(rope(q), rope(k), v)) → residual3 = residual2 + mlp(rmsnorm(residual2)).
template <class Real>
void Llama<Real>::block_forward(int slot, int l, CVec<Real> x, const LlamaBlockActivations<Real>& s, Vec<Real> proj,
                                bool to_output) {
  const LlamaDims& d = dims_;
  const int B = int(d.B), T = int(d.T), C = int(d.C), N = int(d.N), hs = int(d.hs);
  const int NHl = int(d.NHl), KVl = int(d.KVl), Q = int(d.q_cols()), QKV = int(d.qkv_cols());
  const double eps = model().norm_eps;
  const auto& w = params_.blocks[l];
  rmsnorm_forward(space_, s.ln1, s.ln1_rstd, x, w.attn_norm, N, C, eps);
  copy_to_.forward(span_of(s.ln1));
  linear_forward<Real>(space_, s.qkv, s.ln1, w.qkv, N, C, QKV);
  rotary_forward(space_, s.qkv, rotary_, N, T, QKV, NHl + KVl, hs);  // the q heads, then the k heads
  attention_forward(space_, s.atty, s.att, s.qkv, B, T, NHl, KVl, hs);
  linear_forward<Real>(space_, proj, s.atty, w.o, N, Q, C);
  reduce_from_.forward(span_of(proj));
  residual_rmsnorm_forward(space_, s.residual2, s.ln2, s.ln2_rstd, x, proj, w.mlp_norm, N, C, eps);
  copy_to_.forward(span_of(s.ln2));
  mlp_forward(slot, l, s, proj, to_output);
  if (!to_output) return;
  reduce_from_.forward(span_of(proj));
  residual_forward(space_, s.residual3, s.residual2, proj, long(N) * C);
}

// The dense SwiGLU: down(silu(gate) · up) of ln2; backward reads gate_up and swiglu, not the output.
template <class Real>
void Llama<Real>::mlp_forward(int slot, int l, const LlamaBlockActivations<Real>& s, Vec<Real> proj, bool to_output) {
  if (dims_.moe(l)) return moe_forward(slot, l, s, proj, to_output);
  const int N = int(dims_.N), C = int(dims_.C), Hl = int(dims_.Hl);
  const auto& w = params_.blocks[l];
  linear_forward<Real>(space_, s.gate_up, s.ln2, w.gate_up, N, C, 2 * Hl);
  swiglu_forward(space_, s.swiglu, s.gate_up, N, Hl);
  if (to_output) linear_forward<Real>(space_, proj, s.swiglu, w.down, N, Hl, C);
}

template <class Real>
void Llama<Real>::recompute_block(int slot, int l) {
  if (recompute_ == Recompute::none || resident_ == std::pair{slot, l}) return;
  const auto& a = slots_[slot];
  const auto& s = a.blocks[l];
  if (recompute_ == Recompute::selective) {
    attention_probabilities(space_, s.att, s.qkv, int(dims_.B), int(dims_.T), int(dims_.NHl), int(dims_.KVl),
                            int(dims_.hs));
  } else {
    block_forward(slot, l, l == 0 ? a.encoded : a.blocks[l - 1].residual3, s, a.proj, false);
  }
  resident_ = {slot, l};
}

template <class Real>
CVec<Real> Llama<Real>::forward_logits(CVec<int> inputs) {
  stage_forward(0, inputs);
  space_.fence();
  return slots_[0].logits;
}

template <class Real>
void Llama<Real>::stage_loss(int slot, CVec<int> targets, Accum grad_scale, const LossSum& sum) {
  const auto& a = slots_[slot];
  const output_loss::HeadBuffers<Real> head{a.logits, a.losses, a.row_max, a.partials};
  output_loss::mean_cross_entropy(space_, tp_.active(), vocab_statistics_, head, targets, int(dims_.N), layout_,
                                  layout_.find("lm_head.weight"), grad_scale, sum);
}

// Each member is instantiated in the file that defines it (the class's own in llama.cpp).
#define MESHTRAIN_LLAMA_FORWARD(Real)                                                                                  \
  template VocabRange Llama<Real>::embedding_rows() const;                                                             \
  template CVec<Real> Llama<Real>::stage_output(int) const;                                                            \
  template void Llama<Real>::stage_forward(int, CVec<int>);                                                            \
  template void Llama<Real>::block_forward(int, int, CVec<Real>, const LlamaBlockActivations<Real>&, Vec<Real>, bool); \
  template void Llama<Real>::mlp_forward(int, int, const LlamaBlockActivations<Real>&, Vec<Real>, bool);               \
  template void Llama<Real>::recompute_block(int, int);                                                                \
  template CVec<Real> Llama<Real>::forward_logits(CVec<int>);                                                          \
  template void Llama<Real>::stage_loss(int, CVec<int>, Accum, const LossSum&);
MESHTRAIN_LLAMA_FORWARD(float)
MESHTRAIN_LLAMA_FORWARD(double)
MESHTRAIN_LLAMA_FORWARD(bf16)
MESHTRAIN_LLAMA_FORWARD(fp16)
#undef MESHTRAIN_LLAMA_FORWARD

}  // namespace meshtrain

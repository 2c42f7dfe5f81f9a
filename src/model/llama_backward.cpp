// Llama's backward pass: a pipeline stage's output head, blocks and embedding in the mirror order of
// llama_forward.cpp, each tensor-parallel mapping's backward at the mirror place of its forward.
#include "model/llama.hpp"

#include "kernels/attention.hpp"
#include "kernels/encoder.hpp"
#include "kernels/matmul.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rotary.hpp"
#include "kernels/swiglu.hpp"
#include "model/impl/backward_sweep.hpp"

namespace meshtrain {

template <class Real>
void Llama<Real>::stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from) {
  backward_sweep<Real>(
      layout_, ready_from, [&] { head_backward(slot); }, [&](int l) { block_backward(slot, l); },
      [&] {
        reduce_from_.backward(span_of(scratch_.dresidual));
        encoder_backward(space_, dparams_.embed, Vec<Real>(), scratch_.column_partials, scratch_.token_order,
                         scratch_.dresidual, inputs, int(dims_.B), int(dims_.T), int(dims_.C), model().vocab,
                         embedding_rows());
      });
}

// Output head: dnorm = dlogits · lm_head (summed over the vocabulary shards), dlm_head += dlogitsᵀ ·
// norm; then the final RMSNorm, leaving dL/d(stage output) in scratch_.dresidual.
template <class Real>
void Llama<Real>::head_backward(int slot) {
  const int N = int(dims_.N), C = int(dims_.C), Vl = int(dims_.Vl);
  const auto& a = slots_[slot];
  const auto& d = scratch_;
  linear_backward<Real>(space_, d.dln, dparams_.lm_head, a.logits, a.norm, params_.lm_head, N, C, Vl);
  copy_to_.backward(span_of(d.dln));
  Kokkos::deep_copy(space_, d.dresidual, Real(0));
  rmsnorm_backward(space_, d.dresidual, dparams_.norm, d.column_partials, d.dln, stage_output(slot), params_.norm,
                   a.norm_rstd, N, C);
}

// Block l: scratch_.dresidual holds dL/d residual3 and becomes dL/d x, the block's input.
template <class Real>
void Llama<Real>::block_backward(int slot, int l) {
  need_block(l);
  const LlamaDims& dm = dims_;
  const int B = int(dm.B), T = int(dm.T), C = int(dm.C), N = int(dm.N), hs = int(dm.hs);
  const int NHl = int(dm.NHl), KVl = int(dm.KVl), Q = int(dm.q_cols()), QKV = int(dm.qkv_cols());
  const auto& a = slots_[slot];
  const auto& w = params_.blocks[l];
  const auto& dw = dparams_.blocks[l];
  const auto& s = a.blocks[l];
  const auto& d = scratch_;
  CVec<Real> x = l == 0 ? a.encoded : a.blocks[l - 1].residual3;
  recompute_block(slot, l);
  // MLP branch; d.dresidual becomes dL/d residual2.
  reduce_from_.backward(span_of(d.dresidual));
  mlp_backward(slot, l);
  copy_to_.backward(span_of(d.dln));
  if (dm.moe(l)) router_input_backward(slot, l);
  rmsnorm_backward(space_, d.dresidual, dw.mlp_norm, d.column_partials, d.dln, s.residual2, w.mlp_norm, s.ln2_rstd, N,
                   C);
  // Attention branch; d.dresidual becomes dL/d x.
  reduce_from_.backward(span_of(d.dresidual));
  linear_backward<Real>(space_, d.datty, dw.o, d.dresidual, s.atty, w.o, N, Q, C);
  attention_backward(space_, d.dqkv, d.datt, d.datty, s.qkv, s.att, B, T, NHl, KVl, hs);
  rotary_backward(space_, d.dqkv, rotary_, N, T, QKV, NHl + KVl, hs);  // back to the unrotated q and k
  linear_backward<Real>(space_, d.dln, dw.qkv, d.dqkv, s.ln1, w.qkv, N, C, QKV);
  copy_to_.backward(span_of(d.dln));
  rmsnorm_backward(space_, d.dresidual, dw.attn_norm, d.column_partials, d.dln, x, w.attn_norm, s.ln1_rstd, N, C);
}

// The dense SwiGLU's backward: scratch_.dresidual holds dL/d proj; leaves dL/d ln2 (this rank's
// part) in scratch_.dln.
template <class Real>
void Llama<Real>::mlp_backward(int slot, int l) {
  if (dims_.moe(l)) return moe_backward(slot, l);
  const int N = int(dims_.N), C = int(dims_.C), Hl = int(dims_.Hl);
  const auto& s = slots_[slot].blocks[l];
  const auto& w = params_.blocks[l];
  const auto& dw = dparams_.blocks[l];
  const auto& d = scratch_;
  linear_backward<Real>(space_, d.dswiglu, dw.down, d.dresidual, s.swiglu, w.down, N, Hl, C);
  swiglu_backward(space_, d.dgate_up, d.dswiglu, s.gate_up, N, Hl);
  linear_backward<Real>(space_, d.dln, dw.gate_up, d.dgate_up, s.ln2, w.gate_up, N, C, 2 * Hl);
}

// Each member is instantiated in the file that defines it (the class's own in llama.cpp).
#define MESHTRAIN_LLAMA_BACKWARD(Real)                                         \
  template void Llama<Real>::stage_backward(int, CVec<int>, const ReadyFrom&); \
  template void Llama<Real>::head_backward(int);                               \
  template void Llama<Real>::block_backward(int, int);                         \
  template void Llama<Real>::mlp_backward(int, int);
MESHTRAIN_LLAMA_BACKWARD(float)
MESHTRAIN_LLAMA_BACKWARD(double)
MESHTRAIN_LLAMA_BACKWARD(bf16)
MESHTRAIN_LLAMA_BACKWARD(fp16)
#undef MESHTRAIN_LLAMA_BACKWARD

}  // namespace meshtrain

// GPT-2's backward pass: a pipeline stage's output head, blocks and embedding in the mirror order of
// gpt2_forward.cpp, each tensor-parallel mapping's backward at the mirror place of its forward.
#include "model/gpt2.hpp"

#include "kernels/attention.hpp"
#include "kernels/encoder.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/matmul.hpp"
#include "model/impl/backward_sweep.hpp"

namespace meshtrain {

template <class Real>
void Gpt2<Real>::stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from) {
  backward_sweep<Real>(
      layout_, ready_from, [&] { head_backward(slot); }, [&](int l) { block_backward(slot, l); },
      [&] {
        const auto& m = model();
        const TensorInfo& wte = layout_.find("wte.weight");
        const VocabRange vocab{int(wte.piece.offset[0]), int(wte.piece.block[0]), true};
        reduce_from_.backward(span_of(scratch_.dresidual));
        encoder_backward(space_, dparams_.wte, dparams_.wpe, scratch_.column_partials, scratch_.token_order,
                         scratch_.dresidual, inputs, batch_, m.seq_len, m.d_model, m.vocab, vocab);
      });
}

// Output head (tied): dlnf = dlogits · wte (summed over the vocabulary shards), dwte += dlogitsᵀ · lnf;
// then ln_f, leaving dL/d(stage output) in scratch_.dresidual.
template <class Real>
void Gpt2<Real>::head_backward(int slot) {
  const int N = batch_ * model().seq_len, C = model().d_model;
  const int Vl = layout_.padded_vocab() / layout_.tp();
  const auto& a = slots_[slot];
  const auto& p = params_;
  const auto& g = dparams_;
  const auto& d = scratch_;
  gemm<Real>(space_, Trans::no, Trans::no, {N, C, Vl}, Real(1), a.logits.data(), Vl, p.wte.data(), C, Real(0),
             d.dln.data(), C);
  copy_to_.backward(span_of(d.dln));
  gemm<Real>(space_, Trans::yes, Trans::no, {Vl, C, N}, Real(1), a.logits.data(), Vl, a.lnf.data(), C, Real(1),
             g.wte.data(), C);
  Kokkos::deep_copy(space_, d.dresidual, Real(0));
  layernorm_backward(space_, d.dresidual, g.lnf_w, g.lnf_b, d.column_partials, d.dln, stage_output(slot), p.lnf_w,
                     a.lnf_mean, a.lnf_rstd, N, C);
}

// Block l: scratch_.dresidual holds dL/d residual3 and becomes dL/d x, the block's input.
template <class Real>
void Gpt2<Real>::block_backward(int slot, int l) {
  need_block(l);
  const auto& m = model();
  const int B = batch_, T = m.seq_len, C = m.d_model, N = B * T;
  const int Cl = C / layout_.tp(), NH = m.heads / layout_.tp();
  const auto& a = slots_[slot];
  const auto& w = params_.blocks[l];
  const auto& dw = dparams_.blocks[l];
  const auto& s = a.blocks[l];
  const auto& d = scratch_;
  const Vec<Real> no_bias;
  CVec<Real> x = l == 0 ? a.encoded : a.blocks[l - 1].residual3;
  recompute_block(slot, l);
  // MLP branch; d.dresidual becomes dL/d residual2. The c_proj biases' gradients are column sums of
  // d.dresidual: the attention's is added by ln_2's backward, which leaves it; the MLP's is summed
  // here, with c_proj's weight gradient (on CUDA in that product's epilogue), inside the block, because under ZeRO 2/3
  // a block's gradients live in its working room only while the block's own backward runs (the next block's ln_1 must
  // not write them).
  reduce_from_.backward(span_of(d.dresidual));
  matmul_backward_gelu<Real>(space_, d.dfch, dw.fc_b, dw.fcproj_w, dw.fcproj_b, d.column_partials, d.dresidual,
                             s.fch_gelu, s.fch, w.fcproj_w, N, 4 * Cl, C);
  matmul_backward<Real>(space_, d.dln, dw.fc_w, no_bias, d.column_partials, d.dfch, s.ln2, w.fc_w, N, C, 4 * Cl);
  copy_to_.backward(span_of(d.dln));
  layernorm_backward(space_, d.dresidual, dw.ln2_w, dw.ln2_b, d.column_partials, d.dln, s.residual2, w.ln2_w,
                     s.ln2_mean, s.ln2_rstd, N, C, dw.attproj_b);
  // Attention branch; d.dresidual becomes dL/d x.
  reduce_from_.backward(span_of(d.dresidual));
  matmul_backward<Real>(space_, d.datty, dw.attproj_w, no_bias, d.column_partials, d.dresidual, s.atty, w.attproj_w, N,
                        Cl, C);
  attention_backward(space_, d.dqkv, d.datt, d.datty, s.qkv, s.att, B, T, Cl, NH);
  matmul_backward<Real>(space_, d.dln, dw.qkv_w, dw.qkv_b, d.column_partials, d.dqkv, s.ln1, w.qkv_w, N, C, 3 * Cl);
  copy_to_.backward(span_of(d.dln));
  layernorm_backward(space_, d.dresidual, dw.ln1_w, dw.ln1_b, d.column_partials, d.dln, x, w.ln1_w, s.ln1_mean,
                     s.ln1_rstd, N, C);
}

// Each member is instantiated in the file that defines it (the class's own in gpt2.cpp).
#define MESHTRAIN_GPT2_BACKWARD(Real)                                         \
  template void Gpt2<Real>::stage_backward(int, CVec<int>, const ReadyFrom&); \
  template void Gpt2<Real>::head_backward(int);                               \
  template void Gpt2<Real>::block_backward(int, int);
MESHTRAIN_GPT2_BACKWARD(float)
MESHTRAIN_GPT2_BACKWARD(double)
MESHTRAIN_GPT2_BACKWARD(bf16)
MESHTRAIN_GPT2_BACKWARD(fp16)
#undef MESHTRAIN_GPT2_BACKWARD

}  // namespace meshtrain

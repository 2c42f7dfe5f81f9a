// LLaMA's backward listings (model/llama.hpp): a block, its dense MLP and the final norm, in the
// mirror order of llama_forward.cpp, each tensor-parallel mapping's backward at the mirror place of
// its forward.
#include "model/families/llama.hpp"

#include "kernels/attention.hpp"
#include "kernels/fused_attention.hpp"
#include "kernels/matmul.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rotary.hpp"
#include "kernels/swiglu.hpp"
#include "model/impl/deferrable_backward.hpp"

#include <stdexcept>

namespace meshtrain {

template <class Real>
void LlamaFamily::block_backward(Parts<Real>& m, int slot, int l, CVec<Real> x) {
  const Dims& dm = m.dims;
  const int B = int(dm.B), T = int(dm.T), C = int(dm.C), N = int(dm.N), Nl = int(dm.Nl), hs = int(dm.hs);
  const int NHl = int(dm.NHl), KVl = int(dm.KVl), Q = int(dm.q_cols()), QKV = int(dm.qkv_cols());
  const auto& w = m.params.blocks[std::size_t(l)];
  const auto& dw = m.dparams.blocks[std::size_t(l)];
  const auto& s = m.slots[std::size_t(slot)].blocks[std::size_t(l)];
  const auto& d = m.scratch;
  // Sequence parallelism: each rank's norm weight gradients come from its rows, summed over the group at
  // the end; a region's output gradient is gathered into dln, read before the region's backward writes it.
  const bool sequence_parallel = m.sequence_parallel();
  if (sequence_parallel) m.later.add([&m] { m.clear_norm_grads(); });
  // MLP branch; d.dresidual becomes dL/d residual2.
  const Vec<Real> dmlp = m.leave_region_backward(d.dresidual, d.dln);
  mlp_backward(m, slot, l, CVec<Real>(dmlp));
  const Vec<Real> dln2 = m.enter_region_backward(d.dln, m.norm_rows);
  if (dm.moe(l)) router_input_backward(m, slot, l, dln2);
  deferrable::rmsnorm_backward<Real>(m.later, m.space, d.dresidual, sequence_parallel ? m.norm_grad(0) : dw.mlp_norm,
                                     d.column_partials, dln2, s.residual2, w.mlp_norm, s.ln2_rstd, Nl, C);
  // Attention branch; d.dresidual becomes dL/d x.
  const Vec<Real> dattended = m.leave_region_backward(d.dresidual, d.dln);
  deferrable::linear_backward<Real>(m.later, m.space, d.datty, dw.o, dattended, s.atty, w.o, N, Q, C);
  lora_row_backward<Real>(m.later, m.space, m.lora, slot, l, lora_o, s.atty, Q, dattended.data(), C, d.datty.data());
  if (dm.fused_attention) {
    m.fused_attention_backward(slot, d.dqkv, d.datty, s.qkv, s.atty, s.lse, NHl, KVl, hs, d.attention_workspace);
  } else {
    attention_backward(m.space, d.dqkv, d.datt, d.datty, s.qkv, s.att, B, T, NHl, KVl, hs);
  }
  // Back to the unrotated q and k.
  rotary_backward(m.space, d.dqkv, m.state.rotary, N, T, QKV, NHl + KVl, hs, m.documents[std::size_t(slot)], m.chunks);
  deferrable::linear_backward<Real>(m.later, m.space, d.dln, dw.qkv, dw.qkv_bias, d.column_partials, d.dqkv, s.ln1,
                                    w.qkv, N, C, QKV);
  const int KVc = KVl * hs;
  const Real* dqkv = d.dqkv.data();
  lora_column_backward<Real>(m.later, m.space, m.tp, m.lora, slot, l, lora_q, s.ln1, C, dqkv, QKV, Q, d.dln.data());
  lora_column_backward<Real>(m.later, m.space, m.tp, m.lora, slot, l, lora_k, s.ln1, C, dqkv + Q, QKV, KVc,
                             d.dln.data());
  lora_column_backward<Real>(m.later, m.space, m.tp, m.lora, slot, l, lora_v, s.ln1, C, dqkv + Q + KVc, QKV, KVc,
                             d.dln.data());
  const Vec<Real> dln1 = m.enter_region_backward(d.dln, m.norm_rows);
  deferrable::rmsnorm_backward<Real>(m.later, m.space, d.dresidual, sequence_parallel ? m.norm_grad(1) : dw.attn_norm,
                                     d.column_partials, dln1, x, w.attn_norm, s.ln1_rstd, Nl, C);
  if (sequence_parallel) m.later.add([&m, &dw] { m.add_norm_grads({dw.mlp_norm, dw.attn_norm}); });
}

// What a deferred backward holds of a dense block: the output gradients of its products (down's and o's N·C,
// gate|up's, q|k|v's) and of its two RMSNorms, which the scratch overwrites; under full recomputation also what the
// weight gradients read of the block's shared set (the SwiGLU output, the MLP norm's input, output and
// statistics, the attention output, the attention norm's output and statistics). (MoE blocks do not defer.)
HeldElements LlamaFamily::held_per_block(const Dims& d, int l, Recompute recompute) {
  if (d.moe(l)) throw std::logic_error("a mixture-of-experts block does not defer its weight gradients");
  const std::size_t N = d.N, C = d.C, Nl = d.Nl, widest = d.widest_dense_cols();
  HeldElements held{2 * N * C + N * 2 * widest + N * d.qkv_cols() + 2 * Nl * C, 0};
  if (recompute == Recompute::full) held += {N * widest + N * C + Nl * C + N * d.q_cols() + N * C, 2 * Nl};
  return held;
}

// The dense SwiGLU's backward from dL/d proj in `dproj`; leaves dL/d ln2 (this rank's part) in the
// scratch's dln.
template <class Real>
void LlamaFamily::mlp_backward(Parts<Real>& m, int slot, int l, CVec<Real> dproj) {
  if (m.dims.moe(l)) return moe_backward(m, slot, l, dproj);
  const int N = int(m.dims.N), C = int(m.dims.C), Hl = int(m.dims.Hl);
  const auto& s = m.slots[std::size_t(slot)].blocks[std::size_t(l)];
  const auto& w = m.params.blocks[std::size_t(l)];
  const auto& dw = m.dparams.blocks[std::size_t(l)];
  const auto& d = m.scratch;
  deferrable::linear_backward<Real>(m.later, m.space, d.dswiglu, dw.down, dproj, s.swiglu, w.down, N, Hl, C);
  lora_row_backward<Real>(m.later, m.space, m.lora, slot, l, lora_down, s.swiglu, Hl, dproj.data(), C,
                          d.dswiglu.data());
  swiglu_backward(m.space, d.dgate_up, d.dswiglu, s.gate_up, N, Hl);
  deferrable::linear_backward<Real>(m.later, m.space, d.dln, dw.gate_up, d.dgate_up, s.ln2, w.gate_up, N, C, 2 * Hl);
  const Real* dgate_up = d.dgate_up.data();
  lora_column_backward<Real>(m.later, m.space, m.tp, m.lora, slot, l, lora_gate, s.ln2, C, dgate_up, 2 * Hl, Hl,
                             d.dln.data());
  lora_column_backward<Real>(m.later, m.space, m.tp, m.lora, slot, l, lora_up, s.ln2, C, dgate_up + Hl, 2 * Hl, Hl,
                             d.dln.data());
}

template <class Real>
void LlamaFamily::final_norm_backward(Parts<Real>& m, const FinalNorm<Real>& f, CVec<Real> x) {
  const auto& d = m.scratch;
  const int Nl = int(m.dims.Nl), C = int(m.dims.C);
  const bool sequence_parallel = m.sequence_parallel();
  if (sequence_parallel) m.later.add([&m] { m.clear_norm_grads(); });
  deferrable::rmsnorm_backward<Real>(m.later, m.space, d.dresidual, sequence_parallel ? m.norm_grad(0) : m.dparams.norm,
                                     d.column_partials, m.final_norm_gradient(), x, m.params.norm, f.rstd, Nl, C);
  if (sequence_parallel) m.later.add([&m] { m.add_norm_grads({m.dparams.norm}); });
}

#define MESHTRAIN_LLAMA_BACKWARD(Real)                                                              \
  template void LlamaFamily::block_backward<Real>(LlamaFamily::Parts<Real>&, int, int, CVec<Real>); \
  template void LlamaFamily::mlp_backward<Real>(LlamaFamily::Parts<Real>&, int, int, CVec<Real>);   \
  template void LlamaFamily::final_norm_backward<Real>(LlamaFamily::Parts<Real>&, const FinalNorm<Real>&, CVec<Real>);
MESHTRAIN_LLAMA_BACKWARD(float)
MESHTRAIN_LLAMA_BACKWARD(double)
MESHTRAIN_LLAMA_BACKWARD(bf16)
MESHTRAIN_LLAMA_BACKWARD(fp16)
#undef MESHTRAIN_LLAMA_BACKWARD

}  // namespace meshtrain

// LLaMA's forward listings (model/llama.hpp): a block, its dense MLP, its attention probabilities
// for selective recomputation, and the final norm; the embedding, the head and the loss are the
// stage's (model/decoder_stage.hpp), an MoE block's MLP is llama_moe.cpp's.
#include "model/families/llama.hpp"

#include "kernels/attention.hpp"
#include "kernels/fused_attention.hpp"
#include "kernels/matmul.hpp"
#include "kernels/residual.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rotary.hpp"
#include "kernels/swiglu.hpp"

namespace meshtrain {

// x → residual2 = x + o(attention(rope(q), rope(k), v)) → residual3 = residual2 + mlp(rmsnorm(residual2)).
template <class Real>
void LlamaFamily::block_forward(Parts<Real>& m, int slot, int l, CVec<Real> x, const Block<Real>& s, Vec<Real> proj,
                                bool to_output) {
  const Dims& d = m.dims;
  const int B = int(d.B), T = int(d.T), C = int(d.C), N = int(d.N), Nl = int(d.Nl), hs = int(d.hs);
  const int NHl = int(d.NHl), KVl = int(d.KVl), Q = int(d.q_cols()), QKV = int(d.qkv_cols());
  const double eps = m.model().norm_eps;
  const auto& w = m.params.blocks[std::size_t(l)];
  // The norms and residual adds run on this rank's rows (all of them without sequence parallelism); the
  // regions between them see every row (DecoderParts::enter_region, leave_region).
  const bool sequence_parallel = m.sequence_parallel();
  const Vec<Real> ln1_rows = sequence_parallel ? m.norm_rows : s.ln1;
  rmsnorm_forward(m.space, ln1_rows, s.ln1_rstd, x, w.attn_norm, Nl, C, eps);
  m.enter_region(ln1_rows, s.ln1);
  linear_forward<Real>(m.space, s.qkv, s.ln1, w.qkv, w.qkv_bias, N, C, QKV);
  const int KVc = KVl * hs;  // k's and v's columns
  lora_column_forward<Real>(m.space, m.lora, slot, l, lora_q, s.ln1, C, s.qkv.data(), QKV, Q);
  lora_column_forward<Real>(m.space, m.lora, slot, l, lora_k, s.ln1, C, s.qkv.data() + Q, QKV, KVc);
  lora_column_forward<Real>(m.space, m.lora, slot, l, lora_v, s.ln1, C, s.qkv.data() + Q + KVc, QKV, KVc);
  const AttentionSegments& documents = m.documents[std::size_t(slot)];
  // The q heads, then the k heads; positions restart at each document of a packed sequence.
  rotary_forward(m.space, s.qkv, m.state.rotary, N, T, QKV, NHl + KVl, hs, documents, m.chunks);
  if (d.fused_attention) {
    m.fused_attention(slot, s.atty, s.lse, s.qkv, NHl, KVl, hs, m.scratch.attention_workspace);
  } else {
    attention_forward(m.space, s.atty, s.att, s.qkv, B, T, NHl, KVl, hs);
  }
  linear_forward<Real>(m.space, proj, s.atty, w.o, N, Q, C);
  lora_row_forward<Real>(m.space, m.tp, m.lora, slot, l, lora_o, s.atty, Q, proj.data(), C);
  const Vec<Real> attended = m.leave_region(proj, m.proj_rows);
  const Vec<Real> ln2_rows = sequence_parallel ? m.norm_rows : s.ln2;
  residual_rmsnorm_forward(m.space, s.residual2, ln2_rows, s.ln2_rstd, x, attended, w.mlp_norm, Nl, C, eps);
  m.enter_region(ln2_rows, s.ln2);
  mlp_forward(m, slot, l, s, proj, to_output);
  if (!to_output) return;
  const Vec<Real> mlp = m.leave_region(proj, m.proj_rows);
  residual_forward(m.space, s.residual3, s.residual2, mlp, long(Nl) * C);
}

// The dense SwiGLU: down(silu(gate) · up) of ln2; backward reads gate_up and swiglu, not the output.
template <class Real>
void LlamaFamily::mlp_forward(Parts<Real>& m, int slot, int l, const Block<Real>& s, Vec<Real> proj, bool to_output) {
  if (m.dims.moe(l)) return moe_forward(m, slot, l, s, proj, to_output);
  const int N = int(m.dims.N), C = int(m.dims.C), Hl = int(m.dims.Hl);
  const auto& w = m.params.blocks[std::size_t(l)];
  linear_forward<Real>(m.space, s.gate_up, s.ln2, w.gate_up, N, C, 2 * Hl);
  lora_column_forward<Real>(m.space, m.lora, slot, l, lora_gate, s.ln2, C, s.gate_up.data(), 2 * Hl, Hl);
  lora_column_forward<Real>(m.space, m.lora, slot, l, lora_up, s.ln2, C, s.gate_up.data() + Hl, 2 * Hl, Hl);
  swiglu_forward(m.space, s.swiglu, s.gate_up, N, Hl);
  if (to_output) linear_forward<Real>(m.space, proj, s.swiglu, w.down, N, Hl, C);
  // h also under recomputation, which skips the output: backward reads it.
  lora_row_forward<Real>(m.space, m.tp, m.lora, slot, l, lora_down, s.swiglu, Hl, proj.data(), C, to_output);
}

template <class Real>
void LlamaFamily::recompute_attention(Parts<Real>& m, const Block<Real>& s) {
  const Dims& d = m.dims;
  attention_probabilities(m.space, s.att, s.qkv, int(d.B), int(d.T), int(d.NHl), int(d.KVl), int(d.hs));
}

template <class Real>
void LlamaFamily::final_norm_forward(Parts<Real>& m, const FinalNorm<Real>& f, CVec<Real> x) {
  rmsnorm_forward(m.space, m.final_norm_rows(f), f.rstd, x, m.params.norm, int(m.dims.Nl), int(m.dims.C),
                  m.model().norm_eps);
}

#define MESHTRAIN_LLAMA_FORWARD(Real)                                                                                \
  template void LlamaFamily::block_forward<Real>(LlamaFamily::Parts<Real>&, int, int, CVec<Real>,                    \
                                                 const LlamaFamily::Block<Real>&, Vec<Real>, bool);                  \
  template void LlamaFamily::mlp_forward<Real>(LlamaFamily::Parts<Real>&, int, int, const LlamaFamily::Block<Real>&, \
                                               Vec<Real>, bool);                                                     \
  template void LlamaFamily::recompute_attention<Real>(LlamaFamily::Parts<Real>&, const LlamaFamily::Block<Real>&);  \
  template void LlamaFamily::final_norm_forward<Real>(LlamaFamily::Parts<Real>&, const FinalNorm<Real>&, CVec<Real>);
MESHTRAIN_LLAMA_FORWARD(float)
MESHTRAIN_LLAMA_FORWARD(double)
MESHTRAIN_LLAMA_FORWARD(bf16)
MESHTRAIN_LLAMA_FORWARD(fp16)
#undef MESHTRAIN_LLAMA_FORWARD

}  // namespace meshtrain

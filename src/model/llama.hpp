// LLaMA forward and backward (share/docs/usage.md, Model families) over a fixed micro-batch shape,
// on one rank or as one rank of a tensor-parallel group, for one pipeline stage:
//   token embedding (no position table), L blocks of
//     x += o_proj(attention(rope(q), rope(k), v)),  q|k|v = qkv_proj(rmsnorm(x))
//     x += down_proj(silu(gate) · up),              gate|up = gate_up_proj(rmsnorm(x))
//   a final RMSNorm and an untied output head lm_head; no biases anywhere.
// Attention is grouped-query: KV key/value heads, each shared by NH/KV query heads. Tensor
// parallelism as Megatron's: q, k, v, gate and up column-parallel (q, k, v by heads), o and down
// row-parallel, embed_tokens and lm_head vocabulary-parallel; the mappings of
// parallel/tensor_parallel_mappings.hpp at the ends of each product pair, as in model/gpt2.hpp.
// Weights are in torch Linear layout [out, in]; q, k, v (and gate, up) of a block are consecutive
// in the flat buffer, so each trio (pair) is one GEMM.
//
// All buffers are allocated in the constructor; forward and backward allocate nothing.
// Recomputation (train.recompute) keeps what Gpt2 keeps (model/gpt2.hpp, Recompute): selective
// recomputes the attention probabilities from the kept (rotated) qkv, full whole blocks.
//
// Size letters: B micro-batch, T context, C channels, NH query heads, KV kv heads, hs head size,
// H SwiGLU hidden size, V vocab, N = B·T; a trailing l is this rank's share (NHl = NH/tp, …).
#pragma once

#include "core/model_sizes.hpp"
#include "kernels/encoder.hpp"
#include "kernels/grouped_linear.hpp"
#include "kernels/moe_router.hpp"
#include "kernels/rotary.hpp"
#include "model/impl/expert_exchange.hpp"
#include "model/language_model.hpp"
#include "parallel/tensor_parallel_mappings.hpp"

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

namespace meshtrain {

// This rank's sizes: B, T, C whole; heads, SwiGLU columns and vocabulary rows its share. The MoE
// sizes (share/docs/usage.md, Mixture of experts) are 0 without experts.
struct LlamaDims {
  std::size_t B, T, C, N, NHl, KVl, hs, Hl, Vl;
  int layers;       // blocks of this pipeline stage
  bool head;        // the stage ends in the final norm, lm_head and the loss (the last stage)
  int first_layer;  // global index of the stage's block 0
  int moe_every;
  std::size_t E, k;  // routed experts, experts per token
  std::size_t Hel;   // one expert's SwiGLU columns on this rank
  std::size_t Hsl;   // the shared experts' SwiGLU columns on this rank (0: none)
  std::size_t R;     // rows of the expert-ordered token buffers: N·k, or fewer under a capacity
  int capacity;      // assignments an expert keeps of a micro-batch (0: all)
  std::size_t ep;    // expert-parallel ranks the experts are spread over
  std::size_t El;    // experts this rank holds (E / ep)
  // Rows an ep rank's experts may receive: R without expert parallelism; else each of the ep
  // senders' rows for El experts at most (all N·k of them when nothing is dropped).
  std::size_t Rr;
  std::size_t q_cols() const { return NHl * hs; }
  std::size_t qkv_cols() const { return (NHl + 2 * KVl) * hs; }
  bool moe(int l) const { return E > 0 && (first_layer + l) % moe_every == 0; }
  // The dense SwiGLU's columns of block l: its MLP's, or an MoE block's shared experts'.
  std::size_t dense_cols(int l) const { return moe(l) ? Hsl : Hl; }
  std::size_t widest_dense_cols() const {
    std::size_t widest = 0;
    for (int l = 0; l < layers; ++l) widest = std::max(widest, dense_cols(l));
    return widest;
  }
  bool any_moe() const {
    for (int l = 0; l < layers; ++l) {
      if (moe(l)) return true;
    }
    return false;
  }
};

inline LlamaDims llama_dims(const ModelConfig& m, int batch, int tp, int first_layer, int layers, bool head,
                            int ep = 1) {
  const std::size_t t = std::size_t(tp), padded = std::size_t(padded_vocab(m, tp).value());
  const std::size_t N = std::size_t(batch) * m.seq_len, E = std::size_t(m.experts);
  const std::size_t k = E > 0 ? std::size_t(m.experts_per_token) : 0;
  const int capacity = m.expert_capacity(int(N));
  const std::size_t R = capacity > 0 ? std::min(N * k, E * std::size_t(capacity)) : N * k;
  const std::size_t P = std::size_t(ep), El = E / P;
  const std::size_t per_sender = capacity > 0 ? std::min(N * k, El * std::size_t(capacity)) : N * k;
  return {std::size_t(batch),
          std::size_t(m.seq_len),
          std::size_t(m.d_model),
          N,
          std::size_t(m.heads) / t,
          std::size_t(m.kv_head_count()) / t,
          std::size_t(m.head_size()),
          std::size_t(m.mlp_hidden()) / t,
          padded / t,
          layers,
          head,
          first_layer,
          m.moe_every,
          E,
          k,
          E > 0 ? std::size_t(m.expert_hidden_size()) / t : 0,
          E > 0 ? std::size_t(m.shared_hidden()) / t : 0,
          R,
          capacity,
          P,
          El,
          P > 1 ? P * per_sender : R};
}

// An MoE block's routing on the host: counts as MoeActivations::counts holds them, and the row
// group of each expert (the grouped products' argument).
struct HostRouting {
  std::vector<int> counts;  // routed (E) | row offsets (E+1)
  ExchangePlan exchange;    // where the rows go and the received rows' groups
  int rows() const { return counts.back(); }
  const int* offsets() const { return counts.data() + (counts.size() - 1) / 2; }
};

// What an MoE block keeps of its routing and its experts' products for backward.
template <class Real>
struct MoeActivations {
  Vec<accum_t<Real>> probs;  // (N, E) router probabilities
  Vec<accum_t<Real>> lse;    // (N)    log Σ exp of the router logits
  Vec<accum_t<Real>> gate;   // (N, k) gate weights
  Vec<int> expert;           // (N, k) chosen experts
  Vec<int> slot;             // (N, k) row of each assignment in the expert-ordered buffers, −1 dropped
  Vec<int> row_token;        // (R)    token of each row
  Vec<int> counts;           // (2E+1) routed (E) | row offsets (E+1): one copy to the host
  Vec<Real> xs;              // (R, C)      the normed tokens in expert order
  Vec<Real> received;        // (Rr, C)     the rows this rank's experts compute (xs itself at ep 1)
  Vec<Real> gate_up;         // (Rr, 2Hel)  each received row's expert gate | up
  Vec<Real> act;             // (Rr, Hel)   silu(gate) · up
  Vec<Real> ys;              // (R, C)      each row's expert output (this tp rank's partial sum)
};

// Activations one llama block keeps for its backward pass (views of the shared set where
// recomputation does not keep them).
template <class Real>
struct LlamaBlockActivations {
  Vec<Real> ln1;                // (N, C)       input_layernorm output
  Vec<accum_t<Real>> ln1_rstd;  // (N)
  Vec<Real> qkv;                // (N, (NHl+2KVl)·hs)  q and k rotated
  Vec<Real> atty;               // (N, NHl·hs)  attention output before o_proj
  Vec<Real> att;                // (B, NHl, T, T) softmax probabilities
  Vec<Real> residual2;          // (N, C)       x + attn(...)
  Vec<Real> ln2;                // (N, C)       post_attention_layernorm output
  Vec<accum_t<Real>> ln2_rstd;  // (N)
  Vec<Real> gate_up;            // (N, 2Hl)     gate | up (an MoE block: its shared experts')
  Vec<Real> swiglu;             // (N, Hl)      silu(gate) · up
  MoeActivations<Real> moe;     // an MoE block's routing and experts
  Vec<Real> residual3;          // (N, C)       block output
};

template <class Real>
struct LlamaActivations {
  Vec<Real> encoded;  // (N, C)
  std::vector<LlamaBlockActivations<Real>> blocks;
  Vec<Real> proj;                // (N, C)   o_proj and down_proj outputs before the residual add
  Vec<Real> norm;                // (N, C)
  Vec<accum_t<Real>> norm_rstd;  // (N)
  Vec<Real> logits;              // (N, Vl); after a training forward it holds dlogits
  Vec<accum_t<Real>> losses;     // (N)
  Vec<accum_t<Real>> row_max;    // (N)
  Vec<accum_t<Real>> partials;   // (2N)
};

template <class Real>
struct LlamaScratch {
  Vec<Real> dresidual;  // (N, C)
  Vec<Real> dln;        // (N, C)
  Vec<Real> datty;      // (N, NHl·hs)
  Vec<Real> dqkv;       // (N, (NHl+2KVl)·hs)
  Vec<Real> datt;       // (B, NHl, T, T)
  Vec<Real> dswiglu;    // (N, Hl)
  Vec<Real> dgate_up;   // (N, 2Hl)
  // The RMSNorm weight gradients' partial sums (kernels/column_sum.hpp) and the embedding gradient's
  // token order (kernels/encoder.hpp).
  Vec<accum_t<Real>> column_partials;
  Vec<int> token_order;
  // MoE blocks: router logits (forward) and their gradient (backward); the gate weights' gradient;
  // the experts' output rows' gradient, then their input rows'; the experts' hidden gradients.
  Vec<accum_t<Real>> router_logits;  // (N, E) in fp32 (kernels/router_linear.hpp)
  Vec<accum_t<Real>> dgate;          // (N, k)
  Vec<Real> drows;                   // (R, C)
  Vec<Real> dreceived;               // (Rr, C)  the experts' side of drows (drows itself at ep 1); forward's outputs
  Vec<Real> dexpert_act;             // (Rr, Hel)
  Vec<Real> dexpert_gate_up;         // (Rr, 2Hel)
};

// One block's weights (or gradients): qkv spans q_proj, k_proj and v_proj, gate_up gate_proj and
// up_proj (an MoE block: its shared experts', empty without them).
template <class Real>
struct LlamaBlockTensors {
  Vec<Real> attn_norm;  // (C)
  Vec<Real> qkv;        // ((NHl+2KVl)·hs, C)
  Vec<Real> o;          // (C, NHl·hs)
  Vec<Real> mlp_norm;   // (C)
  Vec<Real> gate_up;    // (2Hl, C)
  Vec<Real> down;       // (C, Hl)
  Vec<Real> router;     // (E, C)  MoE blocks only
  Vec<Real> experts;    // E × [gate (Hel, C) | up (Hel, C) | down (C, Hel)], expert after expert
};

template <class Real>
struct LlamaTensors {
  Vec<Real> embed;  // (Vl, C)
  std::vector<LlamaBlockTensors<Real>> blocks;
  Vec<Real> norm;     // (C)
  Vec<Real> lm_head;  // (Vl, C)

  // Points the view of each held tensor t at where(t); a trio or pair must lie contiguous.
  using Where = std::function<Real*(const TensorInfo&)>;
  static LlamaTensors bind(const ParameterLayout& layout, const Where& where);
};

// What Llama<Real> allocates for these arguments, in elements of Real.
template <class Real = float>
ActivationSizes llama_activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place, int slots,
                                          Recompute recompute, int ep = 1);

template <class Real>
class Llama final : public LanguageModel<Real> {
 public:
  using typename LanguageModel<Real>::Accum;
  using typename LanguageModel<Real>::ReadyFrom;

  // The arguments of make_language_model (model/language_model.hpp).
  // `ep`: the expert-parallel group (none: every expert on this rank).
  Llama(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp = nullptr, StagePlace place = {},
        int slots = 1, Recompute recompute = Recompute::none, ParameterStore<Real>* store = nullptr,
        Comm* ep = nullptr);

  const ParameterLayout& layout() const override { return layout_; }
  const ModelConfig& model() const { return layout_.model(); }
  int batch() const override { return batch_; }
  ActivationSizes activation_elements() const override {
    return {activation_buffer_.extent(0), scratch_buffer_.extent(0)};
  }
  Vec<Real> weights() const override { return slice(weights_, 0, weights_.extent(0)); }
  Vec<Real> grads() const override { return slice(grads_, 0, grads_.extent(0)); }
  void zero_grads() override;

  CVec<Real> forward_logits(CVec<int> inputs) override;
  void stage_forward(int slot, CVec<int> inputs) override;
  void stage_loss(int slot, CVec<int> targets, Accum grad_scale, const LossSum& sum) override;
  void stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from = {}) override;
  Vec<Real> stage_input(int slot) const override { return slots_[slot].encoded; }
  CVec<Real> stage_output(int slot) const override;
  Vec<Real> output_gradient() const override { return scratch_.dresidual; }
  CVec<Real> input_gradient() const override { return scratch_.dresidual; }
  RouterStatistics router_statistics() const override;
  void clear_router_statistics() override;

 private:
  // Without `to_output` (recomputation) it stops once s holds what backward reads.
  void block_forward(int slot, int l, CVec<Real> x, const LlamaBlockActivations<Real>& s, Vec<Real> proj,
                     bool to_output);
  // The MLP of block l into proj (before the tensor-parallel reduction): dense, or routed experts
  // plus shared ones. An MoE block records its router's statistics only with `to_output`.
  void mlp_forward(int slot, int l, const LlamaBlockActivations<Real>& s, Vec<Real> proj, bool to_output);
  void moe_forward(int slot, int l, const LlamaBlockActivations<Real>& s, Vec<Real> proj, bool to_output);
  // dL/d(normed MLP input) into scratch_.dln from dL/d proj in scratch_.dresidual (before the
  // tensor-parallel sum of copy_to_'s backward; the router's part, the same on every rank, after).
  void mlp_backward(int slot, int l);
  void moe_backward(int slot, int l);
  void router_input_backward(int slot, int l);
  // Copies an MoE block's routed counts and row offsets to the host and sets its experts' row groups.
  void read_routing(int slot, int l);
  // Counts block l's routing into the statistics; returns its index there (its losses' place in
  // router_loss_sums_).
  int record_routing(int l, const HostRouting& host);
  void recompute_block(int slot, int l);
  void head_backward(int slot);
  void block_backward(int slot, int l);
  VocabRange embedding_rows() const;
  template <class T>
  static std::span<T> span_of(Vec<T> x) {
    return {x.data(), x.extent(0)};
  }
  void need_block(int l) {
    if (store_ != nullptr) store_->need_block(layout_.first_layer() + l);
  }

  ExecSpace space_;
  TensorParallelGroup tp_;
  CopyToRegion copy_to_;
  ReduceFromRegion reduce_from_;
  VocabParallelStatistics vocab_statistics_;
  ParameterStore<Real>* store_;
  ExpertExchange exchange_;
  ParameterLayout layout_;
  LlamaDims dims_;
  int batch_;
  Recompute recompute_;
  std::pair<int, int> resident_{-1, -1};  // (slot, block) whose activations the shared set holds
  RotaryTable<Accum> rotary_;
  Buffer<Real> weights_;
  Buffer<Real> grads_;
  Buffer<Real> activation_buffer_;
  Buffer<Real> scratch_buffer_;
  LlamaTensors<Real> params_;
  LlamaTensors<Real> dparams_;
  std::vector<LlamaActivations<Real>> slots_;
  LlamaScratch<Real> scratch_;
  // Each slot's MoE blocks' routing as the host needs it ([slot][block]), read again by backward.
  std::vector<std::vector<HostRouting>> host_routing_;
  RouterStatistics router_statistics_;  // its aux_loss and z_loss are filled from router_loss_sums_ when read
  Buffer<double> router_loss_sums_;     // per MoE block: Σ aux, Σ z over the passes (device memory)
};

extern template class Llama<float>;
extern template class Llama<double>;
extern template class Llama<bf16>;
extern template class Llama<fp16>;

}  // namespace meshtrain

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

#include "kernels/encoder.hpp"
#include "kernels/rotary.hpp"
#include "model/language_model.hpp"
#include "parallel/tensor_parallel_mappings.hpp"

#include <span>
#include <utility>
#include <vector>

namespace meshtrain {

// This rank's sizes: B, T, C whole; heads, SwiGLU columns and vocabulary rows its share.
struct LlamaDims {
  std::size_t B, T, C, N, NHl, KVl, hs, Hl, Vl;
  int layers;  // blocks of this pipeline stage
  bool head;   // the stage ends in the final norm, lm_head and the loss (the last stage)
  std::size_t q_cols() const { return NHl * hs; }
  std::size_t qkv_cols() const { return (NHl + 2 * KVl) * hs; }
};

inline LlamaDims llama_dims(const ModelConfig& m, int batch, int tp, int layers, bool head) {
  const std::size_t t = std::size_t(tp), padded = (std::size_t(m.vocab) + t - 1) / t * t;
  return {std::size_t(batch),
          std::size_t(m.seq_len),
          std::size_t(m.d_model),
          std::size_t(batch) * m.seq_len,
          std::size_t(m.heads) / t,
          std::size_t(m.kv_head_count()) / t,
          std::size_t(m.head_size()),
          std::size_t(m.mlp_hidden()) / t,
          padded / t,
          layers,
          head};
}

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
  Vec<Real> gate_up;            // (N, 2Hl)     gate | up
  Vec<Real> swiglu;             // (N, Hl)      silu(gate) · up
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
};

// One block's weights (or gradients): qkv spans q_proj, k_proj and v_proj, gate_up gate_proj and up_proj.
template <class Real>
struct LlamaBlockTensors {
  Vec<Real> attn_norm;  // (C)
  Vec<Real> qkv;        // ((NHl+2KVl)·hs, C)
  Vec<Real> o;          // (C, NHl·hs)
  Vec<Real> mlp_norm;   // (C)
  Vec<Real> gate_up;    // (2Hl, C)
  Vec<Real> down;       // (C, Hl)
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
                                          Recompute recompute);

template <class Real>
class Llama final : public LanguageModel<Real> {
 public:
  using typename LanguageModel<Real>::Accum;
  using typename LanguageModel<Real>::ReadyFrom;

  // The arguments of make_language_model (model/language_model.hpp).
  Llama(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp = nullptr, StagePlace place = {},
        int slots = 1, Recompute recompute = Recompute::none, ParameterStore<Real>* store = nullptr);

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
  Accum stage_loss(int slot, CVec<int> targets, Accum grad_scale) override;
  void stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from = {}) override;
  Vec<Real> stage_input(int slot) const override { return slots_[slot].encoded; }
  CVec<Real> stage_output(int slot) const override;
  Vec<Real> output_gradient() const override { return scratch_.dresidual; }
  CVec<Real> input_gradient() const override { return scratch_.dresidual; }

 private:
  void block_forward(int l, CVec<Real> x, const LlamaBlockActivations<Real>& s, Vec<Real> proj, bool to_output);
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
};

extern template class Llama<float>;
extern template class Llama<double>;
extern template class Llama<bf16>;
extern template class Llama<fp16>;

}  // namespace meshtrain

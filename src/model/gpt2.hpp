// GPT-2 forward and backward over a fixed micro-batch shape, on one rank or as one rank of a
// tensor-parallel group (Megatron): c_attn and c_fc column-parallel (c_attn by heads), both c_proj
// row-parallel, the embedding and the cross-entropy vocabulary-parallel. The group's collectives
// are the mappings of parallel/tensor_parallel_mappings.hpp, each called at its two ends:
// copy-to-region before a column-parallel product (its backward sums the input's gradient),
// reduce-from-region after a row-parallel product and the embedding (its forward sums).
//
// All buffers are allocated in the constructor; forward() and backward() allocate nothing.
// forward() and backward() read as one kernel call per line, in mirror order.
//
// Size letters: B micro-batch, T context, C channels, NH heads, V vocab, L layers, N = B·T.
#pragma once

#include "model/language_model.hpp"
#include "model/parameter_store.hpp"
#include "model/parameters.hpp"
#include "parallel/comm.hpp"
#include "parallel/tensor_parallel_mappings.hpp"

#include <functional>
#include <span>
#include <string>
#include <utility>

namespace meshtrain {

// Activation recomputation (train.recompute): what each block keeps, per micro-batch, between its
// forward and its backward. Gradients are bitwise those of `none` in every mode: a recomputation
// runs the same kernels on the same inputs.
//   none       every activation backward reads.
//   selective  all but the attention probabilities att (B·NH·T·T, the largest for long contexts):
//              forward leaves them in one buffer shared by all blocks, and backward recomputes them
//              from the kept qkv (Megatron's selective recomputation; costs two attention GEMMs and a
//              softmax per block).
//   full       only the block's input (N·C; the previous block's output): every other activation
//              lives in one block set per rank, into which backward re-runs the block's forward
//              (all but the MLP's c_proj, whose output backward does not read; with tensor
//              parallelism that includes the attention's sum over the group).
// Backward skips the recomputation of the block whose activations are still in the shared set
// (the last block right after its forward).
// (Recompute itself is declared with train.recompute's names in core/config.hpp.)

// Activations one block keeps for its backward pass. Under recomputation the fields a block does not
// keep are views of the shared set (see Recompute).
template <class Real>
struct BlockActivations {
  Vec<Real> ln1;                // (N, C)
  Vec<accum_t<Real>> ln1_mean;  // (N)
  Vec<accum_t<Real>> ln1_rstd;  // (N)
  Vec<Real> qkv;                // (N, 3C)
  Vec<Real> atty;               // (N, C)   attention output before c_proj
  Vec<Real> att;                // (B, NH, T, T) softmax probabilities
  Vec<Real> residual2;          // (N, C)   x + attn(ln_1(x))
  Vec<Real> ln2;                // (N, C)
  Vec<accum_t<Real>> ln2_mean;  // (N)
  Vec<accum_t<Real>> ln2_rstd;  // (N)
  Vec<Real> fch;                // (N, 4C)  c_fc output
  Vec<Real> fch_gelu;           // (N, 4C)
  Vec<Real> residual3;          // (N, C)   block output
};

template <class Real>
struct ActivationTensors {
  Vec<Real> encoded;  // (N, C)
  std::vector<BlockActivations<Real>> blocks;
  Vec<Real> lnf;                // (N, C)
  Vec<accum_t<Real>> lnf_mean;  // (N)
  Vec<accum_t<Real>> lnf_rstd;  // (N)
  Vec<Real> logits;             // (N, V); after a training forward it holds dlogits
  Vec<accum_t<Real>> losses;    // (N)
  Vec<Real> proj;               // (N, C)   c_proj outputs before the residual add
  Vec<accum_t<Real>> row_max;   // (N)      vocabulary-parallel cross-entropy: row maxima
  Vec<accum_t<Real>> partials;  // (2N)     … and Σ exp, target logit
};

// Gradients of activations, reused by every block on the way back.
template <class Real>
struct BackwardScratch {
  Vec<Real> dresidual;  // (N, C) gradient flowing down the residual stream
  Vec<Real> dln;        // (N, C)
  Vec<Real> datty;      // (N, C)
  Vec<Real> dqkv;       // (N, 3C)
  Vec<Real> datt;       // (B, NH, T, T)
  Vec<Real> dfch;       // (N, 4C)
  // The column sums' partials (bias, LayerNorm and position-embedding gradients; kernels/column_sum.hpp)
  // and the embedding gradient's token order (kernels/encoder.hpp).
  Vec<accum_t<Real>> column_partials;
  Vec<int> token_order;
};

// What Gpt2<Real> allocates for these arguments (the same carving code, without allocating), in
// elements of Real.
template <class Real = float>
ActivationSizes gpt2_activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place, int slots,
                                         Recompute recompute);

template <class Real>
class Gpt2 final : public LanguageModel<Real> {
 public:
  using typename LanguageModel<Real>::Accum;
  using typename LanguageModel<Real>::ReadyFrom;

  // The arguments of make_language_model (model/language_model.hpp).
  Gpt2(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp = nullptr, StagePlace place = {},
       int slots = 1, Recompute recompute = Recompute::none, ParameterStore<Real>* store = nullptr);

  const ParameterLayout& layout() const override { return layout_; }
  const ModelConfig& model() const { return layout_.model(); }
  int batch() const override { return batch_; }
  Recompute recompute() const { return recompute_; }
  ActivationSizes activation_elements() const override {
    return {activation_buffer_.extent(0), scratch_buffer_.extent(0)};
  }
  Vec<Real> weights() const override { return slice(weights_, 0, weights_.extent(0)); }
  Vec<Real> grads() const override { return slice(grads_, 0, grads_.extent(0)); }
  // Bytes of the buffers the model allocated: weights and gradients (without a store).
  std::size_t weight_bytes() const { return weights_.extent(0) * sizeof(Real); }
  std::size_t grad_bytes() const { return grads_.extent(0) * sizeof(Real); }
  void zero_grads() override;

  CVec<Real> forward_logits(CVec<int> inputs) override;
  void stage_forward(int slot, CVec<int> inputs) override;
  void stage_loss(int slot, CVec<int> targets, Accum grad_scale, const LossSum& sum) override;
  void stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from = {}) override;
  Vec<Real> stage_input(int slot) const override { return slots_[slot].encoded; }
  CVec<Real> stage_output(int slot) const override;
  Vec<Real> output_gradient() const override { return scratch_.dresidual; }
  CVec<Real> input_gradient() const override { return scratch_.dresidual; }

 private:
  // Block l (of this stage) from its input x into s, using `proj` as c_proj's output. Without
  // `to_output` it stops once s holds what backward reads (before the MLP's c_proj).
  void block_forward(int l, CVec<Real> x, const BlockActivations<Real>& s, Vec<Real> proj, bool to_output);
  // Makes the shared set hold what block l's backward reads for `slot` (see Recompute).
  void recompute_block(int slot, int l);
  // The output head's and the blocks' backward (stage_backward calls them from the last down).
  void head_backward(int slot);
  void block_backward(int slot, int l);
  // A view as the span the tensor-parallel mappings take.
  template <class T>
  static std::span<T> span_of(Vec<T> x) {
    return {x.data(), x.extent(0)};
  }
  void need_block(int l) {
    if (store_ != nullptr) store_->need_block(layout_.first_layer() + l);
  }

  ExecSpace space_;
  TensorParallelGroup tp_;  // inactive without a group or with one of one rank
  CopyToRegion copy_to_;
  ReduceFromRegion reduce_from_;
  VocabParallelStatistics vocab_statistics_;
  ParameterStore<Real>* store_;
  ParameterLayout layout_;
  int batch_;
  Recompute recompute_;
  std::pair<int, int> resident_{-1, -1};  // (slot, block) whose activations the shared set holds
  Buffer<Real> weights_;
  Buffer<Real> grads_;
  Buffer<Real> activation_buffer_;
  Buffer<Real> scratch_buffer_;
  ParameterTensors<Real> params_;
  ParameterTensors<Real> dparams_;
  std::vector<ActivationTensors<Real>> slots_;
  BackwardScratch<Real> scratch_;
};

extern template class Gpt2<float>;
extern template class Gpt2<double>;
extern template class Gpt2<bf16>;
extern template class Gpt2<fp16>;

}  // namespace meshtrain

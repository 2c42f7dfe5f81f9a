// One pipeline stage of a decoder-only transformer, for any family (share/docs/design.md, Model
// families): embedding → blocks → final norm and output head → loss, and backward in mirror order,
// on one rank or as one rank of a tensor-parallel group (Megatron). What every family does alike is
// here: the members, the vocabulary-parallel embedding and output head, the loss, the backward
// sweep, recomputation, the stage's input and output buffers, binding the parameters and carving
// the activations. A family (model/families/gpt2.hpp, llama.hpp) is a plain type that supplies the rest:
//
//   Dims                          its local sizes (dims(model, batch, layout, ep))
//   list_tensors                  its tensors, in flat-buffer order, with their TableRole
//   Weights<Real>                 named views of its tensors: embed, positions (may be empty),
//                                 blocks, its final norm's, output (embed again when tied) — bind()
//   Block<Real>                   what a block keeps for backward — carve_block(); Block::residual3
//                                 is the block's output
//   norm_keeps_mean               whether its final norm keeps the rows' mean (FinalNorm)
//   Scratch<Real>                 backward's scratch, with dresidual, dln, column_partials and
//                                 token_order among its fields — carve_scratch()
//   State<Real>                   what else it holds (llama: rotary table, MoE routing; NoState),
//                                 made from (layout, dims, ep group, slots, router statistics)
//   block_forward, block_backward, recompute_attention, final_norm_forward, final_norm_backward:
//                                 its listings, one kernel call per line, over the DecoderParts
//
// The tensor-parallel collectives are the mappings of parallel/tensor_parallel_mappings.hpp, each
// called at its two ends: copy-to-region before a column-parallel product (its backward sums the
// input's gradient), reduce-from-region after a row-parallel product and the embedding (its
// forward sums). All buffers are allocated in the constructor; forward and backward allocate nothing.
//
// Context parallelism (ModelConfig::context_parallel, a cp group): each rank holds T = seq_len / cp positions of
// every sequence, two load-balanced chunks (ContextChunks), and its attention runs around the group's ring
// (model/impl/context_ring.hpp); positions are global, everything else works on the rank's rows as they are.
//
// Size letters: B micro-batch, T context (this rank's positions), C channels, V vocab, N = B·T; Vl this rank's
// vocabulary rows; Nl this rank's rows of the residual stream: N, or under sequence parallelism (ModelConfig::
// sequence_parallel) its block of N / tp rows, between the regions (enter_region, leave_region).
#pragma once

#include "kernels/gemm_types.hpp"
#include "model/impl/carver.hpp"
#include "model/impl/context_ring.hpp"
#include "model/impl/deferred_weight_gradients.hpp"
#include "model/impl/lora_parts.hpp"
#include "model/impl/span_of.hpp"
#include "model/language_model.hpp"
#include "model/parameter_store.hpp"
#include "model/parameters.hpp"
#include "model/router_statistics.hpp"
#include "parallel/comm.hpp"
#include "parallel/tensor_parallel_mappings.hpp"

#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

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
//              (all but the MLP's output product, whose output backward does not read; with tensor
//              parallelism that includes the attention's sum over the group).
// Backward skips the recomputation of the block whose activations are still in the shared set
// (the last block right after its forward).
// (Recompute itself is declared with train.recompute's names in core/config.hpp.)

// A family without state of its own beyond the stage's.
struct NoState {
  template <class... Args>
  explicit NoState(const Args&...) {}
};

// What the final norm keeps for backward: its output, the head's input, and per-row statistics
// (LayerNorm's mean and rstd; RMSNorm's rstd alone, Family::norm_keeps_mean false).
template <class Real>
struct FinalNorm {
  Vec<Real> out;            // (N, C)
  Vec<accum_t<Real>> mean;  // (Nl) this rank's rows: N, or N / tp under sequence parallelism
  Vec<accum_t<Real>> rstd;  // (Nl)
};

// One micro-batch's activations: the stage's input, the blocks', the row-parallel products' output
// and, on the last stage, the final norm's and the head's.
template <class Real, class Family>
struct SlotActivations {
  Vec<Real> encoded;  // (Nl, C)  the embedding's output, or the previous stage's (stage_input)
  std::vector<typename Family::template Block<Real>> blocks;
  Vec<Real> proj;               // (N, C)   row-parallel products before the residual add
  FinalNorm<Real> norm;         // its `out` (N, C) is the head's input
  Vec<Real> logits;             // (N, Vl); after a training forward it holds dlogits
  Vec<accum_t<Real>> losses;    // (N)
  Vec<accum_t<Real>> row_max;   // (N)      vocabulary-parallel cross-entropy: row maxima
  Vec<accum_t<Real>> partials;  // (2N)     … and Σ exp, target logit
};

// What the stage holds and a family's listings compute with (they take it as `m`).
template <class Real, class Family>
struct DecoderParts {
  using Accum = accum_t<Real>;
  using Weights = typename Family::template Weights<Real>;
  using Scratch = typename Family::template Scratch<Real>;

  ExecSpace space;
  TensorParallelGroup tp;  // inactive without a group or with one of one rank
  CopyToRegion copy_to;
  ReduceFromRegion reduce_from;
  GatherToRegion gather_to;        // sequence parallelism's ends of the same regions
  ScatterFromRegion scatter_from;  // (Dims::Nl < N; enter_region and leave_region below)
  VocabParallelStatistics vocab_statistics;
  ParameterStore<Real>* store;
  ParameterLayout layout;  // the model's tensors (under LoRA the frozen base's)
  typename Family::Dims dims;
  int batch;
  Recompute recompute;
  Buffer<Real> weights;
  Buffer<Real> grads;
  Buffer<Real> activation_buffer;
  Buffer<Real> scratch_buffer;
  Weights params;
  Weights dparams;
  std::vector<SlotActivations<Real, Family>> slots;
  Scratch scratch;
  // Sequence parallelism only (empty otherwise): this rank's rows (Nl, C) of a norm's output before its
  // gather (forward) or of its input's gradient after the scatter (backward); of a row-parallel product's
  // sum after the scatter (forward); the norms' weight gradients of one backward pass, each rank's from
  // its rows, before their sum over the group (add_norm_grads).
  Vec<Real> norm_rows;
  Vec<Real> proj_rows;
  Vec<Real> norm_grads;
  // MoE blocks (the family's State lists them): which blocks and the passes counted, and their sums in
  // device memory (per MoE block: Σ aux, Σ z, Σ routed and Σ kept per expert over the passes,
  // kernels/moe_router.hpp), read into the statistics when asked.
  RouterStatistics router_statistics;
  Buffer<double> router_sums;
  // LanguageModel::aux_weight() when backward started (MoE blocks' auxiliary losses).
  Accum aux_weight = Accum(1);
  // Per slot: the documents of its sequences (LanguageModel::set_documents; none by default), the whole
  // sequences' under context parallelism.
  std::vector<AttentionSegments> documents;
  // Context parallelism: where this rank's rows sit in each sequence (default: they are the sequence), and
  // the ring its fused attention runs around (none without a cp group of two or more ranks).
  ContextChunks chunks;
  std::optional<ContextRing<Real>> ring;
  Comm* cp = nullptr;    // the context-parallel group (null without one): the ring's, and the MoE routers' counts
  LoraParts<Real> lora;  // model.lora's adapters (inactive without)
  // Where the listings' weight gradients go: run at once, or queued while a backward runs deferred
  // (stage_backward_input; the deferrable kernels of model/impl/deferrable_backward.hpp).
  DeferredWeightGradients<Real> later;
  typename Family::template State<Real> state;  // constructed last, from the parts above

  // make_language_model's arguments (model/language_model.hpp).
  DecoderParts(const ExecSpace& exec, const ModelConfig& config, int batch_size, Comm* tp_comm, StagePlace place,
               ActivationSlots slot_count, Recompute mode, ParameterStore<Real>* parameter_store, Comm* ep_comm,
               Comm* cp_comm);

  const ModelConfig& model() const { return layout.model(); }
  bool sequence_parallel() const { return dims.Nl != dims.N; }

  // Enters a tensor-parallel region with a norm's output in `rows`: under sequence parallelism this
  // rank's Nl rows, gathered into `whole` (N rows); else rows is whole, handed to every rank as it is.
  void enter_region(Vec<Real> rows, Vec<Real> whole) const {
    if (sequence_parallel()) return gather_to.forward<Real>(span_of(rows), span_of(whole));
    copy_to.forward(span_of(whole));
  }
  // Its backward: this rank's part of the whole's gradient, `dwhole`, summed over the group — this rank's
  // block of the sum into `drows` under sequence parallelism, else all of it in place. Returns the rows'.
  Vec<Real> enter_region_backward(Vec<Real> dwhole, Vec<Real> drows) const {
    if (!sequence_parallel()) {
      copy_to.backward(span_of(dwhole));
      return dwhole;
    }
    gather_to.backward<Real>(span_of(dwhole), span_of(drows));
    return drows;
  }
  // Leaves a region with this rank's partial sums of every row in `partial` (N rows): their sum, this
  // rank's block of it into `rows` under sequence parallelism, else all of it in place. Returns the sum.
  Vec<Real> leave_region(Vec<Real> partial, Vec<Real> rows) const {
    if (!sequence_parallel()) {
      reduce_from.forward(span_of(partial));
      return partial;
    }
    scatter_from.forward<Real>(span_of(partial), span_of(rows));
    return rows;
  }
  // Its backward: the sum's gradient `drows` reaches every partial as it is — gathered into `dwhole`
  // under sequence parallelism. Returns the partials' gradient.
  Vec<Real> leave_region_backward(Vec<Real> drows, Vec<Real> dwhole) const {
    if (!sequence_parallel()) {
      reduce_from.backward(span_of(drows));
      return drows;
    }
    scatter_from.backward<Real>(span_of(drows), span_of(dwhole));
    return dwhole;
  }
  // The final norm's output (its rows: the head's input, or this rank's to gather into it) and the
  // gradient of those rows in backward (the scratch's dln, or this rank's block of it).
  Vec<Real> final_norm_rows(const FinalNorm<Real>& f) const { return sequence_parallel() ? norm_rows : f.out; }
  Vec<Real> final_norm_gradient() const { return sequence_parallel() ? norm_rows : scratch.dln; }
  // Sequence parallelism: the weight gradient of norm parameter i (C elements) of one backward pass, on
  // this rank from its rows: zeroed by clear_norm_grads, then summed over the group and added to the
  // parameters' gradients `into` (parameter i to into[i]) by add_norm_grads.
  Vec<Real> norm_grad(int i) const { return slice(norm_grads, std::size_t(i) * dims.C, dims.C); }
  void clear_norm_grads() const;
  void add_norm_grads(std::initializer_list<Vec<Real>> into) const;
  // The layout whose tensors have gradients: the adapters' under LoRA, else the model's.
  const ParameterLayout& trainable() const { return lora.active() ? *lora.layout : layout; }
  // The fused attention of this rank's query heads in qkv (NH query, KVH kv heads of hs channels; rows as
  // the fused kernel's): out and lse over the whole sequence of the slot's documents, on this rank or around
  // the cp ring. Its backward: dqkv from dout and the forward's out and lse.
  void fused_attention(int slot, Vec<Real> out, Vec<Accum> lse, CVec<Real> qkv, int NH, int KVH, int hs,
                       Vec<Accum> workspace);
  void fused_attention_backward(int slot, Vec<Real> dqkv, CVec<Real> dout, CVec<Real> qkv, CVec<Real> out,
                                CVec<Accum> lse, int NH, int KVH, int hs, Vec<Accum> workspace);
  // The input of block l of `slot`: the previous block's output, or the stage's input.
  CVec<Real> block_input(int slot, int l) const {
    const auto& a = slots[std::size_t(slot)];
    return l == 0 ? CVec<Real>(a.encoded) : CVec<Real>(a.blocks[std::size_t(l - 1)].residual3);
  }
};

// Declares, inside a family's struct and after its types, the functions every family defines; the
// stage calls them. `m` is the stage's parts; x a block's (or the final norm's) input.
#define MESHTRAIN_DECODER_FAMILY(Family)                                                                         \
  template <class Real>                                                                                          \
  using Parts = DecoderParts<Real, Family>;                                                                      \
  static Dims dims(const ModelConfig& m, int batch, const ParameterLayout& layout, int ep);                      \
  /* Every GEMM shape one rank runs, for the 16-bit products' workspace (model/gemm_workspace.hpp). */           \
  static std::vector<GemmShape> gemm_products(const ModelConfig& m, int batch, int tp);                          \
  /* The tensors of layout's stage, in flat-buffer order (ParameterLayout's constructor calls it). */            \
  static void list_tensors(ParameterLayout& layout);                                                             \
  template <class Real>                                                                                          \
  static Weights<Real> bind(const TensorViews<Real>& views);                                                     \
  /* The fields `take` names from `c`, the others views of `other` (l: the block; -1: the shared set). */        \
  template <class Real>                                                                                          \
  static Block<Real> carve_block(carving::Carver<Real>& c, const Dims& d, carving::BlockFields take, int l,      \
                                 const Block<Real>& other = {});                                                 \
  /* beside_mlp: views carved over the elements of the MLP's hidden gradients, which live only within a */       \
  /* block's MLP backward (the context ring's buffers: attention's). */                                          \
  template <class Real>                                                                                          \
  static Scratch<Real> carve_scratch(carving::Carver<Real>& c, const Dims& d,                                    \
                                     const carving::CarveFn<Real>& beside_mlp);                                  \
  /* Block l of `slot` into s, its row-parallel products into proj; without to_output it stops once s */         \
  /* holds what backward reads (recomputation). */                                                               \
  template <class Real>                                                                                          \
  static void block_forward(Parts<Real>& m, int slot, int l, CVec<Real> x, const Block<Real>& s, Vec<Real> proj, \
                            bool to_output);                                                                     \
  /* What one deferred backward of block l holds (DeferredWeightGradients::hold) under `recompute`. */           \
  static HeldElements held_per_block(const Dims& d, int l, Recompute recompute);                                 \
  /* Selective recomputation: the attention probabilities from the kept qkv. */                                  \
  template <class Real>                                                                                          \
  static void recompute_attention(Parts<Real>& m, const Block<Real>& s);                                         \
  /* The scratch's dresidual holds dL/d(block l's output) and becomes dL/d x. */                                 \
  template <class Real>                                                                                          \
  static void block_backward(Parts<Real>& m, int slot, int l, CVec<Real> x);                                     \
  template <class Real>                                                                                          \
  static void final_norm_forward(Parts<Real>& m, const FinalNorm<Real>& f, CVec<Real> x);                        \
  /* dL/d x into the scratch's dresidual (zeroed) from dL/d f.out in its dln. */                                 \
  template <class Real>                                                                                          \
  static void final_norm_backward(Parts<Real>& m, const FinalNorm<Real>& f, CVec<Real> x)

// The stage of a family for the four element types: declared in its header, defined in its source
// (which includes model/impl/decoder_stage_impl.hpp).
#define MESHTRAIN_EXTERN_DECODER_STAGE(Family)        \
  extern template class DecoderStage<float, Family>;  \
  extern template class DecoderStage<double, Family>; \
  extern template class DecoderStage<bf16, Family>;   \
  extern template class DecoderStage<fp16, Family>

template <class Real, class Family>
class DecoderStage final : public LanguageModel<Real> {
 public:
  using typename LanguageModel<Real>::Accum;
  using typename LanguageModel<Real>::ReadyFrom;
  using Parts = DecoderParts<Real, Family>;

  // The arguments of make_language_model (model/language_model.hpp).
  DecoderStage(const ExecSpace& space, const ModelConfig& model, int batch, Comm* tp = nullptr, StagePlace place = {},
               ActivationSlots slots = {}, Recompute recompute = Recompute::none, ParameterStore<Real>* store = nullptr,
               Comm* ep = nullptr, Comm* cp = nullptr);

  const ParameterLayout& layout() const override { return m_.layout; }
  const ModelConfig& model() const { return m_.model(); }
  int batch() const override { return m_.batch; }
  ActivationSizes activation_elements() const override {
    const auto lora =
        lora_activation_elements(m_.model(), m_.batch, m_.layout.first_layer(), m_.layout.stage_layers(),
                                 int(m_.slots.size()), m_.layout.place().last(), m_.layout.tp(), m_.layout.ep());
    return {m_.activation_buffer.extent(0) + m_.later.allocated_elements() + lora.kept,
            m_.scratch_buffer.extent(0) + lora.scratch};
  }
  const ParameterLayout* adapter_layout() const override { return m_.lora.active() ? &*m_.lora.layout : nullptr; }
  Vec<Real> adapter_weights() const override { return slice(m_.lora.weights, 0, m_.lora.weights.extent(0)); }
  Vec<Real> adapter_grads() const override { return slice(m_.lora.grads, 0, m_.lora.grads.extent(0)); }
  Vec<Real> weights() const override { return slice(m_.weights, 0, m_.weights.extent(0)); }
  Vec<Real> grads() const override { return slice(m_.grads, 0, m_.grads.extent(0)); }
  void zero_grads() override;

  CVec<Real> forward_logits(CVec<int> inputs) override;
  void set_documents(int slot, const AttentionSegments& documents) override;
  void set_micro_batch_draw(int slot, std::optional<MicroBatchDraw> draw) override {
    m_.lora.draws.at(std::size_t(slot)) = draw;
  }
  void stage_forward(int slot, CVec<int> inputs) override;
  void stage_loss(int slot, CVec<int> targets, Accum grad_scale, const LossSum& sum) override;
  void stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from = {}) override;
  void stage_backward_input(int slot, CVec<int> inputs) override;
  void stage_backward_weight(int slot, CVec<int> inputs, const ReadyFrom& ready_from = {}) override;
  Vec<Real> stage_input(int slot) const override { return m_.slots[std::size_t(slot)].encoded; }
  CVec<Real> stage_output(int slot) const override { return m_.block_input(slot, m_.layout.stage_layers()); }
  Vec<Real> output_gradient() const override { return m_.scratch.dresidual; }
  CVec<Real> input_gradient() const override { return m_.scratch.dresidual; }
  RouterStatistics router_statistics() const override;
  void clear_router_statistics() override;

 private:
  // Makes the shared set hold what block l's backward reads for `slot` (see Recompute).
  void recompute_block(int slot, int l);
  // The output head's backward: leaves dL/d(stage output) in the scratch's dresidual.
  void head_backward(int slot);
  void need_block(int l) {
    if (m_.store != nullptr) m_.store->need_block(m_.layout.first_layer() + l);
  }

  Parts m_;
  std::pair<int, int> resident_{-1, -1};  // (slot, block) whose activations the shared set holds
  CVec<int> tokens_;  // the micro-batch's, for the embedding's weight gradient (run now or deferred)
};

// What DecoderStage<Real, Family> allocates for these arguments (the same carving code, without
// allocating), in elements of Real.
template <class Real, class Family>
ActivationSizes decoder_activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place,
                                            ActivationSlots slots, Recompute recompute, int ep = 1);

}  // namespace meshtrain

// What training, the pipeline executor and `sample` ask of a model (share/docs/usage.md, Model
// families): one micro-batch shape on one rank, or one rank of a tensor-parallel group, over the
// flat buffers of its ParameterLayout, for one pipeline stage. DecoderStage (model/decoder_stage.hpp)
// implements it for every family; make_language_model() builds the one model.arch names.
//
// Size letters: B micro-batch, T context, C channels, N = B·T.
#pragma once

#include "kernels/attention_segments.hpp"
#include "kernels/loss_sum.hpp"
#include "model/parameter_store.hpp"
#include "model/parameters.hpp"
#include "model/router_statistics.hpp"
#include "parallel/comm.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace meshtrain {

// Elements of one rank's activation buffers: `kept`, the activations of all pipeline slots, and
// `scratch`, backward's scratch plus the block set shared under recomputation (once per rank).
struct ActivationSizes {
  std::size_t kept = 0;
  std::size_t scratch = 0;
  std::size_t total() const { return kept + scratch; }
};

// How many micro-batches a stage keeps activations for at once, and how many of those may wait for their weight
// gradients after their input gradient (zero-bubble schedules: LanguageModel::stage_backward_input), each holding
// its backward's output gradients until then. From an int: that many kept, none waiting.
struct ActivationSlots {
  ActivationSlots(int kept_slots = 1, int held_slots = 0)
      : kept(kept_slots), held(held_slots) {}  // NOLINT: an int is the common case
  int kept;
  int held;
};

// One micro-batch: N = B·T input tokens and as many targets (kNoLossTarget where a target carries no
// loss: prompts and padding of fine-tuning data), the documents packed into each sequence (none:
// one document per sequence), and where it lies in its step (the step, the step's index of its first sample).
struct MicroBatch {
  CVec<int> inputs;
  CVec<int> targets;
  AttentionSegments documents;
  std::int64_t step = 0;
  std::uint64_t first_sample = 0;
};

// The weights of a step's terms in its objective (share/docs/usage.md, Packing and the fine-tuning
// loss), before the fp16 loss scale: each loss-carrying target's cross-entropy (1/(B·T·accum·dp) on
// plain data, 1 / the step's loss-carrying targets on fine-tuning data), and each micro-batch's MoE
// auxiliary losses (1/(accum·dp) on both).
// Where a training micro-batch lies in the run: the run's seed (train.seed), the step, and the step's index of
// its first sample (train/batch_loader.hpp: (first + k)·B for micro-batch k of data-parallel rank d, first = d·accum).
struct MicroBatchDraw {
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::uint64_t first_sample = 0;
};

struct LossWeights {
  double per_target = 0;
  double per_micro_batch = 0;
};

template <class Real>
class LanguageModel {
 public:
  using Accum = accum_t<Real>;  // loss and per-row statistics: float for bf16/fp16, else Real
  // Backward's progress: every gradient at flat offset ≥ offset is final for this pass, so the
  // data-parallel reduction of that range can start (see state/gradient_reduction.hpp).
  using ReadyFrom = std::function<void(std::size_t offset)>;

  virtual ~LanguageModel() = default;

  virtual const ParameterLayout& layout() const = 0;
  const ModelConfig& model() const { return layout().model(); }
  virtual int batch() const = 0;
  // The flat buffers, when the model owns them (no ParameterStore); empty otherwise.
  virtual Vec<Real> weights() const = 0;
  virtual Vec<Real> grads() const = 0;
  virtual ActivationSizes activation_elements() const = 0;
  // LoRA (model.lora): the adapters' layout, the only tensors with gradients (the model's are frozen), and
  // their flat buffers when the model owns them; null and empty without LoRA.
  virtual const ParameterLayout* adapter_layout() const { return nullptr; }
  virtual Vec<Real> adapter_weights() const { return {}; }
  virtual Vec<Real> adapter_grads() const { return {}; }
  std::size_t activation_bytes() const { return activation_elements().total() * sizeof(Real); }
  virtual void zero_grads() = 0;

  // The documents of the sequences the coming stage_forward and stage_backward of `slot` run: attention
  // stays within each, and positions (rotary, gpt2's table) restart at each (kernels/attention_segments.hpp).
  // The offsets are read when those run, so they must still hold then. std::invalid_argument under
  // materialized attention, which has no document mask (model.attention = fused has).
  virtual void set_documents(int slot, const AttentionSegments& documents) = 0;
  // Training: which micro-batch of the run the coming stage_forward and stage_backward of `slot` run, for the
  // draws keyed by it (lora.dropout's mask, kernels/lora_dropout.hpp); held until set again, so that backward
  // and a recomputation draw what forward drew. None (the default, and what evaluation sets): no dropout.
  virtual void set_micro_batch_draw(int slot, std::optional<MicroBatchDraw> draw) = 0;

  // One pipeline stage's part, for micro-batch activations kept in `slot`. A stage that is not
  // first reads its input from stage_input(slot), where the previous stage's activation is
  // received; one that is not last starts backward from output_gradient(), where the next stage's
  // gradient is received, and leaves the gradient of its input in input_gradient().
  virtual void stage_forward(int slot, CVec<int> inputs) = 0;
  // Last stage: adds the mean cross-entropy over the B·T targets to `sum` (in device memory, no read
  // to the host); leaves dloss/dlogits · grad_scale for backward (grad_scale = 1/(B·T) for one
  // micro-batch, 1/(B·T·accum) to accumulate).
  virtual void stage_loss(int slot, CVec<int> targets, Accum grad_scale, const LossSum& sum) = 0;
  // Accumulates the micro-batch's gradients (call stage_forward and, on the last stage, stage_loss first).
  virtual void stage_backward(int slot, CVec<int> inputs, const ReadyFrom& ready_from = {}) = 0;
  // The same in two parts (zero-bubble schedules; make_language_model's slots.held of them at once): the input
  // gradient, left in input_gradient() as stage_backward leaves it, then — any time before the slot's next
  // stage_forward — the weight gradients, with backward's progress reports. inputs: the micro-batch's tokens
  // again, and set_documents must name its documents again.
  virtual void stage_backward_input(int slot, CVec<int> inputs) = 0;
  virtual void stage_backward_weight(int slot, CVec<int> inputs, const ReadyFrom& ready_from = {}) = 0;
  virtual Vec<Real> stage_input(int slot) const = 0;    // (N, C)
  virtual CVec<Real> stage_output(int slot) const = 0;  // (N, C)
  virtual Vec<Real> output_gradient() const = 0;        // (N, C)
  virtual CVec<Real> input_gradient() const = 0;        // (N, C)
  // Inference: logits for `inputs`, no loss: N rows of layout().padded_vocab() / tp columns (the padded
  // vocabulary's, train.vocab_multiple), of which the first V are the tokens'.
  virtual CVec<Real> forward_logits(CVec<int> inputs) = 0;

  // Mixture of experts: the weight each coming micro-batch's auxiliary losses carry in the step's
  // objective (times the fp16 loss scale), the weight of a micro-batch's mean cross-entropy
  // (share/docs/usage.md, Packing and the fine-tuning loss). Every stage's MoE blocks need it, also
  // those of stages without the loss.
  void set_aux_weight(Accum per_micro_batch) { aux_weight_ = per_micro_batch; }
  Accum aux_weight() const { return aux_weight_; }
  // What the stage's routers saw since the last clear (empty without MoE blocks).
  virtual RouterStatistics router_statistics() const { return {}; }
  virtual void clear_router_statistics() {}

  // The whole model on one stage: forward and loss (added to `sum`), and backward. The auxiliary
  // losses weigh as the micro-batch's mean: grad_scale per target, N targets.
  void forward(CVec<int> inputs, CVec<int> targets, Accum grad_scale, const LossSum& sum) {
    set_aux_weight(grad_scale * Accum(std::size_t(batch()) * std::size_t(model().seq_len)));
    stage_forward(0, inputs);
    stage_loss(0, targets, grad_scale, sum);
  }
  // Tests and tools: the same, returning the micro-batch's mean loss, read to the host (it allocates
  // and waits for the default execution space instance, which every model here runs on; the
  // training step sums on the device instead).
  Accum forward(CVec<int> inputs, CVec<int> targets, Accum grad_scale) {
    const ExecSpace space;
    const LossSum sum;
    sum.clear(space);
    forward(inputs, targets, grad_scale, sum);
    return Accum(sum.read(space));
  }
  void backward(CVec<int> inputs, const ReadyFrom& ready_from = {}) { stage_backward(0, inputs, ready_from); }

 private:
  Accum aux_weight_ = Accum(1);
};

// The family model.arch names, with the arguments of DecoderStage's constructor: `tp` the tensor-parallel
// group (none: the whole model on this rank); `place` the pipeline stage; `slots` how many
// micro-batches' activations it keeps at once (and how many of them wait for their weight gradients); `recompute` which
// of them backward recomputes; `store` where weights and gradients live (ZeRO; none: the model owns flat buffers); `ep`
// the expert-parallel group (llama's MoE blocks; none: every expert on this rank); `cp` the context-parallel group, of
// model.context_parallel ranks (none: every position of a sequence on this rank).
template <class Real>
std::unique_ptr<LanguageModel<Real>> make_language_model(const ExecSpace& space, const ModelConfig& model, int batch,
                                                         Comm* tp = nullptr, StagePlace place = {},
                                                         ActivationSlots slots = {},
                                                         Recompute recompute = Recompute::none,
                                                         ParameterStore<Real>* store = nullptr, Comm* ep = nullptr,
                                                         Comm* cp = nullptr);

// What make_language_model's model allocates for these arguments, in elements of Real.
template <class Real>
ActivationSizes activation_elements(const ModelConfig& model, int batch, int tp, StagePlace place,
                                    ActivationSlots slots, Recompute recompute, int ep = 1);

// The float workspace the host's 16-bit GEMMs of that family's rank need (model/gemm_workspace.hpp).
template <class Real>
std::size_t model_gemm_workspace_bytes(const ModelConfig& model, int batch, int tp = 1);

}  // namespace meshtrain

// The pipeline schedule executor.
#include "train/pipeline_executor.hpp"

#include <chrono>
#include <stdexcept>

namespace meshtrain {

template <class Real>
PipelineExecutor<Real>::PipelineExecutor(std::vector<Action> actions, LanguageModel<Real>& model, BatchLoader& loader,
                                         Comm& pipeline, typename LanguageModel<Real>::ReadyFrom ready_from,
                                         std::uint64_t seed)
    : actions_(std::move(actions)),
      model_(model),
      loader_(loader),
      pipeline_(pipeline),
      ready_from_(std::move(ready_from)),
      seed_(seed) {
  // One model chunk a stage: interleaved lists (Action::chunk) are not run here.
  for (const Action& a : actions_) {
    if (a.chunk != 0) throw std::logic_error("the pipeline executor runs one chunk a stage, not " + to_string(a));
  }
}

template <class Real>
void PipelineExecutor<Real>::reload(std::int64_t step, int micro) {
  // The first stage's embedding backward reads the tokens again, every stage the documents (the buffers of the
  // forward's load have been refilled since).
  loader_.load(step, micro);
  model_.set_documents(slot_of_[micro], loader_.documents());
  model_.set_micro_batch_draw(slot_of_[micro], MicroBatchDraw{seed_, step, loader_.first_sample()});
}

template <class Real>
int PipelineExecutor<Real>::take_slot(int micro) {
  if (slot_of_[micro] >= 0) return slot_of_[micro];
  if (free_slots_.empty()) throw std::logic_error("pipeline schedule keeps more micro-batches alive than its slots");
  slot_of_[micro] = free_slots_.back();
  free_slots_.pop_back();
  return slot_of_[micro];
}

template <class Real>
void PipelineExecutor<Real>::run(std::int64_t step, const LossWeights& weights, const LossSum& sum) {
  const int micros = [&] {
    int most = 0;
    for (const Action& a : actions_) most = std::max(most, a.micro + 1);
    return most;
  }();
  const int slots = pipeline_slots(actions_).kept;
  slot_of_.assign(micros, -1);
  free_slots_.clear();
  for (int k = slots - 1; k >= 0; --k) free_slots_.push_back(k);

  const StagePlace& place = model_.layout().place();
  const std::size_t activation = activation_elements();
  const int previous = place.stage - 1, next = place.stage + 1;
  model_.set_aux_weight(accum_t<Real>(weights.per_micro_batch));  // every stage's MoE blocks weigh their losses by it
  const accum_t<Real> grad_scale(weights.per_target);
  // Sends are posted and left in flight while the compute goes on (on a device the compute stream
  // does not wait for them); each is waited where its buffer may next be written: an activation's
  // before its micro-batch's backward (from there on the slot's buffers may be recomputed, and are
  // then handed to the next micro-batch, whose receive may land in them), the gradient's
  // (the scratch's dresidual, which the next gradient is received into and backward and the last
  // stage's loss write) before the next action that writes it. The stream stand-in fails a wait
  // placed later than the write (parallel/stream_standin.hpp).
  activation_sends_.clear();
  activation_sends_.resize(std::size_t(slots));
  Request gradient_send;
  for (const Action& a : actions_) {
    const bool writes_gradient = a.kind == ActionKind::recv_gradient || a.kind == ActionKind::backward ||
                                 a.kind == ActionKind::backward_input ||
                                 (a.kind == ActionKind::forward && place.last());
    if (writes_gradient) gradient_send.wait();
    const auto started = std::chrono::steady_clock::now();
    switch (a.kind) {
      case ActionKind::recv_activation:
        pipeline_.recv(model_.stage_input(take_slot(a.micro)).data(), activation, previous, a.micro);
        break;
      case ActionKind::forward: {
        const int slot = take_slot(a.micro);
        loader_.load(step, a.micro);
        model_.set_documents(slot, loader_.documents());
        model_.set_micro_batch_draw(slot, MicroBatchDraw{seed_, step, loader_.first_sample()});
        model_.stage_forward(slot, loader_.inputs());
        if (place.last()) model_.stage_loss(slot, loader_.targets(), grad_scale, sum);
        break;
      }
      case ActionKind::send_activation: {
        const int slot = slot_of_[a.micro];
        activation_sends_[std::size_t(slot)] =
            pipeline_.isend(model_.stage_output(slot).data(), activation, next, a.micro);
        break;
      }
      case ActionKind::recv_gradient: pipeline_.recv(model_.output_gradient().data(), activation, next, a.micro); break;
      case ActionKind::backward:
        activation_sends_[std::size_t(slot_of_[a.micro])].wait();
        reload(step, a.micro);
        model_.stage_backward(slot_of_[a.micro], loader_.inputs(), ready_from_);
        free_slots_.push_back(slot_of_[a.micro]);
        break;
      case ActionKind::backward_input:
        activation_sends_[std::size_t(slot_of_[a.micro])].wait();
        reload(step, a.micro);
        model_.stage_backward_input(slot_of_[a.micro], loader_.inputs());
        break;
      case ActionKind::backward_weight:
        // The slot's activations (what the weight gradients read) live until now.
        reload(step, a.micro);
        model_.stage_backward_weight(slot_of_[a.micro], loader_.inputs(), ready_from_);
        free_slots_.push_back(slot_of_[a.micro]);
        break;
      case ActionKind::send_gradient:
        gradient_send = pipeline_.isend(model_.input_gradient().data(), activation, previous, a.micro);
        break;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (a.kind == ActionKind::forward) compute_seconds_.forward += seconds;
    if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) {
      compute_seconds_.backward_input += seconds;
    }
    if (a.kind == ActionKind::backward_weight) compute_seconds_.backward_weight += seconds;
  }
  // The step's last sends: ordered before the optimizer's update and the next step's compute.
  gradient_send.wait();
  for (Request& send : activation_sends_) send.wait();
}

template <class Real>
void PipelineExecutor<Real>::evaluate(BatchLoader& loader, int micro_batches, const LossSum& sum) {
  const StagePlace& place = model_.layout().place();
  const std::size_t activation = activation_elements();
  ExecSpace space;
  for (int micro = 0; micro < micro_batches; ++micro) {
    if (!place.first()) pipeline_.recv(model_.stage_input(0).data(), activation, place.stage - 1, micro);
    loader.load(0, micro);
    model_.set_documents(0, loader.documents());
    model_.set_micro_batch_draw(0, std::nullopt);  // evaluation: no dropout
    model_.stage_forward(0, loader.inputs());
    if (place.last()) {
      model_.stage_loss(0, loader.targets(), accum_t<Real>(0), sum);  // its gradient of the logits is not used
    } else {
      pipeline_.send(model_.stage_output(0).data(), activation, place.stage + 1, micro);
    }
  }
  host_fence(space, "pipeline validation: the schedule done");
}

template class PipelineExecutor<float>;
template class PipelineExecutor<bf16>;
template class PipelineExecutor<fp16>;

}  // namespace meshtrain

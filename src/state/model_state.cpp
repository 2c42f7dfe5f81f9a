// A rank's model states and the model computing on them.
#include "state/model_state.hpp"

#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "kernels/fused_attention_backward_choice.hpp"
#include "model/gemm_workspace.hpp"
#include "state/frozen_base.hpp"
#include "state/working_copy.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace meshtrain {
namespace {

int group_size(const Comm* c) { return c == nullptr ? 1 : c->size(); }
int group_rank(const Comm* c) { return c == nullptr ? 0 : c->rank(); }

// The layout of this rank's piece of the trainable tensors (the model's, or under LoRA its adapters):
// its tensor-parallel piece, its stage, its experts; under ZeRO its units are padded to a multiple of dp
// (and so of the expert units' dp / ep). `content`: the model's tensors under LoRA (its frozen base).
ParameterLayout state_layout(const Config& cfg, const StateGroups& g, StagePlace place,
                             std::optional<LayoutContent> content = std::nullopt) {
  const int tp = group_size(g.tp), ep = group_size(g.ep);
  if (ep != cfg.parallel.ep) {
    throw std::logic_error(
        fmt::format("parallel.ep = {} but the expert-parallel group has {} ranks", cfg.parallel.ep, ep));
  }
  return ParameterLayout(cfg.model, tp, tp > 1 ? group_rank(g.tp) : 0, place,
                         ZeroStage{cfg.parallel.zero}.shard_group_size(group_size(g.dp)), ep,
                         ep > 1 ? group_rank(g.ep) : 0,
                         content.value_or(cfg.model.lora.enabled() ? LayoutContent::adapters : LayoutContent::model));
}

// The group the expert units are reduced over: the dp group itself without expert parallelism
// (whatever edp says), so that ep 1 reduces exactly as before.
Comm& expert_data_parallel(const StateGroups& g) {
  if (group_size(g.ep) == 1) return *g.dp;
  if (g.edp == nullptr) throw std::logic_error("expert parallelism needs its expert-data-parallel group");
  return *g.edp;
}

AdamWStep adamw_step(const OptimConfig& o, double lr, double clip, std::int64_t i) {
  return {lr, o.weight_decay, o.beta1, o.beta2, o.eps, i + 1, clip};
}

template <class Real>
class ModelOn final : public Computation {
 public:
  ModelOn(const ExecSpace& space, const Config& cfg, OptimizerState& fp32, const StateGroups& groups, StagePlace place,
          const PipelineParts& pipeline)
      : space_(space),
        copy_(space, fp32),
        frozen_(frozen_base(space, cfg, groups, place, fp32, copy_)),
        model_(make_language_model<Real>(
            space, cfg.model, cfg.train.micro_batch, groups.tp, place,
            pipeline.schedule.empty() ? 1 : pipeline_slots(pipeline.schedule), cfg.train.recompute,
            frozen_ ? &*frozen_ : static_cast<ParameterStore<Real>*>(&copy_), groups.ep, groups.cp)),
        workspace_(model_gemm_workspace_bytes<Real>(cfg.model, cfg.train.micro_batch, group_size(groups.tp))),
        seed_(std::uint64_t(cfg.train.seed)) {
    set_fp32_gemm(cfg.train.tf32 ? Fp32Gemm::tf32 : Fp32Gemm::exact);
    set_fused_attention_backward(cfg.train.deterministic ? FusedAttentionBackward::deterministic
                                                         : FusedAttentionBackward::fastest);
    // The GEMMs of a 16-bit model go through one fp32 workspace: allocated now, counted, never grown.
    if (workspace_ > 0) reserve_gemm_workspace(workspace_);
    if (!pipeline.schedule.empty() && pipeline.loader != nullptr && pipeline.pp != nullptr) {
      executor_.emplace(
          pipeline.schedule, *model_, *pipeline.loader, *pipeline.pp,
          [this](std::size_t offset) { ready_from(offset); }, std::uint64_t(cfg.train.seed));
    }
  }

  void forward(const MicroBatch& batch, const LossWeights& weights, double loss_scale, const LossSum& sum) override {
    model_->set_documents(0, batch.documents);
    model_->set_micro_batch_draw(0, MicroBatchDraw{seed_, batch.step, batch.first_sample});
    model_->set_aux_weight(accum_t<Real>(weights.per_micro_batch * loss_scale));
    model_->stage_forward(0, batch.inputs);
    model_->stage_loss(0, batch.targets, accum_t<Real>(weights.per_target * loss_scale), sum);
  }
  void backward(CVec<int> inputs, double loss_scale) override {
    loss_scale_ = loss_scale;
    model_->backward(inputs, [this](std::size_t offset) { ready_from(offset); });
  }
  void run_pipeline(std::int64_t step, const LossWeights& weights, double loss_scale, const LossSum& sum) override {
    if (!executor_) throw std::logic_error("ModelState::run_pipeline without a pipeline schedule");
    loss_scale_ = loss_scale;
    executor_->run(step, {weights.per_target * loss_scale, weights.per_micro_batch * loss_scale}, sum);
  }
  void evaluate(const MicroBatch& batch, const LossSum& sum) override {
    model_->set_documents(0, batch.documents);
    model_->set_micro_batch_draw(0, std::nullopt);  // evaluation: no dropout
    model_->stage_forward(0, batch.inputs);
    model_->stage_loss(0, batch.targets, accum_t<Real>(0), sum);  // its gradient of the logits is not used
  }
  void evaluate_pipeline(BatchLoader& loader, int micro_batches, const LossSum& sum) override {
    if (!executor_) throw std::logic_error("ModelState::evaluate_pipeline without a pipeline schedule");
    executor_->evaluate(loader, micro_batches, sum);
  }
  void publish() override { copy_.publish(); }
  const ParameterLayout* frozen_layout() const override { return frozen_ ? frozen_->frozen_layout() : nullptr; }
  void load_frozen_base(const std::function<void(const ParameterLayout&, StateSource&)>& read) override {
    if (!frozen_) throw std::logic_error("ModelState::load_frozen_base without LoRA");
    frozen_->load([&](StateSource& weights) { read(*frozen_->frozen_layout(), weights); });
  }
  void poison_next_gradient() override {
    const ParameterLayout& layout = copy_.layout();
    for (const TensorInfo& t : layout.tensors()) {
      if (layout.holds_counted_copy(t)) {
        poisoned_ = &t;
        return;
      }
    }
  }
  RouterStatistics router_statistics() const override { return model_->router_statistics(); }
  void clear_router_statistics() override { model_->clear_router_statistics(); }
  ScheduleCosts take_pipeline_seconds() override {
    return executor_ ? executor_->take_compute_seconds() : ScheduleCosts{};
  }
  MemoryBytes memory() const override {
    MemoryBytes m = copy_.memory();
    if (frozen_) m += frozen_->memory();
    m[MemoryCategory::activations] += std::int64_t(model_->activation_bytes());
    m[MemoryCategory::workspace] += std::int64_t(workspace_);
    return m;
  }

 private:
  // Backward's report that the gradients at offset >= `offset` are final: the poisoned element, if
  // any, turns NaN before the working copy moves them on.
  void ready_from(std::size_t offset) {
    if (poisoned_ != nullptr && offset <= poisoned_->offset) {
      Kokkos::deep_copy(space_, Vec<Real>(copy_.grad(*poisoned_), 1), Real(std::numeric_limits<float>::quiet_NaN()));
      poisoned_ = nullptr;
    }
    copy_.ready_from(offset, loss_scale_);
  }

  // LoRA: the model's frozen tensors beside the adapters' working copy; none without LoRA.
  static std::optional<FrozenBase<Real>> frozen_base(const ExecSpace& space, const Config& cfg,
                                                     const StateGroups& groups, StagePlace place,
                                                     const OptimizerState& fp32, WorkingCopy<Real>& adapters) {
    if (!cfg.model.lora.enabled()) return std::nullopt;
    // The groups and places the adapters' states are sharded over (UnitComms of both groups, as at stage 0).
    const UnitComms comms{groups.dp, &expert_data_parallel(groups)};
    return std::optional<FrozenBase<Real>>(std::in_place, space, state_layout(cfg, groups, place, LayoutContent::model),
                                           adapters, fp32.stage(), comms, comms.places());
  }

  ExecSpace space_;
  WorkingCopy<Real> copy_;
  std::optional<FrozenBase<Real>> frozen_;
  std::unique_ptr<LanguageModel<Real>> model_;
  std::size_t workspace_;
  std::uint64_t seed_;  // train.seed: keys the training micro-batches' draws (lora.dropout's mask)
  std::optional<PipelineExecutor<Real>> executor_;
  double loss_scale_ = 1.0;
  const TensorInfo* poisoned_ = nullptr;  // test-only: the tensor whose first gradient turns NaN
};

std::unique_ptr<Computation> model_in_precision(const ExecSpace& space, const Config& cfg, OptimizerState& fp32,
                                                const StateGroups& groups, StagePlace place,
                                                const PipelineParts& pipeline) {
  if (cfg.train.precision == Precision::bf16)
    return std::make_unique<ModelOn<bf16>>(space, cfg, fp32, groups, place, pipeline);
  if (cfg.train.precision == Precision::fp16)
    return std::make_unique<ModelOn<fp16>>(space, cfg, fp32, groups, place, pipeline);
  return std::make_unique<ModelOn<float>>(space, cfg, fp32, groups, place, pipeline);
}

}  // namespace

ModelState::ModelState(const ExecSpace& space, const Config& cfg, const StateGroups& groups, StagePlace place,
                       const PipelineParts& pipeline, LossTerm term)
    : space_(space),
      groups_(groups),
      optimizer_(space, state_layout(cfg, groups, place), ZeroStage{cfg.parallel.zero}, *groups.dp,
                 expert_data_parallel(groups), cfg.train.precision == Precision::fp32,
                 std::size_t(cfg.parallel.bucket_mb * (1 << 20))),
      compute_(model_in_precision(space, cfg, optimizer_, groups, place, pipeline)),
      fp16_(cfg.train.precision == Precision::fp16),
      scaler_(fp16_, cfg.train.loss_scale, cfg.train.loss_scale_window),
      nonfinite_(cfg.train.nonfinite, cfg.train.nonfinite_skips),
      loss_(term) {}

ModelState::~ModelState() = default;

void ModelState::initialize(std::uint64_t seed) {
  optimizer_.initialize(seed);
  compute_->publish();
}

ModelState::StepSums ModelState::read_step_sums() const {
  const ParameterLayout& layout = optimizer_.layout();
  const Kokkos::View<const double, MemSpace> norm =
      optimizer_.grad_squared_norm_on_device([&](const TensorInfo& t) { return layout.holds_counted_copy(t); });
  using HostScalar = Kokkos::View<double, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  StepSums sums;
  Kokkos::deep_copy(space_, HostScalar(&sums.loss), loss_.on_device());
  Kokkos::deep_copy(space_, HostScalar(&sums.grad_squared_norm), norm);
  host_fence(space_, "step: the loss and the gradient norm read");
  return sums;
}

StepValues ModelState::agreed_values(double loss, double grad_squared_norm) const {
  // One all-reduce for both: Σ g², and the non-finite losses (0 where the loss is finite), whose
  // sum is non-finite wherever any rank's is.
  double sums[2] = {grad_squared_norm, std::isfinite(loss) ? 0.0 : loss};
  const WatchedWait watched(collective_ticket(groups_.world, "allreduce", 2));
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, groups_.world),
                      "the step's values are collective over the world: every rank must take them each step");
  return {sums[1] == 0 ? loss : sums[1], std::sqrt(sums[0])};
}

void ModelState::save_scaler(TrainingProgress& progress) const {
  progress.loss_scale = fp16_ ? scaler_.scale() : 0.0;
  progress.loss_scale_clean_steps = fp16_ ? scaler_.clean_steps() : 0;
}

void ModelState::restore_scaler(const TrainingProgress& progress) {
  if (progress.loss_scale > 0) scaler_.restore(progress.loss_scale, progress.loss_scale_clean_steps);
}

StepOutcome ModelState::update(const OptimConfig& optim, double lr, double clip, std::int64_t i,
                               const StepValues& values) {
  // Every rank judges the same agreed values, so all skip or all update.
  const StepOutcome outcome = nonfinite_.judge(values, scaler_);
  if (outcome != StepOutcome::applied) return outcome;
  // Enqueued, not waited for: the next step's kernels follow it on the stream (and a save's read of
  // the state fences first, state/state_source.cpp).
  optimizer_.update(adamw_step(optim, lr, clip, i));
  compute_->publish();
  return outcome;
}

}  // namespace meshtrain

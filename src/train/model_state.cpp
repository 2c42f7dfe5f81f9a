// A rank's model states and the model computing on them.
#include "train/model_state.hpp"

#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "model/gemm_workspace.hpp"
#include "state/working_copy.hpp"

#include <cmath>

namespace meshtrain {
namespace {

int group_size(const Comm* c) { return c == nullptr ? 1 : c->size(); }
int group_rank(const Comm* c) { return c == nullptr ? 0 : c->rank(); }

// The layout of this rank's piece of the model; under ZeRO its units are padded to a multiple of dp.
ParameterLayout state_layout(const Config& cfg, const StateGroups& g, StagePlace place) {
  const int tp = group_size(g.tp);
  return ParameterLayout(cfg.model, tp, tp > 1 ? group_rank(g.tp) : 0, place,
                         ZeroStage{cfg.parallel.zero}.shard_group_size(group_size(g.dp)));
}

AdamWStep adamw_step(const OptimConfig& o, const TensorInfo& t, double lr, double clip, std::int64_t i) {
  return {lr, t.decays ? o.weight_decay : 0.0, o.beta1, o.beta2, o.eps, i + 1, clip};
}

template <class Real>
class ModelOn final : public Computation {
 public:
  ModelOn(const ExecSpace& space, const Config& cfg, OptimizerState& fp32, Comm* tp, StagePlace place,
          const PipelineParts& pipeline)
      : copy_(space, fp32),
        model_(space, cfg.model, cfg.train.micro_batch, tp, place,
               pipeline.schedule.empty() ? 1 : pipeline_slots(pipeline.schedule), cfg.train.recompute, &copy_),
        workspace_(gpt2_gemm_workspace_bytes<Real>(cfg.model, cfg.train.micro_batch, group_size(tp))) {
    // The GEMMs of a 16-bit model go through one fp32 workspace: allocated now, counted, never grown.
    if (workspace_ > 0) reserve_gemm_workspace(workspace_);
    if (!pipeline.schedule.empty() && pipeline.loader != nullptr && pipeline.pp != nullptr) {
      executor_.emplace(pipeline.schedule, model_, *pipeline.loader, *pipeline.pp,
                        [this](std::size_t offset) { copy_.ready_from(offset, loss_scale_); });
    }
  }

  double forward(CVec<int> inputs, CVec<int> targets, double grad_scale, double loss_scale) override {
    return double(model_.forward(inputs, targets, accum_t<Real>(grad_scale * loss_scale)));
  }
  void backward(CVec<int> inputs, double loss_scale) override {
    loss_scale_ = loss_scale;
    model_.backward(inputs, [this](std::size_t offset) { copy_.ready_from(offset, loss_scale_); });
  }
  double run_pipeline(std::int64_t step, double grad_scale, double loss_scale) override {
    if (!executor_) throw std::logic_error("ModelState::run_pipeline without a pipeline schedule");
    loss_scale_ = loss_scale;
    return executor_->run(step, accum_t<Real>(grad_scale * loss_scale));
  }
  void publish() override { copy_.publish(); }
  MemoryBytes memory() const override {
    MemoryBytes m = copy_.memory();
    m[MemoryCategory::activations] += std::int64_t(model_.activation_bytes());
    m[MemoryCategory::workspace] += std::int64_t(workspace_);
    return m;
  }

 private:
  WorkingCopy<Real> copy_;
  Gpt2<Real> model_;
  std::size_t workspace_;
  std::optional<PipelineExecutor<Real>> executor_;
  double loss_scale_ = 1.0;
};

std::unique_ptr<Computation> model_in_precision(const ExecSpace& space, const Config& cfg, OptimizerState& fp32,
                                                Comm* tp, StagePlace place, const PipelineParts& pipeline) {
  if (cfg.train.precision == Precision::bf16)
    return std::make_unique<ModelOn<bf16>>(space, cfg, fp32, tp, place, pipeline);
  if (cfg.train.precision == Precision::fp16)
    return std::make_unique<ModelOn<fp16>>(space, cfg, fp32, tp, place, pipeline);
  return std::make_unique<ModelOn<float>>(space, cfg, fp32, tp, place, pipeline);
}

}  // namespace

ModelState::ModelState(const ExecSpace& space, const Config& cfg, const StateGroups& groups, StagePlace place,
                       const PipelineParts& pipeline)
    : space_(space),
      groups_(groups),
      optimizer_(space, state_layout(cfg, groups, place), ZeroStage{cfg.parallel.zero}, *groups.dp,
                 cfg.train.precision == Precision::fp32, std::size_t(cfg.parallel.bucket_mb * (1 << 20))),
      compute_(model_in_precision(space, cfg, optimizer_, groups.tp, place, pipeline)),
      fp16_(cfg.train.precision == Precision::fp16),
      scaler_(fp16_, cfg.train.loss_scale, cfg.train.loss_scale_window) {}

ModelState::~ModelState() = default;

void ModelState::initialize(std::uint64_t seed) {
  optimizer_.initialize(seed);
  compute_->publish();
}

double ModelState::grad_norm() {
  const ParameterLayout& layout = optimizer_.layout();
  double sum = optimizer_.grad_squared_norm([&](const TensorInfo& t) { return layout.holds_counted_copy(t); });
  const WatchedWait watched(collective_ticket(groups_.world, "allreduce", 1));
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, groups_.world),
                      "the gradient norm is collective over the world: every rank must take it each step");
  return std::sqrt(sum);
}

void ModelState::save_scaler(TrainingProgress& progress) const {
  progress.loss_scale = fp16_ ? scaler_.scale() : 0.0;
  progress.loss_scale_clean_steps = fp16_ ? scaler_.clean_steps() : 0;
}

void ModelState::restore_scaler(const TrainingProgress& progress) {
  if (progress.loss_scale > 0) scaler_.restore(progress.loss_scale, progress.loss_scale_clean_steps);
}

bool ModelState::update(const OptimConfig& optim, double lr, double clip, std::int64_t i, double grad_norm) {
  // Every rank sees the same global norm, so all skip or all update.
  if (!scaler_.update(std::isfinite(grad_norm))) return false;
  optimizer_.update([&](const TensorInfo& t) { return adamw_step(optim, t, lr, clip, i); });
  compute_->publish();
  space_.fence();
  return true;
}

}  // namespace meshtrain

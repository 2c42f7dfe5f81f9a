// A rank's model states for ZeRO stages 0–3.
#include "train/model_state.hpp"

#include "kernels/cross_entropy.hpp"
#include "model/init.hpp"

#include <cmath>

namespace meshtrain {
namespace {

int group_size(const Comm* c) { return c == nullptr ? 1 : c->size(); }
int group_rank(const Comm* c) { return c == nullptr ? 0 : c->rank(); }

// The layout of this rank's piece of the model; under ZeRO its units are padded to a multiple of dp.
ParameterLayout state_layout(const Config& cfg, const StateGroups& g, StagePlace place) {
  const int tp = group_size(g.tp);
  return ParameterLayout(cfg.model, tp, tp > 1 ? group_rank(g.tp) : 0, place,
                         cfg.parallel.zero > 0 ? group_size(g.dp) : 1);
}

std::unique_ptr<ZeroState> sharded_state(const ExecSpace& space, const Config& cfg, const StateGroups& g,
                                         StagePlace place) {
  if (cfg.parallel.zero == 0) return nullptr;
  // Under 16-bit precision the copy computes; the ZeroState keeps the fp32 optimizer side only.
  return std::make_unique<ZeroState>(space, state_layout(cfg, g, place), cfg.parallel.zero, *g.dp,
                                     cfg.train.precision != Precision::fp32);
}

AdamWStep adamw_step(const OptimConfig& o, const TensorInfo& t, double lr, double clip, std::int64_t i) {
  return {lr, t.decays ? o.weight_decay : 0.0, o.beta1, o.beta2, o.eps, i + 1, clip};
}

}  // namespace

ModelState::ModelState(const ExecSpace& space, const Config& cfg, const StateGroups& groups, StagePlace place,
                       const PipelineParts& pipeline)
    : space_(space),
      groups_(groups),
      zero_(cfg.parallel.zero),
      sharded_(sharded_state(space, cfg, groups, place)),
      layout_(sharded_ ? sharded_->layout() : state_layout(cfg, groups, place)),
      fp16_(cfg.train.precision == Precision::fp16),
      scaler_(fp16_, cfg.train.loss_scale, cfg.train.loss_scale_window) {
  const bool fp32 = cfg.train.precision == Precision::fp32;
  const int slots = pipeline.schedule.empty() ? 1 : pipeline_slots(pipeline.schedule);
  if (fp32) {
    model_ = std::make_unique<Gpt2<float>>(space, cfg.model, cfg.train.micro_batch, groups.tp, place, slots,
                                           cfg.train.recompute, sharded_.get());
    if (!pipeline.schedule.empty() && pipeline.loader != nullptr && pipeline.pp != nullptr) {
      executor_.emplace(pipeline.schedule, *model_, *pipeline.loader, *pipeline.pp, ready_from());
    }
  }
  if (!sharded_) {
    const std::size_t n = layout_.total();
    if (!fp32) {
      master_ = Buffer<float>("meshtrain::master_weights", n);
      grads32_ = Buffer<float>("meshtrain::fp32_grads", n);
    }
    const Vec<float> weights = fp32 ? model_->weights() : slice(master_, 0, n);
    const Vec<float> grads = fp32 ? model_->grads() : slice(grads32_, 0, n);
    exp_avg_ = Buffer<float>("meshtrain::adamw::exp_avg", n);
    exp_avg_sq_ = Buffer<float>("meshtrain::adamw::exp_avg_sq", n);
    reducer_.emplace(*groups.dp, grads, std::size_t(cfg.parallel.bucket_mb * (1 << 20)));
    // The data-parallel replicas share the writing of every tensor.
    const int replica = groups.dp->rank(), replicas = groups.dp->size();
    sources_[0] = std::make_unique<FlatSource>(weights, layout_, replica, replicas);
    sources_[1] = std::make_unique<FlatSource>(slice(exp_avg_, 0, n), layout_, replica, replicas);
    sources_[2] = std::make_unique<FlatSource>(slice(exp_avg_sq_, 0, n), layout_, replica, replicas);
  }
  if (!fp32) {
    Fp32Side side;
    side.grad = [this](const TensorInfo& t) { return fp32_grad(t); };
    side.master = [this](const TensorInfo& t) { return master(t); };
    side.master_shard = [this](std::size_t u) { return sharded_->weight_shard_view(u); };
    low_ = LowPrecisionCopy::make(space, cfg, layout_, groups.tp, groups.dp, place, pipeline, std::move(side));
  }
}

ModelState::~ModelState() = default;

double ModelState::run_pipeline(std::int64_t step, double grad_scale) {
  if (low_) return low_->run_pipeline(step, grad_scale, scaler_.scale(), ready_from());
  if (!executor_) throw std::logic_error("ModelState::run_pipeline without a pipeline schedule");
  return executor_->run(step, float(grad_scale));
}

float* ModelState::master(const TensorInfo& t) {
  if (sharded_) return sharded_->weight(t);
  return (model_ ? model_->weights().data() : master_.data()) + t.offset;
}

float* ModelState::fp32_grad(const TensorInfo& t) {
  if (sharded_) return sharded_->grad(t);
  return (model_ ? model_->grads().data() : grads32_.data()) + t.offset;
}

MemoryBytes ModelState::memory() const {
  MemoryBytes m;
  if (sharded_) {
    m = sharded_->memory();
  } else {
    // The whole buffers: the fp32 model's own, or the master weights and fp32 gradients here.
    const std::size_t weights = model_ ? model_->weight_bytes() : master_.extent(0) * sizeof(float);
    const std::size_t grads = model_ ? model_->grad_bytes() : grads32_.extent(0) * sizeof(float);
    m[MemoryCategory::weights] = std::int64_t(weights);
    m[MemoryCategory::grads] = std::int64_t(grads);
    m[MemoryCategory::optimizer] = std::int64_t((exp_avg_.extent(0) + exp_avg_sq_.extent(0)) * sizeof(float));
    for (const auto& s : sources_) m[MemoryCategory::workspace] += std::int64_t(s->staging_bytes());
  }
  if (model_) {
    m[MemoryCategory::activations] += std::int64_t(model_->activation_bytes());
  } else {
    // The fp32 weights are the master copy; the model's own are the 16-bit ones.
    m[MemoryCategory::master] = m[MemoryCategory::weights];
    m[MemoryCategory::weights] = 0;
    m += low_->memory();
  }
  return m;
}

void ModelState::initialize(std::uint64_t seed) {
  if (sharded_) {
    sharded_->initialize(seed);
  } else {
    initialize_parameters(space_, model_ ? model_->weights() : slice(master_, 0, layout_.total()), layout_, seed);
  }
  if (low_) low_->copy_master();
}

TrainingTensors ModelState::checkpoint_tensors() {
  if (sharded_) return {sharded_->weights_source(), sharded_->exp_avg_source(), sharded_->exp_avg_sq_source()};
  return {*sources_[0], *sources_[1], *sources_[2]};
}

void ModelState::loaded() {
  if (sharded_) sharded_->gather_weights();
  if (low_) low_->copy_master();
}

double ModelState::forward(CVec<int> inputs, CVec<int> targets, double grad_scale) {
  if (low_) return low_->forward(inputs, targets, grad_scale, scaler_.scale());
  return double(model_->forward(inputs, targets, float(grad_scale)));
}

void ModelState::backward(CVec<int> inputs) {
  if (low_) {
    low_->backward(inputs, scaler_.scale(), ready_from());
  } else {
    model_->backward(inputs, ready_from());
  }
}

void ModelState::zero_grads() {
  if (sharded_) {
    sharded_->zero_grads();
  } else {
    const Vec<float> grads(model_ ? model_->grads().data() : grads32_.data(), layout_.total());
    Kokkos::deep_copy(space_, grads, 0.0f);
  }
}
void ModelState::arm() {
  if (sharded_) {
    sharded_->arm();
  } else {
    reducer_->arm();
  }
}

Gpt2<float>::ReadyFrom ModelState::ready_from() {
  if (sharded_) return [this](std::size_t offset) { sharded_->ready_from(offset); };
  return [this](std::size_t offset) { reducer_->ready_from(offset); };
}

void ModelState::finish_gradients() {
  const ParameterLayout& layout = layout_;
  if (sharded_) {
    sharded_->finish();
    // The tied wte: its unit is sharded alike on the first and the last stage, so the two add slice by slice.
    if (groups_.tied != nullptr) {
      const Vec<float> wte = sharded_->grad_shard(layout.unit_at(layout.find("wte.weight").offset));
      groups_.tied->allreduce_sum(wte.data(), wte.extent(0));
    }
    return;
  }
  if (groups_.tied != nullptr) {
    const TensorInfo& wte = layout.find("wte.weight");
    space_.fence();
    groups_.tied->allreduce_sum(fp32_grad(wte), wte.numel);
  }
  reducer_->finish();
}

double ModelState::grad_norm() {
  const ParameterLayout& layout = layout_;
  double sum = 0;
  if (sharded_) {
    sum = sharded_->grad_squared_norm([&](const TensorInfo& t) { return layout.holds_counted_copy(t); });
  } else if (group_rank(groups_.dp) == 0) {
    // Data-parallel replicas hold the same reduced gradients: one of them counts.
    for (const TensorInfo& t : layout.tensors()) {
      if (layout.holds_counted_copy(t)) sum += squared_norm<float>(space_, Vec<float>(fp32_grad(t), t.numel), t.numel);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, groups_.world);
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
  if (sharded_) {
    sharded_->update([&](const TensorInfo& t) { return adamw_step(optim, t, lr, clip, i); });
  } else {
    for (const TensorInfo& t : layout_.tensors()) {
      adamw_update<float>(space_, Vec<float>(master(t), t.numel), slice(exp_avg_, t.offset, t.numel),
                          slice(exp_avg_sq_, t.offset, t.numel), Vec<float>(fp32_grad(t), t.numel), t.numel,
                          adamw_step(optim, t, lr, clip, i));
    }
  }
  if (low_) low_->copy_master();
  space_.fence();
  return true;
}

}  // namespace meshtrain

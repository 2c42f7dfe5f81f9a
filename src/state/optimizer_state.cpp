// The fp32 optimizer side of a rank's model states.
#include "state/optimizer_state.hpp"

#include "kernels/cross_entropy.hpp"
#include "model/init.hpp"

namespace meshtrain {

OptimizerState::OptimizerState(const ExecSpace& space, const ParameterLayout& layout, ZeroStage stage, Comm& dp,
                               Comm& edp, bool master_computes, std::size_t bucket_bytes)
    : space_(space),
      stage_(stage),
      data_parallel_{&dp, &edp},
      replicas_(stage.replica_groups(data_parallel_.places())),
      map_(layout, stage.shard_groups(data_parallel_.places())),
      master_("meshtrain::master_weights", map_, master_computes ? stage.compute_weights() : ZeroStage::master_copy()),
      grads_("meshtrain::fp32_grads", map_, stage.fp32_grads()),
      exp_avg_("meshtrain::adamw::exp_avg", map_, ZeroStage::moments()),
      exp_avg_sq_("meshtrain::adamw::exp_avg_sq", map_, ZeroStage::moments()),
      reduction_(make_gradient_reduction(space, stage, grads_, data_parallel_, bucket_bytes)),
      staging_(layout),
      weights_source_(master_.where(), staging_, replicas_),
      exp_avg_source_(exp_avg_.where(), staging_, replicas_),
      exp_avg_sq_source_(exp_avg_sq_.where(), staging_, replicas_),
      master_computes_(master_computes) {}

MemoryBytes OptimizerState::memory() const {
  MemoryBytes m;
  m[master_computes_ ? MemoryCategory::weights : MemoryCategory::master] = std::int64_t(master_.bytes());
  m[MemoryCategory::grads] = std::int64_t(grads_.bytes());
  m[MemoryCategory::optimizer] = std::int64_t(exp_avg_.bytes() + exp_avg_sq_.bytes());
  m[MemoryCategory::comm_buffers] = std::int64_t(reduction_->buffer_bytes());
  m[MemoryCategory::workspace] = std::int64_t(staging_.bytes());
  return m;
}

void OptimizerState::initialize(std::uint64_t seed) {
  for (std::size_t u = 0; u < map_.units(); ++u) {
    initialize_range(space_, master_.owned_view(u), layout(), seed, map_.owned_begin(u));
  }
}

double OptimizerState::grad_squared_norm(const std::function<bool(const TensorInfo&)>& counted) const {
  double sum = 0;
  for (const TensorInfo& t : layout().tensors()) {
    // Replicas hold the same reduced gradients: one of them counts.
    if (replicas_.rank(map_.unit(layout().unit_at(t.offset)).experts) != 0) continue;
    const io::ElementRange run = map_.owned_run(t);
    if (run.count == 0 || !counted(t)) continue;
    sum += squared_norm<float>(space_, Vec<float>(grads_.element(t, run.first), run.count), long(run.count));
  }
  return sum;
}

void OptimizerState::update(const std::function<AdamWStep(const TensorInfo&)>& step_for) {
  for (const TensorInfo& t : layout().tensors()) {
    const io::ElementRange run = map_.owned_run(t);
    if (run.count == 0) continue;
    const auto at = [&](const PlacedState<float>& s) { return Vec<float>(s.element(t, run.first), run.count); };
    adamw_update<float>(space_, at(master_), at(exp_avg_), at(exp_avg_sq_), at(grads_), run.count, step_for(t));
  }
}

}  // namespace meshtrain

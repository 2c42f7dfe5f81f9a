// The fp32 optimizer side of a rank's model states.
#include "state/optimizer_state.hpp"

#include "model/init.hpp"

namespace meshtrain {
namespace {

// Tensor t's owned run (none where the rank owns none of it), marked where t decays.
OwnedRun owned_run_of(const ShardMap& map, const TensorInfo& t) {
  const io::ElementRange run = map.owned_run(t);
  const std::size_t u = map.layout().unit_at(t.offset);
  return {u, t.offset + run.first - map.owned_begin(u), run.count, t.decays};
}

// Every tensor's owned run, in layout order.
std::vector<OwnedRun> update_runs(const ShardMap& map) {
  std::vector<OwnedRun> runs;
  for (const TensorInfo& t : map.layout().tensors()) {
    const OwnedRun run = owned_run_of(map, t);
    if (run.count > 0) runs.push_back(run);
  }
  return runs;
}

}  // namespace

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
      master_computes_(master_computes),
      update_chunks_("meshtrain::adamw::runs", map_, update_runs(map_)),
      norm_("meshtrain::grad_squared_norm") {}

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

Kokkos::View<const double, MemSpace> OptimizerState::grad_squared_norm_on_device(
    const std::function<bool(const TensorInfo&)>& counted) const {
  std::vector<bool> counts;
  for (const TensorInfo& t : layout().tensors()) {
    // Replicas hold the same reduced gradients: one of them counts.
    const bool replica0 = replicas_.rank(map_.unit(layout().unit_at(t.offset)).experts) == 0;
    counts.push_back(replica0 && map_.owned_run(t).count > 0 && counted(t));
  }
  if (!norm_counts_ || *norm_counts_ != counts) {
    std::vector<OwnedRun> runs;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i]) runs.push_back(owned_run_of(map_, layout().tensors()[i]));
    }
    norm_chunks_ = OwnedChunks("meshtrain::grad_squared_norm::runs", map_, runs);
    norm_partials_ = Kokkos::View<double*, MemSpace>("meshtrain::grad_squared_norm::partials",
                                                     norm_chunks_.size() + norm_chunks_.runs());
    norm_counts_ = counts;
  }
  owned_squared_norm(space_, norm_chunks_, chunk_address(grads_.where()), norm_partials_, norm_);
  return norm_;
}

double OptimizerState::grad_squared_norm(const std::function<bool(const TensorInfo&)>& counted) const {
  const Kokkos::View<const double, MemSpace> sum = grad_squared_norm_on_device(counted);
  double host = 0;
  Kokkos::deep_copy(space_, Kokkos::View<double, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(&host), sum);
  host_fence(space_, "step: the gradient norm read");
  return host;
}

void OptimizerState::update(const AdamWStep& step) {
  const AdamWElement<float> update(step);
  const ChunkAddress<float> p = chunk_address(master_.where()), m = chunk_address(exp_avg_.where()),
                            v = chunk_address(exp_avg_sq_.where()), g = chunk_address(grads_.where());
  for_each_owned(
      space_, "meshtrain::adamw::update", update_chunks_, KOKKOS_LAMBDA(const OwnedChunk& c, std::size_t i) {
        update(p.at(c, i), m.at(c, i), v.at(c, i), g.at(c, i), c.flag ? update.decay : 1.0f);
      });
}

}  // namespace meshtrain

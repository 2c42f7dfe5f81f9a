// ZeRO stages 1–3 over the data-parallel group.
#include "train/zero_state.hpp"

#include "kernels/convert.hpp"
#include "kernels/cross_entropy.hpp"
#include "model/init.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace meshtrain {
namespace {

constexpr bool host_reachable = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

}  // namespace

MemoryBytes ZeroSizes::bytes() const {
  MemoryBytes m;
  m[MemoryCategory::weights] = std::int64_t(weights * sizeof(float));
  m[MemoryCategory::grads] = std::int64_t(grads * sizeof(float));
  m[MemoryCategory::optimizer] = std::int64_t(2 * moments * sizeof(float));
  m[MemoryCategory::comm_buffers] = std::int64_t(reduce_buffer * sizeof(float));
  m[MemoryCategory::workspace] = std::int64_t(staging * sizeof(float));
  return m;
}

ZeroSizes zero_sizes(const ParameterLayout& layout, int dp, int stage, bool master_only) {
  if (stage < 1 || stage > 3) throw std::invalid_argument("ZeRO stage must be 1, 2 or 3");
  const ShardMap map(layout, dp, 0);
  ZeroSizes z;
  z.weights = master_only ? map.shard_total() : stage < 3 ? layout.total() : map.shard_total() + map.working_total();
  z.grads = stage < 2 ? layout.total() : map.shard_total() + map.working_total();
  z.moments = map.shard_total();
  z.reduce_buffer = map.largest_shard();
  // Checkpoints read and write the owned slices in place; device memory goes through the host.
  z.staging = FlatSource::staging_bytes_for(layout) / sizeof(float);
  return z;
}

// A flat state of the ZeroState as a checkpoint sees it: each rank saves the owned slices (of the
// whole weights under stages 1–2 too, so the group writes them in parallel) and loads them back;
// under stages 1–2 it loads whole weights, which it holds anyway.
class ZeroState::ShardSource final : public StateSource {
 public:
  enum class Kind { weights, exp_avg, exp_avg_sq };
  ShardSource(ZeroState& state, Kind kind, Kokkos::View<float*, HostSpace>& host) : state_(state), kind_(kind), host_(host) {}

  io::ElementRange save_range(const TensorInfo& t) const override { return state_.map_.owned_elements(t); }

  const float* saved_data(const TensorInfo& t) override {
    const io::ElementRange run = save_range(t);
    state_.space_.fence();
    const float* data = local(t, run);
    if constexpr (host_reachable) return data;
    Kokkos::deep_copy(HostSlice(host_.data(), run.count), Vec<float>(const_cast<float*>(data), run.count));
    return host_.data();
  }

  io::ElementRange load_range(const TensorInfo& t) const override {
    return whole_weights() ? io::ElementRange{0, t.piece.elements()} : save_range(t);
  }

  float* load_target(const TensorInfo& t) override {
    if constexpr (host_reachable) return local(t, load_range(t));
    return host_.data();
  }

  void commit_tensor(const TensorInfo& t) override {
    if constexpr (!host_reachable) {
      const io::ElementRange run = load_range(t);
      Kokkos::deep_copy(Vec<float>(local(t, run), run.count), HostSlice(host_.data(), run.count));
    }
  }

  std::size_t staging_bytes() const override { return 0; }  // the ZeroState's, counted there

 private:
  using HostSlice = Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  // Under stages 1–2 every rank holds all weights.
  bool whole_weights() const { return kind_ == Kind::weights && !state_.sharded_weights(); }
  // Where elements `run` of tensor t live: the whole weight buffer, or the owned slice's shard.
  float* local(const TensorInfo& t, io::ElementRange run) const {
    const std::size_t at = t.offset + run.first;
    if (whole_weights()) return state_.weights_.data() + at;
    const std::size_t u = state_.layout_.unit_at(t.offset);
    return shard(u) + (at - state_.owned_begin(u));
  }
  float* shard(std::size_t u) const {
    switch (kind_) {
      case Kind::weights:
        return state_.weight_shard(u);
      case Kind::exp_avg:
        return state_.exp_avg_.data() + state_.map_.shard_offset(u);
      case Kind::exp_avg_sq:
        return state_.exp_avg_sq_.data() + state_.map_.shard_offset(u);
    }
    return nullptr;
  }

  ZeroState& state_;
  Kind kind_;
  Kokkos::View<float*, HostSpace>& host_;
};

ZeroState::ZeroState(const ExecSpace& space, const ParameterLayout& layout, int stage, Comm& dp, bool master_only)
    : space_(space),
      layout_(layout),
      map_(layout, dp.size(), dp.rank()),
      stage_(stage),
      master_only_(master_only),
      dp_(dp) {
  const ZeroSizes sizes = zero_sizes(layout, dp.size(), stage, master_only);
  const std::size_t weight_shards = sharded_weights() ? map_.shard_total() : 0;
  weights_ = Buffer<float>("meshtrain::zero::weights", sizes.weights - weight_shards);
  weight_shard_ = Buffer<float>("meshtrain::zero::weight_shard", weight_shards);
  const std::size_t grad_shards = stage >= 2 ? map_.shard_total() : 0;
  grads_ = Buffer<float>("meshtrain::zero::grads", sizes.grads - grad_shards);
  grad_shard_ = Buffer<float>("meshtrain::zero::grad_shard", grad_shards);
  exp_avg_ = Buffer<float>("meshtrain::zero::exp_avg", sizes.moments);
  exp_avg_sq_ = Buffer<float>("meshtrain::zero::exp_avg_sq", sizes.moments);
  reduce_buffer_ = Buffer<float>("meshtrain::zero::reduce_buffer", sizes.reduce_buffer);
  host_staging_ = Kokkos::View<float*, HostSpace>("meshtrain::zero::checkpoint_staging", sizes.staging);
  next_unit_ = map_.units();
  using Kind = ShardSource::Kind;
  for (Kind kind : {Kind::weights, Kind::exp_avg, Kind::exp_avg_sq}) {
    sources_.push_back(std::make_unique<ShardSource>(*this, kind, host_staging_));
  }
}

ZeroState::~ZeroState() = default;

MemoryBytes ZeroState::memory() const {
  auto bytes = [](std::size_t elements) { return std::int64_t(elements * sizeof(float)); };
  MemoryBytes m;
  m[MemoryCategory::weights] = bytes(weights_.extent(0) + weight_shard_.extent(0));
  m[MemoryCategory::grads] = bytes(grads_.extent(0) + grad_shard_.extent(0));
  m[MemoryCategory::optimizer] = bytes(exp_avg_.extent(0) + exp_avg_sq_.extent(0));
  m[MemoryCategory::comm_buffers] = bytes(reduce_buffer_.extent(0));
  m[MemoryCategory::workspace] = bytes(host_staging_.extent(0));
  return m;
}

float* ZeroState::unit_weights(std::size_t u) const {
  if (master_only_) throw std::logic_error("ZeroState: a master-only state holds no working weights");
  if (stage_ < 3) return weights_.data() + map_.unit(u).begin;
  return weights_.data() + map_.working_offset(u);
}

float* ZeroState::unit_grads(std::size_t u) const {
  if (stage_ < 2) return grads_.data() + map_.unit(u).begin;
  return grads_.data() + map_.working_offset(u);
}

float* ZeroState::weight_shard(std::size_t u) const {
  if (!sharded_weights()) return weights_.data() + owned_begin(u);
  return weight_shard_.data() + map_.shard_offset(u);
}

float* ZeroState::grad_shard_data(std::size_t u) const {
  if (stage_ < 2) return grads_.data() + owned_begin(u);
  return grad_shard_.data() + map_.shard_offset(u);
}

Vec<float> ZeroState::grad_shard(std::size_t u) const { return Vec<float>(grad_shard_data(u), shard_size(u)); }

float* ZeroState::weight(const TensorInfo& t) {
  const std::size_t u = layout_.unit_at(t.offset);
  return unit_weights(u) + (t.offset - layout_.units()[u].begin);
}

float* ZeroState::grad(const TensorInfo& t) {
  const std::size_t u = layout_.unit_at(t.offset);
  return unit_grads(u) + (t.offset - layout_.units()[u].begin);
}

void ZeroState::gather_unit(std::size_t u, float* into) {
  space_.fence();  // the kernels that wrote the shard must be done before the collective reads it
  dp_.allgather(weight_shard(u), into, shard_size(u));
}

void ZeroState::need_block(int block) {
  if (stage_ < 3 || master_only_ || gathered_block_ == block) return;
  const std::size_t u = map_.block_unit(block);
  gather_unit(u, unit_weights(u));
  gathered_block_ = block;
}

void ZeroState::gather_weights() {
  if (master_only_) return;  // the 16-bit copy gathers its own
  for (std::size_t u = 0; u < map_.units(); ++u) {
    if (stage_ == 3 && map_.is_block(u)) continue;  // gathered on demand
    gather_unit(u, unit_weights(u));
  }
  gathered_block_ = -1;
}

void ZeroState::initialize(std::uint64_t seed) {
  for (std::size_t u = 0; u < layout_.units().size(); ++u) {
    initialize_range(space_, Vec<float>(weight_shard(u), shard_size(u)), layout_, seed, owned_begin(u));
  }
  gather_weights();
}

void ZeroState::zero_grads() {
  Kokkos::deep_copy(space_, stage_ < 2 ? grads_ : grad_shard_, 0.0f);
  pending_ = true;
  next_unit_ = layout_.units().size();
}

void ZeroState::reduce_unit(std::size_t u) {
  const std::size_t n = shard_size(u);
  space_.fence();
  dp_.reduce_scatter_sum(unit_grads(u), reduce_buffer_.data(), n);
  const Vec<float> shard(grad_shard_data(u), n);
  const CVec<float> reduced(reduce_buffer_.data(), n);
  if (stage_ < 2) {
    Kokkos::deep_copy(space_, shard, reduced);
  } else {
    // Sharded gradients accumulate over micro-batches; the unit's working gradients start again at 0.
    accumulate_into<float, float>(space_, shard, reduced, 1.0f, long(n));
    Kokkos::deep_copy(space_, Vec<float>(unit_grads(u), layout_.units()[u].size()), 0.0f);
  }
}

void ZeroState::ready_from(std::size_t offset) {
  if (stage_ < 2 && !armed_) return;
  const auto& units = layout_.units();
  while (next_unit_ > 0 && units[next_unit_ - 1].begin >= offset) reduce_unit(--next_unit_);
  if (next_unit_ > 0) return;
  next_unit_ = units.size();  // the pass is complete
  if (stage_ < 2) pending_ = false;
}

void ZeroState::finish() {
  armed_ = false;
  if (stage_ < 2 && pending_) {
    while (next_unit_ > 0) reduce_unit(--next_unit_);
    next_unit_ = layout_.units().size();
  }
  pending_ = false;
  space_.fence();
}

double ZeroState::grad_squared_norm(const std::function<bool(const TensorInfo&)>& counted) const {
  double sum = 0;
  for (std::size_t u = 0; u < layout_.units().size(); ++u) {
    const std::size_t own = owned_begin(u), own_end = own + shard_size(u);
    for (const TensorInfo& t : layout_.tensors()) {
      const std::size_t first = std::max(own, t.offset), last = std::min(own_end, t.offset + t.piece.elements());
      if (first >= last || !counted(t)) continue;
      sum += squared_norm<float>(space_, Vec<float>(grad_shard_data(u) + (first - own), last - first), last - first);
    }
  }
  return sum;
}

void ZeroState::update(const std::function<AdamWStep(const TensorInfo&)>& update_for) {
  for (std::size_t u = 0; u < layout_.units().size(); ++u) {
    const std::size_t own = owned_begin(u), own_end = own + shard_size(u);
    for (const TensorInfo& t : layout_.tensors()) {
      const std::size_t first = std::max(own, t.offset), last = std::min(own_end, t.offset + t.piece.elements());
      if (first >= last) continue;
      const std::size_t k = first - own, n = last - first;
      const std::size_t moment = map_.shard_offset(u) + k;
      adamw_update<float>(space_, Vec<float>(weight_shard(u) + k, n), Vec<float>(exp_avg_.data() + moment, n),
                          Vec<float>(exp_avg_sq_.data() + moment, n), CVec<float>(grad_shard_data(u) + k, n), n,
                          update_for(t));
    }
  }
  gather_weights();
}

}  // namespace meshtrain

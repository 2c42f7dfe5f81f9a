// A rank's states as checkpoint sources.
#include "state/state_source.hpp"

#include <algorithm>

namespace meshtrain {
namespace {

constexpr bool host_reachable = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;

std::size_t largest_tensor(const ParameterLayout& layout) {
  std::size_t n = 0;
  for (const TensorInfo& t : layout.tensors()) n = std::max(n, t.numel);
  return n;
}

using HostSlice = Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

}  // namespace

CheckpointStaging::CheckpointStaging(const ParameterLayout& layout)
    : host_("meshtrain::checkpoint::staging", bytes_for(layout) / sizeof(float)) {}

std::size_t CheckpointStaging::bytes_for(const ParameterLayout& layout) {
  return host_reachable ? 0 : largest_tensor(layout) * sizeof(float);
}

io::ElementRange StateSlices::saved_run(const ShardMap& map, const TensorInfo& t, const UnitGroups& replicas) {
  const io::ElementRange owned = map.owned_run(t);
  const bool experts = map.unit(map.layout().unit_at(t.offset)).experts;
  const int r = replicas.rank(experts), n = replicas.size(experts);
  const auto cut = [&](int k) { return owned.count * std::uint64_t(k) / std::uint64_t(n); };
  return {owned.first + cut(r), cut(r + 1) - cut(r)};
}

const float* StateSlices::saved_data(const TensorInfo& t) {
  const io::ElementRange run = save_range(t);
  host_fence(ExecSpace(), "state read: the kernels that last wrote it done");
  float* data = where_.element(t, run.first);
  if constexpr (host_reachable) return data;
  Kokkos::deep_copy(HostSlice(staging_.data(), run.count), Vec<float>(data, run.count));
  return staging_.data();
}

io::ElementRange StateSlices::load_range(const TensorInfo& t) const {
  if (where_.held == Held::whole) return {0, t.piece.elements()};
  return where_.map->owned_run(t);
}

float* StateSlices::load_target(const TensorInfo& t) {
  if constexpr (host_reachable) return where_.element(t, load_range(t).first);
  return staging_.data();
}

void StateSlices::commit_tensor(const TensorInfo& t) {
  if constexpr (!host_reachable) {
    const io::ElementRange run = load_range(t);
    Kokkos::deep_copy(Vec<float>(where_.element(t, run.first), run.count), HostSlice(staging_.data(), run.count));
  }
}

}  // namespace meshtrain

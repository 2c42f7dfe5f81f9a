// Flat training state as a checkpoint source.
#include "train/state_source.hpp"

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

FlatSource::FlatSource(Vec<float> flat, const ParameterLayout& layout, int replica, int replicas)
    : flat_(flat),
      replica_(replica),
      replicas_(replicas),
      staging_("meshtrain::checkpoint::staging", staging_bytes_for(layout) / sizeof(float)) {}

std::size_t FlatSource::staging_bytes_for(const ParameterLayout& layout) {
  return host_reachable ? 0 : largest_tensor(layout) * sizeof(float);
}

io::ElementRange FlatSource::replica_range(const TensorInfo& t, int r, int replicas) {
  const auto cut = [&](int k) { return t.piece.elements() * std::uint64_t(k) / std::uint64_t(replicas); };
  return {cut(r), cut(r + 1) - cut(r)};
}

const float* FlatSource::saved_data(const TensorInfo& t) {
  const io::ElementRange run = save_range(t);
  ExecSpace().fence();  // the kernels that last wrote the state must be done
  if constexpr (host_reachable) return flat_.data() + t.offset + run.first;
  Kokkos::deep_copy(HostSlice(staging_.data(), run.count), slice(flat_, t.offset + run.first, run.count));
  return staging_.data();
}

float* FlatSource::load_target(const TensorInfo& t) {
  if constexpr (host_reachable) return flat_.data() + t.offset;
  return staging_.data();
}

void FlatSource::commit_tensor(const TensorInfo& t) {
  const std::size_t n = t.piece.elements();
  if constexpr (!host_reachable) Kokkos::deep_copy(slice(flat_, t.offset, n), HostSlice(staging_.data(), n));
}

}  // namespace meshtrain

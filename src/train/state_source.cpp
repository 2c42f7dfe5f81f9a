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

}  // namespace

FlatSource::FlatSource(Vec<float> flat, const ParameterLayout& layout)
    : flat_(flat), staging_("meshtrain::checkpoint::staging", staging_bytes_for(layout) / sizeof(float)) {}

std::size_t FlatSource::staging_bytes_for(const ParameterLayout& layout) {
  return host_reachable ? 0 : largest_tensor(layout) * sizeof(float);
}

const float* FlatSource::read_tensor(const TensorInfo& t) {
  if constexpr (host_reachable) {
    ExecSpace().fence();  // the kernels that last wrote the state must be done
    return flat_.data() + t.offset;
  } else {
    Kokkos::deep_copy(Kokkos::subview(staging_, std::make_pair(std::size_t(0), t.numel)), slice(flat_, t.offset, t.numel));
    return staging_.data();
  }
}

float* FlatSource::tensor_target(const TensorInfo& t) {
  if constexpr (host_reachable) return flat_.data() + t.offset;
  return staging_.data();
}

void FlatSource::commit_tensor(const TensorInfo& t) {
  if constexpr (!host_reachable) {
    Kokkos::deep_copy(slice(flat_, t.offset, t.numel), Kokkos::subview(staging_, std::make_pair(std::size_t(0), t.numel)));
  }
}

}  // namespace meshtrain

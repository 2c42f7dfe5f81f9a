// LoRA's frozen base as a checkpoint source to load into (state/frozen_base.hpp): each tensor's part this
// rank holds (whole, or its ZeRO-3 slice) read into fp32 staging the size of the largest tensor, then
// rounded into its place in the compute precision, so that loading never holds the base in fp32. The
// ranks holding the same copy (`replicas`) share its checksum as they would share its save.
#pragma once

#include "kernels/convert.hpp"
#include "state/state_source.hpp"

#include <algorithm>
#include <stdexcept>

namespace meshtrain {

template <class Real>
class FrozenWeightsSource final : public StateSource {
 public:
  FrozenWeightsSource(const ExecSpace& space, const StatePlace<Real>& where, const UnitGroups& replicas)
      : space_(space),
        where_(where),
        replicas_(replicas),
        host_("meshtrain::lora::frozen_staging_host", largest(where.map->layout())),
        device_("meshtrain::lora::frozen_staging", host_reachable ? 0 : largest(where.map->layout())) {}

  io::ElementRange save_range(const TensorInfo& t) const override {
    return StateSlices::saved_run(*where_.map, t, replicas_);
  }
  const float* saved_data(const TensorInfo& t) override {
    throw std::logic_error("the frozen base is never saved: " + t.name);
  }
  io::ElementRange load_range(const TensorInfo& t) const override {
    if (where_.held == Held::whole) return {0, t.piece.elements()};
    return where_.map->owned_run(t);
  }
  float* load_target(const TensorInfo&) override { return host_.data(); }
  void commit_tensor(const TensorInfo& t) override {
    const io::ElementRange run = load_range(t);
    const std::size_t n = run.count;
    CVec<float> fp32(host_.data(), n);
    if constexpr (!host_reachable) {
      Kokkos::deep_copy(space_, Vec<float>(device_.data(), n), HostSlice(host_.data(), n));
      fp32 = CVec<float>(device_.data(), n);
    }
    convert<Real, float>(space_, Vec<Real>(where_.element(t, run.first), n), fp32, long(n));
    host_fence(space_, "frozen weights: the staging refilled by the next tensor");
  }

 private:
  static constexpr bool host_reachable = Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
  using HostSlice = Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static std::size_t largest(const ParameterLayout& layout) {
    std::size_t n = 0;
    for (const TensorInfo& t : layout.tensors()) n = std::max(n, t.numel);
    return n;
  }

  ExecSpace space_;
  StatePlace<Real> where_;
  UnitGroups replicas_;
  Kokkos::View<float*, HostSpace> host_;
  Buffer<float> device_;
};

}  // namespace meshtrain

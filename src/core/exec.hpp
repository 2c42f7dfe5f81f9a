// The one place that names Kokkos execution and memory spaces, and the View types every kernel takes.
//
// Tensors live in flat buffers (see model/parameters.hpp); a named tensor is an unmanaged 1-D View
// into that buffer, so kernels receive (pointer, extent) pairs that cost nothing to capture.
#pragma once

#include "core/half_types.hpp"
#include "core/host_waits.hpp"
#include "core/kokkos_compat.hpp"

#include <cstddef>
#include <cstdlib>

namespace meshtrain {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;
// Host memory that the execution space copies from without a global fence and can write to
// (page-locked on a GPU; HostSpace on host builds): the token batches' staging.
#if KOKKOS_VERSION >= 40000
using PinnedSpace = Kokkos::SharedHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_CUDA)
using PinnedSpace = Kokkos::CudaHostPinnedSpace;
#else
using PinnedSpace = HostSpace;
#endif

// Owning flat buffer in device memory.
template <class Real>
using Buffer = Kokkos::View<Real*, MemSpace>;

// Non-owning views: what kernels take. Vec is written, CVec only read.
template <class Real>
using Vec = Kokkos::View<Real*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class Real>
using CVec = Kokkos::View<const Real*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// A window [offset, offset + count) of a flat buffer, as an unmanaged view.
template <class Real>
Vec<Real> slice(const Buffer<Real>& buf, std::size_t offset, std::size_t count) {
  return Vec<Real>(buf.data() + offset, count);
}
template <class Real>
Vec<Real> slice(const Vec<Real>& buf, std::size_t offset, std::size_t count) {
  return Vec<Real>(buf.data() + offset, count);
}

// The policy of the team kernels (row-wise ones, column-block sums): a league of `teams` teams of
// Kokkos' recommended size. That is a multiple of the warp on a GPU but one thread on a host
// (Kokkos without hwloc), where the team-level code (TeamThreadRange reductions, team barriers,
// scratch sums) then never runs on two threads at once. MESHTRAIN_TEAM_SIZE=n asks for teams of n
// threads instead (at most the space's concurrency; read once): the `openmp` test pass runs the
// kernels with n = 2, so that a race inside a team shows on the host as it would on a GPU.
inline int requested_team_size() {
  static const int size = [] {
    const char* value = std::getenv("MESHTRAIN_TEAM_SIZE");
    return value != nullptr ? std::atoi(value) : 0;
  }();
  return size;
}

inline Kokkos::TeamPolicy<ExecSpace> team_policy(const ExecSpace& space, int teams) {
  const int size = requested_team_size();
  if (size <= 0) return Kokkos::TeamPolicy<ExecSpace>(space, teams, Kokkos::AUTO);
  return Kokkos::TeamPolicy<ExecSpace>(space, teams, size < space.concurrency() ? size : space.concurrency());
}

// The host waits until every kernel enqueued on `space` is done: every fence of meshtrain's goes through
// here, named (core/host_waits.hpp counts them; Kokkos 3.5 and later also hand the name to Kokkos Tools).
// The kernels may wait on a device backend's collectives: those are settled first, watched
// (host_waits.hpp's before_host_fence).
inline void host_fence(const ExecSpace& space, const char* reason) {
  run_before_host_fence();
#if KOKKOS_VERSION >= 30500
  space.fence(reason);
#else
  space.fence();
#endif
  report_host_wait(reason);
}

// Kernels assert at compile time that the execution space can reach the views' memory.
template <class View>
constexpr bool reachable_v = Kokkos::SpaceAccessibility<ExecSpace, typename View::memory_space>::accessible;

}  // namespace meshtrain

// The one place that names Kokkos execution and memory spaces, and the View types every kernel takes.
//
// Tensors live in flat buffers (see model/parameters.hpp); a named tensor is an unmanaged 1-D View
// into that buffer, so kernels receive (pointer, extent) pairs that cost nothing to capture.
#pragma once

#include "core/half_types.hpp"
#include "core/kokkos_compat.hpp"

#include <cstddef>

namespace meshtrain {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;

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

// Kernels assert at compile time that the execution space can reach the views' memory.
template <class View>
constexpr bool reachable_v = Kokkos::SpaceAccessibility<ExecSpace, typename View::memory_space>::accessible;

}  // namespace meshtrain

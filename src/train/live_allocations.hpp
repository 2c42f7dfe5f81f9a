// Test-only, for the pointer audit (parallel/pointer_audit.hpp): the live allocations of the
// execution space's memory space (core/exec.hpp MemSpace: device memory on GPU builds, HostSpace
// on CPU ones), recorded through Kokkos Tools' allocation callbacks, which Kokkos calls for every
// View allocation and free once a callback is set, with or without a profiling library.
//
// Recording replaces any allocation callbacks a Kokkos Tools library had set.
#pragma once

#include <cstddef>

namespace meshtrain {

// Starts recording (idempotent; after Kokkos::initialize). Allocations made before are unknown to
// it, so call it before the buffers that will be audited are allocated.
void record_live_allocations();

// Whether [data, data + bytes) lies inside one allocation recorded and not yet freed.
bool inside_live_allocation(const void* data, std::size_t bytes);

}  // namespace meshtrain

// A host-memory backend ordered with the compute (parallel/comm.hpp, Ordering with the compute):
// before every call that touches a buffer of the backend's memory space, the host waits for the
// compute issued so far, so no caller fences before a collective. The waits then sit where the
// collectives are; a device backend has none (its streams are ordered by events).
#pragma once

#include "parallel/comm.hpp"

#include <functional>
#include <memory>

namespace meshtrain {

// What the host waits with: the trainer's host_fence on its execution space (core/exec.hpp).
using WaitForCompute = std::function<void()>;

std::unique_ptr<Comm> make_compute_ordered_comm(std::unique_ptr<Comm> inner, WaitForCompute wait_for_compute);

}  // namespace meshtrain

// A Comm whose every wait the watchdog watches (parallel/watchdog.hpp): each blocking call and
// each wait on a request runs inside a WatchedWait (core/watched_wait.hpp) of the Comm's group, so
// a wait that outlasts parallel.timeout is reported by group, kind, sequence number and count.
// Whatever the backend (MPI, NCCL), the numbering is the same: one place for it.
#pragma once

#include "core/watched_wait.hpp"
#include "parallel/comm.hpp"

#include <memory>

namespace meshtrain {

// `group` must name the ranks of `inner`'s communicator in its order, and outlive the Comm.
std::unique_ptr<Comm> make_watched_comm(std::unique_ptr<Comm> inner, WaitGroup& group);

}  // namespace meshtrain

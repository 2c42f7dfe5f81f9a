// A Comm that counts the wall time spent in communication: every blocking call and every wait on a
// request adds its duration to a counter the caller owns (several groups may share one). Waiting
// for a slower peer inside a collective counts too: at this level it cannot be told from transfer.
#pragma once

#include "parallel/comm.hpp"

#include <memory>

namespace meshtrain {

std::unique_ptr<Comm> make_timed_comm(std::unique_ptr<Comm> inner, double& seconds);
// The same, with the all-to-all calls' time added to `all_to_all_seconds` instead: the timing table
// shows expert parallelism's token exchange apart from the other collectives (train/rank_timing.hpp).
std::unique_ptr<Comm> make_timed_comm(std::unique_ptr<Comm> inner, double& seconds, double& all_to_all_seconds);

}  // namespace meshtrain

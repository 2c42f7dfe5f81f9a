// The reasons to leave early, and the agreement that makes every rank leave together.
#include "train/leaving.hpp"

#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "train/stop_signals.hpp"

#include <fmt/format.h>

namespace meshtrain {

std::string reason_to_leave(const Config& cfg, std::int64_t steps_this_job, double elapsed_s, double longest_step_s,
                            double last_save_s) {
  if (int sig = stop_signal_received()) return fmt::format("received signal {}", sig);
  if (cfg.train.stop_after > 0 && steps_this_job >= cfg.train.stop_after) {
    return fmt::format("train.stop_after = {} steps reached", cfg.train.stop_after);
  }
  // Leave while one more step and a save still fit in the limit.
  if (cfg.train.time_limit > 0 && elapsed_s + longest_step_s + last_save_s > cfg.train.time_limit * 60.0) {
    return fmt::format("train.time_limit = {} min would be exceeded by another step", cfg.train.time_limit);
  }
  return {};
}

Leaving agree_to_leave(MPI_Comm comm, const std::string& mine, const std::string& log_failure) {
  int votes[2] = {mine.empty() && log_failure.empty() ? 0 : 1, log_failure.empty() ? 0 : 1};
  {
    const WatchedWait watched(collective_ticket(comm, "allreduce", 2));
    MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, votes, 2, MPI_INT, MPI_MAX, comm),
                        "is every rank reaching the same step boundary?");
  }
  Leaving leaving{votes[0] == 1, votes[1] == 1, {}};
  if (!leaving.leave) return leaving;
  leaving.reason = !log_failure.empty() ? log_failure
                   : !mine.empty()      ? mine
                   : leaving.log_failed ? std::string("another rank could not write a log")
                                        : std::string("another rank asked to leave");
  return leaving;
}

}  // namespace meshtrain

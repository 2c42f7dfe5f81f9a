// Error kinds and the exit codes (share/docs/usage.md, Exit codes).
//
// InputError is bad input from the user (config, shard, checkpoint): main() prints its message and
// exits 2 before anything is written. Anything else that escapes is an internal failure (exit 1).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace meshtrain {

namespace exit_code {
inline constexpr int finished = 0;
inline constexpr int failure = 1;
inline constexpr int bad_input = 2;
// Left before train.steps (signal, stop_after, time_limit) with a checkpoint saved: requeue me.
inline constexpr int requeue = 3;
// A checkpoint could not be written (disk full, quota, I/O error): the previous one is intact.
inline constexpr int save_failed = 4;
// A collective or point-to-point wait did not complete within parallel.timeout (the watchdog).
inline constexpr int collective_timeout = 5;
// The loss or gradient norm turned non-finite and train.nonfinite said stop (or the skips ran out).
inline constexpr int nonfinite = 6;
// A log output (log.metrics, log.traffic) could not be written after the start (disk full, quota,
// I/O error): the job saved a checkpoint at that step and left.
inline constexpr int log_failed = 7;
}  // namespace exit_code

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

template <class... Args>
[[noreturn]] void input_error(fmt::format_string<Args...> format, Args&&... args) {
  throw InputError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace meshtrain

#pragma once
// Wall time as the run reports it: seconds on the steady clock (immune to clock changes mid-run).

#include <chrono>

namespace meshtrain {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace meshtrain

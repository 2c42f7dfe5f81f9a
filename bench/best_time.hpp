// Timing for benchmarks on shared machines: the best of several runs, in wall time and in this
// process's CPU time (user + system, all threads) — on cores shared with other jobs the CPU time is
// the steadier of the two.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace meshtrain::bench {

inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Timing {
  double wall = std::numeric_limits<double>::infinity(), cpu = std::numeric_limits<double>::infinity();
};

// The best of `repeats` timed runs of run(), after `warmups` untimed ones.
template <class F>
Timing best_of(int repeats, F&& run, int warmups = 0) {
  for (int w = 0; w < warmups; ++w) run();
  Timing best;
  for (int r = 0; r < repeats; ++r) {
    const double cpu0 = cpu_seconds();
    const auto wall0 = std::chrono::steady_clock::now();
    run();
    best.wall = std::min(best.wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count());
    best.cpu = std::min(best.cpu, cpu_seconds() - cpu0);
  }
  return best;
}

}  // namespace meshtrain::bench

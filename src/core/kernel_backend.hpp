// What runs the kernels, as the trainer says at start: the Kokkos backend and its threads, and a
// warning when a multi-threaded OpenMP backend will spin its threads against OpenBLAS's.
//
// The wait policy. Between two kernels libgomp's threads spin before they sleep (300000 spins
// with OMP_WAIT_POLICY unset, without end with `active`), while the GEMM that usually comes next
// runs on OpenBLAS's own pthreads: the two pools share the cores and the GEMMs slow down
// (share/docs/benchmark.md). OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0) puts them to sleep at
// once. libgomp reads both when it is loaded, before main() starts, so the process cannot set them
// for itself: the launch scripts export OMP_WAIT_POLICY=passive unless it is set, and the trainer
// warns when a run goes without.
#pragma once

#include "core/exec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>

namespace meshtrain {

// `kernels: Kokkos 3.4.1 OpenMP, 2 threads` (host backends), `kernels: Kokkos 4.4.1 Cuda` (devices).
inline std::string kernel_backend_line() {
  std::string line = fmt::format("kernels: Kokkos {}.{}.{} {}", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100,
                                 KOKKOS_VERSION % 100, ExecSpace::name());
  if constexpr (Kokkos::SpaceAccessibility<ExecSpace, HostSpace>::accessible) {
    const int threads = ExecSpace().concurrency();
    line += fmt::format(", {} thread{}", threads, threads == 1 ? "" : "s");
  }
  return line;
}

// The warning for a backend `name` running `threads` threads under the environment's
// OMP_WAIT_POLICY and GOMP_SPINCOUNT (nullptr: unset); nothing when its threads will not spin.
inline std::optional<std::string> wait_policy_warning(const std::string& name, int threads, const char* wait_policy,
                                                      const char* spin_count) {
  if (name != "OpenMP" || threads < 2) return std::nullopt;
  if (spin_count != nullptr && std::string(spin_count) == "0") return std::nullopt;
  std::string policy = wait_policy != nullptr ? wait_policy : "";
  std::transform(policy.begin(), policy.end(), policy.begin(), [](unsigned char c) { return std::tolower(c); });
  if (policy == "passive") return std::nullopt;
  return fmt::format(
      "warning: OMP_WAIT_POLICY is {}: the {} OpenMP threads spin between kernels and slow OpenBLAS's GEMM threads "
      "down; export OMP_WAIT_POLICY=passive before starting meshtrain (the OpenMP runtime reads it when it loads)",
      wait_policy != nullptr ? fmt::format("'{}'", wait_policy) : std::string("unset"), threads);
}

// The same for this process's backend and environment.
inline std::optional<std::string> wait_policy_warning() {
  return wait_policy_warning(ExecSpace::name(), ExecSpace().concurrency(), std::getenv("OMP_WAIT_POLICY"),
                             std::getenv("GOMP_SPINCOUNT"));
}

}  // namespace meshtrain

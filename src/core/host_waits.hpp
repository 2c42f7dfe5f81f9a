// The places where meshtrain's host waits: for the device (a fence: core/exec.hpp's host_fence) or for a
// collective (Request::wait, parallel/comm.hpp). Each reports itself here by name as it happens, so that a
// test on any Kokkos (3.4 reports no fence to Kokkos Tools) counts a step's host waits, reason by reason
// (tests/common/kokkos_counters.hpp), and holds the step to its budget of them: the GPU step keeps the
// device busy only where the host does not wait on it (issue 42: one read a step is the goal).
//
// Kokkos-free (the communication layer reports too). Without an observer a report is one relaxed load.
#pragma once

#include <atomic>

namespace meshtrain {

using HostWaitObserver = void (*)(const char* reason);

inline std::atomic<HostWaitObserver> host_wait_observer{nullptr};

// Installs `observer` (nullptr: none); the counting tests' hook, not for production code.
inline void set_host_wait_observer(HostWaitObserver observer) {
  host_wait_observer.store(observer, std::memory_order_relaxed);
}

// `reason`: a string literal naming the wait ("gradient buckets before their reduction").
inline void report_host_wait(const char* reason) {
  if (const HostWaitObserver observer = host_wait_observer.load(std::memory_order_relaxed)) observer(reason);
}

}  // namespace meshtrain

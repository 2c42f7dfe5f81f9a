// The places where meshtrain's host waits: for the device (a fence: core/exec.hpp's host_fence) or for a
// collective of a host-memory backend (the MPI backend's Request::wait, parallel/comm.hpp; a device
// backend's wait is the device's, not the host's). Each reports itself here by name as it happens, so that a
// test on any Kokkos (3.4 reports no fence to Kokkos Tools) counts a step's host waits, reason by reason
// (tests/common/kokkos_counters.hpp), and holds the step to its budget of them: the GPU step keeps the
// device busy only where the host does not wait on it (issue 42: one read a step is the goal).
//
// Kokkos-free (the communication layer reports too). Without an observer a report is one relaxed load.
#pragma once

#include <atomic>
#include <thread>

namespace meshtrain {

using HostWaitObserver = void (*)(const char* reason);

inline std::atomic<HostWaitObserver> host_wait_observer{nullptr};

// Installs `observer` (nullptr: none); the counting tests' hook, not for production code.
inline void set_host_wait_observer(HostWaitObserver observer) {
  host_wait_observer.store(observer, std::memory_order_relaxed);
}

inline thread_local int unreported_host_waits_depth = 0;

// What runs before every host fence (core/exec.hpp) on the thread that set it: the training groups
// settle their device backends' operations there (Comm::settle, train/training_groups.cpp), so that a
// wait on a peer that stopped is a watched wait the watchdog reports, not a stream synchronisation
// that hangs. Other threads' fences (a background save's) do not run it: the Comms are the training
// thread's. None without a device backend. One at a time: set with the groups, cleared when they go.
using BeforeHostFence = void (*)(void* context);
struct BeforeHostFenceHook {
  BeforeHostFence run = nullptr;
  void* context = nullptr;
  std::thread::id owner;
};
inline BeforeHostFenceHook before_host_fence{};
inline void set_before_host_fence(BeforeHostFence run, void* context) {
  before_host_fence = {run, context, std::this_thread::get_id()};
}
inline void run_before_host_fence() {
  if (before_host_fence.run != nullptr && before_host_fence.owner == std::this_thread::get_id()) {
    before_host_fence.run(before_host_fence.context);
  }
}

// `reason`: a string literal naming the wait ("gradient buckets before their reduction").
inline void report_host_wait(const char* reason) {
  if (unreported_host_waits_depth > 0) return;
  if (const HostWaitObserver observer = host_wait_observer.load(std::memory_order_relaxed)) observer(reason);
}

// While one lives, this thread's waits go unreported: the device stream stand-in
// (parallel/stream_standin.hpp) waits on the host for what a device would do on its own streams.
class UnreportedHostWaits {
 public:
  UnreportedHostWaits() { ++unreported_host_waits_depth; }
  ~UnreportedHostWaits() { --unreported_host_waits_depth; }
  UnreportedHostWaits(const UnreportedHostWaits&) = delete;
  UnreportedHostWaits& operator=(const UnreportedHostWaits&) = delete;
};

}  // namespace meshtrain

// A test-side Kokkos Tools hook over the in-process callback API: counts what code issues to Kokkos
// (launches, reductions, fences, deep copies, allocations) by kernel name, and keeps the live
// allocations of every memory space. No tool library and no change to the code under test.
//
//   KokkosCounters::install();                      // once; before the allocations you want to see
//   const KokkosCounts c = count_kokkos([&] { training_step(...); });
//   c.launches(); c.reductions(); c.host_reductions(); c.fence_count(); c.deep_copy_count();
//   KokkosCounters::live_ranges("Host");            // [begin, end) of each live allocation
//   KokkosCounters::count_regions("meshtrain::training_step");  // then run the code, and
//   KokkosCounters::region_counts();                // the counts of each instance of that region
//
// What Kokkos reports, and so what is counted:
// - Launches: every top-level parallel_for / parallel_reduce / parallel_scan (nested team-level
//   ones are not reported), under its label. deep_copy(view, value) launches a ViewFill: it counts
//   as a launch and as a deep copy, as Kokkos reports both.
// - Host-returning reductions: a top-level parallel_reduce whose result Kokkos had to wait for on
//   the host. Kokkos 3.5 and later say so: right after such a reduce they fence the space with the
//   name "Kokkos::parallel_reduce: fence due to result being value, not view" (or
//   "Kokkos::Impl::ParallelReduce<…>: Result Not Device Accessible"); a reduce so followed counts.
//   Kokkos 3.4 reports no fence at all and nothing else tells a scalar result from a View: there
//   every top-level reduce counts as host-returning (an upper bound; exact for a code whose
//   reductions all return scalars). fences_reported() says which rule applies.
// - Fences: Kokkos 3.5 and later name them; global (Kokkos::fence) and per-instance (space.fence())
//   apart. The fence they put before every tool callback of a tool that does not refuse global
//   fencing ("Kokkos Profile Tool Fence") is left out: it is the hook's, not the code's.
// - Deep copies: every Kokkos::deep_copy, keyed "<dst label> <- <src label>" (a fill's source is
//   "Scalar", or "(none)" when the fill names an execution space; an unmanaged view's label is
//   "(no label)").
// - Host waits: every point where meshtrain's host waits for the device (host_fence) or for a
//   collective (Request::wait), by the reason it names (core/host_waits.hpp): on every Kokkos, as
//   meshtrain reports them itself.
// - Allocations: every allocation through a Kokkos memory space (Views, kokkos_malloc). Kokkos
//   reports a View's allocation from its header on, with the size of the data after it: a live
//   range is [reported pointer, + header + size), so the View's data lies inside it (a direct
//   MemorySpace::allocate's range is then a header's 128 bytes too long).
//
// Callbacks chain to whatever tool was loaded before install() (KOKKOS_TOOLS_LIBS), so a profiler
// still sees everything. Thread-safe; counts are per process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace meshtrain::test {

struct KernelCount {
  long fors = 0;
  long reduces = 0;
  long scans = 0;
  long host_reductions = 0;  // of `reduces`, those whose result came back to the host
  long launches() const { return fors + reduces + scans; }
};
bool operator==(const KernelCount& a, const KernelCount& b);

struct KokkosCounts {
  std::map<std::string, KernelCount> kernels;  // by kernel label
  std::map<std::string, long> fences;          // by fence name (empty under Kokkos 3.4)
  std::map<std::string, long> deep_copies;     // by "<dst label> <- <src label>"
  std::map<std::string, long> host_waits;      // by reason (core/host_waits.hpp)
  long global_fences = 0;                      // Kokkos::fence(): every space, every instance
  long instance_fences = 0;                    // one execution-space instance
  long allocations = 0;
  long deallocations = 0;

  long launches() const;
  long reductions() const;  // top-level parallel_reduce launches
  long host_reductions() const;
  long fence_count() const { return global_fences + instance_fences; }
  long deep_copy_count() const;
  long host_wait_count() const;
  // The kernels by launches, most first (ties by name), at most `top` of them (0: all).
  std::vector<std::pair<std::string, KernelCount>> busiest(std::size_t top = 0) const;
};

// What happened between two snapshots of the counts: after − before, item by item (zero items left out).
KokkosCounts counts_between(const KokkosCounts& before, const KokkosCounts& after);

// A table for people: the busiest `top` kernels (0: all) with their launches and host-returning
// reductions, the deep copies by labels, the fences by name, and the totals.
std::string format_counts(const KokkosCounts& counts, std::size_t top = 0);

struct LiveRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;  // one past the last byte
  std::string label;
};

class KokkosCounters {
 public:
  // Sets the callbacks (idempotent). Before Kokkos::initialize it also turns off the fence Kokkos
  // 3.5+ puts before every callback; after, those fences happen but are not counted.
  static void install();
  static bool installed();
  // Whether this Kokkos reports fences (3.5 and later), and so tells host-returning reductions
  // apart; see the header comment.
  static bool fences_reported();
  // Counts since the last reset (or install). Live allocations are not counts: reset keeps them.
  static void reset();
  static KokkosCounts counts();
  // Regions (Kokkos::Profiling::pushRegion / popRegion): from now on, each instance of the region
  // named `name` is counted on its own, from its push to its pop, as region_counts() returns them
  // (the instances since this call, in order). Counts the whole code inside the region, the kernels
  // of the host waits' callers included; a reset() inside an instance falsifies that instance.
  static void count_regions(const std::string& name);
  static std::vector<KokkosCounts> region_counts();
  // The live allocations of memory space `space` (Kokkos' name for it: "Host", "Cuda", "CudaUVM",
  // "CudaHostPinned", …), by address, made since install().
  static std::vector<LiveRange> live_ranges(const std::string& space);
  // Whether [p, p + bytes) lies inside one live allocation of `space`.
  static bool inside_live_allocation(const std::string& space, const void* p, std::size_t bytes);
};

// What `work` issues: installs the hook, resets the counts, runs it, returns the counts.
template <class Work>
KokkosCounts count_kokkos(Work&& work) {
  KokkosCounters::install();
  KokkosCounters::reset();
  work();
  return KokkosCounters::counts();
}

}  // namespace meshtrain::test

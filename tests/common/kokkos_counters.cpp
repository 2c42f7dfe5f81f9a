// The Kokkos Tools callbacks behind KokkosCounters (tests/common/kokkos_counters.hpp).
#include "common/kokkos_counters.hpp"

#include "core/host_waits.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string_view>

namespace meshtrain::test {
namespace {

namespace tools = Kokkos::Tools::Experimental;
using Kokkos::Tools::SpaceHandle;

constexpr bool kFencesReported = KOKKOS_VERSION >= 30500;
// The fence Kokkos puts before each callback of a tool that wants global fencing: the hook's own.
constexpr std::string_view kToolFence = "Kokkos::Tools::invoke_kokkosp_callback: Kokkos Profile Tool Fence";

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// A fence that Kokkos issues because a reduction's result is wanted on the host.
bool is_reduction_result_fence(std::string_view name) {
  return starts_with(name, "Kokkos::parallel_reduce") || starts_with(name, "Kokkos::Impl::ParallelReduce");
}

struct Allocation {
  std::uintptr_t end;
  std::string label;
};

struct HookState {
  std::mutex mutex;
  bool installed = false;
  tools::EventSet previous{};  // the callbacks before install(), called after ours
  KokkosCounts counts;
  std::string running_reduce;                                        // the reduce between its begin and end
  std::string ended_reduce;                                          // a reduce that just ended, until the next event
  std::map<std::string, std::map<std::uintptr_t, Allocation>> live;  // by space, by start
  // count_regions(): the region named, the counts when its open instance began, and its instances.
  std::string counted_region;
  std::vector<std::string> open_regions;  // innermost last
  KokkosCounts at_region_start;
  std::vector<KokkosCounts> region_instances;
};

// Never destroyed: Kokkos deallocates Views of static lifetime after main returns.
HookState& hook() {
  static auto* state = new HookState;
  return *state;
}

void begin_kernel(const char* name, long KernelCount::*kind, bool is_reduce) {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  KernelCount& k = h.counts.kernels[name];
  ++(k.*kind);
  if (is_reduce) {
    h.running_reduce = name;
    if (!kFencesReported) ++k.host_reductions;  // Kokkos 3.4 cannot tell: the upper bound
  }
  h.ended_reduce.clear();
}

void begin_for(const char* name, const std::uint32_t device, std::uint64_t* id) {
  begin_kernel(name, &KernelCount::fors, false);
  if (hook().previous.begin_parallel_for) hook().previous.begin_parallel_for(name, device, id);
}
void end_for(std::uint64_t id) {
  if (hook().previous.end_parallel_for) hook().previous.end_parallel_for(id);
}
void begin_scan(const char* name, const std::uint32_t device, std::uint64_t* id) {
  begin_kernel(name, &KernelCount::scans, false);
  if (hook().previous.begin_parallel_scan) hook().previous.begin_parallel_scan(name, device, id);
}
void end_scan(std::uint64_t id) {
  if (hook().previous.end_parallel_scan) hook().previous.end_parallel_scan(id);
}
void begin_reduce(const char* name, const std::uint32_t device, std::uint64_t* id) {
  begin_kernel(name, &KernelCount::reduces, true);
  if (hook().previous.begin_parallel_reduce) hook().previous.begin_parallel_reduce(name, device, id);
}
void end_reduce(std::uint64_t id) {
  {
    HookState& h = hook();
    const std::lock_guard<std::mutex> lock(h.mutex);
    h.ended_reduce.swap(h.running_reduce);
    h.running_reduce.clear();
  }
  if (hook().previous.end_parallel_reduce) hook().previous.end_parallel_reduce(id);
}

void begin_fence(const char* name, const std::uint32_t device, std::uint64_t* id) {
  if (name != kToolFence) {
    HookState& h = hook();
    const std::lock_guard<std::mutex> lock(h.mutex);
    ++h.counts.fences[name];
    // The device id's low 24 bits: 0 for Kokkos::fence(), else the instance (0xffffff: the
    // deep-copy resource's own instance); Kokkos_Profiling_Interface.hpp.
    if ((device & 0x00ffffffu) == 0) {
      ++h.counts.global_fences;
    } else {
      ++h.counts.instance_fences;
    }
    if (!h.ended_reduce.empty() && is_reduction_result_fence(name)) {
      ++h.counts.kernels[h.ended_reduce].host_reductions;
    }
    h.ended_reduce.clear();
  }
  if (hook().previous.begin_fence) hook().previous.begin_fence(name, device, id);
}
void end_fence(std::uint64_t id) {
  if (hook().previous.end_fence) hook().previous.end_fence(id);
}

// meshtrain's own report (core/host_waits.hpp), not a Kokkos Tools callback.
void host_wait(const char* reason) {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  ++h.counts.host_waits[reason];
}

void begin_deep_copy(SpaceHandle dst_space, const char* dst_label, const void* dst, SpaceHandle src_space,
                     const char* src_label, const void* src, std::uint64_t bytes) {
  {
    HookState& h = hook();
    const std::lock_guard<std::mutex> lock(h.mutex);
    const auto named = [](const char* label) { return std::string(*label != '\0' ? label : "(no label)"); };
    ++h.counts.deep_copies[named(dst_label) + " <- " + named(src_label)];  // unmanaged views have no label
    h.ended_reduce.clear();
  }
  if (hook().previous.begin_deep_copy) {
    hook().previous.begin_deep_copy(dst_space, dst_label, dst, src_space, src_label, src, bytes);
  }
}
void end_deep_copy() {
  if (hook().previous.end_deep_copy) hook().previous.end_deep_copy();
}

void allocate(const SpaceHandle space, const char* label, const void* p, const std::uint64_t bytes) {
  {
    HookState& h = hook();
    const std::lock_guard<std::mutex> lock(h.mutex);
    ++h.counts.allocations;
    // A View's allocation reports the start of Kokkos' header and the bytes after it (3.4 and 4.x
    // alike); a direct MemorySpace::allocate reports its own bytes. The range covers both cases.
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    h.live[space.name][begin] = Allocation{begin + sizeof(Kokkos::Impl::SharedAllocationHeader) + bytes, label};
  }
  if (hook().previous.allocate_data) hook().previous.allocate_data(space, label, p, bytes);
}
void deallocate(const SpaceHandle space, const char* label, const void* p, const std::uint64_t bytes) {
  {
    HookState& h = hook();
    const std::lock_guard<std::mutex> lock(h.mutex);
    ++h.counts.deallocations;
    h.live[space.name].erase(reinterpret_cast<std::uintptr_t>(p));
  }
  if (hook().previous.deallocate_data) hook().previous.deallocate_data(space, label, p, bytes);
}

// The counted region's instances: the counts between its push and its pop (reset() inside one
// falsifies that instance, as the header says).
void push_region(const char* name) {
  {
    HookState& h = hook();
    const std::lock_guard<std::mutex> lock(h.mutex);
    h.open_regions.emplace_back(name);
    if (h.open_regions.back() == h.counted_region) h.at_region_start = h.counts;
  }
  if (hook().previous.push_region) hook().previous.push_region(name);
}
void pop_region() {
  {
    HookState& h = hook();
    const std::lock_guard<std::mutex> lock(h.mutex);
    if (!h.open_regions.empty()) {
      if (h.open_regions.back() == h.counted_region) {
        h.region_instances.push_back(counts_between(h.at_region_start, h.counts));
      }
      h.open_regions.pop_back();
    }
  }
  if (hook().previous.pop_region) hook().previous.pop_region();
}

// Asked once, at Kokkos::initialize (so only when install() ran before it): no fence before each
// callback, unless a tool loaded before us wants one.
void tool_settings(const std::uint32_t count, Kokkos_Tools_ToolSettings* settings) {
  settings->requires_global_fencing = false;
  if (hook().previous.request_tool_settings) hook().previous.request_tool_settings(count, settings);
}

}  // namespace

namespace {
// after − before, key by key; keys whose difference is zero are left out.
template <class Value, class Subtract>
std::map<std::string, Value> map_difference(const std::map<std::string, Value>& before,
                                            const std::map<std::string, Value>& after, Subtract subtract) {
  std::map<std::string, Value> out;
  for (const auto& [key, value] : after) {
    const auto earlier = before.find(key);
    const Value d = earlier == before.end() ? value : subtract(value, earlier->second);
    if (!(d == Value{})) out.emplace(key, d);
  }
  return out;
}
}  // namespace

bool operator==(const KernelCount& a, const KernelCount& b) {
  return a.fors == b.fors && a.reduces == b.reduces && a.scans == b.scans && a.host_reductions == b.host_reductions;
}

KokkosCounts counts_between(const KokkosCounts& before, const KokkosCounts& after) {
  const auto minus = [](long a, long b) { return a - b; };
  KokkosCounts d;
  d.kernels = map_difference(before.kernels, after.kernels, [](const KernelCount& a, const KernelCount& b) {
    return KernelCount{a.fors - b.fors, a.reduces - b.reduces, a.scans - b.scans,
                       a.host_reductions - b.host_reductions};
  });
  d.fences = map_difference(before.fences, after.fences, minus);
  d.deep_copies = map_difference(before.deep_copies, after.deep_copies, minus);
  d.host_waits = map_difference(before.host_waits, after.host_waits, minus);
  d.global_fences = after.global_fences - before.global_fences;
  d.instance_fences = after.instance_fences - before.instance_fences;
  d.allocations = after.allocations - before.allocations;
  d.deallocations = after.deallocations - before.deallocations;
  return d;
}

long KokkosCounts::launches() const {
  long n = 0;
  for (const auto& [name, k] : kernels) n += k.launches();
  return n;
}

long KokkosCounts::reductions() const {
  long n = 0;
  for (const auto& [name, k] : kernels) n += k.reduces;
  return n;
}

long KokkosCounts::host_reductions() const {
  long n = 0;
  for (const auto& [name, k] : kernels) n += k.host_reductions;
  return n;
}

long KokkosCounts::deep_copy_count() const {
  long n = 0;
  for (const auto& [labels, c] : deep_copies) n += c;
  return n;
}

long KokkosCounts::host_wait_count() const {
  long n = 0;
  for (const auto& [reason, c] : host_waits) n += c;
  return n;
}

std::vector<std::pair<std::string, KernelCount>> KokkosCounts::busiest(std::size_t top) const {
  std::vector<std::pair<std::string, KernelCount>> sorted(kernels.begin(), kernels.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.launches() > b.second.launches(); });
  if (top > 0 && sorted.size() > top) sorted.resize(top);
  return sorted;
}

std::string format_counts(const KokkosCounts& c, std::size_t top) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "  %8s %8s  %s\n", "launches", "to host", "kernel");
  out << line;
  const auto kernels = c.busiest(top);
  long shown = 0;
  for (const auto& [name, k] : kernels) {
    std::snprintf(line, sizeof line, "  %8ld %8ld  %s\n", k.launches(), k.host_reductions, name.c_str());
    out << line;
    shown += k.launches();
  }
  if (kernels.size() < c.kernels.size()) {
    std::snprintf(line, sizeof line, "  %8ld %8s  (%zu other kernels)\n", c.launches() - shown, "",
                  c.kernels.size() - kernels.size());
    out << line;
  }
  for (const auto& [labels, n] : c.deep_copies) {
    std::snprintf(line, sizeof line, "  %8ld %8s  deep_copy %s\n", n, "", labels.c_str());
    out << line;
  }
  for (const auto& [name, n] : c.fences) {
    std::snprintf(line, sizeof line, "  %8ld %8s  fence %s\n", n, "", name.c_str());
    out << line;
  }
  for (const auto& [reason, n] : c.host_waits) {
    std::snprintf(line, sizeof line, "  %8ld %8s  host wait: %s\n", n, "", reason.c_str());
    out << line;
  }
  out << "  totals: " << c.launches() << " launches (" << c.reductions() << " reductions, " << c.host_reductions()
      << " returning to the host), " << c.deep_copy_count() << " deep copies, ";
  if (KokkosCounters::fences_reported()) {
    out << c.global_fences << " global + " << c.instance_fences << " instance fences, ";
  } else {
    out << "fences not reported by Kokkos " << KOKKOS_VERSION / 10000 << "." << KOKKOS_VERSION / 100 % 100 << ", ";
  }
  out << c.host_wait_count() << " host waits, " << c.allocations << " allocations, " << c.deallocations
      << " deallocations\n";
  return out.str();
}

void KokkosCounters::install() {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  if (h.installed) return;
  set_host_wait_observer(&host_wait);
  h.previous = tools::get_callbacks();
  tools::EventSet mine = h.previous;
  mine.begin_parallel_for = &begin_for;
  mine.end_parallel_for = &end_for;
  mine.begin_parallel_reduce = &begin_reduce;
  mine.end_parallel_reduce = &end_reduce;
  mine.begin_parallel_scan = &begin_scan;
  mine.end_parallel_scan = &end_scan;
  mine.begin_fence = &begin_fence;
  mine.end_fence = &end_fence;
  mine.begin_deep_copy = &begin_deep_copy;
  mine.end_deep_copy = &end_deep_copy;
  mine.allocate_data = &allocate;
  mine.deallocate_data = &deallocate;
  mine.push_region = &push_region;
  mine.pop_region = &pop_region;
  mine.request_tool_settings = &tool_settings;
  tools::set_callbacks(mine);
  h.installed = true;
}

bool KokkosCounters::installed() {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  return h.installed;
}

bool KokkosCounters::fences_reported() { return kFencesReported; }

void KokkosCounters::reset() {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  h.counts = KokkosCounts{};
  h.ended_reduce.clear();
}

KokkosCounts KokkosCounters::counts() {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  return h.counts;
}

void KokkosCounters::count_regions(const std::string& name) {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  h.counted_region = name;
  h.region_instances.clear();
}

std::vector<KokkosCounts> KokkosCounters::region_counts() {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  return h.region_instances;
}

std::vector<LiveRange> KokkosCounters::live_ranges(const std::string& space) {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  std::vector<LiveRange> ranges;
  const auto found = h.live.find(space);
  if (found == h.live.end()) return ranges;
  for (const auto& [begin, a] : found->second) ranges.push_back({begin, a.end, a.label});
  return ranges;
}

bool KokkosCounters::inside_live_allocation(const std::string& space, const void* p, std::size_t bytes) {
  HookState& h = hook();
  const std::lock_guard<std::mutex> lock(h.mutex);
  const auto found = h.live.find(space);
  if (found == h.live.end()) return false;
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  auto after = found->second.upper_bound(begin);  // the first allocation starting past p
  if (after == found->second.begin()) return false;
  const Allocation& a = std::prev(after)->second;
  return begin + bytes <= a.end;
}

}  // namespace meshtrain::test

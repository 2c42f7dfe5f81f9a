// A Kokkos Tools library (KOKKOS_TOOLS_LIBS=libmeshtrain_kernel_timer.so) that times every kernel and
// counts every fence inside the trainer's steps (its "meshtrain::training_step" profiling region), for the
// GPU check's profiled run (bench/gpu/throughput_steps.py). At the end it writes JSON to the file
// MESHTRAIN_KERNEL_TIMES names:
//   {"steps": n, "kernels": {label: {"launches": k, "seconds": s}}, "fences": {name: count},
//    "fence_callbacks": bool}
// MESHTRAIN_KERNEL_TIMER_SKIP_STEPS=n leaves the first n steps out (first allocations, cuBLAS' heuristics).
// A kernel's time runs from its begin callback to its end callback. Kokkos fences the device around
// both for a tool that does not turn global fencing off (this one does not), so the span is the kernel's
// own, launch included: what kokkos-tools' simple kernel timer reports. The fences Kokkos adds for the tool
// ("Kokkos Profile Tool Fence") are not counted: every other fence inside a step is the host waiting for
// the device. Kokkos 3.4 calls no fence callback at all (fence_callbacks false then).
//
// No Kokkos headers: the Tools interface is a C ABI.
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelTime {
  long launches = 0;
  double seconds = 0;
};

struct Timer {
  std::mutex mutex;
  int step_depth = 0;  // inside a counted step region (they do not nest, but a count is as cheap)
  long steps = 0;      // counted
  long steps_seen = 0;
  long skip = 0;
  std::vector<std::string> regions;
  std::map<std::string, KernelTime> kernels;
  std::map<std::string, long> fences;
  bool fence_callbacks = false;
  struct Open {
    std::string name;
    std::chrono::steady_clock::time_point start;
  };
  std::map<std::uint64_t, Open> open;
  std::uint64_t next_id = 1;
};

Timer& timer() {
  static Timer t;
  return t;
}

constexpr const char* kStepRegion = "meshtrain::training_step";

void begin_kernel(const char* name, std::uint64_t* id) {
  Timer& t = timer();
  const std::lock_guard<std::mutex> lock(t.mutex);
  *id = t.next_id++;
  if (t.step_depth > 0) t.open[*id] = {name, std::chrono::steady_clock::now()};
}

void end_kernel(std::uint64_t id) {
  const auto now = std::chrono::steady_clock::now();
  Timer& t = timer();
  const std::lock_guard<std::mutex> lock(t.mutex);
  const auto it = t.open.find(id);
  if (it == t.open.end()) return;
  KernelTime& k = t.kernels[it->second.name];
  ++k.launches;
  k.seconds += std::chrono::duration<double>(now - it->second.start).count();
  t.open.erase(it);
}

// JSON string contents: kernel labels are C++ names (no control characters), but quote what JSON needs.
std::string escaped(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return out;
}

void write_report() {
  const char* path = std::getenv("MESHTRAIN_KERNEL_TIMES");
  if (path == nullptr) return;
  Timer& t = timer();
  const std::lock_guard<std::mutex> lock(t.mutex);
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "meshtrain kernel timer: cannot write %s: %s\n", path, std::strerror(errno));
    return;
  }
  std::fprintf(f, "{\"steps\": %ld, \"fence_callbacks\": %s, \"kernels\": {", t.steps,
               t.fence_callbacks ? "true" : "false");
  const char* sep = "";
  for (const auto& [name, k] : t.kernels) {
    std::fprintf(f, "%s\"%s\": {\"launches\": %ld, \"seconds\": %.9f}", sep, escaped(name).c_str(), k.launches,
                 k.seconds);
    sep = ", ";
  }
  std::fprintf(f, "}, \"fences\": {");
  sep = "";
  for (const auto& [name, count] : t.fences) {
    std::fprintf(f, "%s\"%s\": %ld", sep, escaped(name).c_str(), count);
    sep = ", ";
  }
  std::fprintf(f, "}}\n");
  std::fclose(f);
}

}  // namespace

extern "C" {

struct Kokkos_Profiling_KokkosPDeviceInfo {
  std::size_t deviceID;
};

void kokkosp_init_library(int, std::uint64_t, std::uint32_t, Kokkos_Profiling_KokkosPDeviceInfo*) {
  const char* skip = std::getenv("MESHTRAIN_KERNEL_TIMER_SKIP_STEPS");
  timer().skip = skip != nullptr ? std::atol(skip) : 0;
}

void kokkosp_finalize_library() { write_report(); }

void kokkosp_begin_parallel_for(const char* name, std::uint32_t, std::uint64_t* id) { begin_kernel(name, id); }
void kokkosp_end_parallel_for(std::uint64_t id) { end_kernel(id); }
void kokkosp_begin_parallel_reduce(const char* name, std::uint32_t, std::uint64_t* id) { begin_kernel(name, id); }
void kokkosp_end_parallel_reduce(std::uint64_t id) { end_kernel(id); }
void kokkosp_begin_parallel_scan(const char* name, std::uint32_t, std::uint64_t* id) { begin_kernel(name, id); }
void kokkosp_end_parallel_scan(std::uint64_t id) { end_kernel(id); }

void kokkosp_begin_fence(const char* name, std::uint32_t, std::uint64_t* id) {
  Timer& t = timer();
  const std::lock_guard<std::mutex> lock(t.mutex);
  t.fence_callbacks = true;
  *id = 0;
  if (t.step_depth > 0 && std::strcmp(name, "Kokkos Profile Tool Fence") != 0) ++t.fences[name];
}
void kokkosp_end_fence(std::uint64_t) {}

void kokkosp_push_profile_region(const char* name) {
  Timer& t = timer();
  const std::lock_guard<std::mutex> lock(t.mutex);
  t.regions.emplace_back(name);
  if (t.regions.back() == kStepRegion && t.steps_seen++ >= t.skip) ++t.step_depth;
}

void kokkosp_pop_profile_region() {
  Timer& t = timer();
  const std::lock_guard<std::mutex> lock(t.mutex);
  if (t.regions.empty()) return;
  if (t.regions.back() == kStepRegion && t.step_depth > 0) {
    --t.step_depth;
    ++t.steps;
  }
  t.regions.pop_back();
}

}  // extern "C"

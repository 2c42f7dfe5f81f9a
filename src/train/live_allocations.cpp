// The live allocations of the execution space's memory, from Kokkos Tools' callbacks.
#include "train/live_allocations.hpp"

#include "core/exec.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

namespace meshtrain {
namespace {

// Kokkos reports a View's allocation from the start of its header (Kokkos' SharedAllocationHeader,
// in 3.4 as in 4.x) with the size of its data, which follows the header: the data's last bytes lie
// past base + size. A range is taken as [base, base + header + size), which holds the data of a
// View and overshoots an allocation without a header by at most the header's size.
constexpr std::size_t header_bytes = sizeof(Kokkos::Impl::SharedAllocationHeader);

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, std::size_t> extents;  // base → bytes (header included)
};

// Never destroyed: Kokkos may free Views after static destructors have run.
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

bool ours(const Kokkos::Tools::SpaceHandle& handle) {
  return std::strncmp(handle.name, MemSpace::name(), sizeof(handle.name)) == 0;
}

void allocated(const Kokkos::Tools::SpaceHandle handle, const char*, const void* ptr, const std::uint64_t size) {
  if (!ours(handle) || ptr == nullptr) return;
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.extents[reinterpret_cast<std::uintptr_t>(ptr)] = std::size_t(size) + header_bytes;
}

void freed(const Kokkos::Tools::SpaceHandle handle, const char*, const void* ptr, const std::uint64_t) {
  if (!ours(handle) || ptr == nullptr) return;
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.extents.erase(reinterpret_cast<std::uintptr_t>(ptr));
}

}  // namespace

void record_live_allocations() {
  static const bool started = [] {
    Kokkos::Tools::Experimental::set_allocate_data_callback(allocated);
    Kokkos::Tools::Experimental::set_deallocate_data_callback(freed);
    return true;
  }();
  (void)started;
}

bool inside_live_allocation(const void* data, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  auto after = r.extents.upper_bound(begin);  // the first allocation starting past `data`
  if (after == r.extents.begin()) return false;
  const auto& [base, extent] = *std::prev(after);
  return begin - base <= extent && bytes <= extent - (begin - base);
}

}  // namespace meshtrain

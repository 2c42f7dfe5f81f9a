// Memory categories and the process's peak resident memory.
#include "core/memory_ledger.hpp"

#include <fstream>
#include <sstream>

namespace meshtrain {

const char* category_name(MemoryCategory category) {
  static constexpr std::array<const char*, memory_categories> names = {
      "weights", "master", "grads", "optimizer", "activations", "comm_buffers", "workspace"};
  return names[static_cast<int>(category)];
}

std::int64_t MemoryBytes::total() const {
  std::int64_t sum = 0;
  for (std::int64_t b : bytes) sum += b;
  return sum;
}

MemoryBytes& MemoryBytes::operator+=(const MemoryBytes& other) {
  for (int i = 0; i < memory_categories; ++i) bytes[i] += other.bytes[i];
  return *this;
}

std::int64_t peak_rss_bytes() {
  // Linux: "VmHWM:   123456 kB" in /proc/self/status.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      std::int64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

}  // namespace meshtrain

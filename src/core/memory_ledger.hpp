// What a rank allocates, by category (issue: memory accounting), and the process's peak resident
// memory. The trainer records every buffer it allocates here; the planner (`meshtrain plan`)
// computes the same records from the same sizing code without allocating (plan/memory_plan.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace meshtrain {

enum class MemoryCategory : int {
  weights,       // parameters the model computes with (a ZeRO-3 shard plus the gathered units)
  master,        // fp32 master weights under bf16/fp16 (none under fp32: the weights are the master)
  grads,         // gradients (a ZeRO-2/3 shard plus the units being reduced)
  optimizer,     // AdamW moments (a ZeRO-1/2/3 shard)
  activations,   // activations kept for backward, and backward's scratch
  comm_buffers,  // staging of collectives
  workspace,     // everything else the trainer allocates (checkpoint staging, batch tokens)
};
inline constexpr int memory_categories = 7;

// "weights", "master", "grads", "optimizer", "activations", "comm_buffers", "workspace".
const char* category_name(MemoryCategory category);

struct MemoryBytes {
  std::array<std::int64_t, memory_categories> bytes{};

  std::int64_t& operator[](MemoryCategory c) { return bytes[static_cast<int>(c)]; }
  std::int64_t operator[](MemoryCategory c) const { return bytes[static_cast<int>(c)]; }
  std::int64_t total() const;
  MemoryBytes& operator+=(const MemoryBytes& other);
  friend MemoryBytes operator+(MemoryBytes a, const MemoryBytes& b) { return a += b; }
  static MemoryBytes of(MemoryCategory c, std::size_t bytes) {
    MemoryBytes m;
    m[c] = static_cast<std::int64_t>(bytes);
    return m;
  }
};

// The process's peak resident set size so far (VmHWM), in bytes; 0 where the OS does not say.
std::int64_t peak_rss_bytes();

}  // namespace meshtrain

// The layout-independent checksum of checkpoint tensors.
#include "io/checkpoint/tensor_checksum.hpp"

#include "io/checkpoint/file.hpp"

#include <bit>

namespace meshtrain::io {
namespace {

constexpr std::uint64_t index_mixer = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio

std::uint64_t run_sum(std::uint64_t first_index, const float* data, std::uint64_t length) {
  std::uint64_t sum = 0;
  for (std::uint64_t k = 0; k < length; ++k) {
    sum += fmix64((first_index + k) * index_mixer ^ std::uint64_t(std::bit_cast<std::uint32_t>(data[k])));
  }
  return sum;
}

}  // namespace

std::uint64_t element_hash(std::uint64_t global_index, float value) { return run_sum(global_index, &value, 1); }

std::uint64_t partial_checksum(const TensorSlab& slab, ElementRange range, const float* data) {
  std::uint64_t sum = 0;
  for_each_global_run(slab, range, [&](std::uint64_t index, std::uint64_t position, std::uint64_t length) {
    sum += run_sum(index, data + position, length);
  });
  return sum;
}

std::uint64_t tensor_checksum(const float* data, std::uint64_t count) { return run_sum(0, data, count); }

}  // namespace meshtrain::io

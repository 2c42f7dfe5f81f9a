// TensorSlab's sizes and the checks of a slab and of a run of its elements (io/checkpoint/impl/slab_checks.hpp).
#include "io/checkpoint/impl/slab_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>

namespace meshtrain::io {

std::uint64_t TensorSlab::elements() const {
  const std::uint64_t per_block = std::accumulate(extent.begin(), extent.end(), std::uint64_t{1}, std::multiplies<>());
  return std::accumulate(count.begin(), count.end(), per_block, std::multiplies<>());
}

TensorSlab TensorSlab::whole(std::string name, std::vector<std::uint64_t> global_shape) {
  std::vector<std::uint64_t> offset(global_shape.size(), 0);
  std::vector<std::uint64_t> extent = global_shape;
  return TensorSlab{std::move(name), std::move(global_shape), std::move(offset), std::move(extent)};
}

namespace detail {

std::string normalize(const std::string& name) { return (!name.empty() && name.front() == '/') ? name : "/" + name; }

std::string shape_string(const std::vector<std::uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

bool holds_nothing(const TensorSlab& slab) {
  const auto zero = [](const std::vector<std::uint64_t>& v) { return std::find(v.begin(), v.end(), 0u) != v.end(); };
  return zero(slab.extent) || zero(slab.count);
}

std::string slab_text(const TensorSlab& slab) {
  if (slab.count.empty() && slab.stride.empty()) {
    return fmt::format("block at offset {} of extent {}", shape_string(slab.offset), shape_string(slab.extent));
  }
  return fmt::format("piece at offset {} of extent {}, count {} and stride {}", shape_string(slab.offset),
                     shape_string(slab.extent), shape_string(slab.count), shape_string(slab.stride));
}

std::string slab_problem(const TensorSlab& slab, bool has_data) {
  const std::size_t rank = slab.global_shape.size();
  if (slab.name.empty() || slab.name == "/") return "a tensor needs a name";
  if (rank == 0) return fmt::format("{} has no dimensions; store scalars as attributes", slab.name);
  if (slab.offset.size() != rank || slab.extent.size() != rank) {
    return fmt::format("{}: global shape {} has {} dimensions but offset {} and extent {} have {} and {}", slab.name,
                       shape_string(slab.global_shape), rank, shape_string(slab.offset), shape_string(slab.extent),
                       slab.offset.size(), slab.extent.size());
  }
  if ((!slab.count.empty() && slab.count.size() != rank) || (!slab.stride.empty() && slab.stride.size() != rank)) {
    return fmt::format(
        "{}: global shape {} has {} dimensions but count {} and stride {} have {} and {} (empty means "
        "all ones)",
        slab.name, shape_string(slab.global_shape), rank, shape_string(slab.count), shape_string(slab.stride),
        slab.count.size(), slab.stride.size());
  }
  if (holds_nothing(slab)) return {};
  for (std::size_t d = 0; d < rank; ++d) {
    const std::uint64_t count = count_at(slab, d), stride = stride_at(slab, d);
    if (count > 1 && stride < slab.extent[d]) {
      return fmt::format(
          "{}: {} has overlapping blocks in dimension {} (stride {} < extent {}); where the count "
          "exceeds 1 the stride must be at least the extent",
          slab.name, slab_text(slab), d, stride, slab.extent[d]);
    }
    // offset + (count - 1) * stride + extent <= global_shape, without overflowing (stride >= 1 here).
    const std::uint64_t size = slab.global_shape[d];
    if (slab.offset[d] > size || slab.extent[d] > size - slab.offset[d] ||
        (count > 1 && count - 1 > (size - slab.offset[d] - slab.extent[d]) / stride)) {
      return fmt::format("{}: {} lies outside the global shape {}", slab.name, slab_text(slab),
                         shape_string(slab.global_shape));
    }
  }
  if (!has_data) {
    return fmt::format("{}: a {} of {} elements with a null data pointer", slab.name, slab_text(slab), slab.elements());
  }
  return {};
}

std::string range_problem(const TensorSlab& slab, ElementRange range) {
  const std::uint64_t n = holds_nothing(slab) ? 0 : slab.elements();
  if (range.first <= n && range.count <= n - range.first) return {};
  return fmt::format("{}: elements [{}, {}) of a {} of {} elements", slab.name, range.first, range.first + range.count,
                     slab_text(slab), n);
}

}  // namespace detail
}  // namespace meshtrain::io

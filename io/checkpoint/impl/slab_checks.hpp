// What the checkpoint writer and reader check of a TensorSlab before HDF5 sees it, and the text
// their messages describe it with.
#pragma once

#include "io/checkpoint/file.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::io::detail {

// An absolute dataset path: "model/wte.weight" -> "/model/wte.weight".
std::string normalize(const std::string& name);
// "[768,2304]".
std::string shape_string(const std::vector<std::uint64_t>& shape);

// count[d] and stride[d] of a slab, empty vectors meaning all ones.
inline std::uint64_t count_at(const TensorSlab& slab, std::size_t d) { return slab.count.empty() ? 1 : slab.count[d]; }
inline std::uint64_t stride_at(const TensorSlab& slab, std::size_t d) {
  return slab.stride.empty() ? 1 : slab.stride[d];
}

// Whether a slab holds nothing: a zero in extent or count (not elements() == 0, which a product
// that overflows 64 bits could also give).
bool holds_nothing(const TensorSlab& slab);

// "block at offset [..] of extent [..]", with the count and stride of a piece of several blocks.
std::string slab_text(const TensorSlab& slab);

// What is wrong with a slab (empty if nothing); has_data: whether the caller passed a buffer.
std::string slab_problem(const TensorSlab& slab, bool has_data);

// What is wrong with a run of a slab's elements (empty if nothing).
std::string range_problem(const TensorSlab& slab, ElementRange range);

}  // namespace meshtrain::io::detail

// A contiguous run of a slab's elements and where they lie in the global tensor.
//
// A TensorSlab (io/checkpoint/file.hpp) lists a rank's piece of a global tensor in row-major order
// of global coordinates. Sharded optimizer state (ZeRO) owns a contiguous run of that list, which in
// the global tensor is a ragged region: a partial row, whole rows, a partial row, each row possibly
// split into several blocks (tensor-parallel q|k|v columns). This file turns a run into
//   - boxes: few rectangular global blocks whose union is the run (what HDF5 selects), and
//   - runs of consecutive global row-major indices (what checksums walk).
// Both keep the run's order: the local row-major order equals the global row-major order of the
// selected elements, because the local-to-global map is increasing in every dimension.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace meshtrain::io {

struct TensorSlab;

// Elements [first, first + count) of a slab's piece, in its row-major order.
struct ElementRange {
  std::uint64_t first = 0;
  std::uint64_t count = 0;
};

// A rectangular block of the global tensor.
struct GlobalBox {
  std::vector<std::uint64_t> start;
  std::vector<std::uint64_t> extent;
};

// Boxes whose union is exactly the range's elements (none for an empty range). The range must lie
// inside the slab's elements, and the slab must be valid.
std::vector<GlobalBox> range_boxes(const TensorSlab& slab, ElementRange range);

// Calls visit(global_index, position, length) for each maximal run of consecutive global row-major
// indices in the range, in order: elements position … position + length − 1 of the range (0 is the
// range's first element) are global elements global_index … global_index + length − 1.
void for_each_global_run(
    const TensorSlab& slab, ElementRange range,
    const std::function<void(std::uint64_t global_index, std::uint64_t position, std::uint64_t length)>& visit);

}  // namespace meshtrain::io

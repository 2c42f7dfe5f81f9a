// Runs of a slab's elements as global boxes and as runs of global indices.
#include "io/checkpoint/slab_range.hpp"

#include "io/checkpoint/file.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace meshtrain::io {
namespace {

// Where a slab's local (row-major, blocks packed together) coordinates lie in the global tensor,
// one dimension at a time.
struct SlabAxes {
  explicit SlabAxes(const TensorSlab& slab) : slab_(slab), rank_(slab.global_shape.size()) {}

  std::size_t rank() const { return rank_; }
  std::uint64_t block(std::size_t d) const { return slab_.extent[d]; }
  std::uint64_t blocks(std::size_t d) const { return slab_.count.empty() ? 1 : slab_.count[d]; }
  std::uint64_t stride(std::size_t d) const { return slab_.stride.empty() || blocks(d) == 1 ? 0 : slab_.stride[d]; }
  std::uint64_t local_size(std::size_t d) const { return blocks(d) * block(d); }
  std::uint64_t global_coordinate(std::size_t d, std::uint64_t local) const {
    return slab_.offset[d] + (local / block(d)) * stride(d) + local % block(d);
  }

 private:
  const TensorSlab& slab_;
  std::size_t rank_;
};

void check_range(const TensorSlab& slab, ElementRange range) {
  const std::uint64_t n = slab.elements();
  if (range.first > n || range.count > n - range.first) {
    throw std::invalid_argument(fmt::format("{}: elements [{}, {}) lie outside the piece's {} elements", slab.name,
                                            range.first, range.first + range.count, n));
  }
}

// A box in local coordinates, [lo, hi) in each dimension.
struct LocalBox {
  std::vector<std::uint64_t> lo, hi;
  // The box of single coordinates `fixed` in the leading dimensions, to be extended.
  static LocalBox at(const std::vector<std::uint64_t>& fixed) {
    LocalBox box{fixed, fixed};
    for (auto& h : box.hi) ++h;
    return box;
  }
};

// Splits local elements [a, b) of the sub-array of dimensions d… (the earlier ones fixed in
// `prefix`) into boxes: a partial leading row, whole rows, a partial trailing row, recursively.
void local_boxes(const SlabAxes& axes, std::size_t d, std::uint64_t a, std::uint64_t b,
                 std::vector<std::uint64_t>& prefix, std::vector<LocalBox>& out) {
  if (a >= b) return;
  const std::size_t n = axes.rank();
  if (d + 1 == n) {
    LocalBox box = LocalBox::at(prefix);
    box.lo.push_back(a);
    box.hi.push_back(b);
    out.push_back(std::move(box));
    return;
  }
  std::uint64_t inner = 1;
  for (std::size_t e = d + 1; e < n; ++e) inner *= axes.local_size(e);
  std::uint64_t row = a / inner;
  const std::uint64_t last_row = b / inner, head = a % inner, tail = b % inner;
  const auto one_row = [&](std::uint64_t r, std::uint64_t from, std::uint64_t to) {
    prefix.push_back(r);
    local_boxes(axes, d + 1, from, to, prefix, out);
    prefix.pop_back();
  };
  if (row == last_row) {
    one_row(row, head, tail);
    return;
  }
  if (head != 0) one_row(row++, head, inner);
  if (row < last_row) {
    LocalBox box = LocalBox::at(prefix);
    box.lo.push_back(row);
    box.hi.push_back(last_row);
    for (std::size_t e = d + 1; e < n; ++e) {
      box.lo.push_back(0);
      box.hi.push_back(axes.local_size(e));
    }
    out.push_back(std::move(box));
  }
  if (tail != 0) one_row(last_row, 0, tail);
}

// The global intervals (start, length) that local coordinates [lo, hi) of dimension d cover: one per
// block they touch.
std::vector<std::pair<std::uint64_t, std::uint64_t>> global_intervals(const SlabAxes& axes, std::size_t d,
                                                                      std::uint64_t lo, std::uint64_t hi) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  const std::uint64_t e = axes.block(d);
  for (std::uint64_t k = lo / e; k * e < hi; ++k) {
    const std::uint64_t from = std::max(lo, k * e), to = std::min(hi, (k + 1) * e);
    out.emplace_back(axes.global_coordinate(d, from), to - from);
  }
  return out;
}

}  // namespace

std::vector<GlobalBox> range_boxes(const TensorSlab& slab, ElementRange range) {
  check_range(slab, range);
  std::vector<GlobalBox> boxes;
  if (range.count == 0) return boxes;
  const SlabAxes axes(slab);
  std::vector<LocalBox> local;
  std::vector<std::uint64_t> prefix;
  local_boxes(axes, 0, range.first, range.first + range.count, prefix, local);
  const std::size_t n = axes.rank();
  for (const LocalBox& box : local) {
    // The product, over dimensions, of the global intervals each side of the box covers.
    std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> sides(n);
    for (std::size_t d = 0; d < n; ++d) sides[d] = global_intervals(axes, d, box.lo[d], box.hi[d]);
    std::vector<std::size_t> pick(n, 0);
    while (true) {
      GlobalBox g{std::vector<std::uint64_t>(n), std::vector<std::uint64_t>(n)};
      for (std::size_t d = 0; d < n; ++d) std::tie(g.start[d], g.extent[d]) = sides[d][pick[d]];
      boxes.push_back(std::move(g));
      std::size_t d = n;
      while (d > 0 && ++pick[d - 1] == sides[d - 1].size()) pick[--d] = 0;
      if (d == 0) break;
    }
  }
  return boxes;
}

void for_each_global_run(const TensorSlab& slab, ElementRange range,
                         const std::function<void(std::uint64_t, std::uint64_t, std::uint64_t)>& visit) {
  check_range(slab, range);
  if (range.count == 0) return;
  const SlabAxes axes(slab);
  const std::size_t n = axes.rank();
  std::vector<std::uint64_t> global_stride(n, 1), local(n, 0);
  for (std::size_t d = n - 1; d > 0; --d) global_stride[d - 1] = global_stride[d] * slab.global_shape[d];
  std::uint64_t rest = range.first;
  for (std::size_t d = n; d-- > 0;) {
    local[d] = rest % axes.local_size(d);
    rest /= axes.local_size(d);
  }
  const std::size_t last = n - 1;
  const std::uint64_t block = axes.block(last);
  for (std::uint64_t position = 0; position < range.count;) {
    // Consecutive in the global tensor up to the end of the block (or of the range).
    const std::uint64_t length = std::min(block - local[last] % block, range.count - position);
    std::uint64_t index = 0;
    for (std::size_t d = 0; d < n; ++d) index += axes.global_coordinate(d, local[d]) * global_stride[d];
    visit(index, position, length);
    position += length;
    local[last] += length;
    for (std::size_t d = last; d > 0 && local[d] == axes.local_size(d); --d) {
      local[d] = 0;
      ++local[d - 1];
    }
  }
}

}  // namespace meshtrain::io

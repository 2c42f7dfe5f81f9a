// HDF5 selections of slab pieces and object look-ups (io/checkpoint/impl/hdf5_selection.hpp).
#include "io/checkpoint/impl/hdf5_selection.hpp"

#include "io/checkpoint/impl/slab_checks.hpp"

#include <algorithm>
#include <vector>

namespace meshtrain::io::detail {
namespace {

std::vector<hsize_t> to_hsize(const std::vector<std::uint64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

Selection select_piece(hid_t file_space, const TensorSlab& slab, ElementRange range) {
  Selection s{h5::Dataspace{MESHTRAIN_H5_CHECK(H5Scopy(file_space), "out of memory?")}, {}};
  const std::uint64_t n = holds_nothing(slab) ? 0 : range.count;
  const hsize_t memory_dims[1] = {std::max<hsize_t>(n, 1)};
  s.memory = h5::Dataspace{MESHTRAIN_H5_CHECK(H5Screate_simple(1, memory_dims, nullptr), "out of memory?")};
  if (n == 0) {
    MESHTRAIN_H5_CHECK(H5Sselect_none(s.file.get()), "internal: selecting nothing in the file space");
    MESHTRAIN_H5_CHECK(H5Sselect_none(s.memory.get()), "internal: selecting nothing in the memory space");
    return s;
  }
  const std::size_t rank = slab.extent.size();
  if (range.first == 0 && range.count == slab.elements()) {
    // HDF5's start, stride, count and block. Where the count is 1 the stride is unused (any value
    // is accepted) and HDF5 is given 1, as it rejects a zero stride.
    std::vector<hsize_t> start(rank), stride(rank), count(rank), block(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      start[d] = slab.offset[d];
      count[d] = count_at(slab, d);
      stride[d] = count[d] > 1 ? stride_at(slab, d) : 1;
      block[d] = slab.extent[d];
    }
    MESHTRAIN_H5_CHECK(
        H5Sselect_hyperslab(s.file.get(), H5S_SELECT_SET, start.data(), stride.data(), count.data(), block.data()),
        "the blocks must lie inside the dataset's shape and must not overlap");
    return s;
  }
  const std::vector<hsize_t> ones(rank, 1);
  H5S_seloper_t op = H5S_SELECT_SET;
  for (const GlobalBox& box : range_boxes(slab, range)) {
    const auto start = to_hsize(box.start), block = to_hsize(box.extent);
    MESHTRAIN_H5_CHECK(H5Sselect_hyperslab(s.file.get(), op, start.data(), ones.data(), ones.data(), block.data()),
                       "the blocks must lie inside the dataset's shape");
    op = H5S_SELECT_OR;
  }
  return s;
}

// Type of the object at an absolute path, or H5I_BADID if there is none (checked link by link, as
// H5Lexists fails when an intermediate group is missing).
H5I_type_t object_type(hid_t file, const std::string& path) {
  if (path == "/") return H5I_GROUP;
  std::size_t at = 0;
  while (at != std::string::npos) {
    at = path.find('/', at + 1);
    const std::string prefix = path.substr(0, at);
    if (prefix.size() <= 1 || prefix.back() == '/') return H5I_BADID;
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return H5I_BADID;
  }
  const hid_t object = H5Oopen(file, path.c_str(), H5P_DEFAULT);
  if (object < 0) return H5I_BADID;
  const H5I_type_t type = H5Iget_type(object);
  H5Oclose(object);
  return type;
}

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating-point";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
  }
}

}  // namespace meshtrain::io::detail

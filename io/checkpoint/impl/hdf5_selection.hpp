// HDF5 selections of a slab's piece, and what the reader asks of the objects in a file.
#pragma once

#include "io/checkpoint/file.hpp"
#include "io/hdf5_handles.hpp"

#include <string>

namespace meshtrain::io::detail {

// The file-space selection of a slab's piece (a regular hyperslab) and the contiguous 1-D memory
// space of its elements; none selected when it is empty.
struct Selection {
  h5::Dataspace file;
  h5::Dataspace memory;
};

// The file-space selection of a run of a slab's piece and the contiguous 1-D memory space of its
// elements; none selected when it is empty. The whole piece is one regular hyperslab; a part of it
// (a ZeRO shard's run) is the union of a few boxes, which HDF5 still walks in row-major order.
Selection select_piece(hid_t file_space, const TensorSlab& slab, ElementRange range);

// Type of the object at an absolute path, or H5I_BADID if there is none (checked link by link, as
// H5Lexists fails when an intermediate group is missing).
H5I_type_t object_type(hid_t file, const std::string& path);

// "integer", "floating-point", ... for messages.
const char* class_name(H5T_class_t c);

}  // namespace meshtrain::io::detail

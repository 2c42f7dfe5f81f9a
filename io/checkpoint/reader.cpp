// CheckpointReader: opens any HDF5 file (ours or h5py's) read-only with the MPI-IO driver and reads
// any rank's piece of its tensors and their checksums; root attributes are
// io/checkpoint/reader_attributes.cpp.
#include "core/regular_file.hpp"
#include "io/checkpoint/impl/collective.hpp"
#include "io/checkpoint/impl/hdf5_selection.hpp"
#include "io/checkpoint/impl/reader_impl.hpp"
#include "io/checkpoint/impl/slab_checks.hpp"
#include "io/checkpoint/schema.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <stdexcept>

namespace meshtrain::io {
namespace {

using detail::class_name;
using detail::holds_nothing;
using detail::normalize;
using detail::object_type;
using detail::range_problem;
using detail::select_piece;
using detail::Selection;
using detail::shape_string;
using detail::slab_problem;

herr_t collect_dataset(hid_t group, const char* name, const H5L_info_t* info, void* data) {
  if (info->type != H5L_TYPE_HARD) return 0;
  const hid_t object = H5Oopen(group, name, H5P_DEFAULT);
  if (object < 0) return 0;
  const bool is_dataset = H5Iget_type(object) == H5I_DATASET;
  H5Oclose(object);
  try {
    if (is_dataset) static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  } catch (...) {
    return -1;
  }
  return 0;
}

// The dataset's declared shape.
std::vector<std::uint64_t> extent_of(hid_t space) {
  const int rank = MESHTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(space), "damaged file?");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  MESHTRAIN_H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "damaged file?");
  return std::vector<std::uint64_t>(dims.begin(), dims.end());
}

// Deflate, HDF5's usual filter, shrinks data at most about 1032:1; a compressed dataset declaring
// more bytes than that over what it stores cannot be real.
constexpr std::uint64_t max_compression = 1032;

// Refuses a dataset whose declared shape needs more bytes than the file stores of it: a file of a
// few hundred bytes can declare 10^11 elements, which `export` would allocate and `inspect` read
// as fill values for hours. Checked from the metadata alone, before anything is allocated or read.
// Contiguous data (every checkpoint's, and h5py's default) must lie whole inside the file.
void require_stored(hid_t file, hid_t dset, const std::string& path, const std::string& name,
                    const std::vector<std::uint64_t>& shape) {
  h5::Datatype type{MESHTRAIN_H5_CHECK(H5Dget_type(dset), "damaged file?")};
  const std::uint64_t value_bytes = H5Tget_size(type.get());
  std::uint64_t declared = value_bytes;
  bool overflow = false;
  for (std::uint64_t d : shape) overflow |= __builtin_mul_overflow(declared, d, &declared);
  if (!overflow && declared == 0) return;
  h5::PropList dcpl{MESHTRAIN_H5_CHECK(H5Dget_create_plist(dset), "damaged file?")};
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  const std::uint64_t stored = H5Dget_storage_size(dset);
  hsize_t file_bytes = 0;
  MESHTRAIN_H5_CHECK(H5Fget_filesize(file, &file_bytes), "damaged file?");
  std::uint64_t limit = stored;
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t offset = H5Dget_offset(dset);
    limit = offset == HADDR_UNDEF || offset >= file_bytes ? 0 : std::min<std::uint64_t>(stored, file_bytes - offset);
  } else if (layout == H5D_CHUNKED && H5Pget_nfilters(dcpl.get()) > 0) {
    if (__builtin_mul_overflow(stored, max_compression, &limit)) limit = UINT64_MAX;
  }
  if (overflow || declared > limit) {
    input_error(
        "{}: {} declares shape {} of {}-byte values ({} bytes), but the file stores at most {} bytes of it "
        "(the file is {} bytes); it is damaged or was not written by meshtrain or h5py",
        path, name, shape_string(shape), value_bytes, overflow ? std::string("over 2^64") : std::to_string(declared),
        limit, file_bytes);
  }
}

// Refuses non-finite values among the n floats just read (a run of slab's piece): a checkpoint
// holding NaN or Inf, checksums and all, would resume only to fail at the first step and sample
// garbage. Names the tensor's first bad element by its global row-major index. One pass over what
// was read, a fraction of the cost of reading it.
void require_finite(const std::string& path, const std::string& name, const TensorSlab& slab, ElementRange range,
                    const float* data) {
  const float* bad = std::find_if(data, data + range.count, [](float x) { return !std::isfinite(x); });
  if (bad == data + range.count) return;
  const std::uint64_t position = static_cast<std::uint64_t>(bad - data);
  std::uint64_t index = 0;  // a scalar's only element
  if (!slab.global_shape.empty())
    for_each_global_run(slab, range, [&](std::uint64_t global, std::uint64_t first, std::uint64_t length) {
      if (position >= first && position < first + length) index = global + (position - first);
    });
  input_error(
      "{}: {} holds a non-finite value, {} at element {} (row-major); the checkpoint was saved from a diverged "
      "run or damaged: use an earlier one",
      path, name, *bad, index);
}

// What keeps `path` from being opened as HDF5 (empty if nothing); checked by one rank. A FIFO or a
// device is refused before HDF5 opens it (which would block or read without end).
std::string file_problem(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return fmt::format("{}: no such file", path);
  std::string problem = regular_file_problem(path, "checkpoint");
  if (!problem.empty()) return problem;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    return fmt::format(
        "{}: not an HDF5 file ({} bytes without an HDF5 signature); expected a checkpoint written by "
        "meshtrain or h5py",
        path, static_cast<long long>(std::filesystem::file_size(path, ec)));
  }
  return {};
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm)
    : path_(path), impl_(std::make_unique<Impl>(comm)) {
  h5::quiet_errors();
  // Rank 0 checks the file, and everyone fails together, before the collective open.
  const MPI_Comm own = impl_->comm.get();
  const std::string problem = detail::broadcast_message(mpi::rank_of(own) == 0 ? file_problem(path) : "", own);
  if (!problem.empty()) throw InputError(problem);

  h5::PropList fapl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), "out of memory?")};
  MESHTRAIN_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), own, MPI_INFO_NULL),
                     "meshtrain needs parallel HDF5 (Debian: libhdf5-mpich-dev)");
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (file < 0) {
    input_error("{}: cannot be opened as HDF5 (truncated or damaged?): {}", path, h5::last_error_message());
  }
  impl_->file = h5::File{file};
}

CheckpointReader::~CheckpointReader() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && impl_) impl_->file.reset();  // collective
}

bool CheckpointReader::has(const std::string& dataset) const {
  return object_type(impl_->file.get(), normalize(dataset)) == H5I_DATASET;
}

std::vector<std::uint64_t> CheckpointReader::shape(const std::string& dataset) const {
  const std::string name = normalize(dataset);
  if (!has(name)) input_error("{}: has no dataset {}", path_, name);
  return impl_->guarded(path_, [&] {
    h5::Dataset dset{MESHTRAIN_H5_CHECK(H5Dopen2(impl_->file.get(), name.c_str(), H5P_DEFAULT), "damaged file?")};
    h5::Dataspace space{MESHTRAIN_H5_CHECK(H5Dget_space(dset.get()), "damaged file?")};
    const std::vector<std::uint64_t> shape = extent_of(space.get());
    require_stored(impl_->file.get(), dset.get(), path_, name, shape);
    return shape;
  });
}

std::optional<std::uint64_t> CheckpointReader::checksum(const std::string& dataset) const {
  const std::string name = normalize(dataset);
  if (!has(name)) input_error("{}: has no dataset {}", path_, name);
  return impl_->guarded(path_, [&]() -> std::optional<std::uint64_t> {
    h5::Dataset dset{MESHTRAIN_H5_CHECK(H5Dopen2(impl_->file.get(), name.c_str(), H5P_DEFAULT), "damaged file?")};
    if (MESHTRAIN_H5_CHECK(H5Aexists(dset.get(), schema::checksum_attribute), "damaged file?") <= 0)
      return std::nullopt;
    h5::Attribute attr{
        MESHTRAIN_H5_CHECK(H5Aopen(dset.get(), schema::checksum_attribute, H5P_DEFAULT), "damaged file?")};
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Aget_type(attr.get()), "damaged file?")};
    h5::Dataspace space{MESHTRAIN_H5_CHECK(H5Aget_space(attr.get()), "damaged file?")};
    if (H5Tget_class(type.get()) != H5T_INTEGER ||
        MESHTRAIN_H5_CHECK(H5Sget_simple_extent_npoints(space.get()), "damaged file?") != 1) {
      input_error("{}: {} has a checksum attribute that is not one integer", path_, name);
    }
    std::uint64_t value = 0;
    MESHTRAIN_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_UINT64, &value), "damaged file?");
    return value;
  });
}

void CheckpointReader::read(const TensorSlab& slab, ElementRange range, float* out) const {
  const std::string name = normalize(slab.name);
  if (!slab.global_shape.empty()) {
    std::string problem = slab_problem(slab, true);
    if (problem.empty()) problem = range_problem(slab, range);
    if (problem.empty() && range.count > 0 && !holds_nothing(slab) && out == nullptr) {
      problem = fmt::format("{}: {} elements to read into a null pointer", name, range.count);
    }
    if (!problem.empty()) throw std::invalid_argument("CheckpointReader::read: " + problem);
  } else if (!slab.offset.empty() || !slab.extent.empty() || !slab.count.empty() || !slab.stride.empty() ||
             out == nullptr || range.first != 0 || range.count != 1) {
    throw std::invalid_argument("CheckpointReader::read(" + name +
                                "): a scalar has no offset, extent, count or stride");
  }
  if (!has(name)) {
    input_error("{}: has no dataset {}; expected a floating-point tensor of shape {}", path_, name,
                shape_string(slab.global_shape));
  }
  impl_->guarded(path_, [&] {
    h5::Dataset dset{MESHTRAIN_H5_CHECK(H5Dopen2(impl_->file.get(), name.c_str(), H5P_DEFAULT), "damaged file?")};
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Dget_type(dset.get()), "damaged file?")};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_FLOAT) {
      input_error("{}: {} holds {} values, expected a floating-point tensor (float32 or float64)", path_, name,
                  class_name(cls));
    }
    h5::Dataspace space{MESHTRAIN_H5_CHECK(H5Dget_space(dset.get()), "damaged file?")};
    const std::vector<std::uint64_t> shape = extent_of(space.get());
    if (shape != slab.global_shape) {
      input_error("{}: {} has shape {}, expected {}", path_, name, shape_string(shape),
                  shape_string(slab.global_shape));
    }
    require_stored(impl_->file.get(), dset.get(), path_, name, shape);
    if (holds_nothing(slab) || range.count == 0) return;
    if (shape.empty()) {
      MESHTRAIN_H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
                         "is the file complete?");
    } else {
      const Selection sel = select_piece(space.get(), slab, range);
      MESHTRAIN_H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_FLOAT, sel.memory.get(), sel.file.get(), H5P_DEFAULT, out),
                         "is the file complete and undamaged? (h5dump -H FILE shows what HDF5 can read)");
    }
    require_finite(path_, name, slab, range, out);
  });
}

std::vector<std::string> CheckpointReader::datasets(const std::string& group) const {
  std::string name = normalize(group);
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  if (object_type(impl_->file.get(), name) != H5I_GROUP) return {};
  return impl_->guarded(path_, [&] {
    h5::Group g{MESHTRAIN_H5_CHECK(H5Gopen2(impl_->file.get(), name.c_str(), H5P_DEFAULT), "damaged file?")};
    std::vector<std::string> names;
    MESHTRAIN_H5_CHECK(H5Lvisit(g.get(), H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &names), "damaged file?");
    std::sort(names.begin(), names.end());
    return names;
  });
}

}  // namespace meshtrain::io

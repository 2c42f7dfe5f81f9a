// CheckpointReader: opens any HDF5 file (ours or h5py's) read-only with the MPI-IO driver and reads
// any rank's piece of its tensors and their checksums; root attributes are
// io/checkpoint_reader_attributes.cpp.
#include "io/checkpoint_schema.hpp"
#include "io/impl/checkpoint_reader_impl.hpp"
#include "io/impl/collective.hpp"
#include "io/impl/hdf5_selection.hpp"
#include "io/impl/slab_checks.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

// What keeps `path` from being opened as HDF5 (empty if nothing); checked by one rank.
std::string file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? fmt::format("{}: no such file", path)
                           : fmt::format("{}: cannot access: {}", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return fmt::format("{}: not a regular file; expected an HDF5 checkpoint", path);
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    return fmt::format(
        "{}: not an HDF5 file ({} bytes without an HDF5 signature); expected a checkpoint written by "
        "meshtrain or h5py",
        path, static_cast<long long>(st.st_size));
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
    const int rank = MESHTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(space.get()), "damaged file?");
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    MESHTRAIN_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "damaged file?");
    return std::vector<std::uint64_t>(dims.begin(), dims.end());
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
    const int rank = MESHTRAIN_H5_CHECK(H5Sget_simple_extent_ndims(space.get()), "damaged file?");
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    MESHTRAIN_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "damaged file?");
    const std::vector<std::uint64_t> shape(dims.begin(), dims.end());
    if (shape != slab.global_shape) {
      input_error("{}: {} has shape {}, expected {}", path_, name, shape_string(shape),
                  shape_string(slab.global_shape));
    }
    if (holds_nothing(slab) || range.count == 0) return;
    if (shape.empty()) {
      MESHTRAIN_H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
                         "is the file complete?");
      return;
    }
    const Selection sel = select_piece(space.get(), slab, range);
    MESHTRAIN_H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_FLOAT, sel.memory.get(), sel.file.get(), H5P_DEFAULT, out),
                       "is the file complete and undamaged? (h5dump -H FILE shows what HDF5 can read)");
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

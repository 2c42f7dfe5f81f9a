// CheckpointWriter: collective HDF5 writes of named global tensors and root attributes into
// <final_path>.tmp (commit() is io/checkpoint/commit.cpp); see file.hpp for who must
// call what.
#include "core/errors.hpp"
#include "io/checkpoint/impl/collective.hpp"
#include "io/checkpoint/impl/hdf5_selection.hpp"
#include "io/checkpoint/impl/slab_checks.hpp"
#include "io/checkpoint/impl/writer_impl.hpp"
#include "io/checkpoint/schema.hpp"
#include "io/checkpoint/storage_space.hpp"
#include "io/checkpoint/tensor_checksum.hpp"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>

namespace meshtrain::io {
namespace {

using detail::holds_nothing;

// Objects at or above this size start on a multiple of it: whole stripes on parallel file systems.
constexpr hsize_t alignment_bytes = hsize_t{1} << 20;

// FNV-1a over the name and the shape: equal on every rank iff they write the same tensor.
std::uint64_t fingerprint(const std::string& name, const std::vector<std::uint64_t>& shape) {
  std::uint64_t h = 14695981039346656037ull;
  auto mix = [&h](unsigned char byte) { h = (h ^ byte) * 1099511628211ull; };
  for (char c : name) mix(static_cast<unsigned char>(c));
  mix(0);
  for (std::uint64_t v : shape) {
    for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(v >> (8 * i)));
  }
  return h;
}

// One tensor's write as every rank has agreed to it: the dataset's space, this rank's selection
// in it, and the tensor's checksum (the sum of every rank's part).
struct AgreedWrite {
  h5::Dataspace space;
  std::optional<detail::Selection> selection;
  std::uint64_t checksum = 0;
  bool writes = false;  // whether this rank has elements to write
};

// Everything rank-local happens first, and all ranks learn whether it worked on all of them, so a
// local failure throws everywhere instead of leaving the others in a collective call.
AgreedWrite agree_on_write(const TensorSlab& slab, ElementRange range, const float* data, const std::string& name,
                           MPI_Comm comm) {
  AgreedWrite w;
  std::string problem = detail::slab_problem(slab, true);
  if (problem.empty()) problem = detail::range_problem(slab, range);
  w.writes = problem.empty() && !holds_nothing(slab) && range.count > 0;
  if (problem.empty() && w.writes && data == nullptr) {
    problem = fmt::format("{}: {} elements to write from a null data pointer", name, range.count);
  }
  if (problem.empty()) {
    try {
      const std::vector<hsize_t> dims(slab.global_shape.begin(), slab.global_shape.end());
      w.space = h5::Dataspace{MESHTRAIN_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                                 "a global shape must have at most 32 dimensions")};
      w.selection = detail::select_piece(w.space.get(), slab, range);
      if (w.writes) w.checksum = partial_checksum(slab, range, data);
    } catch (const h5::Error& e) {
      problem = fmt::format("{}: {}", name, e.what());
    }
  }
  const std::uint64_t h = fingerprint(name, slab.global_shape);
  const std::uint64_t local[3] = {h, ~h, problem.empty() ? 0u : 1u};
  std::uint64_t global[3] = {0, 0, 0};
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(local, global, 3, MPI_UINT64_T, MPI_MAX, comm), detail::same_calls_hint);
  if (global[2] != 0) {
    throw std::logic_error(problem.empty()
                               ? fmt::format("CheckpointWriter::write({}): another rank passed an invalid block", name)
                               : fmt::format("CheckpointWriter::write: {}", problem));
  }
  if (global[0] != h || global[1] != ~h) {
    throw std::logic_error(
        fmt::format("CheckpointWriter::write({} {}): ranks disagree on the tensor's name or global "
                    "shape; every rank must write the same tensors in the same order",
                    name, detail::shape_string(slab.global_shape)));
  }
  // The ranks' pieces are disjoint, so their partial sums add up to the tensor's checksum.
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &w.checksum, 1, MPI_UINT64_T, MPI_SUM, comm),
                      detail::same_calls_hint);
  return w;
}

// Creates dataset `name` and writes this rank's part of it and its checksum attribute (collective).
// A failed transfer of the data is returned, not thrown: the attribute is still created, so that
// every rank's metadata stays the same and the file can be closed together (settle()).
std::string write_dataset(hid_t file, const std::string& name, const AgreedWrite& w, const float* data,
                          Transfer transfer) {
  h5::PropList lcpl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_LINK_CREATE), "out of memory?")};
  MESHTRAIN_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1), "internal: link creation property");
  h5::PropList dcpl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), "out of memory?")};
  // Every element is written, so skip writing fill values first.
  MESHTRAIN_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "internal: dataset creation property");
  h5::Dataset dset{MESHTRAIN_H5_CHECK(
      H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, w.space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
      "is the tensor name unique in this checkpoint, and is there space on the file system?")};

  h5::PropList dxpl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER), "out of memory?")};
  MESHTRAIN_H5_CHECK(
      H5Pset_dxpl_mpio(dxpl.get(), transfer == Transfer::collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT),
      "meshtrain needs parallel HDF5");
  const float nothing = 0.0f;
  std::string failed;
  if (H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, w.selection->memory.get(), w.selection->file.get(), dxpl.get(),
               w.writes ? data : &nothing) < 0) {
    failed = h5::last_error_message();
    if (transfer == Transfer::collective) detail::rejoin_failed_collective_write(file, failed);
  }
  h5::Dataspace scalar{MESHTRAIN_H5_CHECK(H5Screate(H5S_SCALAR), "out of memory?")};
  h5::Attribute attr{MESHTRAIN_H5_CHECK(
      H5Acreate2(dset.get(), schema::checksum_attribute, H5T_STD_U64LE, scalar.get(), H5P_DEFAULT, H5P_DEFAULT),
      "internal")};
  MESHTRAIN_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_UINT64, &w.checksum), "internal: writing the checksum");
  return failed;
}

// Runs f, prefixing HDF5 failures with what was being done to which file.
template <class F>
void with_context(const std::string& context, F&& f) {
  try {
    f();
  } catch (const h5::Error& e) {
    throw h5::Error(context + ": " + e.what());
  }
}

// Writes a scalar root attribute, replacing one of the same name.
void write_attribute(hid_t file, const std::string& name, hid_t file_type, hid_t memory_type, const void* value) {
  if (MESHTRAIN_H5_CHECK(H5Aexists(file, name.c_str()), "attribute names must be non-empty") > 0) {
    MESHTRAIN_H5_CHECK(H5Adelete(file, name.c_str()), "internal: replacing an attribute");
  }
  h5::Dataspace scalar{MESHTRAIN_H5_CHECK(H5Screate(H5S_SCALAR), "out of memory?")};
  h5::Attribute attr{
      MESHTRAIN_H5_CHECK(H5Acreate2(file, name.c_str(), file_type, scalar.get(), H5P_DEFAULT, H5P_DEFAULT),
                         "every rank must set the same attributes in the same order")};
  MESHTRAIN_H5_CHECK(H5Awrite(attr.get(), memory_type, value), "every rank must pass the same value");
}

h5::Datatype utf8_string_type() {
  h5::Datatype type{MESHTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1), "out of memory?")};
  MESHTRAIN_H5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE), "internal: string type");
  MESHTRAIN_H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8), "internal: string type");
  return type;
}

}  // namespace

CheckpointWriter::CheckpointWriter(const std::string& final_path, MPI_Comm comm, Transfer transfer,
                                   ExpectedSize expected, std::string tmp_path)
    : final_path_(final_path),
      tmp_path_(tmp_path.empty() ? final_path + ".tmp" : std::move(tmp_path)),
      impl_(std::make_unique<Impl>(comm, transfer, expected)) {
  h5::quiet_errors();
  const WatchedWait watched(impl_->waits.collective("checkpoint create", 0));
  h5::PropList fapl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), "out of memory?")};
  MESHTRAIN_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), impl_->comm.get(), MPI_INFO_NULL),
                     "meshtrain needs parallel HDF5 (Debian: libhdf5-mpich-dev)");
  if (transfer == Transfer::collective) {
    MESHTRAIN_H5_CHECK(H5Pset_all_coll_metadata_ops(fapl.get(), 1), "needs HDF5 >= 1.10 built with MPI");
  }
  MESHTRAIN_H5_CHECK(H5Pset_coll_metadata_write(fapl.get(), 1), "needs HDF5 >= 1.10 built with MPI");
  MESHTRAIN_H5_CHECK(H5Pset_alignment(fapl.get(), alignment_bytes, alignment_bytes), "internal: bad alignment");
  const hid_t file = H5Fcreate(tmp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (file < 0) {
    input_error(
        "cannot create checkpoint file {}: {}\nHINT: does the directory exist, is it writable, and is "
        "there space on its file system? (checkpoint.dir)",
        tmp_path_, h5::last_error_message());
  }
  impl_->file = h5::File{file};
  // After the create, which truncates; HDF5's close cuts the file back to the bytes it used.
  if (expected.reserve && mpi::rank_of(impl_->comm.get()) == 0) {
    const std::string refused = reserve_file_space(tmp_path_, expected.bytes);
    if (!refused.empty()) note_failure(refused);
  }
  settle();  // a throw from here leaves the .tmp already removed: no destructor runs
  set_attribute(schema::attr::checksum_algorithm, std::string(checksum_algorithm));
}

CheckpointWriter::~CheckpointWriter() {
  if (!impl_ || impl_->committed || impl_->abandoned) return;
  abandon();
}

std::uint64_t CheckpointWriter::planned_bytes(const std::vector<std::vector<std::uint64_t>>& global_shapes) {
  // Measured (1 layer, 48 datasets): 27 KB of metadata in all, under 600 bytes a dataset with its
  // object header, checksum attribute and link; the superblock, groups and root attributes (the
  // config's INI among them) take a few KiB. Twice that, and more, stays a bound.
  constexpr std::uint64_t per_dataset_metadata = 1024, fixed_metadata = 64 * 1024;
  std::uint64_t bytes = fixed_metadata;
  for (const auto& shape : global_shapes) {
    std::uint64_t data = sizeof(float);
    for (std::uint64_t n : shape) data *= n;
    bytes += data + per_dataset_metadata + (data >= alignment_bytes ? alignment_bytes : 0);
  }
  return bytes;
}

void CheckpointWriter::write(const TensorSlab& slab, ElementRange range, const float* data) {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::write after commit()");
  if (impl_->abandoned) throw std::logic_error("CheckpointWriter::write after a failed write");
  const std::string name = detail::normalize(slab.name);
  const WatchedWait watched(impl_->waits.collective("checkpoint write", range.count));
  const AgreedWrite w = agree_on_write(slab, range, data, name, impl_->comm.get());
  // Metadata calls fail alike on every rank (a usage error: h5::Error); the data's transfer fails
  // where the storage does.
  std::string failed;
  with_context(fmt::format("writing {} to {}", name, tmp_path_),
               [&] { failed = write_dataset(impl_->file.get(), name, w, data, impl_->transfer); });
  if (!failed.empty()) note_failure(fmt::format("writing {}: {}", name, failed));
  settle();  // a rank whose write failed must not go on alone to the next collective step
}

void CheckpointWriter::set_attribute(const std::string& name, const std::string& value) {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::set_attribute after commit()");
  with_context(fmt::format("setting attribute {} in {}", name, tmp_path_), [&] {
    const h5::Datatype type = utf8_string_type();
    const char* text = value.c_str();
    write_attribute(impl_->file.get(), name, type.get(), type.get(), &text);
  });
}

void CheckpointWriter::set_attribute(const std::string& name, std::int64_t value) {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::set_attribute after commit()");
  with_context(fmt::format("setting attribute {} in {}", name, tmp_path_),
               [&] { write_attribute(impl_->file.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value); });
}

void CheckpointWriter::set_attribute(const std::string& name, double value) {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::set_attribute after commit()");
  with_context(fmt::format("setting attribute {} in {}", name, tmp_path_),
               [&] { write_attribute(impl_->file.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value); });
}

}  // namespace meshtrain::io

// Collective HDF5 writes of named global tensors, independent reads of any rank's block, and root
// attributes; see checkpoint_file.hpp for who must call what.
#include "io/checkpoint_file.hpp"

#include "core/errors.hpp"
#include "io/hdf5_handles.hpp"
#include "io/tensor_checksum.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <utility>

namespace meshtrain::io {
namespace {

// Objects at or above this size start on a multiple of it: whole stripes on parallel file systems.
constexpr hsize_t alignment_bytes = hsize_t{1} << 20;

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(fmt::format("MPI call {} failed: {}\nHINT: is every rank of the communicator making "
                                       "the same checkpoint calls in the same order?",
                                       call, std::string(text, static_cast<std::size_t>(length))));
}

// A duplicate of the caller's communicator, so our collectives never meet the caller's messages.
class DupComm {
 public:
  explicit DupComm(MPI_Comm comm) { mpi_check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup"); }
  ~DupComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  DupComm(const DupComm&) = delete;
  DupComm& operator=(const DupComm&) = delete;
  MPI_Comm get() const { return comm_; }
  int rank() const {
    int r = 0;
    MPI_Comm_rank(comm_, &r);
    return r;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Rank 0's message (empty: no error) on every rank.
std::string broadcast_message(const std::string& message, MPI_Comm comm) {
  unsigned long long length = message.size();
  mpi_check(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, 0, comm), "MPI_Bcast");
  std::string result = message;
  result.resize(length);
  if (length > 0) mpi_check(MPI_Bcast(result.data(), static_cast<int>(length), MPI_CHAR, 0, comm), "MPI_Bcast");
  return result;
}

std::string normalize(const std::string& name) { return (!name.empty() && name.front() == '/') ? name : "/" + name; }

std::string shape_string(const std::vector<std::uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

std::vector<hsize_t> to_hsize(const std::vector<std::uint64_t>& v) { return {v.begin(), v.end()}; }

// count[d] and stride[d] of a slab, empty vectors meaning all ones.
std::uint64_t count_at(const TensorSlab& slab, std::size_t d) { return slab.count.empty() ? 1 : slab.count[d]; }
std::uint64_t stride_at(const TensorSlab& slab, std::size_t d) { return slab.stride.empty() ? 1 : slab.stride[d]; }

// Whether a slab holds nothing: a zero in extent or count (not elements() == 0, which a product
// that overflows 64 bits could also give).
bool holds_nothing(const TensorSlab& slab) {
  const auto zero = [](const std::vector<std::uint64_t>& v) { return std::find(v.begin(), v.end(), 0u) != v.end(); };
  return zero(slab.extent) || zero(slab.count);
}

// "block at offset [..] of extent [..]", with the count and stride of a piece of several blocks.
std::string slab_text(const TensorSlab& slab) {
  if (slab.count.empty() && slab.stride.empty()) {
    return fmt::format("block at offset {} of extent {}", shape_string(slab.offset), shape_string(slab.extent));
  }
  return fmt::format("piece at offset {} of extent {}, count {} and stride {}", shape_string(slab.offset),
                     shape_string(slab.extent), shape_string(slab.count), shape_string(slab.stride));
}

// What is wrong with a slab (empty if nothing).
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
    return fmt::format("{}: global shape {} has {} dimensions but count {} and stride {} have {} and {} (empty means "
                       "all ones)",
                       slab.name, shape_string(slab.global_shape), rank, shape_string(slab.count),
                       shape_string(slab.stride), slab.count.size(), slab.stride.size());
  }
  if (holds_nothing(slab)) return {};
  for (std::size_t d = 0; d < rank; ++d) {
    const std::uint64_t count = count_at(slab, d), stride = stride_at(slab, d);
    if (count > 1 && stride < slab.extent[d]) {
      return fmt::format("{}: {} has overlapping blocks in dimension {} (stride {} < extent {}); where the count "
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
    return fmt::format("{}: a {} of {} elements with a null data pointer", slab.name, slab_text(slab),
                       slab.elements());
  }
  return {};
}

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

// The file-space selection of a slab's piece (a regular hyperslab) and the contiguous 1-D memory
// space of its elements; none selected when it is empty.
struct Selection {
  h5::Dataspace file;
  h5::Dataspace memory;
};

// What is wrong with a run of a slab's elements (empty if nothing).
std::string range_problem(const TensorSlab& slab, ElementRange range) {
  const std::uint64_t n = holds_nothing(slab) ? 0 : slab.elements();
  if (range.first <= n && range.count <= n - range.first) return {};
  return fmt::format("{}: elements [{}, {}) of a {} of {} elements", slab.name, range.first, range.first + range.count,
                     slab_text(slab), n);
}

// The file-space selection of a run of a slab's piece and the contiguous 1-D memory space of its
// elements; none selected when it is empty. The whole piece is one regular hyperslab; a part of it
// (a ZeRO shard's run) is the union of a few boxes, which HDF5 still walks in row-major order.
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

herr_t collect_attribute(hid_t /*location*/, const char* name, const H5A_info_t* /*info*/, void* data) {
  try {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  } catch (...) {
    return -1;
  }
  return 0;
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

}  // namespace

// --- TensorSlab --------------------------------------------------------------------------------

std::uint64_t TensorSlab::elements() const {
  const std::uint64_t per_block = std::accumulate(extent.begin(), extent.end(), std::uint64_t{1}, std::multiplies<>());
  return std::accumulate(count.begin(), count.end(), per_block, std::multiplies<>());
}

TensorSlab TensorSlab::whole(std::string name, std::vector<std::uint64_t> global_shape) {
  std::vector<std::uint64_t> offset(global_shape.size(), 0);
  std::vector<std::uint64_t> extent = global_shape;
  return TensorSlab{std::move(name), std::move(global_shape), std::move(offset), std::move(extent)};
}

// --- CheckpointWriter --------------------------------------------------------------------------

struct CheckpointWriter::Impl {
  Impl(MPI_Comm c, Transfer t) : comm(c), transfer(t) {}
  DupComm comm;
  Transfer transfer;
  h5::File file;
  bool committed = false;
};

CheckpointWriter::CheckpointWriter(const std::string& final_path, MPI_Comm comm, Transfer transfer)
    : final_path_(final_path), tmp_path_(final_path + ".tmp"), impl_(std::make_unique<Impl>(comm, transfer)) {
  h5::quiet_errors();
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
    input_error("cannot create checkpoint file {}: {}\nHINT: does the directory exist, is it writable, and is "
                "there space on its file system? (checkpoint.dir)",
                tmp_path_, h5::last_error_message());
  }
  impl_->file = h5::File{file};
  set_attribute("checksum_algorithm", std::string(checksum_algorithm));
}

CheckpointWriter::~CheckpointWriter() {
  if (!impl_ || impl_->committed) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  impl_->file.reset();  // collective
  if (impl_->comm.rank() == 0) ::unlink(tmp_path_.c_str());
  MPI_Barrier(impl_->comm.get());  // nobody returns while the .tmp is still there
}

void CheckpointWriter::write(const TensorSlab& slab, ElementRange range, const float* data) {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::write after commit()");
  const std::string name = normalize(slab.name);
  // Everything rank-local happens first, and all ranks learn whether it worked on all of them,
  // so a local failure throws everywhere instead of leaving the others in a collective call.
  std::string problem = slab_problem(slab, true);
  if (problem.empty()) problem = range_problem(slab, range);
  const bool writes = problem.empty() && !holds_nothing(slab) && range.count > 0;
  if (problem.empty() && writes && data == nullptr) {
    problem = fmt::format("{}: {} elements to write from a null data pointer", name, range.count);
  }
  h5::Dataspace space;
  std::optional<Selection> selection;
  std::uint64_t checksum = 0;
  if (problem.empty()) {
    try {
      const auto dims = to_hsize(slab.global_shape);
      space = h5::Dataspace{MESHTRAIN_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                               "a global shape must have at most 32 dimensions")};
      selection = select_piece(space.get(), slab, range);
      if (writes) checksum = partial_checksum(slab, range, data);
    } catch (const h5::Error& e) {
      problem = fmt::format("{}: {}", name, e.what());
    }
  }
  const std::uint64_t h = fingerprint(name, slab.global_shape);
  const std::uint64_t local[3] = {h, ~h, problem.empty() ? 0u : 1u};
  std::uint64_t global[3] = {0, 0, 0};
  mpi_check(MPI_Allreduce(local, global, 3, MPI_UINT64_T, MPI_MAX, impl_->comm.get()), "MPI_Allreduce");
  if (global[2] != 0) {
    throw std::logic_error(problem.empty()
                               ? fmt::format("CheckpointWriter::write({}): another rank passed an invalid block", name)
                               : fmt::format("CheckpointWriter::write: {}", problem));
  }
  if (global[0] != h || global[1] != ~h) {
    throw std::logic_error(fmt::format("CheckpointWriter::write({} {}): ranks disagree on the tensor's name or global "
                                       "shape; every rank must write the same tensors in the same order",
                                       name, shape_string(slab.global_shape)));
  }
  // The ranks' pieces are disjoint, so their partial sums add up to the tensor's checksum.
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &checksum, 1, MPI_UINT64_T, MPI_SUM, impl_->comm.get()), "MPI_Allreduce");

  with_context(fmt::format("writing {} to {}", name, tmp_path_), [&] {
    const hid_t file = impl_->file.get();
    h5::PropList lcpl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_LINK_CREATE), "out of memory?")};
    MESHTRAIN_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1), "internal: link creation property");
    h5::PropList dcpl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), "out of memory?")};
    // Every element is written, so skip writing fill values first.
    MESHTRAIN_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "internal: dataset creation property");
    h5::Dataset dset{MESHTRAIN_H5_CHECK(
        H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
        "is the tensor name unique in this checkpoint, and is there space on the file system?")};

    h5::PropList dxpl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_DATASET_XFER), "out of memory?")};
    MESHTRAIN_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), impl_->transfer == Transfer::collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT), "meshtrain needs parallel HDF5");
    const float nothing = 0.0f;
    MESHTRAIN_H5_CHECK(
        H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, selection->memory.get(), selection->file.get(), dxpl.get(),
                 writes ? data : &nothing),
        "did every rank call write() for this tensor? Is there space on the file system?");
    h5::Dataspace scalar{MESHTRAIN_H5_CHECK(H5Screate(H5S_SCALAR), "out of memory?")};
    h5::Attribute attr{MESHTRAIN_H5_CHECK(
        H5Acreate2(dset.get(), "checksum", H5T_STD_U64LE, scalar.get(), H5P_DEFAULT, H5P_DEFAULT), "internal")};
    MESHTRAIN_H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_UINT64, &checksum), "internal: writing the checksum");
  });
}

namespace {

// Removes an existing root attribute of that name, so set_attribute replaces it.
void drop_attribute(hid_t file, const std::string& name) {
  if (MESHTRAIN_H5_CHECK(H5Aexists(file, name.c_str()), "attribute names must be non-empty") > 0) {
    MESHTRAIN_H5_CHECK(H5Adelete(file, name.c_str()), "internal: replacing an attribute");
  }
}

void write_attribute(hid_t file, const std::string& name, hid_t file_type, hid_t memory_type, const void* value) {
  drop_attribute(file, name);
  h5::Dataspace scalar{MESHTRAIN_H5_CHECK(H5Screate(H5S_SCALAR), "out of memory?")};
  h5::Attribute attr{MESHTRAIN_H5_CHECK(H5Acreate2(file, name.c_str(), file_type, scalar.get(), H5P_DEFAULT, H5P_DEFAULT),
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
  with_context(fmt::format("setting attribute {} in {}", name, tmp_path_), [&] {
    write_attribute(impl_->file.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
  });
}

void CheckpointWriter::set_attribute(const std::string& name, double value) {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::set_attribute after commit()");
  with_context(fmt::format("setting attribute {} in {}", name, tmp_path_), [&] {
    write_attribute(impl_->file.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
  });
}

void CheckpointWriter::commit() {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::commit called twice");
  // Every rank flushes what it wrote (MPI_File_sync) and closes; all confirm before the rename.
  std::string error;
  if (H5Fflush(impl_->file.get(), H5F_SCOPE_GLOBAL) < 0) {
    error = fmt::format("cannot flush checkpoint {}: {}", tmp_path_, h5::last_error_message());
  }
  impl_->file.close("is there space on the file system? Did every rank reach commit()?");  // collective
  int confirmed = error.empty() ? 1 : 0;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &confirmed, 1, MPI_INT, MPI_MIN, impl_->comm.get()), "MPI_Allreduce");
  if (!confirmed) {
    throw std::runtime_error(error.empty() ? fmt::format("another rank could not flush checkpoint {}", tmp_path_)
                                           : error);  // the destructor removes the .tmp
  }
  if (impl_->comm.rank() == 0) {
    // MPI-IO's close need not reach the disk: fsync the file, rename, then fsync the directory.
    const int fd = ::open(tmp_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      error = fmt::format("cannot flush checkpoint {} to disk: {}", tmp_path_, std::strerror(errno));
    }
    if (fd >= 0) ::close(fd);
    if (error.empty() && ::rename(tmp_path_.c_str(), final_path_.c_str()) != 0) {
      error = fmt::format("cannot rename checkpoint {} to {}: {}", tmp_path_, final_path_, std::strerror(errno));
    }
    if (error.empty()) {
      const std::filesystem::path parent = std::filesystem::path(final_path_).parent_path();
      const std::string dir = parent.empty() ? std::string(".") : parent.string();
      const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        ::fsync(dfd);  // best effort: the rename has happened
        ::close(dfd);
      }
    }
  }
  error = broadcast_message(error, impl_->comm.get());  // also: nobody returns before the rename
  if (!error.empty()) throw std::runtime_error(error);  // the destructor removes the .tmp
  impl_->committed = true;
}

// --- CheckpointReader --------------------------------------------------------------------------

struct CheckpointReader::Impl {
  explicit Impl(MPI_Comm c) : comm(c) {}
  DupComm comm;
  h5::File file;

  // Runs f, turning HDF5 failures into InputError naming the file.
  template <class F>
  auto guarded(const std::string& path, F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const h5::Error& e) {
      throw InputError(fmt::format("{}: {}", path, e.what()));
    }
  }
};

CheckpointReader::CheckpointReader(const std::string& path, MPI_Comm comm)
    : path_(path), impl_(std::make_unique<Impl>(comm)) {
  h5::quiet_errors();
  // Rank 0 checks the file, and everyone fails together, before the collective open.
  std::string problem;
  if (impl_->comm.rank() == 0) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      problem = errno == ENOENT ? fmt::format("{}: no such file", path)
                                : fmt::format("{}: cannot access: {}", path, std::strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
      problem = fmt::format("{}: not a regular file; expected an HDF5 checkpoint", path);
    } else if (H5Fis_hdf5(path.c_str()) <= 0) {
      problem = fmt::format("{}: not an HDF5 file ({} bytes without an HDF5 signature); expected a checkpoint written "
                            "by meshtrain or h5py",
                            path, static_cast<long long>(st.st_size));
    }
  }
  problem = broadcast_message(problem, impl_->comm.get());
  if (!problem.empty()) throw InputError(problem);

  h5::PropList fapl{MESHTRAIN_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), "out of memory?")};
  MESHTRAIN_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), impl_->comm.get(), MPI_INFO_NULL),
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
    if (MESHTRAIN_H5_CHECK(H5Aexists(dset.get(), "checksum"), "damaged file?") <= 0) return std::nullopt;
    h5::Attribute attr{MESHTRAIN_H5_CHECK(H5Aopen(dset.get(), "checksum", H5P_DEFAULT), "damaged file?")};
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
      input_error("{}: {} has shape {}, expected {}", path_, name, shape_string(shape), shape_string(slab.global_shape));
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

namespace {

// The attribute, or nothing; InputError if it does not hold exactly one value.
std::optional<h5::Attribute> open_attribute(hid_t file, const std::string& path, const std::string& name) {
  if (MESHTRAIN_H5_CHECK(H5Aexists(file, name.c_str()), "attribute names must be non-empty") <= 0) return std::nullopt;
  h5::Attribute attr{MESHTRAIN_H5_CHECK(H5Aopen(file, name.c_str(), H5P_DEFAULT), "damaged file?")};
  h5::Dataspace space{MESHTRAIN_H5_CHECK(H5Aget_space(attr.get()), "damaged file?")};
  const hssize_t n = MESHTRAIN_H5_CHECK(H5Sget_simple_extent_npoints(space.get()), "damaged file?");
  if (n != 1) input_error("{}: attribute {} holds {} values, expected one", path, name, n);
  return attr;
}

}  // namespace

std::optional<std::string> CheckpointReader::string_attribute(const std::string& name) const {
  return impl_->guarded(path_, [&]() -> std::optional<std::string> {
    const auto attr = open_attribute(impl_->file.get(), path_, name);
    if (!attr) return std::nullopt;
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Aget_type(attr->get()), "damaged file?")};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_STRING) input_error("{}: attribute {} is {}, expected a string", path_, name, class_name(cls));
    if (MESHTRAIN_H5_CHECK(H5Tis_variable_str(type.get()), "damaged file?") > 0) {
      h5::Datatype memory{MESHTRAIN_H5_CHECK(H5Tcopy(H5T_C_S1), "out of memory?")};
      MESHTRAIN_H5_CHECK(H5Tset_size(memory.get(), H5T_VARIABLE), "internal: string type");
      MESHTRAIN_H5_CHECK(H5Tset_cset(memory.get(), H5Tget_cset(type.get())), "internal: string type");
      char* text = nullptr;
      MESHTRAIN_H5_CHECK(H5Aread(attr->get(), memory.get(), &text), "damaged file?");
      std::string value = text != nullptr ? text : "";
      H5free_memory(text);
      return value;
    }
    const std::size_t size = H5Tget_size(type.get());
    if (size == 0) input_error("{}: attribute {} is a string of size 0", path_, name);
    std::string buffer(size, '\0');
    MESHTRAIN_H5_CHECK(H5Aread(attr->get(), type.get(), buffer.data()), "damaged file?");
    buffer.resize(std::strlen(buffer.c_str()));  // fixed-length strings are NUL-padded or terminated
    if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD) buffer.erase(buffer.find_last_not_of(' ') + 1);
    return buffer;
  });
}

std::optional<std::int64_t> CheckpointReader::int_attribute(const std::string& name) const {
  return impl_->guarded(path_, [&]() -> std::optional<std::int64_t> {
    const auto attr = open_attribute(impl_->file.get(), path_, name);
    if (!attr) return std::nullopt;
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Aget_type(attr->get()), "damaged file?")};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_INTEGER) input_error("{}: attribute {} is {}, expected an integer", path_, name, class_name(cls));
    std::int64_t value = 0;
    MESHTRAIN_H5_CHECK(H5Aread(attr->get(), H5T_NATIVE_INT64, &value), "damaged file?");
    return value;
  });
}

std::optional<double> CheckpointReader::double_attribute(const std::string& name) const {
  return impl_->guarded(path_, [&]() -> std::optional<double> {
    const auto attr = open_attribute(impl_->file.get(), path_, name);
    if (!attr) return std::nullopt;
    h5::Datatype type{MESHTRAIN_H5_CHECK(H5Aget_type(attr->get()), "damaged file?")};
    const H5T_class_t cls = H5Tget_class(type.get());
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) {
      input_error("{}: attribute {} is {}, expected a number", path_, name, class_name(cls));
    }
    double value = 0;
    MESHTRAIN_H5_CHECK(H5Aread(attr->get(), H5T_NATIVE_DOUBLE, &value), "damaged file?");
    return value;
  });
}

std::vector<std::string> CheckpointReader::attribute_names() const {
  return impl_->guarded(path_, [&] {
    std::vector<std::string> names;
    hsize_t index = 0;
    MESHTRAIN_H5_CHECK(H5Aiterate2(impl_->file.get(), H5_INDEX_NAME, H5_ITER_INC, &index, collect_attribute, &names),
                       "damaged file?");
    std::sort(names.begin(), names.end());
    return names;
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

// What a CheckpointWriter does when the storage fails under it (share/docs/usage.md, A full disk
// during a save): every rank records its own failure, all agree before the next collective step,
// and the .tmp is freed, closed and removed on every rank before all throw WriteFailed together.
//
// Why the order matters: after a failed write, HDF5 still holds dirty metadata, and its close
// flushes it collectively (HDF5's metadata sync point, then MPI_File_set_size and barriers). If that
// flush fails again on one rank, that rank leaves the sync point early and the others wait in it
// for ever. So rank 0 first truncates the .tmp to nothing (its blocks and quota return to the file
// system) and every rank waits for that before closing: the close then writes only HDF5's few
// kilobytes of metadata into a sparse, unlinked file.
#include "core/mpi_check.hpp"
#include "io/checkpoint/impl/collective.hpp"
#include "io/checkpoint/impl/writer_impl.hpp"
#include "io/checkpoint/storage_space.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>

namespace meshtrain::io {

namespace detail {

void rejoin_failed_collective_write(hid_t file, const std::string& failure) {
  if (failure.find("MPI_File_write_at_all failed") == std::string::npos) return;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == nullptr) return;
  // The arguments HDF5 resets the view with (H5FD__mpio_write).
  char native[] = "native";
  MPI_File_set_view(*static_cast<MPI_File*>(handle), 0, MPI_BYTE, MPI_BYTE, native, MPI_INFO_NULL);
}

}  // namespace detail

std::string write_failure_message(const std::string& file, const std::string& reason, std::uint64_t needed_bytes) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const auto free = free_bytes(dir);
  const std::string needs = needed_bytes > 0 ? fmt::format("it needs {} and ", describe_bytes(needed_bytes)) : "";
  const std::string space = free ? fmt::format("statvfs reports {} free", describe_bytes(*free))
                                 : std::string("statvfs cannot tell the free space");
  return fmt::format("cannot write checkpoint {}: {}; {}{} on the file system of {}", file, reason, needs, space, dir);
}

std::optional<WriteFailed> agree_on_write_failure(const std::string& failure, MPI_Comm comm) {
  const int rank = mpi::rank_of(comm);
  int world = 1;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm, &world), detail::same_calls_hint);
  int first_failing = failure.empty() ? world : rank;
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm), detail::same_calls_hint);
  if (first_failing == world) return std::nullopt;
  return WriteFailed(detail::broadcast_message(failure, comm, first_failing), first_failing == rank);
}

void CheckpointWriter::note_failure(const std::string& reason) {
  if (impl_->failure.empty()) impl_->failure = write_failure_message(final_path_, reason, impl_->expected.bytes);
}

void CheckpointWriter::settle() {
  std::optional<WriteFailed> failed = agree_on_write_failure(impl_->failure, impl_->comm.get());
  if (!failed) return;
  abandon();
  throw *failed;
}

void CheckpointWriter::abandon() noexcept {
  impl_->abandoned = true;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Unchecked: the file is discarded, and a destructor may call this while an exception unwinds.
  const WatchedWait watched(impl_->waits.collective("checkpoint abandon", 0));
  const MPI_Comm comm = impl_->comm.get();
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0) {
    (void)::truncate(tmp_path_.c_str(), 0);  // the space back before HDF5's closing writes
    ::unlink(tmp_path_.c_str());             // nobody returns while the .tmp is still there
  }
  MPI_Barrier(comm);
  impl_->file.reset();  // collective
}

}  // namespace meshtrain::io

// CheckpointWriter::commit: the step that makes a checkpoint exist. Every rank flushes and closes
// <file>.tmp; once all have confirmed, rank 0 fsyncs it, renames it to the final name and fsyncs
// the directory, so a kill at any instant leaves either no final file or a complete one.
#include "io/impl/checkpoint_writer_impl.hpp"
#include "io/impl/collective.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace meshtrain::io {
namespace {

// Rank 0's part: MPI-IO's close need not reach the disk, so fsync the file, rename it, then fsync
// the directory. Returns what went wrong, or nothing.
std::string make_final(const std::string& tmp_path, const std::string& final_path) {
  std::string error;
  const int fd = ::open(tmp_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0)
    error = fmt::format("cannot flush checkpoint {} to disk: {}", tmp_path, std::strerror(errno));
  if (fd >= 0) ::close(fd);
  if (error.empty() && ::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    error = fmt::format("cannot rename checkpoint {} to {}: {}", tmp_path, final_path, std::strerror(errno));
  }
  if (error.empty()) {
    const std::filesystem::path parent = std::filesystem::path(final_path).parent_path();
    const std::string dir = parent.empty() ? std::string(".") : parent.string();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);  // best effort: the rename has happened
      ::close(dfd);
    }
  }
  return error;
}

}  // namespace

void CheckpointWriter::commit() {
  if (impl_->committed) throw std::logic_error("CheckpointWriter::commit called twice");
  const MPI_Comm comm = impl_->comm.get();
  // Every rank flushes what it wrote (MPI_File_sync) and closes; all confirm before the rename.
  std::string error;
  if (H5Fflush(impl_->file.get(), H5F_SCOPE_GLOBAL) < 0) {
    error = fmt::format("cannot flush checkpoint {}: {}", tmp_path_, h5::last_error_message());
  }
  impl_->file.close("is there space on the file system? Did every rank reach commit()?");  // collective
  int confirmed = error.empty() ? 1 : 0;
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &confirmed, 1, MPI_INT, MPI_MIN, comm), detail::same_calls_hint);
  if (!confirmed) {
    throw std::runtime_error(error.empty() ? fmt::format("another rank could not flush checkpoint {}", tmp_path_)
                                           : error);  // the destructor removes the .tmp
  }
  if (mpi::rank_of(comm) == 0) error = make_final(tmp_path_, final_path_);
  error = detail::broadcast_message(error, comm);       // also: nobody returns before the rename
  if (!error.empty()) throw std::runtime_error(error);  // the destructor removes the .tmp
  impl_->committed = true;
}

}  // namespace meshtrain::io

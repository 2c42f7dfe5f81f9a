// CheckpointWriter::commit: the step that makes a checkpoint exist. Every rank flushes and closes
// <file>.tmp; once all have confirmed, rank 0 fsyncs it, renames it to the final name and fsyncs
// the directory, so a kill at any instant leaves either no final file or a complete one.
#include "io/checkpoint/impl/writer_impl.hpp"

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
  if (fd < 0 || ::fsync(fd) != 0) error = fmt::format("flushing {} to disk: {}", tmp_path, std::strerror(errno));
  if (fd >= 0) ::close(fd);
  if (error.empty() && ::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    error = fmt::format("renaming {} to {}: {}", tmp_path, final_path, std::strerror(errno));
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
  if (impl_->abandoned) throw std::logic_error("CheckpointWriter::commit after a failed write");
  const WatchedWait watched(impl_->waits.collective("checkpoint commit", 0));
  // Every rank flushes what it wrote (MPI_File_sync) and closes; all confirm before the rename.
  // Each phase is agreed on before the next collective one (io/checkpoint/write_failure.cpp).
  if (H5Fflush(impl_->file.get(), H5F_SCOPE_GLOBAL) < 0) note_failure("flushing: " + h5::last_error_message());
  settle();
  if (H5Fclose(impl_->file.release()) < 0) note_failure("closing: " + h5::last_error_message());  // collective
  settle();
  if (mpi::rank_of(impl_->comm.get()) == 0) {
    const std::string error = make_final(tmp_path_, final_path_);
    if (!error.empty()) note_failure(error);
  }
  settle();  // also: nobody returns before the rename
  impl_->committed = true;
}

}  // namespace meshtrain::io

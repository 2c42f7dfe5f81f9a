// The state a CheckpointWriter keeps, shared by its writes (io/checkpoint/writer.cpp) and its
// commit (io/checkpoint/commit.cpp).
#pragma once

#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "io/checkpoint/file.hpp"
#include "io/hdf5_handles.hpp"

namespace meshtrain::io {

struct CheckpointWriter::Impl {
  Impl(MPI_Comm c, Transfer t, ExpectedSize e) : transfer(t), expected(e), waits(wait_group(c, "checkpoint")) {
    MESHTRAIN_MPI_CHECK(MPI_Comm_dup(c, comm.out()), "is the communicator valid on every rank?");
  }
  // A duplicate of the caller's communicator, so our collectives never meet the caller's messages.
  mpi::OwnedComm comm;
  Transfer transfer;
  ExpectedSize expected;
  // The watchdog's group, over the caller's communicator (which outlives every save, so the numbers
  // run on from save to save alike on every rank): each collective step below is one watched wait.
  WaitGroup& waits;
  h5::File file;
  std::string failure;     // this rank's first storage failure, for the user; empty: none
  bool committed = false;  // the final file is in place
  bool abandoned = false;  // the .tmp is removed and the file closed after a failure
};

namespace detail {

// HDF5's MPI-IO driver, when MPI_File_write_at_all fails on a rank, returns at once, skipping the
// collective MPI_File_set_view that resets the file view on the ranks whose write succeeded (HDF5
// 1.10 to 1.14): they wait in it for ever. Given a failed collective H5Dwrite's message, makes that
// call where HDF5 skipped it, so that every rank has made the same collective calls again.
void rejoin_failed_collective_write(hid_t file, const std::string& failure);

}  // namespace detail
}  // namespace meshtrain::io

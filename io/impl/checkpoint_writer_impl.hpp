// The state a CheckpointWriter keeps, shared by its writes (io/checkpoint_writer.cpp) and its
// commit (io/checkpoint_commit.cpp).
#pragma once

#include "core/mpi_check.hpp"
#include "io/checkpoint_file.hpp"
#include "io/hdf5_handles.hpp"

namespace meshtrain::io {

struct CheckpointWriter::Impl {
  Impl(MPI_Comm c, Transfer t, ExpectedSize e) : transfer(t), expected(e) {
    MESHTRAIN_MPI_CHECK(MPI_Comm_dup(c, comm.out()), "is the communicator valid on every rank?");
  }
  // A duplicate of the caller's communicator, so our collectives never meet the caller's messages.
  mpi::OwnedComm comm;
  Transfer transfer;
  ExpectedSize expected;
  h5::File file;
  std::string failure;     // this rank's first storage failure, for the user; empty: none
  bool committed = false;  // the final file is in place
  bool abandoned = false;  // the .tmp is removed and the file closed after a failure
};

}  // namespace meshtrain::io

// The state a CheckpointWriter keeps, shared by its writes (io/checkpoint_writer.cpp) and its
// commit (io/checkpoint_commit.cpp).
#pragma once

#include "core/mpi_check.hpp"
#include "io/checkpoint_file.hpp"
#include "io/hdf5_handles.hpp"

namespace meshtrain::io {

struct CheckpointWriter::Impl {
  Impl(MPI_Comm c, Transfer t) : transfer(t) {
    MESHTRAIN_MPI_CHECK(MPI_Comm_dup(c, comm.out()), "is the communicator valid on every rank?");
  }
  // A duplicate of the caller's communicator, so our collectives never meet the caller's messages.
  mpi::OwnedComm comm;
  Transfer transfer;
  h5::File file;
  bool committed = false;
};

}  // namespace meshtrain::io

// The state a CheckpointReader keeps, shared by its tensor reads (io/checkpoint/reader.cpp) and its
// attribute reads (io/checkpoint/reader_attributes.cpp).
#pragma once

#include "core/errors.hpp"
#include "core/mpi_check.hpp"
#include "io/checkpoint/file.hpp"
#include "io/hdf5_handles.hpp"

#include <fmt/format.h>

namespace meshtrain::io {

struct CheckpointReader::Impl {
  explicit Impl(MPI_Comm c) {
    MESHTRAIN_MPI_CHECK(MPI_Comm_dup(c, comm.out()), "is the communicator valid on every rank?");
  }
  // A duplicate of the caller's communicator, so our collectives never meet the caller's messages.
  mpi::OwnedComm comm;
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

}  // namespace meshtrain::io

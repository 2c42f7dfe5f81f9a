// The few MPI steps the checkpoint writer and reader take together, checked
// (core/mpi_check.hpp: a failure throws only where the communicator returns errors).
#pragma once

#include <mpi.h>

#include <string>

namespace meshtrain::io::detail {

inline constexpr const char* same_calls_hint =
    "is every rank of the communicator making the same checkpoint calls in the same order?";

// Rank `root`'s message (empty: no error) on every rank.
std::string broadcast_message(const std::string& message, MPI_Comm comm, int root = 0);

}  // namespace meshtrain::io::detail

// Checked MPI steps of the checkpoint files (io/checkpoint/impl/collective.hpp).
#include "io/checkpoint/impl/collective.hpp"

#include "core/mpi_check.hpp"

namespace meshtrain::io::detail {

std::string broadcast_message(const std::string& message, MPI_Comm comm, int root) {
  unsigned long long length = message.size();
  MESHTRAIN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, comm), same_calls_hint);
  std::string result = message;
  result.resize(length);
  if (length > 0) {
    MESHTRAIN_MPI_CHECK(MPI_Bcast(result.data(), static_cast<int>(length), MPI_CHAR, root, comm), same_calls_hint);
  }
  return result;
}

}  // namespace meshtrain::io::detail

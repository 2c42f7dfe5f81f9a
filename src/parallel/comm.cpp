// What the Comm backends share.
#include "parallel/comm.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace meshtrain {

void require_group_rank(int rank, int size, const char* op, const char* role) {
  if (rank < 0 || rank >= size) {
    throw std::invalid_argument(
        fmt::format("{}: {} {} is not a rank of this group (ranks 0..{})", op, role, rank, size - 1));
  }
}

}  // namespace meshtrain

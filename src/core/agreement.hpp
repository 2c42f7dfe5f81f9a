// Ranks agree on bad input before anyone moves on, so that no rank waits forever in a collective
// while another one has already left with an error.
//
//   auto setup = agree_on_input(comm, [&] { return open_everything(config); });
//
// Every rank runs the function; if any rank throws InputError, every rank throws AgreedInputError:
// the lowest failing rank carries its own message and reports it, the others stay silent. All ranks
// then leave through MPI_Finalize with exit code 2, and the message is printed once.
#pragma once

#include "core/errors.hpp"

#include <mpi.h>

#include <optional>
#include <type_traits>
#include <utility>

namespace meshtrain {

// Bad input that every rank of the communicator knows about; only the reporter prints it.
class AgreedInputError : public InputError {
 public:
  AgreedInputError(const std::string& what, bool reporter) : InputError(what), reporter_(reporter) {}
  bool reporter() const { return reporter_; }

 private:
  bool reporter_;
};

namespace detail {

// Throws on every rank when any rank failed: the lowest failing rank rethrows its own error.
inline void settle(MPI_Comm comm, const std::optional<InputError>& mine) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  int first_failing = mine ? rank : world;
  MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm);
  if (first_failing == rank) throw AgreedInputError(mine->what(), true);
  if (first_failing < world) throw AgreedInputError(fmt::format("rank {} rejected the input", first_failing), false);
}

}  // namespace detail

template <class Fn>
auto agree_on_input(MPI_Comm comm, Fn&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  std::optional<InputError> mine;
  if constexpr (std::is_void_v<Result>) {
    try {
      fn();
    } catch (const InputError& e) {
      mine = e;
    }
    detail::settle(comm, mine);
  } else {
    std::optional<Result> result;
    try {
      result.emplace(fn());
    } catch (const InputError& e) {
      mine = e;
    }
    detail::settle(comm, mine);
    return std::move(*result);
  }
}

}  // namespace meshtrain

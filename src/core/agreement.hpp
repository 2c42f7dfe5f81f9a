// Ranks agree on bad input before anyone moves on, so that no rank waits forever in a collective
// while another one has already left with an error.
//
//   auto setup = agree_on_input(comm, [&] { return open_everything(config); });
//
// Every rank runs the function; if any rank throws InputError, every rank throws AgreedInputError
// with the lowest failing rank's message; that rank reports it, the others stay silent. All ranks
// then leave through MPI_Finalize with exit code 2, and the message is printed once.
#pragma once

#include "core/errors.hpp"
#include "core/watched_wait.hpp"

#include <mpi.h>

#include <optional>
#include <string>
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

// Throws on every rank when any rank failed, each with the lowest failing rank's message (so that
// an agreement nested in another keeps it); that rank is the one that reports it. Its waits are
// watched as collectives of group "world" (the communicator agreed over).
inline void settle(MPI_Comm comm, const std::optional<InputError>& mine) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  int first_failing = mine ? rank : world;
  {
    const WatchedWait watched(collective_ticket(comm, "allreduce", 1));
    MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm);
  }
  if (first_failing == world) return;
  std::string message = first_failing == rank ? std::string(mine->what()) : std::string();
  unsigned long long length = message.size();
  {
    const WatchedWait watched(collective_ticket(comm, "broadcast", 1));
    MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, first_failing, comm);
  }
  message.resize(length);
  const WatchedWait watched(collective_ticket(comm, "broadcast", length));
  MPI_Bcast(message.data(), int(length), MPI_CHAR, first_failing, comm);
  throw AgreedInputError(message, first_failing == rank);
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

// Checked MPI calls and an owned communicator, in the manner of llm.c's mpiCheck.
//
// MESHTRAIN_MPI_CHECK(call, hint) evaluates an MPI call and, if it returns anything but
// MPI_SUCCESS, throws mpi::Error with the source file and line, the call's text, MPI's own error
// string and a `HINT:` for the fix:
//
//   MESHTRAIN_MPI_CHECK(MPI_Comm_split(world, color, key, &out),
//                       "is every rank of the communicator calling this in the same order?");
//
// MPI's default error handler (MPI_ERRORS_ARE_FATAL) aborts before a call can return an error, so
// a check only fires on a communicator whose handler is MPI_ERRORS_RETURN: Topology sets that on
// its duplicate of the world, and every group communicator split from it inherits it.
#pragma once

#include <fmt/format.h>
#include <mpi.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace meshtrain::mpi {

// A failed MPI call: an internal failure (exit 1), reported with a hint.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// MPI's text for an error code (MPICH: the error class and its stack).
inline std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return std::string(text, static_cast<std::size_t>(length));
}

// Throws Error("<file>:<line>: MPI call <call> failed: <MPI's text>\nHINT: <hint>").
[[noreturn]] inline void fail(int code, const char* file, int line, const char* call, const char* hint) {
  throw Error(fmt::format("{}:{}: MPI call {} failed: {}\nHINT: {}", file, line, call, error_string(code), hint));
}

inline void check(int code, const char* file, int line, const char* call, const char* hint) {
  if (code != MPI_SUCCESS) fail(code, file, line, call, hint);
}

#define MESHTRAIN_MPI_CHECK(call, hint) ::meshtrain::mpi::check((call), __FILE__, __LINE__, #call, (hint))

// This rank's place in `comm`, and the number of ranks in it, checked.
inline int rank_of(MPI_Comm comm) {
  int rank = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is the communicator valid (not freed, not MPI_COMM_NULL)?");
  return rank;
}
inline int size_of(MPI_Comm comm) {
  int size = 0;
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size), "is the communicator valid (not freed, not MPI_COMM_NULL)?");
  return size;
}

// Owns one communicator made by MPI_Comm_dup/split/create and frees it when destroyed (unless MPI
// is already finalized, when there is nothing left to free). Move-only; release() hands the handle
// over to an owner that frees it itself.
class OwnedComm {
 public:
  OwnedComm() = default;
  explicit OwnedComm(MPI_Comm comm) : comm_(comm) {}
  ~OwnedComm() { free_comm(comm_); }
  OwnedComm(OwnedComm&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  OwnedComm& operator=(OwnedComm&& other) noexcept {
    if (this != &other) {
      free_comm(comm_);
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    }
    return *this;
  }
  OwnedComm(const OwnedComm&) = delete;
  OwnedComm& operator=(const OwnedComm&) = delete;

  MPI_Comm get() const { return comm_; }
  // For MPI calls that create the communicator: MPI_Comm_split(parent, c, k, owned.out()).
  MPI_Comm* out() {
    free_comm(comm_);
    return &comm_;
  }
  MPI_Comm release() { return std::exchange(comm_, MPI_COMM_NULL); }

  // Frees `comm` and sets it to MPI_COMM_NULL; a null handle or a finalized MPI is left alone.
  // Errors are ignored: this runs in destructors, where there is no one to report them to.
  static void free_comm(MPI_Comm& comm) noexcept {
    if (comm == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm);
    comm = MPI_COMM_NULL;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace meshtrain::mpi

// The MPI backend's Request: its chunks' MPI requests, completed in order.
#include "parallel/impl/mpi_request.hpp"

#include "core/host_waits.hpp"
#include "core/mpi_check.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <utility>

namespace meshtrain::mpi_backend {
namespace {

// The MPI requests of one operation (one per chunk). wait() completes them in chunk order; for a
// receive it checks that every chunk brought as many elements as it expected. Dropped without
// wait(), it completes them in its destructor, so that no buffer outlives its operation; while an
// exception unwinds the stack it leaves them instead (the job is on its way to MPI_Abort, and
// waiting could hang on a peer that never comes).
class MpiRequest final : public Request::Impl {
 public:
  MpiRequest(std::vector<MPI_Request> requests, std::vector<int> expected, MPI_Datatype type, std::string what,
             std::vector<std::byte> staging)
      : requests_(std::move(requests)),
        expected_(std::move(expected)),
        staging_(std::move(staging)),
        type_(type),
        what_(std::move(what)),
        unwinding_at_start_(std::uncaught_exceptions()) {}

  ~MpiRequest() override {
    if (waited_ || std::uncaught_exceptions() > unwinding_at_start_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrain: %s, dropped without wait(), failed: %s\n", what_.c_str(), e.what());
    }
  }

  void wait() override {
    waited_ = true;
    report_host_wait("Request::wait");  // core/host_waits.hpp: the host blocks here
    for (std::size_t i = 0; i < requests_.size(); ++i) {
      MPI_Status status;
      const int code = MPI_Wait(&requests_[i], &status);
      if (code != MPI_SUCCESS) {
        cancel_receives_from(i + 1);
        mpi::fail(code, __FILE__, __LINE__, "MPI_Wait(&requests_[i], &status)",
                  expected_.empty() ? collective_hint : p2p_hint);
      }
      if (!expected_.empty()) check_received(status, i);
    }
  }

 private:
  void check_received(const MPI_Status& status, std::size_t chunk) {
    int got = 0;
    MPI_Get_count(&status, type_, &got);
    if (got == expected_[chunk]) return;
    cancel_receives_from(chunk + 1);
    throw mpi::Error(
        fmt::format("{}:{}: {}: chunk {} brought {} elements where {} were expected\nHINT: the sender sent a shorter "
                    "message: send and recv must name the same count (and be made with the same max_chunk)",
                    __FILE__, __LINE__, what_, chunk, got, expected_[chunk]));
  }
  // After a failed chunk the later ones of a receive may never be matched: cancel them.
  void cancel_receives_from(std::size_t first) {
    if (expected_.empty()) return;
    for (std::size_t i = first; i < requests_.size(); ++i) {
      MPI_Cancel(&requests_[i]);
      MPI_Wait(&requests_[i], MPI_STATUS_IGNORE);
    }
  }

  std::vector<MPI_Request> requests_;
  std::vector<int> expected_;       // receives: the count each chunk must bring; empty otherwise
  std::vector<std::byte> staging_;  // what the operation reads from until it completes (reduce-scatter rounds)
  MPI_Datatype type_;               // of the elements counted
  std::string what_;
  int unwinding_at_start_;
  bool waited_ = false;
};

}  // namespace

Request pending(std::vector<MPI_Request> requests, std::vector<int> expected, MPI_Datatype type, std::string what,
                std::vector<std::byte> staging) {
  if (requests.empty()) return Request();
  return Request(std::make_unique<MpiRequest>(std::move(requests), std::move(expected), type, std::move(what),
                                              std::move(staging)));
}

}  // namespace meshtrain::mpi_backend

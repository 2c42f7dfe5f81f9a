// The MPI backend's Comm (parallel/comm_mpi.cpp says how it works): declared here so that its
// collectives (comm_mpi.cpp) and its messages (comm_mpi_messages.cpp) can live in two files.
// Internal to the backend; make_mpi_comm (parallel/comm.hpp) is how one is made.
#pragma once

#include "core/mpi_check.hpp"
#include "parallel/comm.hpp"
#include "parallel/impl/mpi_elements.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace meshtrain::mpi_backend {

// The Comm's own duplicate of the caller's communicator, and its shape.
struct OwnComm {
  mpi::OwnedComm comm;
  int rank = 0, size = 1, tag_ub = 32767;  // 32767: the least upper bound the standard allows
};
OwnComm duplicate(MPI_Comm parent, std::size_t max_chunk);

class MpiComm final : public Comm {
 public:
  MpiComm(OwnComm own, std::size_t max_chunk);

  void allreduce(void* data, std::size_t count, ElementType type, ReduceOp op) override;
  Request iallreduce(void* data, std::size_t count, ElementType type, ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) override;
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) override;
  void allgather(const void* send, void* recv, std::size_t send_count, ElementType type) override;
  Request iallgather(const void* send, void* recv, std::size_t send_count, ElementType type) override;
  void broadcast(void* data, std::size_t count, ElementType type, int root) override;
  void barrier() override;

  // comm_mpi_messages.cpp
  void send(const void* data, std::size_t count, ElementType type, int peer, int tag) override;
  void recv(void* data, std::size_t count, ElementType type, int peer, int tag) override;
  Request isend(const void* data, std::size_t count, ElementType type, int peer, int tag) override;
  Request irecv(void* data, std::size_t count, ElementType type, int peer, int tag) override;
  void alltoallv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs, void* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, ElementType type) override;
  void alltoall(const void* send, void* recv, std::size_t count_per_peer, ElementType type) override;

 private:
  // Collectives.
  void widened_allreduce(void* data, std::size_t count, ElementType type, const MpiElement& e, ReduceOp op);
  void widened_reduce_scatter(const std::byte* send, std::byte* recv, int n, ElementType type, const MpiElement& e,
                              ReduceOp op);
  template <class Gather>
  void for_each_gather_piece(const void* send, void* recv, std::size_t send_count, ElementType type, Gather&& gather);
  template <class Reduce>
  void for_each_scatter_round(const void* send, std::size_t recv_count, ElementType type,
                              std::vector<std::byte>& staging, bool keep_rounds, Reduce&& reduce);
  void check_total(std::size_t count, ElementType type, const char* op) const;

  // Messages.
  Request start_send(MPI_Comm comm, const void* data, std::size_t count, ElementType type, int peer, int tag,
                     std::string what) const;
  Request start_recv(MPI_Comm comm, void* data, std::size_t count, ElementType type, int peer, int tag,
                     std::string what) const;
  MPI_Comm exchange_comm();
  void check_peer(int peer, int tag, const char* op) const;

  mpi::OwnedComm comm_;
  mpi::OwnedComm exchange_;  // the all-to-all's, once one has run
  std::size_t max_chunk_;
  int tag_ub_;
  // Grow-only scratch of the 16-bit reductions: tensor-parallel sums call them every layer of every step.
  struct Scratch {
    std::vector<int> lengths, starts, gathered_lengths, gathered_starts;
    std::vector<std::byte> gathered;
  } scratch_;
};

}  // namespace meshtrain::mpi_backend

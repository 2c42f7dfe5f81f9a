// Collectives over one process group (share/docs/design.md, Parallelism), with two backends: MPI (host
// memory: every CPU run and test) and NCCL (device memory on CUDA builds, bootstrapped over MPI).
//
// Buffers are raw pointers into the memory space the backend serves. All ranks of the group call
// each collective in the same order with the same counts. Non-blocking calls return a Request that
// must be waited on before the buffer is read or reused. A non-blocking collective computes what its
// blocking twin computes (test_comm holds the two bitwise equal on this MPI; the MPI standard does
// not promise one summation order for both), and several may be in flight at once, started in the
// same order on every rank.
#pragma once

#include <mpi.h>

#include "core/half_types.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace meshtrain {

class Request {
 public:
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual void wait() = 0;
  };
  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Blocks until the operation is complete; a default or already waited request returns at once.
  void wait() {
    if (impl_) impl_->wait();
    impl_.reset();
  }
  bool pending() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual std::string backend() const = 0;  // "mpi" or "nccl"

  // In place: data ← Σ over the group (average = sum then scale, by the caller).
  virtual void allreduce_sum(float* data, std::size_t count) = 0;
  virtual Request iallreduce_sum(float* data, std::size_t count) = 0;
  virtual void allreduce_max(float* data, std::size_t count) = 0;
  virtual void allreduce_max(double* data, std::size_t count) = 0;
  virtual void allreduce_sum(double* data, std::size_t count) = 0;
  // recv (recv_count) ← this rank's block of Σ send (size · recv_count), blocks in rank order.
  virtual void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) = 0;
  virtual Request ireduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) = 0;
  // recv (size · send_count) ← every rank's send, in rank order. In place when send is
  // recv + rank · send_count.
  virtual void allgather(const float* send, float* recv, std::size_t send_count) = 0;
  virtual Request iallgather(const float* send, float* recv, std::size_t send_count) = 0;
  virtual void broadcast(float* data, std::size_t count, int root) = 0;
  // Point-to-point within the group (peers are group ranks); tags tell concurrent messages apart.
  virtual void send(const float* data, std::size_t count, int peer, int tag) = 0;
  virtual void recv(float* data, std::size_t count, int peer, int tag) = 0;
  virtual Request isend(const float* data, std::size_t count, int peer, int tag) = 0;
  virtual Request irecv(float* data, std::size_t count, int peer, int tag) = 0;
  virtual void barrier() = 0;

  // The 16-bit storage types (bf16, fp16): values travel as their 16 bits.
  //
  // allreduce_sum accumulates in fp32 and rounds once: data ← T(Σ_g float(data_g)) on the MPI
  // backend, the sum taken in group-rank order, so every rank gets the same bits. (A reduction
  // operator on the 16-bit type would round after every pairwise add, P − 1 times.) The NCCL
  // backend uses NCCL's own 16-bit reduction, which rounds at every step of its ring or tree: up to
  // (P − 1)/2 ulp from the once-rounded sum.
  virtual void allreduce_sum(bf16* data, std::size_t count) = 0;
  virtual void allreduce_sum(fp16* data, std::size_t count) = 0;
  // As for float: recv (size · send_count) ← every rank's send in rank order; in place allowed.
  virtual void allgather(const bf16* send, bf16* recv, std::size_t send_count) = 0;
  virtual void allgather(const fp16* send, fp16* recv, std::size_t send_count) = 0;
  virtual Request iallgather(const bf16* send, bf16* recv, std::size_t send_count) = 0;
  virtual Request iallgather(const fp16* send, fp16* recv, std::size_t send_count) = 0;
  virtual void send(const bf16* data, std::size_t count, int peer, int tag) = 0;
  virtual void send(const fp16* data, std::size_t count, int peer, int tag) = 0;
  virtual void recv(bf16* data, std::size_t count, int peer, int tag) = 0;
  virtual void recv(fp16* data, std::size_t count, int peer, int tag) = 0;
  virtual Request isend(const bf16* data, std::size_t count, int peer, int tag) = 0;
  virtual Request isend(const fp16* data, std::size_t count, int peer, int tag) = 0;
  virtual Request irecv(bf16* data, std::size_t count, int peer, int tag) = 0;
  virtual Request irecv(fp16* data, std::size_t count, int peer, int tag) = 0;

  // All-to-all (expert parallelism's token exchange, share/docs/design.md, Parallelism): group
  // rank q receives send[send_displs[q], + send_counts[q]) into its recv at recv_displs[this rank],
  // so recv_counts[p] must equal peer p's send_counts[this rank]. The four arrays are host memory,
  // one entry per group rank, in elements; the buffers are in the backend's memory space and must
  // not overlap. Counts may be zero, blocks may come in any order and leave gaps (untouched).
  virtual void alltoallv(const float* send, const std::size_t* send_counts, const std::size_t* send_displs, float* recv,
                         const std::size_t* recv_counts, const std::size_t* recv_displs) = 0;
  virtual void alltoallv(const double* send, const std::size_t* send_counts, const std::size_t* send_displs,
                         double* recv, const std::size_t* recv_counts, const std::size_t* recv_displs) = 0;
  virtual void alltoallv(const bf16* send, const std::size_t* send_counts, const std::size_t* send_displs, bf16* recv,
                         const std::size_t* recv_counts, const std::size_t* recv_displs) = 0;
  virtual void alltoallv(const fp16* send, const std::size_t* send_counts, const std::size_t* send_displs, fp16* recv,
                         const std::size_t* recv_counts, const std::size_t* recv_displs) = 0;
  // recv[p · n, + n) ← peer p's send[this rank · n, + n), n = count_per_peer: the token counts each
  // rank tells the others before an alltoallv. Host memory on every backend (the caller needs the
  // counts on the host to build the alltoallv's arrays).
  virtual void alltoall(const std::int64_t* send, std::int64_t* recv, std::size_t count_per_peer) = 0;
};

// MPI counts are int, buffers are not: the MPI backend moves a buffer in calls of at most this many
// elements per rank (2^27: 512 MiB of floats, 1 GiB of doubles, inside every transport's limits).
inline constexpr std::size_t mpi_default_max_chunk = std::size_t(1) << 27;

// Shared argument check of the backends: `rank` (a peer or a root, named by `role`) must be a rank
// of a group of `size`; std::invalid_argument naming the operation and the numbers otherwise.
void require_group_rank(int rank, int size, const char* op, const char* role);

// A group over `comm` (which the Comm duplicates and owns) with the MPI backend.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm);
// The same with chunks of at most `max_chunk` elements (1 ≤ max_chunk ≤ INT_MAX; the same on every
// rank of the group). Tests lower it to exercise the splitting without allocating gigabytes.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, std::size_t max_chunk);

#if defined(MESHTRAIN_HAVE_NCCL)
// A group over `comm` with NCCL: ncclGetUniqueId on group rank 0, MPI_Bcast, ncclCommInitRank.
// `stream` (a cudaStream_t) orders the collectives with the compute.
std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, void* stream);
#endif

}  // namespace meshtrain

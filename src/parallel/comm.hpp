// Collectives over one process group (share/docs/design.md, Parallelism), with two backends: MPI (host
// memory: every CPU run and test) and NCCL (device memory on CUDA builds, bootstrapped over MPI).
//
// Buffers are raw pointers into the memory space the backend serves. All ranks of the group call
// each collective in the same order with the same counts. Non-blocking calls return a Request that
// must be waited on before the buffer is read or reused. A non-blocking collective computes what its
// blocking twin computes (test_comm holds the two bitwise equal on this MPI; the MPI standard does
// not promise one summation order for both), and several may be in flight at once, started in the
// same order on every rank.
//
// Ordering with the compute (issue 42). A call is ordered after all the compute its caller has
// issued before it, and the compute issued after a blocking call, or after a Request's wait(), is
// ordered after the operation: callers never fence before a collective. How, is the backend's:
//   NCCL   on a stream of its own per Comm (one per group kind), after an event recorded on the
//          compute stream; the compute stream waits on the operation's event (a blocking call's at
//          once, a Request's at its wait()), the host on nothing but settle() (parallel/comm_nccl.cpp).
//   MPI    the host runs the operation: before it touches a buffer, the host waits for the compute
//          (make_compute_ordered_comm, parallel/compute_ordered_comm.hpp, with the trainer's fence);
//          wait() blocks the host and reports it (core/host_waits.hpp).
// Host memory read after a collective is read as any device result is: after a fence of the compute.
#pragma once

#include <mpi.h>

#include "core/half_types.hpp"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

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
  // Orders what follows after the operation (the contract above): the compute issued from now on
  // sees its result, and its buffers may be reused. A host-memory backend blocks until it is complete.
  // A default or already waited request returns at once.
  void wait() {
    if (!impl_) return;
    impl_->wait();
    impl_.reset();
  }
  bool pending() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<Impl> impl_;
};

// The element types a Comm moves. Each call carries its type as data, as NCCL's ncclDataType_t
// and MPI's MPI_Datatype do, so each collective is one virtual function below and the typed front
// turns a T* into its tag. Adding a type (fp8, say): an enumerator, its row in element_traits, its
// ElementTypeOf, and one row in each backend's table (parallel/impl/mpi_elements.cpp, comm_nccl.cpp).
enum class ElementType : std::uint8_t { f32, f64, bf16, fp16, i64, i32 };

struct ElementTraits {
  ElementType type;
  std::size_t bytes;
  const char* name;  // in messages: "floats", "bf16 values"
};
inline constexpr ElementTraits element_traits[] = {
    {ElementType::f32, 4, "floats"},       {ElementType::f64, 8, "doubles"},      {ElementType::bf16, 2, "bf16 values"},
    {ElementType::fp16, 2, "fp16 values"}, {ElementType::i64, 8, "int64 values"}, {ElementType::i32, 4, "int32 values"},
};
constexpr const ElementTraits& traits_of(ElementType type) { return element_traits[static_cast<std::size_t>(type)]; }
constexpr std::size_t element_bytes(ElementType type) { return traits_of(type).bytes; }
constexpr const char* element_name(ElementType type) { return traits_of(type).name; }

// The tag of each C++ type a Comm moves; a type without one is not a Comm element.
template <class T>
struct ElementTypeOf;
template <>
struct ElementTypeOf<float> : std::integral_constant<ElementType, ElementType::f32> {};
template <>
struct ElementTypeOf<double> : std::integral_constant<ElementType, ElementType::f64> {};
template <>
struct ElementTypeOf<bf16> : std::integral_constant<ElementType, ElementType::bf16> {};
template <>
struct ElementTypeOf<fp16> : std::integral_constant<ElementType, ElementType::fp16> {};
template <>
struct ElementTypeOf<std::int64_t> : std::integral_constant<ElementType, ElementType::i64> {};
template <>
struct ElementTypeOf<std::int32_t> : std::integral_constant<ElementType, ElementType::i32> {};

// The rows of element_traits are in the enumeration's order.
static_assert([] {
  for (std::size_t i = 0; i < std::size(element_traits); ++i) {
    if (static_cast<std::size_t>(element_traits[i].type) != i) return false;
  }
  return true;
}());

template <class T>
concept CommElement = requires {
  ElementTypeOf<T>::value;
}
&&sizeof(T) == element_bytes(ElementTypeOf<T>::value);
template <CommElement T>
inline constexpr ElementType element_type_of = ElementTypeOf<T>::value;

enum class ReduceOp : std::uint8_t { sum, max };

// A process group's collectives. The virtual functions take untyped buffers and an ElementType,
// one per collective; backends and decorators implement each once. Callers use the typed front (the
// templates), which names the tag from the pointer's type.
class Comm {
 public:
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int size() const { return size_; }
  int rank() const { return rank_; }
  const std::string& backend() const { return backend_; }  // "mpi" or "nccl"

  // ---- The typed front.

  // In place: data ← Σ (or max) over the group (average = sum then scale, by the caller).
  template <CommElement T>
  void allreduce_sum(T* data, std::size_t count) {
    allreduce(data, count, element_type_of<T>, ReduceOp::sum);
  }
  template <CommElement T>
  void allreduce_max(T* data, std::size_t count) {
    allreduce(data, count, element_type_of<T>, ReduceOp::max);
  }
  template <CommElement T>
  Request iallreduce_sum(T* data, std::size_t count) {
    return iallreduce(data, count, element_type_of<T>, ReduceOp::sum);
  }
  // recv (recv_count) ← this rank's block of Σ send (size · recv_count), blocks in rank order.
  template <CommElement T>
  void reduce_scatter_sum(const T* send, T* recv, std::size_t recv_count) {
    reduce_scatter(send, recv, recv_count, element_type_of<T>, ReduceOp::sum);
  }
  template <CommElement T>
  Request ireduce_scatter_sum(const T* send, T* recv, std::size_t recv_count) {
    return ireduce_scatter(send, recv, recv_count, element_type_of<T>, ReduceOp::sum);
  }
  // recv (size · send_count) ← every rank's send, in rank order. In place when send is
  // recv + rank · send_count.
  template <CommElement T>
  void allgather(const T* send, T* recv, std::size_t send_count) {
    allgather(send, recv, send_count, element_type_of<T>);
  }
  template <CommElement T>
  Request iallgather(const T* send, T* recv, std::size_t send_count) {
    return iallgather(send, recv, send_count, element_type_of<T>);
  }
  template <CommElement T>
  void broadcast(T* data, std::size_t count, int root) {
    broadcast(data, count, element_type_of<T>, root);
  }
  // Point-to-point within the group (peers are group ranks); tags tell concurrent messages apart.
  template <CommElement T>
  void send(const T* data, std::size_t count, int peer, int tag) {
    send(data, count, element_type_of<T>, peer, tag);
  }
  template <CommElement T>
  void recv(T* data, std::size_t count, int peer, int tag) {
    recv(data, count, element_type_of<T>, peer, tag);
  }
  template <CommElement T>
  Request isend(const T* data, std::size_t count, int peer, int tag) {
    return isend(data, count, element_type_of<T>, peer, tag);
  }
  template <CommElement T>
  Request irecv(T* data, std::size_t count, int peer, int tag) {
    return irecv(data, count, element_type_of<T>, peer, tag);
  }
  // All-to-all (expert parallelism's token exchange, share/docs/design.md, Parallelism): group
  // rank q receives send[send_displs[q], + send_counts[q]) into its recv at recv_displs[this rank],
  // so recv_counts[p] must equal peer p's send_counts[this rank]. The four arrays are host memory,
  // one entry per group rank, in elements; the buffers are in the backend's memory space and must
  // not overlap. Counts may be zero, blocks may come in any order and leave gaps (untouched).
  template <CommElement T>
  void alltoallv(const T* send, const std::size_t* send_counts, const std::size_t* send_displs, T* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) {
    alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs, element_type_of<T>);
  }
  // recv[p · n, + n) ← peer p's send[this rank · n, + n), n = count_per_peer: the token counts each
  // rank tells the others before an alltoallv. The buffers are in the backend's memory space, as every
  // collective's: the counts travel where the routing computed them (on a device, on the device), and
  // the caller reads them back once, with the rest of the routing (model/families/llama_moe.cpp).
  template <CommElement T>
  void alltoall(const T* send, T* recv, std::size_t count_per_peer) {
    alltoall(send, recv, count_per_peer, element_type_of<T>);
  }

  // ---- One virtual function per collective: what the front above calls, with the same contract;
  // counts are in elements of `type`.
  //
  // Every type is summed in its own arithmetic except the 16-bit floating ones (bf16, fp16): the
  // MPI backend accumulates them in fp32 and rounds once, data ← T(Σ_g float(data_g)) taken in
  // group-rank order, so every rank gets the same bits (a reduction operator on the 16-bit type
  // would round after every pairwise add, P − 1 times); their non-blocking reductions complete
  // before they return. The NCCL backend uses NCCL's own 16-bit reduction, which rounds at every
  // step of its ring or tree: up to (P − 1)/2 ulp from the once-rounded sum.
  virtual void allreduce(void* data, std::size_t count, ElementType type, ReduceOp op) = 0;
  virtual Request iallreduce(void* data, std::size_t count, ElementType type, ReduceOp op) = 0;
  virtual void reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) = 0;
  virtual Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type,
                                  ReduceOp op) = 0;
  virtual void allgather(const void* send, void* recv, std::size_t send_count, ElementType type) = 0;
  virtual Request iallgather(const void* send, void* recv, std::size_t send_count, ElementType type) = 0;
  virtual void broadcast(void* data, std::size_t count, ElementType type, int root) = 0;
  virtual void send(const void* data, std::size_t count, ElementType type, int peer, int tag) = 0;
  virtual void recv(void* data, std::size_t count, ElementType type, int peer, int tag) = 0;
  virtual Request isend(const void* data, std::size_t count, ElementType type, int peer, int tag) = 0;
  virtual Request irecv(void* data, std::size_t count, ElementType type, int peer, int tag) = 0;
  virtual void barrier() = 0;
  virtual void alltoallv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs, void* recv,
                         const std::size_t* recv_counts, const std::size_t* recv_displs, ElementType type) = 0;
  virtual void alltoall(const void* send, void* recv, std::size_t count_per_peer, ElementType type) = 0;

  // The host waits until every operation this Comm has enqueued is complete. A device backend's
  // operations complete on their stream, waited on by the compute and not by the host: before the
  // host waits for the compute it settles every group this way, where the watchdog can see the wait
  // (host_fence's hook, train/training_groups.cpp). A host backend has nothing in flight past its
  // waits: nothing to do.
  virtual void settle() {}

 protected:
  Comm(int rank, int size, std::string backend) : rank_(rank), size_(size), backend_(std::move(backend)) {}

 private:
  int rank_, size_;
  std::string backend_;
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
// `compute_stream` (a cudaStream_t): the stream whose work the collectives are ordered with; they run
// on a stream of the Comm's own.
std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, void* compute_stream);
#endif

}  // namespace meshtrain

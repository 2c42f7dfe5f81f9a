// The NCCL backend of Comm (share/docs/design.md, Parallelism): device memory on CUDA builds.
//
// Bootstrap: group rank 0 asks NCCL for a unique id, MPI_Bcast carries it over the group's MPI
// communicator, and every rank joins with ncclCommInitRank on the current CUDA device. The ranks
// agree on every step's outcome first, so a rank without a GPU fails the whole group with its
// CUDA error instead of leaving the others waiting in NCCL's bootstrap.
//
// Streams and events (parallel/comm.hpp, Ordering with the compute). Every Comm runs its operations
// on a stream of its own (one per group kind: dp's reductions overlap the backward kernels, tp's sit
// on their critical path), made once. Before each operation the Comm records an event on the compute
// stream and makes its stream wait on it, so the operation reads what the compute issued before it
// wrote. After it, a blocking call makes the compute stream wait on an event recorded on the Comm's
// stream at once; a non-blocking one returns a Request whose wait() does so. The host waits for
// nothing there. settle() is where it does (before every host fence, while the training groups use
// NCCL: core/host_waits.hpp), and a barrier, whose point is the host's: both poll the event and the
// communicator's asynchronous error, so a failed peer or network surfaces as an exception with a
// HINT instead of a hang, and the watchdog's verdict: the watched comm brackets settle() with the
// ticket of the group's latest operation, and once the watchdog has reported a wait that outlasted
// parallel.timeout, the waiting thread aborts the communicator (ncclCommAbort from the thread that
// uses it, so no call races the freeing) and throws CollectiveTimeout.
//
// Point-to-point: NCCL runs a send and the matching receive concurrently only inside one
// ncclGroupStart/ncclGroupEnd, and its groups belong to the host thread, not to a communicator.
// So send, recv, isend and irecv (on any NcclComm of this thread) join one open group; the group is
// launched by the first blocking send or recv, by wait() on any of its requests, or by any
// collective, whichever comes first. Hence "irecv; send; wait" and "isend ×2; irecv ×2; wait" work
// as they do with MPI. NCCL has no tags: messages between two ranks match in issue order, so tags
// are checked for range but ignored, and both sides must issue their messages in the same order.
//
// All-to-all: alltoallv is one ncclGroupStart / ncclSend and ncclRecv per other peer with a
// block / ncclGroupEnd on the stream (after launching the thread's open point-to-point group, as
// any collective does), the rank's own block a device-to-device copy on the same stream; it
// returns once the stream has done it all. alltoall is the same with a block of equal size per peer
// (the token counts, exchanged on the device where the routing computed them).
//
// The element types map to NCCL's in one table (nccl_type below). bf16 and fp16 use ncclBfloat16
// and ncclFloat16, which NCCL sums its own way: each step of its ring or tree adds two 16-bit
// values (in float or in half arithmetic, by GPU and version) and stores the partial as 16 bits
// again, so a sum over P ranks is rounded up to P − 1 times, where the MPI backend accumulates in
// fp32 and rounds once. Results can differ from the MPI backend's by a few ulp of the 16-bit type,
// and between NCCL algorithms and versions.
#include "core/cuda_check.hpp"
#include "core/mpi_check.hpp"
#include "parallel/comm.hpp"
#include "parallel/impl/nccl_support.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain {
namespace {

using namespace nccl_backend;

// One row per ElementType.
ncclDataType_t nccl_type(ElementType type) {
  switch (type) {
    case ElementType::f32: return ncclFloat;
    case ElementType::f64: return ncclDouble;
    case ElementType::bf16: return ncclBfloat16;
    case ElementType::fp16: return ncclFloat16;
    case ElementType::i64: return ncclInt64;
    case ElementType::i32: return ncclInt32;
  }
  throw std::logic_error("nccl_type: an ElementType without a row");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::max ? ncclMax : ncclSum; }

// Element `offset` of a buffer of `type`.
template <class Byte>
Byte* element_at(Byte* data, std::size_t offset, ElementType type) {
  return data + offset * element_bytes(type);
}

class NcclComm final : public Comm {
 public:
  NcclComm(std::shared_ptr<NcclHandle> comm, int rank, int size, cudaStream_t compute)
      : Comm(rank, size, "nccl"),
        comm_(std::move(comm)),
        compute_(compute),
        on_compute_stream_(on_compute_stream_requested()) {}

  // Launches this thread's open group, which may hold this communicator's messages.
  ~NcclComm() override {
    try {
      launch_group();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrain: launching pending NCCL messages at teardown failed: %s\n", e.what());
    }
  }

  void allreduce(void* data, std::size_t count, ElementType type, ReduceOp op) override {
    if (count == 0) return;
    start_allreduce(data, count, type, op);
    complete();
  }
  Request iallreduce(void* data, std::size_t count, ElementType type, ReduceOp op) override {
    if (count == 0) return Request();
    start_allreduce(data, count, type, op);
    return enqueued(fmt::format("iallreduce of {} {}", count, element_name(type)));
  }

  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) override {
    if (recv_count == 0) return;
    start_reduce_scatter(send, recv, recv_count, type, op);
    complete();
  }
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type,
                          ReduceOp op) override {
    if (recv_count == 0) return Request();
    start_reduce_scatter(send, recv, recv_count, type, op);
    return enqueued(fmt::format("ireduce_scatter of {} {}", recv_count, element_name(type)));
  }

  void allgather(const void* send, void* recv, std::size_t send_count, ElementType type) override {
    if (send_count == 0) return;
    start_allgather(send, recv, send_count, type);
    complete();
  }
  Request iallgather(const void* send, void* recv, std::size_t send_count, ElementType type) override {
    if (send_count == 0) return Request();
    start_allgather(send, recv, send_count, type);
    return enqueued(fmt::format("iallgather of {} {}", send_count, element_name(type)));
  }

  void broadcast(void* data, std::size_t count, ElementType type, int root) override {
    require_group_rank(root, size(), "broadcast", "root");
    if (count == 0) return;
    launch_group();
    follow_compute();
    MESHTRAIN_NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type(type), root, comm(), stream()), comm());
    complete();
  }

  // A blocking send or recv launches the open group with itself in it and waits for all of it.
  void send(const void* data, std::size_t count, ElementType type, int peer, int tag) override {
    check_peer(peer, tag, "send");
    if (count == 0) return;
    follow_compute();
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclSend(data, count, nccl_type(type), peer, comm(), stream()), comm());
    launch_group();
    complete();
  }
  void recv(void* data, std::size_t count, ElementType type, int peer, int tag) override {
    check_peer(peer, tag, "recv");
    if (count == 0) return;
    follow_compute();
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclRecv(data, count, nccl_type(type), peer, comm(), stream()), comm());
    launch_group();
    complete();
  }
  Request isend(const void* data, std::size_t count, ElementType type, int peer, int tag) override {
    check_peer(peer, tag, "isend");
    if (count == 0) return Request();
    follow_compute();
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclSend(data, count, nccl_type(type), peer, comm(), stream()), comm());
    return in_group(fmt::format("isend of {} {} to peer {}", count, element_name(type), peer));
  }
  Request irecv(void* data, std::size_t count, ElementType type, int peer, int tag) override {
    check_peer(peer, tag, "irecv");
    if (count == 0) return Request();
    follow_compute();
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclRecv(data, count, nccl_type(type), peer, comm(), stream()), comm());
    return in_group(fmt::format("irecv of {} {} from peer {}", count, element_name(type), peer));
  }

  // An allreduce of one element completes only when every rank has entered it; the host waits for it.
  void barrier() override {
    launch_group();
    follow_compute();
    MESHTRAIN_NCCL_CHECK(ncclAllReduce(token_.get(), token_.get(), 1, ncclFloat, ncclSum, comm(), stream()), comm());
    complete();
    wait_for(done_.get(), *comm_, "barrier");
  }

  // One NCCL group of the blocks to and from the other ranks, the own block copied on the stream.
  void alltoallv(const void* send, const std::size_t* send_counts, const std::size_t* send_displs, void* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs, ElementType type) override {
    const int me = rank();
    if (send_counts[me] != recv_counts[me]) {
      throw std::invalid_argument(
          fmt::format("alltoallv: group rank {} sends itself {} {} but expects {} (send_counts[{}] must equal "
                      "recv_counts[{}])",
                      me, send_counts[me], element_name(type), recv_counts[me], me, me));
    }
    const ncclDataType_t t = nccl_type(type);
    const auto* from = static_cast<const std::byte*>(send);
    auto* to = static_cast<std::byte*>(recv);
    launch_group();
    follow_compute();
    MESHTRAIN_NCCL_CHECK(ncclGroupStart(), comm());
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == me) continue;
      if (send_counts[peer] > 0) {
        MESHTRAIN_NCCL_CHECK(
            ncclSend(element_at(from, send_displs[peer], type), send_counts[peer], t, peer, comm(), stream()), comm());
      }
      if (recv_counts[peer] > 0) {
        MESHTRAIN_NCCL_CHECK(
            ncclRecv(element_at(to, recv_displs[peer], type), recv_counts[peer], t, peer, comm(), stream()), comm());
      }
    }
    MESHTRAIN_NCCL_CHECK(ncclGroupEnd(), comm());
    MESHTRAIN_CUDA_CHECK(cudaMemcpyAsync(element_at(to, recv_displs[me], type), element_at(from, send_displs[me], type),
                                         send_counts[me] * element_bytes(type), cudaMemcpyDeviceToDevice, stream()));
    complete();
  }
  void alltoall(const void* send, void* recv, std::size_t count_per_peer, ElementType type) override {
    const std::vector<std::size_t> counts(std::size_t(size()), count_per_peer);
    std::vector<std::size_t> displs(counts.size());
    for (std::size_t p = 0; p < displs.size(); ++p) displs[p] = p * count_per_peer;
    alltoallv(send, counts.data(), displs.data(), recv, counts.data(), displs.data(), type);
  }

  // The host waits for the Comm's latest operation, and so for all of them (one stream, in order),
  // polling (wait_for): the watchdog's verdict and the peers' failures end it.
  void settle() override {
    launch_group();
    if (!unsettled_) return;
    MESHTRAIN_CUDA_CHECK(cudaEventRecord(done_.get(), stream()));
    wait_for(done_.get(), *comm_, fmt::format("the operations enqueued on a group of {} ranks", size()));
    unsettled_ = false;
  }

 private:
  ncclComm_t comm() const { return comm_->get(); }

  // Collectives first launch the thread's open point-to-point group, then enqueue on the stream.
  void start_allreduce(void* data, std::size_t count, ElementType type, ReduceOp op) {
    launch_group();
    follow_compute();
    MESHTRAIN_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm(), stream()), comm());
  }
  void start_reduce_scatter(const void* send, void* recv, std::size_t recv_count, ElementType type, ReduceOp op) {
    launch_group();
    follow_compute();
    MESHTRAIN_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(type), nccl_op(op), comm(), stream()),
                         comm());
  }
  void start_allgather(const void* send, void* recv, std::size_t send_count, ElementType type) {
    launch_group();
    follow_compute();
    MESHTRAIN_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(type), comm(), stream()), comm());
  }

  // MESHTRAIN_NCCL_ON_COMPUTE_STREAM=1: every operation on the compute stream, in its order, overlapping
  // nothing (as before issue 42): the device check's step time without the communication streams.
  static bool on_compute_stream_requested() {
    const char* v = std::getenv("MESHTRAIN_NCCL_ON_COMPUTE_STREAM");
    return v != nullptr && std::string(v) == "1";
  }
  cudaStream_t stream() const { return on_compute_stream_ ? compute_ : stream_.get(); }

  // The operation enqueued next on the Comm's stream runs after the compute issued so far.
  void follow_compute() {
    unsettled_ = true;
    if (on_compute_stream_) return;
    MESHTRAIN_CUDA_CHECK(cudaEventRecord(ready_.get(), compute_));
    MESHTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream(), ready_.get(), 0));
  }

  // The compute issued from now on runs after everything enqueued on the Comm's stream so far.
  // (cudaStreamWaitEvent takes the event's latest record, so one event serves every call.)
  void complete() {
    MESHTRAIN_CUDA_CHECK(cudaEventRecord(done_.get(), stream()));
    if (!on_compute_stream_) MESHTRAIN_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_.get(), 0));
  }

  // A request for the collective just enqueued on the stream: an event recorded after it.
  Request enqueued(std::string what) {
    auto completion = std::make_shared<Completion>(stream());
    MESHTRAIN_CUDA_CHECK(cudaEventRecord(completion->event.get(), stream()));
    completion->recorded = true;
    return make_request(comm_, std::move(completion), compute_, std::move(what));
  }

  // A request for the message just added to the thread's open group.
  Request in_group(std::string what) {
    auto completion = std::make_shared<Completion>(stream());
    add_to_group(completion);
    return make_request(comm_, std::move(completion), compute_, std::move(what));
  }

  void check_peer(int peer, int tag, const char* op) const {
    require_group_rank(peer, size(), op, "peer");
    if (tag < 0) throw std::invalid_argument(fmt::format("{}: tag {} is negative", op, tag));
  }

  std::shared_ptr<NcclHandle> comm_;  // first: destroyed after the stream, events and buffer that use it
  cudaStream_t compute_;              // the compute's (not owned)
  bool on_compute_stream_;            // MESHTRAIN_NCCL_ON_COMPUTE_STREAM=1
  Stream stream_;                     // the Comm's own
  Event ready_;                       // recorded on the compute stream before each operation
  Event done_;                        // recorded on the Comm's stream after each blocking one, and by settle()
  bool unsettled_ = false;            // an operation enqueued since the last settle()
  DeviceFloat token_;
};

// Every rank of `comm` learns whether any failed at a step; the lowest failing rank's message
// reaches all of them, and all throw it.
void agree(MPI_Comm comm, int rank, int size, const std::string& mine) {
  constexpr const char* hint = "make_nccl_comm is collective: every rank of the group must call it together";
  int first = mine.empty() ? size : rank;
  MESHTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), hint);
  if (first == size) return;
  int length = static_cast<int>(mine.size());
  MESHTRAIN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, comm), hint);
  std::string message = mine;
  message.resize(static_cast<std::size_t>(length));
  MESHTRAIN_MPI_CHECK(MPI_Bcast(message.data(), length, MPI_CHAR, first, comm), hint);
  throw std::runtime_error(fmt::format("make_nccl_comm: group rank {} of {}: {}", first, size, message));
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, void* compute_stream) {
  if (comm == MPI_COMM_NULL) {
    throw std::invalid_argument("make_nccl_comm: MPI_COMM_NULL (is this rank a member of the group?)");
  }
  int rank = 0, size = 1;
  MESHTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank), "is MPI initialised?");
  MESHTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size), "is MPI initialised?");

  // 1. Every rank has a GPU.
  agree(comm, rank, size, error_of([] {
          int devices = 0, device = 0;
          MESHTRAIN_CUDA_CHECK(cudaGetDeviceCount(&devices));
          MESHTRAIN_CUDA_CHECK(cudaGetDevice(&device));
          MESHTRAIN_CUDA_CHECK(cudaFree(nullptr));  // creates the context now, not inside NCCL
        }));

  // 2. Group rank 0's unique id, broadcast with its outcome.
  struct {
    int ok = 1;
    ncclUniqueId id;
  } bootstrap;
  std::memset(&bootstrap.id, 0, sizeof(bootstrap.id));
  std::string id_error;
  if (rank == 0) {
    id_error = error_of([&] { MESHTRAIN_NCCL_CHECK(ncclGetUniqueId(&bootstrap.id), nullptr); });
    bootstrap.ok = id_error.empty() ? 1 : 0;
  }
  MESHTRAIN_MPI_CHECK(MPI_Bcast(&bootstrap, static_cast<int>(sizeof(bootstrap)), MPI_BYTE, 0, comm),
                      "make_nccl_comm is collective: every rank of the group must call it together");
  agree(comm, rank, size, id_error);

  // 3. Every rank joins.
  ncclComm_t handle = nullptr;
  const std::string init_error =
      error_of([&] { MESHTRAIN_NCCL_CHECK(ncclCommInitRank(&handle, size, bootstrap.id, rank), nullptr); });
  if (!init_error.empty()) handle = nullptr;
  try {
    agree(comm, rank, size, init_error);
  } catch (...) {
    if (handle != nullptr) ncclCommAbort(handle);
    throw;
  }
  auto nccl = std::make_shared<nccl_backend::NcclHandle>(handle);
  return std::make_unique<NcclComm>(std::move(nccl), rank, size, static_cast<cudaStream_t>(compute_stream));
}

}  // namespace meshtrain

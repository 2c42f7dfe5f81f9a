// The NCCL backend of Comm (share/docs/design.md, Parallelism): device memory on CUDA builds.
//
// Bootstrap: group rank 0 asks NCCL for a unique id, MPI_Bcast carries it over the group's MPI
// communicator, and every rank joins with ncclCommInitRank on the current CUDA device. The ranks
// agree on every step's outcome first, so a rank without a GPU fails the whole group with its
// CUDA error instead of leaving the others waiting in NCCL's bootstrap.
//
// Every operation runs on the caller's stream. A blocking call records an event after the
// operation and waits for it; a non-blocking one returns a Request holding such an event. Waiting
// polls the event and the communicator's asynchronous error, so a failed peer or network surfaces as
// an exception with a HINT instead of a hang, and the watchdog's verdict: once it has reported a
// wait that outlasted parallel.timeout, the waiting thread aborts the communicator (ncclCommAbort
// from the thread that uses it, so no call races the freeing) and throws CollectiveTimeout.
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
// returns once the stream has done it all. alltoall exchanges host memory (token counts, which the
// caller needs on the host to build the alltoallv's arrays): it runs on an MPI Comm over the same
// ranks (parallel/comm_mpi.cpp), made from the bootstrap communicator, and does not touch the
// stream.
//
// bf16 and fp16 use ncclBfloat16 and ncclFloat16. NCCL sums them its own way: each step of its
// ring or tree adds two 16-bit values (in float or in half arithmetic, by GPU and version) and
// stores the partial as 16 bits again, so a sum over P ranks is rounded up to P − 1 times, where
// the MPI backend accumulates in fp32 and rounds once. Results can differ from the MPI backend's by
// a few ulp of the 16-bit type, and between NCCL algorithms and versions.
#include "core/mpi_check.hpp"
#include "core/watched_wait.hpp"
#include "parallel/comm.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace meshtrain {
namespace {

// ---------------------------------------------------------------------------------------------
// Checked calls

const char* cuda_hint(cudaError_t error) {
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return "no usable GPU for this rank: check nvidia-smi, CUDA_VISIBLE_DEVICES, that the driver supports "
             "this CUDA version, and that Slurm gave the job GPUs (--gpus-per-task); CPU runs use the MPI "
             "backend (parallel.backend mpi)";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: fewer or smaller buffers, or more ranks to share them";
    default: return "run with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel, or under compute-sanitizer";
  }
}

[[noreturn]] void cuda_fail(cudaError_t error, const char* call, const char* file, int line) {
  throw std::runtime_error(fmt::format("{}:{}: CUDA call {} failed: {} ({})\nHINT: {}", file, line, call,
                                       cudaGetErrorName(error), cudaGetErrorString(error), cuda_hint(error)));
}
void cuda_check(cudaError_t error, const char* call, const char* file, int line) {
  if (error != cudaSuccess) cuda_fail(error, call, file, line);
}
#define MESHTRAIN_CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)

const char* nccl_hint(ncclResult_t result) {
  switch (result) {
    case ncclUnhandledCudaError:
      return "a CUDA call inside NCCL failed: check the GPU and driver (nvidia-smi) and CUDA_VISIBLE_DEVICES; "
             "NCCL_DEBUG=INFO names the call";
    case ncclSystemError:
      return "a system call failed (sockets, shared memory): run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; "
             "across nodes set NCCL_SOCKET_IFNAME to the interface they share (e.g. ib0); in containers give "
             "/dev/shm room or set NCCL_SHM_DISABLE=1";
    case ncclInvalidArgument:
      return "buffers must be device memory of this rank's GPU, counts the same on every rank, roots and peers "
             "ranks of the group; NCCL_DEBUG=WARN names the argument";
    case ncclInvalidUsage:
      return "each rank of a group needs its own GPU (select it from the node-local rank or CUDA_VISIBLE_DEVICES), "
             "and every rank must issue the same collectives in the same order; NCCL_DEBUG=WARN says more";
    case ncclRemoteError:
      return "another rank or the network failed: look at the other ranks' errors first; NCCL_DEBUG=INFO "
             "NCCL_DEBUG_SUBSYS=NET shows the connections";
    default: return "run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=ALL) to see what NCCL was doing";
  }
}

[[noreturn]] void nccl_fail(ncclResult_t result, ncclComm_t comm, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(comm);
  const std::string detail = last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : std::string();
  throw std::runtime_error(fmt::format("{}:{}: NCCL call {} failed: {}{}\nHINT: {}", file, line, call,
                                       ncclGetErrorString(result), detail, nccl_hint(result)));
}
void nccl_check(ncclResult_t result, ncclComm_t comm, const char* call, const char* file, int line) {
  if (result != ncclSuccess) nccl_fail(result, comm, call, file, line);
}
#define MESHTRAIN_NCCL_CHECK(call, comm) nccl_check((call), (comm), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------------------------------------
// Owned handles

// The NCCL communicator. Destroyed normally it is ncclCommDestroy'ed; destroyed while an exception
// unwinds the stack (peers may be gone) it is ncclCommAbort'ed, which does not wait for them; after
// abort() (the watchdog gave up on a wait) it is gone already.
class NcclHandle {
 public:
  explicit NcclHandle(ncclComm_t comm) : comm_(comm) {}
  ~NcclHandle() {
    if (aborted_) return;
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }
  NcclHandle(const NcclHandle&) = delete;
  NcclHandle& operator=(const NcclHandle&) = delete;
  ncclComm_t get() const { return comm_; }
  // Ends the communicator's kernels and frees it without waiting for the peers.
  void abort() {
    if (aborted_) return;
    aborted_ = true;
    ncclCommAbort(comm_);
  }

 private:
  ncclComm_t comm_;
  bool aborted_ = false;
};

class Event {
 public:
  Event() { MESHTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class DeviceFloat {
 public:
  DeviceFloat() {
    MESHTRAIN_CUDA_CHECK(cudaMalloc(&data_, sizeof(float)));
    MESHTRAIN_CUDA_CHECK(cudaMemset(data_, 0, sizeof(float)));
  }
  ~DeviceFloat() { cudaFree(data_); }
  DeviceFloat(const DeviceFloat&) = delete;
  DeviceFloat& operator=(const DeviceFloat&) = delete;
  float* get() const { return data_; }

 private:
  float* data_ = nullptr;
};

// Waits until `event` has happened, checking `comm` for an asynchronous error meanwhile. Polls
// rather than blocks in a stream synchronisation, so that once the watchdog has reported this wait
// (core/watched_wait.hpp) it can abort the communicator, whose kernels would otherwise spin on
// the GPU for ever, and throw CollectiveTimeout (main exits 5).
void wait_for(cudaEvent_t event, NcclHandle& handle, const std::string& what) {
  const ncclComm_t comm = handle.get();
  for (;;) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) cuda_fail(state, "cudaEventQuery(event)", __FILE__, __LINE__);
    ncclResult_t async = ncclSuccess;
    MESHTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm, &async), comm);
    if (async != ncclSuccess && async != ncclInProgress) {
      nccl_fail(async, comm, ("ncclCommGetAsyncError while waiting for " + what).c_str(), __FILE__, __LINE__);
    }
    if (watchdog_fired()) {
      handle.abort();
      throw CollectiveTimeout(what +
                              ": the watchdog gave up on it (parallel.timeout) and aborted its NCCL communicator");
    }
    std::this_thread::yield();
  }
}

// ---------------------------------------------------------------------------------------------
// Operations in flight and the thread's open point-to-point group

// One operation's completion: an event recorded on the stream after it. Point-to-point operations
// are recorded when their group is launched; `failed` marks those whose group failed to launch.
struct Completion {
  explicit Completion(cudaStream_t s) : stream(s) {}
  Event event;
  cudaStream_t stream;
  bool recorded = false;
  bool failed = false;
};

struct OpenGroup {
  bool open = false;
  std::vector<std::shared_ptr<Completion>> members;
};
OpenGroup& open_group() {
  thread_local OpenGroup group;
  return group;
}

void join_group() {
  OpenGroup& group = open_group();
  if (group.open) return;
  MESHTRAIN_NCCL_CHECK(ncclGroupStart(), nullptr);
  group.open = true;
}

// Launches the open group (if any) and records the completion of each of its operations.
void launch_group() {
  OpenGroup& group = open_group();
  if (!group.open) return;
  std::vector<std::shared_ptr<Completion>> members = std::move(group.members);
  group.members.clear();
  group.open = false;
  const ncclResult_t launched = ncclGroupEnd();
  if (launched != ncclSuccess) {
    for (auto& member : members) member->failed = true;
    nccl_fail(launched, nullptr, "ncclGroupEnd()", __FILE__, __LINE__);
  }
  for (auto& member : members) {
    MESHTRAIN_CUDA_CHECK(cudaEventRecord(member->event.get(), member->stream));
    member->recorded = true;
  }
}

// Waiting launches the operation's group if it is still open. Dropped without wait(), nothing
// blocks: the operation stays ordered on the stream before whatever is enqueued after it.
class NcclRequest final : public Request::Impl {
 public:
  NcclRequest(std::shared_ptr<NcclHandle> comm, std::shared_ptr<Completion> completion, std::string what)
      : comm_(std::move(comm)), completion_(std::move(completion)), what_(std::move(what)) {}

  void wait() override {
    if (!completion_->recorded && !completion_->failed) launch_group();
    if (completion_->failed) {
      throw std::runtime_error(fmt::format(
          "{}: the NCCL group it belonged to failed to launch\nHINT: see the error ncclGroupEnd reported first; "
          "NCCL_DEBUG=INFO says more",
          what_));
    }
    wait_for(completion_->event.get(), *comm_, what_);
  }

 private:
  std::shared_ptr<NcclHandle> comm_;  // kept alive for the asynchronous-error check
  std::shared_ptr<Completion> completion_;
  std::string what_;
};

// ---------------------------------------------------------------------------------------------

class NcclComm final : public Comm {
 public:
  // `host`: an MPI Comm over the same ranks in the same order, for the host-memory alltoall.
  NcclComm(std::shared_ptr<NcclHandle> comm, int rank, int size, cudaStream_t stream, std::unique_ptr<Comm> host)
      : comm_(std::move(comm)), rank_(rank), size_(size), stream_(stream), host_(std::move(host)) {}

  // Launches this thread's open group, which may hold this communicator's messages.
  ~NcclComm() override {
    try {
      launch_group();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "meshtrain: launching pending NCCL messages at teardown failed: %s\n", e.what());
    }
  }

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  std::string backend() const override { return "nccl"; }

  void allreduce_sum(float* data, std::size_t count) override { allreduce(data, count, ncclFloat, ncclSum); }
  void allreduce_max(float* data, std::size_t count) override { allreduce(data, count, ncclFloat, ncclMax); }
  void allreduce_max(double* data, std::size_t count) override { allreduce(data, count, ncclDouble, ncclMax); }
  void allreduce_sum(double* data, std::size_t count) override { allreduce(data, count, ncclDouble, ncclSum); }

  Request iallreduce_sum(float* data, std::size_t count) override {
    if (count == 0) return Request();
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm(), stream_), comm());
    return enqueued(fmt::format("iallreduce_sum of {} floats", count));
  }

  void reduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override {
    if (recv_count == 0) return;
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, ncclFloat, ncclSum, comm(), stream_), comm());
    complete("reduce_scatter_sum");
  }
  Request ireduce_scatter_sum(const float* send, float* recv, std::size_t recv_count) override {
    if (recv_count == 0) return Request();
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, ncclFloat, ncclSum, comm(), stream_), comm());
    return enqueued(fmt::format("ireduce_scatter_sum of {} floats", recv_count));
  }

  void allgather(const float* send, float* recv, std::size_t send_count) override {
    gather_all(send, recv, send_count, ncclFloat);
  }
  Request iallgather(const float* send, float* recv, std::size_t send_count) override {
    return igather_all(send, recv, send_count, ncclFloat, "floats");
  }

  void broadcast(float* data, std::size_t count, int root) override {
    check_rank(root, "broadcast", "root");
    if (count == 0) return;
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclBroadcast(data, data, count, ncclFloat, root, comm(), stream_), comm());
    complete("broadcast");
  }

  void send(const float* data, std::size_t count, int peer, int tag) override {
    send_to(data, count, ncclFloat, peer, tag);
  }
  void recv(float* data, std::size_t count, int peer, int tag) override {
    recv_from(data, count, ncclFloat, peer, tag);
  }
  Request isend(const float* data, std::size_t count, int peer, int tag) override {
    return isend_to(data, count, ncclFloat, "floats", peer, tag);
  }
  Request irecv(float* data, std::size_t count, int peer, int tag) override {
    return irecv_from(data, count, ncclFloat, "floats", peer, tag);
  }

  // An allreduce of one element completes only when every rank has entered it.
  void barrier() override {
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclAllReduce(token_.get(), token_.get(), 1, ncclFloat, ncclSum, comm(), stream_), comm());
    complete("barrier");
  }

  void allreduce_sum(bf16* data, std::size_t count) override { allreduce(data, count, ncclBfloat16, ncclSum); }
  void allreduce_sum(fp16* data, std::size_t count) override { allreduce(data, count, ncclFloat16, ncclSum); }
  void allgather(const bf16* send, bf16* recv, std::size_t send_count) override {
    gather_all(send, recv, send_count, ncclBfloat16);
  }
  void allgather(const fp16* send, fp16* recv, std::size_t send_count) override {
    gather_all(send, recv, send_count, ncclFloat16);
  }
  Request iallgather(const bf16* send, bf16* recv, std::size_t send_count) override {
    return igather_all(send, recv, send_count, ncclBfloat16, "bf16 values");
  }
  Request iallgather(const fp16* send, fp16* recv, std::size_t send_count) override {
    return igather_all(send, recv, send_count, ncclFloat16, "fp16 values");
  }
  void send(const bf16* data, std::size_t count, int peer, int tag) override {
    send_to(data, count, ncclBfloat16, peer, tag);
  }
  void send(const fp16* data, std::size_t count, int peer, int tag) override {
    send_to(data, count, ncclFloat16, peer, tag);
  }
  void recv(bf16* data, std::size_t count, int peer, int tag) override {
    recv_from(data, count, ncclBfloat16, peer, tag);
  }
  void recv(fp16* data, std::size_t count, int peer, int tag) override {
    recv_from(data, count, ncclFloat16, peer, tag);
  }
  Request isend(const bf16* data, std::size_t count, int peer, int tag) override {
    return isend_to(data, count, ncclBfloat16, "bf16 values", peer, tag);
  }
  Request isend(const fp16* data, std::size_t count, int peer, int tag) override {
    return isend_to(data, count, ncclFloat16, "fp16 values", peer, tag);
  }
  Request irecv(bf16* data, std::size_t count, int peer, int tag) override {
    return irecv_from(data, count, ncclBfloat16, "bf16 values", peer, tag);
  }
  Request irecv(fp16* data, std::size_t count, int peer, int tag) override {
    return irecv_from(data, count, ncclFloat16, "fp16 values", peer, tag);
  }

  void alltoallv(const float* send, const std::size_t* send_counts, const std::size_t* send_displs, float* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs, ncclFloat);
  }
  void alltoallv(const double* send, const std::size_t* send_counts, const std::size_t* send_displs, double* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs, ncclDouble);
  }
  void alltoallv(const bf16* send, const std::size_t* send_counts, const std::size_t* send_displs, bf16* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs, ncclBfloat16);
  }
  void alltoallv(const fp16* send, const std::size_t* send_counts, const std::size_t* send_displs, fp16* recv,
                 const std::size_t* recv_counts, const std::size_t* recv_displs) override {
    exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs, ncclFloat16);
  }
  void alltoall(const std::int64_t* send, std::int64_t* recv, std::size_t count_per_peer) override {
    host_->alltoall(send, recv, count_per_peer);
  }

 private:
  ncclComm_t comm() const { return comm_->get(); }

  void allreduce(void* data, std::size_t count, ncclDataType_t type, ncclRedOp_t op) {
    if (count == 0) return;
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclAllReduce(data, data, count, type, op, comm(), stream_), comm());
    complete("allreduce");
  }

  void gather_all(const void* send, void* recv, std::size_t send_count, ncclDataType_t type) {
    if (send_count == 0) return;
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclAllGather(send, recv, send_count, type, comm(), stream_), comm());
    complete("allgather");
  }

  Request igather_all(const void* send, void* recv, std::size_t send_count, ncclDataType_t type, const char* elements) {
    if (send_count == 0) return Request();
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclAllGather(send, recv, send_count, type, comm(), stream_), comm());
    return enqueued(fmt::format("iallgather of {} {}", send_count, elements));
  }

  // A blocking send or recv launches the open group with itself in it and waits for all of it.
  void send_to(const void* data, std::size_t count, ncclDataType_t type, int peer, int tag) {
    check_peer(peer, tag, "send");
    if (count == 0) return;
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclSend(data, count, type, peer, comm(), stream_), comm());
    launch_group();
    complete("send");
  }

  void recv_from(void* data, std::size_t count, ncclDataType_t type, int peer, int tag) {
    check_peer(peer, tag, "recv");
    if (count == 0) return;
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclRecv(data, count, type, peer, comm(), stream_), comm());
    launch_group();
    complete("recv");
  }

  Request isend_to(const void* data, std::size_t count, ncclDataType_t type, const char* elements, int peer, int tag) {
    check_peer(peer, tag, "isend");
    if (count == 0) return Request();
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclSend(data, count, type, peer, comm(), stream_), comm());
    return in_group(fmt::format("isend of {} {} to peer {}", count, elements, peer));
  }

  Request irecv_from(void* data, std::size_t count, ncclDataType_t type, const char* elements, int peer, int tag) {
    check_peer(peer, tag, "irecv");
    if (count == 0) return Request();
    join_group();
    MESHTRAIN_NCCL_CHECK(ncclRecv(data, count, type, peer, comm(), stream_), comm());
    return in_group(fmt::format("irecv of {} {} from peer {}", count, elements, peer));
  }

  // One NCCL group of the blocks to and from the other ranks, the own block copied on the stream.
  template <class T>
  void exchange(const T* send, const std::size_t* send_counts, const std::size_t* send_displs, T* recv,
                const std::size_t* recv_counts, const std::size_t* recv_displs, ncclDataType_t type) {
    if (send_counts[rank_] != recv_counts[rank_]) {
      throw std::invalid_argument(
          fmt::format("alltoallv: group rank {} sends itself {} elements but expects {} (send_counts[{}] must equal "
                      "recv_counts[{}])",
                      rank_, send_counts[rank_], recv_counts[rank_], rank_, rank_));
    }
    launch_group();
    MESHTRAIN_NCCL_CHECK(ncclGroupStart(), comm());
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      if (send_counts[peer] > 0) {
        MESHTRAIN_NCCL_CHECK(ncclSend(send + send_displs[peer], send_counts[peer], type, peer, comm(), stream_),
                             comm());
      }
      if (recv_counts[peer] > 0) {
        MESHTRAIN_NCCL_CHECK(ncclRecv(recv + recv_displs[peer], recv_counts[peer], type, peer, comm(), stream_),
                             comm());
      }
    }
    MESHTRAIN_NCCL_CHECK(ncclGroupEnd(), comm());
    MESHTRAIN_CUDA_CHECK(cudaMemcpyAsync(recv + recv_displs[rank_], send + send_displs[rank_],
                                         send_counts[rank_] * sizeof(T), cudaMemcpyDeviceToDevice, stream_));
    complete("alltoallv");
  }

  // Waits for everything enqueued on the stream so far.
  void complete(const char* what) {
    MESHTRAIN_CUDA_CHECK(cudaEventRecord(done_.get(), stream_));
    wait_for(done_.get(), *comm_, what);
  }

  // A request for the collective just enqueued on the stream: an event recorded after it.
  Request enqueued(std::string what) {
    auto completion = std::make_shared<Completion>(stream_);
    MESHTRAIN_CUDA_CHECK(cudaEventRecord(completion->event.get(), stream_));
    completion->recorded = true;
    return Request(std::make_unique<NcclRequest>(comm_, std::move(completion), std::move(what)));
  }

  Request in_group(std::string what) {
    auto completion = std::make_shared<Completion>(stream_);
    open_group().members.push_back(completion);
    return Request(std::make_unique<NcclRequest>(comm_, std::move(completion), std::move(what)));
  }

  void check_rank(int rank, const char* op, const char* role) const { require_group_rank(rank, size_, op, role); }
  void check_peer(int peer, int tag, const char* op) const {
    check_rank(peer, op, "peer");
    if (tag < 0) throw std::invalid_argument(fmt::format("{}: tag {} is negative", op, tag));
  }

  std::shared_ptr<NcclHandle> comm_;  // first: destroyed after the event and buffer that use it
  int rank_, size_;
  cudaStream_t stream_;
  Event done_;
  DeviceFloat token_;
  std::unique_ptr<Comm> host_;
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

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm comm, void* stream) {
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
  auto nccl = std::make_shared<NcclHandle>(handle);
  return std::make_unique<NcclComm>(std::move(nccl), rank, size, static_cast<cudaStream_t>(stream),
                                    make_mpi_comm(comm));
}

}  // namespace meshtrain

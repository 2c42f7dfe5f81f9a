// The NCCL backend's support (parallel/impl/nccl_support.hpp).
#include "parallel/impl/nccl_support.hpp"

#include "core/host_waits.hpp"
#include "core/watched_wait.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace meshtrain::nccl_backend {
namespace {

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

struct OpenGroup {
  bool open = false;
  std::vector<std::shared_ptr<Completion>> members;
};
OpenGroup& open_group() {
  thread_local OpenGroup group;
  return group;
}

class NcclRequest final : public Request::Impl {
 public:
  NcclRequest(std::shared_ptr<NcclHandle> comm, std::shared_ptr<Completion> completion, cudaStream_t compute,
              std::string what)
      : comm_(std::move(comm)), completion_(std::move(completion)), compute_(compute), what_(std::move(what)) {}

  void wait() override {
    if (!completion_->recorded && !completion_->failed) launch_group();
    if (completion_->failed) {
      throw std::runtime_error(fmt::format(
          "{}: the NCCL group it belonged to failed to launch\nHINT: see the error ncclGroupEnd reported first; "
          "NCCL_DEBUG=INFO says more",
          what_));
    }
    MESHTRAIN_CUDA_CHECK(cudaStreamWaitEvent(compute_, completion_->event.get(), 0));
  }

 private:
  std::shared_ptr<NcclHandle> comm_;  // kept alive while its operation may run
  std::shared_ptr<Completion> completion_;
  cudaStream_t compute_;
  std::string what_;
};

}  // namespace

void nccl_fail(ncclResult_t result, ncclComm_t comm, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(comm);
  const std::string detail = last != nullptr && *last != '\0' ? fmt::format(" ({})", last) : std::string();
  throw std::runtime_error(fmt::format("{}:{}: NCCL call {} failed: {}{}\nHINT: {}", file, line, call,
                                       ncclGetErrorString(result), detail, nccl_hint(result)));
}

void wait_for(cudaEvent_t event, NcclHandle& handle, const std::string& what) {
  report_host_wait("NCCL: the host waits for a group's operations");
  const ncclComm_t comm = handle.get();
  for (;;) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) cuda::fail(state, "cudaEventQuery(event)", __FILE__, __LINE__);
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

void add_to_group(std::shared_ptr<Completion> completion) { open_group().members.push_back(std::move(completion)); }

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

Request make_request(std::shared_ptr<NcclHandle> comm, std::shared_ptr<Completion> completion, cudaStream_t compute,
                     std::string what) {
  return Request(std::make_unique<NcclRequest>(std::move(comm), std::move(completion), compute, std::move(what)));
}

}  // namespace meshtrain::nccl_backend

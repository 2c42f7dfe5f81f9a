// What the NCCL backend (parallel/comm_nccl.cpp, whose comment says how it works) keeps apart from
// its Comm: checked NCCL calls, the owned handles, the wait that polls for errors and the watchdog,
// and the thread's open point-to-point group with the Requests of its operations. Internal to the
// backend; CUDA runtime calls are checked with core/cuda_check.hpp.
#pragma once

#include "core/cuda_check.hpp"
#include "parallel/comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>
#include <memory>
#include <string>

namespace meshtrain::nccl_backend {

// Throw std::runtime_error with the call, file, line, NCCL's error (and its last message for
// `comm`, which may be null) and a HINT.
[[noreturn]] void nccl_fail(ncclResult_t result, ncclComm_t comm, const char* call, const char* file, int line);
inline void nccl_check(ncclResult_t result, ncclComm_t comm, const char* call, const char* file, int line) {
  if (result != ncclSuccess) nccl_fail(result, comm, call, file, line);
}
#define MESHTRAIN_NCCL_CHECK(call, comm) \
  ::meshtrain::nccl_backend::nccl_check((call), (comm), #call, __FILE__, __LINE__)

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

// A stream of the Comm's own, which does not synchronise with the legacy default stream.
class Stream {
 public:
  Stream() { MESHTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }  // its work completes first, CUDA frees it after
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
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

// Waits until `event` has happened, checking `handle` for an asynchronous error meanwhile. Polls
// rather than blocks in a stream synchronisation, so that once the watchdog has reported this wait
// (core/watched_wait.hpp) it can abort the communicator, whose kernels would otherwise spin on
// the GPU for ever, and throw CollectiveTimeout (main exits 5).
void wait_for(cudaEvent_t event, NcclHandle& handle, const std::string& what);

// One operation's completion: an event recorded on the stream after it. Point-to-point operations
// are recorded when their group is launched; `failed` marks those whose group failed to launch.
struct Completion {
  explicit Completion(cudaStream_t s) : stream(s) {}
  Event event;
  cudaStream_t stream;
  bool recorded = false;
  bool failed = false;
};

// The thread's open point-to-point group: join_group opens it if it is not open; add_to_group
// records an operation of it, whose completion launch_group records on its stream when it launches
// the group (if one is open).
void join_group();
void add_to_group(std::shared_ptr<Completion> completion);
void launch_group();

// A Request for the operation `completion` follows: waiting launches its group if it is still open,
// then makes `compute` wait on the completion's event (the host does not wait: Comm::settle does,
// watched). Dropped without wait(), nothing waits for it: the operation stays ordered on its stream
// before whatever is enqueued there after it.
Request make_request(std::shared_ptr<NcclHandle> comm, std::shared_ptr<Completion> completion, cudaStream_t compute,
                     std::string what);

}  // namespace meshtrain::nccl_backend

// What the cuDNN attention wrapper (cudnn_attention.cpp, cudnn_attention_graph.cpp) needs around cuDNN:
// failures of cuDNN, the cudnn-frontend and the CUDA runtime as std::runtime_error naming the call, the
// attention call and its shape, the library's message and a HINT; the cuDNN handle of each device; the
// workspace of each stream. Internal to the wrapper; free of Kokkos. Not thread-safe by itself: the
// wrapper's entry points hold one lock around everything they do.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

namespace meshtrain::cudnn::detail {

// Throw std::runtime_error: "<what>: <call> failed: <message>\nHINT: ...". `what` names the attention call
// and its shape (describe() in cudnn_attention.cpp).
[[noreturn]] void fail(const std::string& what, const char* call, const std::string& message);

void check(cudnnStatus_t status, const char* call, const std::string& what);
void check(cudaError_t error, const char* call, const std::string& what);

// A cudnn-frontend result (cudnn_frontend::error_t), taken as a template so that this header need not
// include the frontend.
template <class FrontendStatus>
void check_frontend(FrontendStatus status, const char* call, const std::string& what) {
  if (!status.is_good()) fail(what, call, status.get_message());
}

// The current device's cuDNN handle, made on its first use and kept for the process, bound to `stream`.
cudnnHandle_t handle_for(int device, void* stream, const std::string& what);

// A device block of at least `bytes` for `stream`, kept for the next calls on it: work queued on the
// stream behind earlier users of the block is ordered with them. A block too small is freed and
// reallocated (at least twice as large) in stream order, cudaFreeAsync and cudaMallocAsync, so no call
// waits for the GPU. nullptr when bytes is 0.
void* workspace_for(int device, void* stream, std::size_t bytes, const std::string& what);

}  // namespace meshtrain::cudnn::detail

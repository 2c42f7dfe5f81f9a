// Checked CUDA runtime calls, shared by the cuBLAS wrappers (kernels/cublas_support.hpp) and the
// NCCL backend (parallel/comm_nccl.cpp): a failing call throws std::runtime_error with the file,
// line, the call's text, CUDA's error name and string, and a HINT for the fix:
//
//   MESHTRAIN_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream));
//
// Header-only and free of Kokkos: the two libraries that include it already link the CUDA runtime
// and nothing else of meshtrain's, so a library of its own would add a target (and an exported one)
// for two functions. Include it only where <cuda_runtime.h> is available (CUDA or NCCL builds).
#pragma once

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <stdexcept>

namespace meshtrain::cuda {

inline const char* hint(cudaError_t error) {
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return "no usable GPU for this rank: check nvidia-smi, CUDA_VISIBLE_DEVICES, that the driver supports "
             "this CUDA version, and that Slurm gave the job GPUs (--gpus-per-task); without GPUs, run "
             "parallel.backend mpi on a build without CUDA";
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: fewer or smaller buffers, or more ranks to share them";
    default: return "run with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel, or under compute-sanitizer";
  }
}

[[noreturn]] inline void fail(cudaError_t error, const char* call, const char* file, int line) {
  throw std::runtime_error(fmt::format("{}:{}: CUDA call {} failed: {} ({})\nHINT: {}", file, line, call,
                                       cudaGetErrorName(error), cudaGetErrorString(error), hint(error)));
}

inline void check(cudaError_t error, const char* call, const char* file, int line) {
  if (error != cudaSuccess) fail(error, call, file, line);
}

}  // namespace meshtrain::cuda

#define MESHTRAIN_CUDA_CHECK(call) ::meshtrain::cuda::check((call), #call, __FILE__, __LINE__)

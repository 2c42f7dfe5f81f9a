// What the cuBLAS and cuBLASLt wrappers (cublas_gemm.cpp, cublaslt_epilogue.cpp) share: cuBLAS
// status checks that throw with a HINT (CUDA runtime calls use core/cuda_check.hpp's), the operand
// types, the per-thread handle and stream-ordered device blocks. Internal to those two files; free
// of Kokkos like them.
#pragma once

#include "core/cuda_check.hpp"
#include "core/half_types.hpp"
#include "kernels/gemm_types.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>

namespace meshtrain::cublas::detail {

// Throw std::runtime_error with the status's name, the call, file, line and a HINT.
[[noreturn]] void fail(cublasStatus_t status, const char* call, const char* file, int line);
inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(status, call, file, line);
}
#define MESHTRAIN_CUBLAS_CHECK(call) ::meshtrain::cublas::detail::check((call), #call, __FILE__, __LINE__)

inline cublasOperation_t op(Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

// The CUDA type of a storage type that goes through the Ex and Lt entry points.
template <class Real>
constexpr cudaDataType_t data_type() {
  static_assert(is_low_precision_v<Real> || std::is_same_v<Real, float>);
  if constexpr (std::is_same_v<Real, float>) return CUDA_R_32F;
  return std::is_same_v<Real, bf16> ? CUDA_R_16BF : CUDA_R_16F;
}

// Whether fp32 products may use TF32 tensor cores (cublas::set_tf32).
bool tf32_enabled();

// The calling thread's cuBLAS handle, bound to `stream`, in the math mode set_tf32 chose.
cublasHandle_t handle_for(void* stream);

// What a thread keeps in device memory per stream.
enum class Block { pointer_arrays, lt_workspace, bias_gradient, count };

// A device block of at least `bytes` for this host thread, `stream` and `use`, reused by every call
// after: work queued on the stream behind earlier users of the block is ordered with them. A block
// too small is freed and reallocated (at least twice as large) in stream order, cudaFreeAsync and
// cudaMallocAsync, so no call waits for the GPU.
void* stream_block(void* stream, Block use, std::size_t bytes);

}  // namespace meshtrain::cublas::detail

// Row-major GEMMs through column-major cuBLAS.
//
// cuBLAS is column-major: a row-major M×N matrix is its column-major N×M transpose. So row-major
// C = op(A)·op(B) is computed as column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cuBLAS is called with the
// operands swapped, m and n swapped, and the same leading dimensions.
#include "kernels/cublas_gemm.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <stdexcept>
#include <type_traits>

namespace meshtrain::cublas {
namespace {

void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(fmt::format(
      "{}:{}: {} failed: {} ({})\nHINT: CUBLAS_STATUS_NOT_INITIALIZED means no usable GPU or driver "
      "(check nvidia-smi and CUDA_VISIBLE_DEVICES); ALLOC_FAILED means the GPU is out of memory",
      file, line, call, cublasGetStatusName(status), cublasGetStatusString(status)));
}
#define MESHTRAIN_CUBLAS_CHECK(call) check((call), #call, __FILE__, __LINE__)

cublasOperation_t op(Trans t) { return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

// One handle per host thread, bound to the stream of each call. cuBLAS handles are costly to
// create and not thread-safe to share; a thread-local cache is the usual answer.
cublasHandle_t handle_for(void* stream) {
  struct Owner {
    cublasHandle_t handle = nullptr;
    ~Owner() {
      if (handle != nullptr) cublasDestroy(handle);
    }
  };
  thread_local Owner owner;
  if (owner.handle == nullptr) MESHTRAIN_CUBLAS_CHECK(cublasCreate(&owner.handle));
  MESHTRAIN_CUBLAS_CHECK(cublasSetStream(owner.handle, static_cast<cudaStream_t>(stream)));
  return owner.handle;
}

}  // namespace

template <class Real>
void gemm(void* stream, Trans trans_a, Trans trans_b, GemmShape s, Real alpha, const Real* a, int lda, const Real* b,
          int ldb, Real beta, Real* c, int ldc) {
  cublasHandle_t h = handle_for(stream);
  if constexpr (std::is_same_v<Real, float>) {
    MESHTRAIN_CUBLAS_CHECK(
        cublasSgemm(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb, a, lda, &beta, c, ldc));
  } else {
    MESHTRAIN_CUBLAS_CHECK(
        cublasDgemm(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb, a, lda, &beta, c, ldc));
  }
}

template <class Real>
void gemm_strided_batched(void* stream, Trans trans_a, Trans trans_b, GemmShape s, Real alpha, const Real* a, int lda,
                          long stride_a, const Real* b, int ldb, long stride_b, Real beta, Real* c, int ldc,
                          long stride_c, int batch) {
  cublasHandle_t h = handle_for(stream);
  if constexpr (std::is_same_v<Real, float>) {
    MESHTRAIN_CUBLAS_CHECK(cublasSgemmStridedBatched(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb,
                                                     stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
  } else {
    MESHTRAIN_CUBLAS_CHECK(cublasDgemmStridedBatched(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb,
                                                     stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
  }
}

template void gemm<float>(void*, Trans, Trans, GemmShape, float, const float*, int, const float*, int, float, float*,
                          int);
template void gemm<double>(void*, Trans, Trans, GemmShape, double, const double*, int, const double*, int, double,
                           double*, int);
template void gemm_strided_batched<float>(void*, Trans, Trans, GemmShape, float, const float*, int, long,
                                          const float*, int, long, float, float*, int, long, int);
template void gemm_strided_batched<double>(void*, Trans, Trans, GemmShape, double, const double*, int, long,
                                           const double*, int, long, double, double*, int, long, int);

}  // namespace meshtrain::cublas

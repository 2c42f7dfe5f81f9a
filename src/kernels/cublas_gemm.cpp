// Row-major GEMMs through column-major cuBLAS.
//
// cuBLAS is column-major: a row-major M×N matrix is its column-major N×M transpose. So row-major
// C = op(A)·op(B) is computed as column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cuBLAS is called with the
// operands swapped, m and n swapped, and the same leading dimensions. bf16 and fp16 go through the
// Ex entry points: 16-bit A, B and C, float alpha and beta, float accumulation.
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
  throw std::runtime_error(
      fmt::format("{}:{}: {} failed: {} ({})\nHINT: CUBLAS_STATUS_NOT_INITIALIZED means no usable GPU or driver "
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

// The cuBLAS type of a 16-bit storage type.
template <class Real>
constexpr cudaDataType_t data_type() {
  static_assert(is_low_precision_v<Real>);
  return std::is_same_v<Real, bf16> ? CUDA_R_16BF : CUDA_R_16F;
}

template <class Real>
void gemm(void* stream, Trans trans_a, Trans trans_b, GemmShape s, accum_t<Real> alpha, const Real* a, int lda,
          const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc) {
  cublasHandle_t h = handle_for(stream);
  if constexpr (std::is_same_v<Real, float>) {
    MESHTRAIN_CUBLAS_CHECK(
        cublasSgemm(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb, a, lda, &beta, c, ldc));
  } else if constexpr (std::is_same_v<Real, double>) {
    MESHTRAIN_CUBLAS_CHECK(
        cublasDgemm(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb, a, lda, &beta, c, ldc));
  } else {
    const cudaDataType_t t = data_type<Real>();
    MESHTRAIN_CUBLAS_CHECK(cublasGemmEx(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, t, ldb, a, t, lda, &beta,
                                        c, t, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

template <class Real>
void gemm_strided_batched(void* stream, Trans trans_a, Trans trans_b, GemmShape s, accum_t<Real> alpha, const Real* a,
                          int lda, long stride_a, const Real* b, int ldb, long stride_b, accum_t<Real> beta, Real* c,
                          int ldc, long stride_c, int batch) {
  cublasHandle_t h = handle_for(stream);
  if constexpr (std::is_same_v<Real, float>) {
    MESHTRAIN_CUBLAS_CHECK(cublasSgemmStridedBatched(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb,
                                                     stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
  } else if constexpr (std::is_same_v<Real, double>) {
    MESHTRAIN_CUBLAS_CHECK(cublasDgemmStridedBatched(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, ldb,
                                                     stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
  } else {
    const cudaDataType_t t = data_type<Real>();
    MESHTRAIN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op(trans_b), op(trans_a), s.n, s.m, s.k, &alpha, b, t, ldb,
                                                      stride_b, a, t, lda, stride_a, &beta, c, t, ldc, stride_c, batch,
                                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

#define MESHTRAIN_INSTANTIATE_CUBLAS(Real)                                                                        \
  template void gemm<Real>(void*, Trans, Trans, GemmShape, accum_t<Real>, const Real*, int, const Real*, int,     \
                           accum_t<Real>, Real*, int);                                                            \
  template void gemm_strided_batched<Real>(void*, Trans, Trans, GemmShape, accum_t<Real>, const Real*, int, long, \
                                           const Real*, int, long, accum_t<Real>, Real*, int, long, int);

MESHTRAIN_INSTANTIATE_CUBLAS(float)
MESHTRAIN_INSTANTIATE_CUBLAS(double)
MESHTRAIN_INSTANTIATE_CUBLAS(bf16)
MESHTRAIN_INSTANTIATE_CUBLAS(fp16)
#undef MESHTRAIN_INSTANTIATE_CUBLAS

}  // namespace meshtrain::cublas

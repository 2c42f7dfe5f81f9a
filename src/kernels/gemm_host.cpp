// Host GEMM dispatch through CBLAS (row-major).
#include "kernels/gemm.hpp"

#include <cblas.h>

#include <type_traits>

namespace meshtrain {
namespace {

CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }

template <class Real>
void cblas_gemm(Trans trans_a, Trans trans_b, GemmShape s, Real alpha, const Real* a, int lda,
                const Real* b, int ldb, Real beta, Real* c, int ldc) {
  if constexpr (std::is_same_v<Real, float>) {
    cblas_sgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), s.m, s.n, s.k, alpha, a,
                lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, cblas_trans(trans_a), cblas_trans(trans_b), s.m, s.n, s.k, alpha, a,
                lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace

#if !defined(KOKKOS_ENABLE_CUDA)

template <class Real>
void gemm(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, Real alpha,
          const Real* a, int lda, const Real* b, int ldb, Real beta, Real* c, int ldc) {
  space.fence();  // earlier kernels on this space must have produced A and B
  cblas_gemm(trans_a, trans_b, shape, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class Real>
void gemm_strided_batched(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape,
                          Real alpha, const Real* a, int lda, long stride_a, const Real* b, int ldb,
                          long stride_b, Real beta, Real* c, int ldc, long stride_c, int batch) {
  space.fence();
  for (int i = 0; i < batch; ++i) {
    cblas_gemm(trans_a, trans_b, shape, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta,
               c + i * stride_c, ldc);
  }
}

template void gemm<float>(const ExecSpace&, Trans, Trans, GemmShape, float, const float*, int,
                          const float*, int, float, float*, int);
template void gemm<double>(const ExecSpace&, Trans, Trans, GemmShape, double, const double*, int,
                           const double*, int, double, double*, int);
template void gemm_strided_batched<float>(const ExecSpace&, Trans, Trans, GemmShape, float,
                                          const float*, int, long, const float*, int, long, float,
                                          float*, int, long, int);
template void gemm_strided_batched<double>(const ExecSpace&, Trans, Trans, GemmShape, double,
                                           const double*, int, long, const double*, int, long,
                                           double, double*, int, long, int);

#endif

}  // namespace meshtrain

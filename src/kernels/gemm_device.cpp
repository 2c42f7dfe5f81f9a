// GEMM dispatch for the Kokkos CUDA backend: every product goes to cuBLAS on the space's stream,
// so it is ordered with the Kokkos kernels launched on the same space.
#include "kernels/gemm.hpp"

#include "kernels/cublas_gemm.hpp"

#if defined(KOKKOS_ENABLE_CUDA)

namespace meshtrain {

template <class Real>
void gemm(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, Real alpha, const Real* a, int lda,
          const Real* b, int ldb, Real beta, Real* c, int ldc) {
  cublas::gemm<Real>(space.cuda_stream(), trans_a, trans_b, shape, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class Real>
void gemm_strided_batched(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, Real alpha,
                          const Real* a, int lda, long stride_a, const Real* b, int ldb, long stride_b, Real beta,
                          Real* c, int ldc, long stride_c, int batch) {
  cublas::gemm_strided_batched<Real>(space.cuda_stream(), trans_a, trans_b, shape, alpha, a, lda, stride_a, b, ldb,
                                     stride_b, beta, c, ldc, stride_c, batch);
}

template void gemm<float>(const ExecSpace&, Trans, Trans, GemmShape, float, const float*, int, const float*, int,
                          float, float*, int);
template void gemm<double>(const ExecSpace&, Trans, Trans, GemmShape, double, const double*, int, const double*, int,
                           double, double*, int);
template void gemm_strided_batched<float>(const ExecSpace&, Trans, Trans, GemmShape, float, const float*, int, long,
                                          const float*, int, long, float, float*, int, long, int);
template void gemm_strided_batched<double>(const ExecSpace&, Trans, Trans, GemmShape, double, const double*, int,
                                           long, const double*, int, long, double, double*, int, long, int);

}  // namespace meshtrain

#endif

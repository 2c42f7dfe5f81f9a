// GEMM dispatch for the Kokkos CUDA backend: every product goes to cuBLAS on the space's stream,
// so it is ordered with the Kokkos kernels launched on the same space. 16-bit products run in
// cuBLAS on their own storage (no workspace here).
#include "kernels/gemm.hpp"

#include "kernels/cublas_gemm.hpp"
#include "kernels/cublaslt_epilogue.hpp"

#include <vector>

#if defined(KOKKOS_ENABLE_CUDA)

namespace meshtrain {

template <class Real>
void gemm(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha, const Real* a,
          int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc) {
  cublas::gemm<Real>(space.cuda_stream(), trans_a, trans_b, shape, alpha, a, lda, b, ldb, beta, c, ldc);
}

// A one-level batch is a strided-batched call; a two-level one goes as one group of equal problems
// (cublas::gemm_grouped sends problems of one shape as a single batched call).
template <class Real>
void gemm_strided_batched(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha,
                          const Real* a, int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc,
                          const StridedBatch& batch) {
  if (batch.outer == 1 || batch.inner == 1) {
    const BatchStride& s = batch.outer == 1 ? batch.inner_stride : batch.outer_stride;
    cublas::gemm_strided_batched<Real>(space.cuda_stream(), trans_a, trans_b, shape, alpha, a, lda, s.a, b, ldb, s.b,
                                       beta, c, ldc, s.c, batch.count());
    return;
  }
  std::vector<GemmProblem<Real>> problems(batch.count());
  for (int i = 0; i < batch.count(); ++i) {
    const BatchStride at = batch.offsets(i);
    problems[i] = GemmProblem<Real>{shape, a + at.a, lda, b + at.b, ldb, c + at.c, ldc};
  }
  cublas::gemm_grouped<Real>(space.cuda_stream(), trans_a, trans_b, problems, alpha, beta);
}

template <class Real>
void gemm_grouped(const ExecSpace& space, Trans trans_a, Trans trans_b, std::span<const GemmProblem<Real>> problems,
                  accum_t<Real> alpha, accum_t<Real> beta) {
  cublas::gemm_grouped<Real>(space.cuda_stream(), trans_a, trans_b, problems, alpha, beta);
}

template <class Real>
bool gemm_fused(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha,
                const Real* a, int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc,
                GemmEpilogue epilogue, const EpilogueOperands<Real>& operands) {
  return cublas::gemm_epilogue<Real>(space.cuda_stream(), trans_a, trans_b, shape, alpha, a, lda, b, ldb, beta, c, ldc,
                                     epilogue, operands);
}

void set_fp32_gemm(Fp32Gemm mode) { cublas::set_tf32(mode == Fp32Gemm::tf32); }

template <class Real>
std::size_t gemm_workspace_bytes_for(GemmShape) {
  return 0;
}
void reserve_gemm_workspace(std::size_t) {}
std::size_t gemm_workspace_bytes() { return 0; }
void release_gemm_workspace() {}

#include "kernels/gemm_instantiations.inc"

}  // namespace meshtrain

#endif

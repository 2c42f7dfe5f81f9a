// The one GEMM dispatch: every matrix product of the model goes through here.
//
// All matrices are row-major, as the model stores them (Conv1D layout [in, out], y = x W + b):
//   C[m,n] = alpha * op(A)[m,k] · op(B)[k,n] + beta * C[m,n]
// where op(X) is X or Xᵀ, and lda/ldb/ldc are row strides (elements between consecutive rows).
// Host builds call CBLAS (OpenBLAS, threaded); CUDA builds call cuBLAS on the execution space's stream.
#pragma once

#include "core/exec.hpp"
#include "kernels/gemm_types.hpp"

namespace meshtrain {

template <class Real>
void gemm(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, Real alpha,
          const Real* a, int lda, const Real* b, int ldb, Real beta, Real* c, int ldc);

// `batch` independent products; matrix i starts at a + i*stride_a (likewise b, c).
template <class Real>
void gemm_strided_batched(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape,
                          Real alpha, const Real* a, int lda, long stride_a, const Real* b, int ldb,
                          long stride_b, Real beta, Real* c, int ldc, long stride_c, int batch);

}  // namespace meshtrain

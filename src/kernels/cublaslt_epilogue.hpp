// cuBLASLt behind the fused products of kernels/gemm_epilogue.hpp, for CUDA builds: the bias add,
// GELU and bias gradients done inside the GEMM's epilogue instead of by kernels after it.
//
// Kept free of Kokkos like cublas_gemm.hpp, so that it compiles wherever the CUDA toolkit is.
#pragma once

#include "core/half_types.hpp"
#include "kernels/gemm_types.hpp"

namespace meshtrain::cublas {

// The row-major product of kernels/gemm.hpp with `epilogue` fused (kernels/gemm_types.hpp), on
// `stream`, float accumulation as cublas::gemm. Returns false, having done nothing, where cuBLASLt
// has no algorithm for it (double, an auxiliary row stride not a multiple of 8, an unsupported
// transpose); the caller then runs the unfused product and its kernels. The first refusal of each
// epilogue and type prints one line to stderr, so a device check shows what ran unfused. Failures
// of the call itself throw std::runtime_error with a HINT.
//
// Bias gradients are written by cuBLASLt into a scratch vector of Real (the thread's block for the
// stream) and added into bias_grad by cublasAxpyEx in float; the workspace is 32 MiB a stream.
template <class Real>
bool gemm_epilogue(void* stream, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha, const Real* a,
                   int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc, GemmEpilogue epilogue,
                   const EpilogueOperands<Real>& operands);

}  // namespace meshtrain::cublas

// The one GEMM dispatch: every matrix product of the model goes through here.
//
// All matrices are row-major, as the model stores them (Conv1D layout [in, out], y = x W + b):
//   C[m,n] = alpha * op(A)[m,k] · op(B)[k,n] + beta * C[m,n]
// where op(X) is X or Xᵀ, and lda/ldb/ldc are row strides (elements between consecutive rows).
// Host builds call CBLAS (OpenBLAS, threaded); CUDA builds call cuBLAS on the execution space's stream.
//
// Real is float, double, bf16 or fp16. alpha and beta are accum_t<Real>. 16-bit products accumulate
// in float and round C once: on CUDA through cublasGemmEx (16-bit operands, CUBLAS_COMPUTE_32F); on
// the host by converting op(A), op(B) and, when beta ≠ 0, C to a float workspace, cblas_sgemm there,
// and rounding the float result back into C. When beta = 0, C is not read (it may hold NaN).
#pragma once

#include "core/exec.hpp"
#include "kernels/gemm_types.hpp"

#include <cstddef>
#include <span>

namespace meshtrain {

template <class Real>
void gemm(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha, const Real* a,
          int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc);

// batch.count() independent products, matrix i of the batch at batch.offsets(i) elements from a, b
// and c (kernels/gemm_types.hpp, StridedBatch). On CUDA a one-level batch (outer or inner 1) is one
// strided-batched cuBLAS call and a two-level one a single batched call over pointer arrays; the
// host runs them in order after one fence.
template <class Real>
void gemm_strided_batched(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha,
                          const Real* a, int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc,
                          const StridedBatch& batch);

// Independent products of different shapes, C_i = alpha · op(A_i) · op(B_i) + beta · C_i, with the
// same transposes, alpha and beta. They may run concurrently (CUDA: one cublasGemmGroupedBatchedEx,
// double through cublasDgemmGroupedBatched), so no problem may write memory another reads or writes;
// products that must add into one C in order are separate calls. The host runs them in order.
template <class Real>
void gemm_grouped(const ExecSpace& space, Trans trans_a, Trans trans_b, std::span<const GemmProblem<Real>> problems,
                  accum_t<Real> alpha, accum_t<Real> beta);

// The product of gemm with `epilogue` fused into it (kernels/gemm_types.hpp, GemmEpilogue): on CUDA
// builds one cuBLASLt call for what would be a GEMM and a kernel or two. Returns false, having done
// nothing, where no fused form runs it (host builds, where CBLAS has none; double; a shape cuBLASLt
// refuses): the caller then runs gemm and its kernels, so every caller keeps the unfused path.
template <class Real>
bool gemm_fused(const ExecSpace& space, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha,
                const Real* a, int lda, const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc,
                GemmEpilogue epilogue, const EpilogueOperands<Real>& operands);

// How fp32 products are computed on CUDA builds, for the whole process (the trainer sets it from
// train.tf32): exact fp32 (the default), or TF32 tensor cores, whose inputs keep 10 mantissa bits
// and whose sums stay fp32. Either way cuBLAS may not reduce split-K partial sums of 16-bit
// products in 16 bits (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION), so every product
// accumulates in float as documented above. Host builds ignore it: CBLAS has no TF32.
enum class Fp32Gemm { exact, tf32 };
void set_fp32_gemm(Fp32Gemm mode);

// The host's 16-bit products share one float workspace (memory category `workspace`): allocated on
// first need, grown when a larger product needs more, never shrunk, reused by every product after.
// A product is done in row panels of C, so its workspace is bounded by op(B) (k·n floats) plus a
// panel of op(A) and of C, not by the whole m·n result.
//
// Bytes that products of this shape (each matrix of a batch or group in turn) need: 0 for float and
// double, and on CUDA builds (cuBLAS needs none).
template <class Real>
std::size_t gemm_workspace_bytes_for(GemmShape shape);
// Grows the workspace to at least `bytes` now, so that a known largest product allocates nothing
// later and the memory is counted from the start. No-op on CUDA builds.
void reserve_gemm_workspace(std::size_t bytes);
// Bytes the workspace holds now.
std::size_t gemm_workspace_bytes();
// Frees the workspace (the next 16-bit product allocates again).
void release_gemm_workspace();

}  // namespace meshtrain

// cuBLAS behind meshtrain's GEMM dispatch (kernels/gemm.hpp), for CUDA builds.
//
// Kept free of Kokkos so that it compiles wherever the CUDA toolkit is installed, GPU or not: the
// CUDA-backend dispatch (gemm_device.cpp) hands it the execution space's stream.
#pragma once

#include "core/half_types.hpp"
#include "kernels/gemm_types.hpp"

#include <span>

namespace meshtrain::cublas {

// Whether fp32 products use TF32 tensor cores (kernels/gemm.hpp, Fp32Gemm); process-wide, read
// by every call. Every handle also disallows reduced-precision split-K reductions.
void set_tf32(bool on);

// Row-major products as in kernels/gemm.hpp, run on `stream` (a cudaStream_t). Real is float,
// double, bf16 or fp16; 16-bit products go through cublasGemmEx with float accumulation
// (CUBLAS_COMPUTE_32F) and float alpha, beta. Failures throw std::runtime_error with the cuBLAS
// status, file, line and a HINT.
template <class Real>
void gemm(void* stream, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha, const Real* a, int lda,
          const Real* b, int ldb, accum_t<Real> beta, Real* c, int ldc);

template <class Real>
void gemm_strided_batched(void* stream, Trans trans_a, Trans trans_b, GemmShape shape, accum_t<Real> alpha,
                          const Real* a, int lda, long stride_a, const Real* b, int ldb, long stride_b,
                          accum_t<Real> beta, Real* c, int ldc, long stride_c, int batch);

// One grouped call for all the problems (each its own group of one, or, when all share shape and
// row strides, one group of them all, i.e. one batched product): cublasGemmGroupedBatchedEx
// for float, bf16 and fp16 (CUBLAS_COMPUTE_32F), cublasDgemmGroupedBatched for double. The A, B
// and C pointer arrays must be in device memory: they are staged, on `stream`, through a device
// buffer kept per host thread and stream and grown (stream-ordered) when a call needs more.
template <class Real>
void gemm_grouped(void* stream, Trans trans_a, Trans trans_b, std::span<const GemmProblem<Real>> problems,
                  accum_t<Real> alpha, accum_t<Real> beta);

}  // namespace meshtrain::cublas

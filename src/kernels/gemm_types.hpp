// Vocabulary of the GEMM dispatch, free of Kokkos so that the cuBLAS wrapper can use it too.
#pragma once

namespace meshtrain {

enum class Trans { no, yes };

struct GemmShape {
  int m, n, k;
};

// Elements between consecutive matrices of A, B and C at one level of a strided batch.
struct BatchStride {
  long a, b, c;
};

// A strided batch of products of one shape over two levels (kernels/gemm.hpp): matrix (o, i), o <
// outer, i < inner, of A starts at a + o·outer_stride.a + i·inner_stride.a, likewise B and C. A
// batch of one level has outer = 1 (its outer_stride is not read).
struct StridedBatch {
  int outer;
  BatchStride outer_stride;
  int inner;
  BatchStride inner_stride;
  int count() const { return outer * inner; }
  // Offsets of the batch's i-th matrix (0 ≤ i < count(), the inner index running fastest).
  BatchStride offsets(int i) const {
    const int o = i / inner, n = i % inner;
    return {o * outer_stride.a + n * inner_stride.a, o * outer_stride.b + n * inner_stride.b,
            o * outer_stride.c + n * inner_stride.c};
  }
};

// One product of a grouped GEMM: its own shape, operands and row strides (kernels/gemm.hpp).
template <class Real>
struct GemmProblem {
  GemmShape shape;
  const Real* a;
  int lda;
  const Real* b;
  int ldb;
  Real* c;
  int ldc;
};

// What a cuBLASLt epilogue fuses into a row-major product C = alpha·op(A)·op(B) + beta·C
// (kernels/gemm_epilogue.hpp), with n = C's columns:
//   bias          C[i,j] += bias[j]
//   gelu_aux_bias aux[i,j] = the product + bias[j] (GELU's input, kept for backward); C = GELU(aux)
//   dgelu_bgrad   C = the product ⊙ GELU'(aux) (aux: the forward's GELU input); bias_grad[j] += Σ_i C[i,j]
//   bgrad_b       C = the product; bias_grad[j] += Σ_p op(B)[p,j] (the column sums of B, e.g. a
//                 layer's bias gradient beside its weight gradient dW = Xᵀ·dY)
// GELU is the tanh approximation (kernels/gelu.hpp).
enum class GemmEpilogue { bias, gelu_aux_bias, dgelu_bgrad, bgrad_b };

// The epilogue's vectors: bias (n elements) for bias and gelu_aux_bias; bias_grad (n, added into)
// for dgelu_bgrad and bgrad_b; aux (rows × n, row stride ld_aux) written by gelu_aux_bias, read by
// dgelu_bgrad.
template <class Real>
struct EpilogueOperands {
  const Real* bias = nullptr;
  Real* bias_grad = nullptr;
  Real* aux = nullptr;
  int ld_aux = 0;
};

}  // namespace meshtrain

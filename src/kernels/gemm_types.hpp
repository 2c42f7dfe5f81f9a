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

}  // namespace meshtrain

// Vocabulary of the GEMM dispatch, free of Kokkos so that the cuBLAS wrapper can use it too.
#pragma once

namespace meshtrain {

enum class Trans { no, yes };

struct GemmShape {
  int m, n, k;
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

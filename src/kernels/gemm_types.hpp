// Vocabulary of the GEMM dispatch, free of Kokkos so that the cuBLAS wrapper can use it too.
#pragma once

namespace meshtrain {

enum class Trans { no, yes };

struct GemmShape {
  int m, n, k;
};

}  // namespace meshtrain

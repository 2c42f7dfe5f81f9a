// The cuBLAS path of the GEMM dispatch. With a GPU: its row-major products (every transpose pair,
// leading dimensions wider than the matrices, strided batches) against a naive host loop. Without
// one (CI): a call fails with cuBLAS's status and a HINT instead of crashing.
#include "kernels/cublas_gemm.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace meshtrain {
namespace {

bool gpu_present() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

// C = op(A)·op(B), row-major, as the reference.
std::vector<double> naive(Trans ta, Trans tb, GemmShape s, const std::vector<double>& a, int lda,
                          const std::vector<double>& b, int ldb) {
  std::vector<double> c(std::size_t(s.m) * s.n, 0.0);
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      double acc = 0;
      for (int p = 0; p < s.k; ++p) {
        const double av = ta == Trans::no ? a[i * lda + p] : a[p * lda + i];
        const double bv = tb == Trans::no ? b[p * ldb + j] : b[j * ldb + p];
        acc += av * bv;
      }
      c[i * s.n + j] = acc;
    }
  }
  return c;
}

TEST(CublasGemm, FailsWithAHintWithoutAGpu) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present; the product tests cover this build";
  double c = 0;
  try {
    cublas::gemm<double>(nullptr, Trans::no, Trans::no, {1, 1, 1}, 1.0, &c, 1, &c, 1, 0.0, &c, 1);
    FAIL() << "cuBLAS ran without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cublas"), std::string::npos) << e.what();
  }
}

TEST(CublasGemm, RowMajorProductsMatchNaiveLoops) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  const GemmShape s{5, 7, 3};
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      const int lda = (ta == Trans::no ? s.k : s.m) + 2, ldb = (tb == Trans::no ? s.n : s.k) + 1;
      const int rows_a = ta == Trans::no ? s.m : s.k, rows_b = tb == Trans::no ? s.k : s.n;
      const int batch = 3;
      const long stride_a = long(rows_a) * lda, stride_b = long(rows_b) * ldb, stride_c = long(s.m) * s.n;
      std::vector<double> a(stride_a * batch), b(stride_b * batch), c(stride_c * batch);
      for (auto& x : a) x = u(rng);
      for (auto& x : b) x = u(rng);
      double *da, *db, *dc;
      ASSERT_EQ(cudaMalloc(&da, a.size() * 8), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&db, b.size() * 8), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dc, c.size() * 8), cudaSuccess);
      cudaMemcpy(da, a.data(), a.size() * 8, cudaMemcpyHostToDevice);
      cudaMemcpy(db, b.data(), b.size() * 8, cudaMemcpyHostToDevice);
      cublas::gemm_strided_batched<double>(nullptr, ta, tb, s, 1.0, da, lda, stride_a, db, ldb, stride_b, 0.0, dc,
                                           s.n, stride_c, batch);
      cudaMemcpy(c.data(), dc, c.size() * 8, cudaMemcpyDeviceToHost);
      for (int i = 0; i < batch; ++i) {
        const std::vector<double> ai(a.begin() + i * stride_a, a.begin() + (i + 1) * stride_a);
        const std::vector<double> bi(b.begin() + i * stride_b, b.begin() + (i + 1) * stride_b);
        const auto want = naive(ta, tb, s, ai, lda, bi, ldb);
        for (std::size_t e = 0; e < want.size(); ++e) ASSERT_NEAR(c[i * stride_c + e], want[e], 1e-12);
      }
      cudaFree(da);
      cudaFree(db);
      cudaFree(dc);
    }
  }
}

}  // namespace
}  // namespace meshtrain

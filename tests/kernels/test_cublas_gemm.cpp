// The cuBLAS path of the GEMM dispatch. With a GPU: its row-major products (every transpose pair,
// leading dimensions wider than the matrices, strided batches, grouped products of different
// shapes and of one shape) against a naive host loop. Without
// one (CI): a call fails with cuBLAS's status and a HINT instead of crashing. The same for bf16 and
// fp16 storage with float accumulation.
#include "kernels/cublas_gemm.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <vector>

namespace meshtrain {
namespace test_cublas_gemm {

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
      cublas::gemm_strided_batched<double>(nullptr, ta, tb, s, 1.0, da, lda, stride_a, db, ldb, stride_b, 0.0, dc, s.n,
                                           stride_c, batch);
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

// 16-bit operands through cublasGemm(StridedBatched)Ex with float accumulation: against the naive
// loop on the same (rounded) values, within one rounding of C (u relative) plus the float
// accumulation error (k·2^-24 relative to Σ|a·b|, far below). Tensor cores may keep fewer bits in
// products (fp16 products are exact in float; bf16 too), so the bound is u·|C| + 1e-5·Σ|a·b|.
template <class H>
void check_low_precision_products() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  const double unit = unit_roundoff<H>();
  const GemmShape s{6, 9, 4};
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      const int lda = (ta == Trans::no ? s.k : s.m) + 1, ldb = (tb == Trans::no ? s.n : s.k) + 2;
      const int rows_a = ta == Trans::no ? s.m : s.k, rows_b = tb == Trans::no ? s.k : s.n;
      const int batch = 2;
      const long stride_a = long(rows_a) * lda, stride_b = long(rows_b) * ldb, stride_c = long(s.m) * s.n;
      std::vector<H> a(stride_a * batch), b(stride_b * batch), c(stride_c * batch);
      std::vector<double> ad(a.size()), bd(b.size());
      for (std::size_t i = 0; i < a.size(); ++i) ad[i] = float(a[i] = H(u(rng)));
      for (std::size_t i = 0; i < b.size(); ++i) bd[i] = float(b[i] = H(u(rng)));
      H *da, *db, *dc;
      ASSERT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&db, b.size() * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dc, c.size() * 2), cudaSuccess);
      cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
      cublas::gemm_strided_batched<H>(nullptr, ta, tb, s, 1.0f, da, lda, stride_a, db, ldb, stride_b, 0.0f, dc, s.n,
                                      stride_c, batch);
      cudaMemcpy(c.data(), dc, c.size() * 2, cudaMemcpyDeviceToHost);
      for (int i = 0; i < batch; ++i) {
        const std::vector<double> ai(ad.begin() + i * stride_a, ad.begin() + (i + 1) * stride_a);
        const std::vector<double> bi(bd.begin() + i * stride_b, bd.begin() + (i + 1) * stride_b);
        const auto want = naive(ta, tb, s, ai, lda, bi, ldb);
        for (std::size_t e = 0; e < want.size(); ++e) {
          ASSERT_NEAR(float(c[i * stride_c + e]), want[e], unit * std::fabs(want[e]) + 1e-5 * s.k)
              << precision_name<H>() << " batch " << i << " element " << e;
        }
      }
      cublas::gemm<H>(nullptr, ta, tb, s, 1.0f, da, lda, db, ldb, 0.0f, dc, s.n);
      cudaMemcpy(c.data(), dc, stride_c * 2, cudaMemcpyDeviceToHost);
      const auto want = naive(ta, tb, s, ad, lda, bd, ldb);
      for (std::size_t e = 0; e < want.size(); ++e) {
        ASSERT_NEAR(float(c[e]), want[e], unit * std::fabs(want[e]) + 1e-5 * s.k) << precision_name<H>();
      }
      cudaFree(da);
      cudaFree(db);
      cudaFree(dc);
    }
  }
}

TEST(CublasGemm, Bf16AndFp16ProductsAccumulateInFloat) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  check_low_precision_products<bf16>();
  check_low_precision_products<fp16>();
}

// Problems in one grouped call, each against the naive loop; C starts non-zero so that beta is
// seen. Problems of different shapes go as groups of one, problems of one shape as one group.
template <class Real>
void check_grouped_products(std::span<const GemmShape> shapes, double tolerance) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      std::vector<std::vector<double>> a, b, c0;
      std::vector<int> lda, ldb;
      std::vector<Real*> device;
      std::vector<GemmProblem<Real>> problems;
      for (const GemmShape& s : shapes) {
        lda.push_back((ta == Trans::no ? s.k : s.m) + 1);
        ldb.push_back((tb == Trans::no ? s.n : s.k) + 2);
        const int rows_a = ta == Trans::no ? s.m : s.k, rows_b = tb == Trans::no ? s.k : s.n;
        for (auto [matrix, size] :
             {std::pair{&a, rows_a * lda.back()}, std::pair{&b, rows_b * ldb.back()}, std::pair{&c0, s.m * s.n}}) {
          std::vector<double> values(size);
          for (double& x : values) x = float(Real(u(rng)));  // exact in Real
          std::vector<Real> stored(values.begin(), values.end());
          Real* d = nullptr;
          ASSERT_EQ(cudaMalloc(&d, size * sizeof(Real)), cudaSuccess);
          cudaMemcpy(d, stored.data(), size * sizeof(Real), cudaMemcpyHostToDevice);
          device.push_back(d);
          matrix->push_back(values);
        }
        const std::size_t i = problems.size();
        problems.push_back({s, device[3 * i], lda[i], device[3 * i + 1], ldb[i], device[3 * i + 2], s.n});
      }
      cublas::gemm_grouped<Real>(nullptr, ta, tb, problems, accum_t<Real>(1.5), accum_t<Real>(0.5));
      for (std::size_t i = 0; i < problems.size(); ++i) {
        const GemmShape s = shapes[i];
        std::vector<Real> got(std::size_t(s.m) * s.n);
        cudaMemcpy(got.data(), device[3 * i + 2], got.size() * sizeof(Real), cudaMemcpyDeviceToHost);
        const auto product = naive(ta, tb, s, a[i], lda[i], b[i], ldb[i]);
        for (std::size_t e = 0; e < got.size(); ++e) {
          const double want = 1.5 * product[e] + 0.5 * c0[i][e];
          ASSERT_NEAR(double(got[e]), want, tolerance * (1 + std::fabs(want))) << "problem " << i << " element " << e;
        }
      }
      for (Real* d : device) cudaFree(d);
    }
  }
}

TEST(CublasGemm, GroupedProductsMatchNaiveLoops) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  for (const std::vector<GemmShape>& shapes : {std::vector<GemmShape>{{5, 7, 3}, {1, 4, 6}, {8, 2, 5}},
                                               std::vector<GemmShape>{{5, 7, 3}, {5, 7, 3}, {5, 7, 3}}}) {
    check_grouped_products<double>(shapes, 1e-12);
    check_grouped_products<float>(shapes, 1e-5);
    check_grouped_products<bf16>(shapes, unit_roundoff<bf16>());
    check_grouped_products<fp16>(shapes, unit_roundoff<fp16>());
  }
}

TEST(CublasGemm, GroupedFailsWithAHintWithoutAGpu) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present; the product tests cover this build";
  float c = 0;
  const GemmProblem<float> problem{{1, 1, 1}, &c, 1, &c, 1, &c, 1};
  try {
    cublas::gemm_grouped<float>(nullptr, Trans::no, Trans::no, std::span(&problem, 1), 1.0f, 0.0f);
    FAIL() << "cuBLAS ran without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT:"), std::string::npos) << e.what();
  }
}

TEST(CublasGemm, Bf16FailsWithAHintWithoutAGpu) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present; the product tests cover this build";
  bf16 c{};
  EXPECT_THROW(cublas::gemm<bf16>(nullptr, Trans::no, Trans::no, {1, 1, 1}, 1.0f, &c, 1, &c, 1, 0.0f, &c, 1),
               std::runtime_error);
}

}  // namespace test_cublas_gemm
}  // namespace meshtrain

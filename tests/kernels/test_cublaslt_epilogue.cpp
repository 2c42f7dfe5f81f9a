// The cuBLASLt epilogues behind gemm_fused (kernels/gemm_types.hpp, GemmEpilogue), with a GPU:
// each of BIAS, GELU_AUX_BIAS, DGELU_BGRAD and the bias gradient of B against a double loop on the
// same stored values, in float, bf16 and fp16, the bias gradients starting non-zero (they are added
// into). Every epilogue must run (not refuse) at these aligned shapes: a refusal on a GPU means the
// model's products run unfused there, which this test makes visible. Without a GPU: a call throws
// with a HINT or refuses, and never crashes.
#include "kernels/cublaslt_epilogue.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace meshtrain {
namespace test_cublaslt_epilogue {

bool gpu_present() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

double gelu(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double gelu_derivative(double x) {
  const double t = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

// Values exact in Real, on the host (as doubles) and on the device.
template <class Real>
struct Matrix {
  std::vector<double> host;
  Real* device = nullptr;
  Matrix(std::size_t size, std::mt19937& rng) : host(size) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (double& x : host) x = double(float(Real(u(rng))));
    upload();
  }
  ~Matrix() { cudaFree(device); }
  void upload() {
    const std::vector<Real> stored(host.begin(), host.end());
    if (device == nullptr) {
      EXPECT_EQ(cudaMalloc(&device, host.size() * sizeof(Real)), cudaSuccess);
    }
    cudaMemcpy(device, stored.data(), host.size() * sizeof(Real), cudaMemcpyHostToDevice);
  }
  std::vector<double> download() const {
    std::vector<Real> stored(host.size());
    cudaMemcpy(stored.data(), device, host.size() * sizeof(Real), cudaMemcpyDeviceToHost);
    return std::vector<double>(stored.begin(), stored.end());
  }
};

// Row-major C (m × n) = A (m × k) · B (k × n), or Aᵀ·B with A stored k × m.
std::vector<double> product(bool a_transposed, int m, int n, int k, const std::vector<double>& a,
                            const std::vector<double>& b) {
  std::vector<double> c(std::size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      for (int p = 0; p < k; ++p) c[i * n + j] += (a_transposed ? a[p * m + i] : a[i * k + p]) * b[p * n + j];
    }
  }
  return c;
}

// Relative tolerance of a stored result: one rounding of Real plus float accumulation.
template <class Real>
double tolerance() {
  return std::is_same_v<Real, float> ? 1e-5 : 2 * unit_roundoff<Real>();
}

template <class Real>
void check_epilogues() {
  SCOPED_TRACE(precision_name<Real>());
  std::mt19937 rng(11);
  const int m = 24, n = 32, k = 16;  // n a multiple of 8: the auxiliary matrix's row stride
  const double tol = tolerance<Real>();
  Matrix<Real> a(std::size_t(m) * k, rng), b(std::size_t(k) * n, rng), c(std::size_t(m) * n, rng);
  Matrix<Real> bias(n, rng), aux(std::size_t(m) * n, rng), grad(n, rng);
  const auto ab = product(false, m, n, k, a.host, b.host);
  const auto call = [&](GemmEpilogue e, EpilogueOperands<Real> x) {
    return cublas::gemm_epilogue<Real>(nullptr, Trans::no, Trans::no, {m, n, k}, accum_t<Real>(1), a.device, k,
                                       b.device, n, accum_t<Real>(0), c.device, n, e, x);
  };

  ASSERT_TRUE(call(GemmEpilogue::bias, {.bias = bias.device})) << "BIAS refused";
  auto got = c.download();
  for (int i = 0; i < m * n; ++i) ASSERT_NEAR(got[i], ab[i] + bias.host[i % n], tol * (1 + std::fabs(got[i])));

  ASSERT_TRUE(call(GemmEpilogue::gelu_aux_bias, {.bias = bias.device, .aux = aux.device, .ld_aux = n}))
      << "GELU_AUX_BIAS refused";
  got = c.download();
  const auto pre = aux.download();
  for (int i = 0; i < m * n; ++i) {
    const double want_pre = ab[i] + bias.host[i % n];
    ASSERT_NEAR(pre[i], want_pre, tol * (1 + std::fabs(want_pre))) << "aux " << i;
    ASSERT_NEAR(got[i], gelu(want_pre), tol * (1 + std::fabs(want_pre))) << "gelu " << i;
  }

  // DGELU_BGRAD reads the stored GELU input (aux, now `pre`) and adds the column sums into grad.
  aux.host = pre;
  ASSERT_TRUE(call(GemmEpilogue::dgelu_bgrad, {.bias_grad = grad.device, .aux = aux.device, .ld_aux = n}))
      << "DGELU_BGRAD refused";
  got = c.download();
  auto grad_got = grad.download();
  for (int j = 0; j < n; ++j) {
    double sum = 0, magnitude = 0;
    for (int i = 0; i < m; ++i) {
      const double want = ab[i * n + j] * gelu_derivative(pre[i * n + j]);
      ASSERT_NEAR(got[i * n + j], want, tol * (1 + std::fabs(want))) << "dgelu " << i << "," << j;
      sum += want;
      magnitude += std::fabs(want);
    }
    ASSERT_NEAR(grad_got[j], grad.host[j] + sum, tol * (2 + magnitude + std::fabs(grad.host[j]))) << "bgrad " << j;
  }

  // The bias gradient of B beside a weight gradient: C (k × n) += Aᵀ·B with A stored m × k, grad[j]
  // += Σ_i B[i,j] (here B is m × n: c's shape).
  grad.upload();
  Matrix<Real> dw(std::size_t(k) * n, rng), dy(std::size_t(m) * n, rng);
  const auto before = dw.host;
  ASSERT_TRUE(cublas::gemm_epilogue<Real>(nullptr, Trans::yes, Trans::no, {k, n, m}, accum_t<Real>(1), a.device, k,
                                          dy.device, n, accum_t<Real>(1), dw.device, n, GemmEpilogue::bgrad_b,
                                          {.bias_grad = grad.device}))
      << "BGRADA refused";
  const auto xty = product(true, k, n, m, a.host, dy.host);
  got = dw.download();
  for (int i = 0; i < k * n; ++i) ASSERT_NEAR(got[i], before[i] + xty[i], tol * (1 + std::fabs(got[i])));
  grad_got = grad.download();
  for (int j = 0; j < n; ++j) {
    double sum = 0, magnitude = 0;
    for (int i = 0; i < m; ++i) sum += dy.host[i * n + j], magnitude += std::fabs(dy.host[i * n + j]);
    ASSERT_NEAR(grad_got[j], grad.host[j] + sum, tol * (2 + magnitude)) << "column sum " << j;
  }
}

TEST(CublasLtEpilogue, EveryEpilogueMatchesADoubleLoop) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  check_epilogues<float>();
  check_epilogues<bf16>();
  check_epilogues<fp16>();
}

TEST(CublasLtEpilogue, DoubleIsRefusedForTheUnfusedPath) {
  double c = 0;
  EXPECT_FALSE(cublas::gemm_epilogue<double>(nullptr, Trans::no, Trans::no, {1, 1, 1}, 1.0, &c, 1, &c, 1, 0.0, &c, 1,
                                             GemmEpilogue::bias, {.bias = &c}));
}

TEST(CublasLtEpilogue, WithoutAGpuThrowsWithAHintOrRefuses) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present; the epilogue test covers this build";
  float c = 0;
  try {
    EXPECT_FALSE(cublas::gemm_epilogue<float>(nullptr, Trans::no, Trans::no, {1, 8, 1}, 1.0f, &c, 1, &c, 8, 0.0f, &c, 8,
                                              GemmEpilogue::bias, {.bias = &c}));
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("HINT:"), std::string::npos) << e.what();
  }
}

}  // namespace test_cublaslt_epilogue
}  // namespace meshtrain

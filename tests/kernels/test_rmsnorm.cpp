// RMSNorm against a direct loop, its gradients against central differences (double) and against
// the Jacobian written out element by element (double and float).
#include "kernels/rmsnorm.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_rmsnorm {

constexpr int N = 10, C = 12;
constexpr double kEps = 1e-6;  // LLaMA's norm_eps

struct RmsNormResult {
  Host out, rstd;
};

RmsNormResult rmsnorm_reference(const Host& x, const Host& w, int rows, int cols) {
  RmsNormResult r{Host(rows * cols), Host(rows)};
  for (int n = 0; n < rows; ++n) {
    double sq = 0;
    for (int c = 0; c < cols; ++c) sq += x[n * cols + c] * x[n * cols + c];
    r.rstd[n] = 1.0 / std::sqrt(sq / cols + kEps);
    for (int c = 0; c < cols; ++c) r.out[n * cols + c] = x[n * cols + c] * r.rstd[n] * w[c];
  }
  return r;
}

// dx[n,k] = Σ_c dout[n,c] w[c] ∂(x[n,c] r)/∂x[n,k], with ∂(x_c r)/∂x_k = r δ_ck − x_c x_k r³ / C.
Host rmsnorm_input_gradient_reference(const Host& dout, const Host& x, const Host& w, int rows, int cols) {
  const Host rstd = rmsnorm_reference(x, w, rows, cols).rstd;
  Host dx(rows * cols, 0.0);
  for (int n = 0; n < rows; ++n) {
    const double r = rstd[n];
    for (int k = 0; k < cols; ++k)
      for (int c = 0; c < cols; ++c) {
        const double jacobian = (c == k ? r : 0.0) - x[n * cols + c] * x[n * cols + k] * r * r * r / cols;
        dx[n * cols + k] += dout[n * cols + c] * w[c] * jacobian;
      }
  }
  return dx;
}

template <class Real>
RmsNormResult run_forward(const Host& x, const Host& w, int rows, int cols) {
  ExecSpace space;
  auto d_x = to_device<Real>(x);
  auto d_w = to_device<Real>(w);
  auto out = to_device<Real>(nan_filled(rows * cols));
  auto rstd = to_device<Real>(nan_filled(rows));
  rmsnorm_forward(space, vec(out), vec(rstd), cvec(d_x), cvec(d_w), rows, cols, kEps);
  return {to_host(out), to_host(rstd)};
}

struct RmsNormGradients {
  Host dinp, dweight;
};

// The gradients added to dinp0 and dweight0 (returned as the differences).
template <class Real>
RmsNormGradients run_backward(const Host& dout, const Host& x, const Host& w, const Host& dinp0, const Host& dweight0,
                              int rows, int cols) {
  const auto fwd = run_forward<Real>(x, w, rows, cols);
  ExecSpace space;
  auto dx = to_device<Real>(dinp0);
  auto dw = to_device<Real>(dweight0);
  auto d_dout = to_device<Real>(dout);
  auto d_x = to_device<Real>(x);
  auto d_w = to_device<Real>(w);
  auto d_rstd = to_device<Real>(fwd.rstd);
  rmsnorm_backward(space, vec(dx), vec(dw), vec(column_partials<Real>(rows, cols)), cvec(d_dout), cvec(d_x), cvec(d_w),
                   cvec(d_rstd), rows, cols);
  return {minus(to_host(dx), dinp0), minus(to_host(dw), dweight0)};
}

template <class Real>
class RmsNorm : public ::testing::Test {};
TYPED_TEST_SUITE(RmsNorm, DoubleAndFloat);
template <class Real>
constexpr double kTol = tolerance_for<Real>(1e-12, 1e-5);

TYPED_TEST(RmsNorm, ForwardMatchesDirectLoop) {
  // Rows of very different scales: rstd must follow each row.
  Host x = random_vector(N * C, 11, -2.0, 2.0);
  for (int c = 0; c < C; ++c) x[3 * C + c] *= 50.0;
  const Host w = random_vector(C, 12, 0.5, 1.5);
  const auto got = run_forward<TypeParam>(x, w, N, C);
  const auto want = rmsnorm_reference(x, w, N, C);
  expect_close(got.out, want.out, kTol<TypeParam>, "out");
  expect_close(got.rstd, want.rstd, kTol<TypeParam>, "rstd");
}

TYPED_TEST(RmsNorm, BackwardAccumulatesTheJacobianProduct) {
  const Host x = random_vector(N * C, 21, -2.0, 2.0);
  const Host w = random_vector(C, 22, 0.5, 1.5);
  const Host dout = random_vector(N * C, 23);
  Host want_dw(C, 0.0);
  const Host rstd = rmsnorm_reference(x, w, N, C).rstd;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) want_dw[c] += dout[n * C + c] * x[n * C + c] * rstd[n];
  const auto got = run_backward<TypeParam>(dout, x, w, random_vector(N * C, 24), random_vector(C, 25), N, C);
  expect_close(got.dinp, rmsnorm_input_gradient_reference(dout, x, w, N, C), 10 * kTol<TypeParam>, "dinp");
  expect_close(got.dweight, want_dw, 10 * kTol<TypeParam>, "dweight");
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  Host x = random_vector(N * C, 31);
  Host w = random_vector(C, 32, 0.5, 1.5);
  const Host r = random_vector(N * C, 33);
  auto loss = [&] { return dot(run_forward<double>(x, w, N, C).out, r); };
  const Host num_x = numeric_gradient(x, loss);
  const Host num_w = numeric_gradient(w, loss);
  const auto got = run_backward<double>(r, x, w, random_vector(N * C, 34), random_vector(C, 35), N, C);
  expect_close(got.dinp, num_x, 1e-6, "dinp");
  expect_close(got.dweight, num_w, 1e-6, "dweight");
}

// More channels than one team's block: the weight-gradient sweep must cover every channel.
TEST(RmsNorm, WeightGradientCoversSeveralColumnBlocks) {
  constexpr int Nw = 6, Cw = 2 * kColumnSumBlock + 5;
  const Host x = random_vector(Nw * Cw, 41);
  const Host w = random_vector(Cw, 42);
  const Host dout = random_vector(Nw * Cw, 43);
  const Host rstd = rmsnorm_reference(x, w, Nw, Cw).rstd;
  Host want_dw(Cw, 0.0);
  for (int c = 0; c < Cw; ++c)
    for (int n = 0; n < Nw; ++n) want_dw[c] += dout[n * Cw + c] * x[n * Cw + c] * rstd[n];
  const auto got = run_backward<double>(dout, x, w, filled(Nw * Cw, 0.0), filled(Cw, 0.0), Nw, Cw);
  expect_close(got.dweight, want_dw, 1e-12, "dweight");
  expect_close(got.dinp, rmsnorm_input_gradient_reference(dout, x, w, Nw, Cw), 1e-12, "dinp");
}

}  // namespace test_rmsnorm
}  // namespace meshtrain::test

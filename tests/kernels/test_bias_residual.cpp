// Bias and residual kernels against naive loops; the bias gradient against central differences.
#include "kernels/bias.hpp"
#include "kernels/residual.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_bias_residual {

constexpr int N = 10, OC = 13;

Host run_add_bias(const Host& x, const Host& bias, int rows, int cols) {
  ExecSpace space;
  auto out = to_device<double>(x);
  auto d_bias = to_device<double>(bias);
  add_bias(space, vec(out), cvec(d_bias), rows, cols);
  return to_host(out);
}

TEST(Bias, AddBiasMatchesNaiveLoop) {
  const Host x = random_vector(N * OC, 51);
  const Host bias = random_vector(OC, 52);
  Host want = x;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) want[n * OC + o] += bias[o];
  expect_close(run_add_bias(x, bias, N, OC), want, 1e-15, "out");
}

TEST(Bias, BackwardAccumulatesFiniteDifferenceGradients) {
  const Host x = random_vector(N * OC, 53);
  Host bias = random_vector(OC, 54);
  const Host r = random_vector(N * OC, 55);
  const Host num = numeric_gradient(bias, [&] { return dot(run_add_bias(x, bias, N, OC), r); });
  ExecSpace space;
  const Host dbias0 = random_vector(OC, 56);
  auto dbias = to_device<double>(dbias0);
  auto dout = to_device<double>(r);
  bias_backward(space, vec(dbias), vec(column_partials<double>(N, OC)), cvec(dout), N, OC);
  expect_close(minus(to_host(dbias), dbias0), num, 1e-6, "dbias");
}

// More columns than one team's block, and not a multiple of it.
TEST(Bias, BackwardCoversSeveralColumnBlocks) {
  constexpr int Nw = 7, OCw = 3 * kColumnSumBlock + 11;
  const Host dout = random_vector(Nw * OCw, 57);
  Host want(OCw, 1.0);
  for (int n = 0; n < Nw; ++n)
    for (int o = 0; o < OCw; ++o) want[o] += dout[n * OCw + o];
  ExecSpace space;
  auto dbias = to_device<double>(filled(OCw, 1.0));
  auto d_dout = to_device<double>(dout);
  bias_backward(space, vec(dbias), vec(column_partials<double>(Nw, OCw)), cvec(d_dout), Nw, OCw);
  expect_close(to_host(dbias), want, 1e-14, "dbias");
}

TEST(Residual, ForwardMatchesNaiveLoopAndWorksInPlace) {
  const long n = 41;
  const Host a = random_vector(n, 58);
  const Host b = random_vector(n, 59);
  Host want(n);
  for (long i = 0; i < n; ++i) want[i] = a[i] + b[i];
  ExecSpace space;
  auto d_a = to_device<double>(a);
  auto d_b = to_device<double>(b);
  auto out = to_device<double>(nan_filled(n));
  residual_forward(space, vec(out), cvec(d_a), cvec(d_b), n);
  expect_close(to_host(out), want, 1e-15, "out");
  residual_forward(space, vec(d_a), cvec(d_a), cvec(d_b), n);  // x += b, as the model does
  EXPECT_TRUE(bitwise_equal(raw(d_a), raw(out)));
}

}  // namespace test_bias_residual
}  // namespace meshtrain::test

// SwiGLU against std::exp's logistic function, its gradient against central differences (double)
// and against the product rule written out with tanh (σ(g) = (1 + tanh(g/2)) / 2), double and float.
#include "kernels/swiglu.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_swiglu {

constexpr int N = 6, H = 7;

double logistic(double g) { return 0.5 * (1.0 + std::tanh(0.5 * g)); }

Host swiglu_reference(const Host& gate_up) {
  Host out(N * H);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < H; ++j) {
      const double g = gate_up[n * 2 * H + j], u = gate_up[n * 2 * H + H + j];
      out[n * H + j] = g * logistic(g) * u;
    }
  return out;
}

Host swiglu_gradient_reference(const Host& dout, const Host& gate_up) {
  Host d(N * 2 * H);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < H; ++j) {
      const double g = gate_up[n * 2 * H + j], u = gate_up[n * 2 * H + H + j], s = logistic(g);
      const double dsilu = s + g * s * (1.0 - s);  // d(g σ(g))/dg
      d[n * 2 * H + j] = dout[n * H + j] * u * dsilu;
      d[n * 2 * H + H + j] = dout[n * H + j] * g * s;
    }
  return d;
}

template <class Real>
Host run_forward(const Host& gate_up) {
  ExecSpace space;
  auto d_in = to_device<Real>(gate_up);
  auto out = to_device<Real>(nan_filled(N * H));
  swiglu_forward(space, vec(out), cvec(d_in), N, H);
  return to_host(out);
}

template <class Real>
Host run_backward(const Host& dout, const Host& gate_up) {
  ExecSpace space;
  auto d_in = to_device<Real>(gate_up);
  auto d_dout = to_device<Real>(dout);
  auto d = to_device<Real>(nan_filled(N * 2 * H));  // written, not accumulated
  swiglu_backward(space, vec(d), cvec(d_dout), cvec(d_in), N, H);
  return to_host(d);
}

template <class Real>
class SwiGlu : public ::testing::Test {};
TYPED_TEST_SUITE(SwiGlu, DoubleAndFloat);
template <class Real>
constexpr double kTol = tolerance_for<Real>(1e-13, 1e-5);

TYPED_TEST(SwiGlu, ForwardAndBackwardMatchTheClosedForm) {
  Host gate_up = random_vector(N * 2 * H, 51, -6.0, 6.0);
  gate_up[0] = -200.0;  // exp(200) overflows float: σ = 0, no NaN
  gate_up[1] = 200.0;
  const Host dout = random_vector(N * H, 52);
  expect_close(run_forward<TypeParam>(gate_up), swiglu_reference(gate_up), kTol<TypeParam>, "out");
  expect_close(run_backward<TypeParam>(dout, gate_up), swiglu_gradient_reference(dout, gate_up), kTol<TypeParam>,
               "dgate_up");
}

TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
  Host gate_up = random_vector(N * 2 * H, 61, -4.0, 4.0);
  const Host r = random_vector(N * H, 62);
  const Host num = numeric_gradient(gate_up, [&] { return dot(run_forward<double>(gate_up), r); });
  expect_close(run_backward<double>(r, gate_up), num, 1e-6, "dgate_up");
}

}  // namespace test_swiglu
}  // namespace meshtrain::test

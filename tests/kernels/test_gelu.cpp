// GELU (tanh approximation) against reference values and the formula, its gradient against central
// differences, and the in-place backward against the out-of-place one.
#include "kernels/gelu.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_gelu {

constexpr int n = 37;

Host run_forward(const Host& x) {
  ExecSpace space;
  auto d_x = to_device<double>(x);
  auto out = to_device<double>(nan_filled(x.size()));
  gelu_forward(space, vec(out), cvec(d_x), static_cast<long>(x.size()));
  return to_host(out);
}

TEST(Gelu, ForwardMatchesReferenceValues) {
  // 0.5·x·(1 + tanh(sqrt(2/π)(x + 0.044715x³))) evaluated by Python's math module (torch's
  // gelu(x, approximate="tanh") agrees to float precision: gelu(1) = 0.8412).
  const Host x = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0};
  const Host want = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                     0.34571400982514394,    0.8411919906082768,   1.954597694087775,    2.996362607918227};
  expect_close(run_forward(x), want, 1e-14, "gelu at reference points");
}

TEST(Gelu, ForwardMatchesFormula) {
  const Host x = random_vector(n, 41, -4.0, 4.0);
  Host want(n);
  for (int i = 0; i < n; ++i)
    want[i] = 0.5 * x[i] * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * std::pow(x[i], 3))));
  expect_close(run_forward(x), want, 1e-14, "gelu");
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  Host x = random_vector(n, 42, -4.0, 4.0);
  const Host r = random_vector(n, 43);
  const Host num = numeric_gradient(x, [&] { return dot(run_forward(x), r); });
  ExecSpace space;
  auto d_x = to_device<double>(x);
  auto dout = to_device<double>(r);
  auto dinp = to_device<double>(nan_filled(n));  // written, not accumulated
  gelu_backward(space, vec(dinp), cvec(d_x), cvec(dout), n);
  expect_close(to_host(dinp), num, 1e-6, "dinp");
}

// Far in the tails exp(−2u) overflows or vanishes; forward and backward must stay finite, in both
// precisions: gelu(x) → 0 and gelu'(x) → 0 for x → −∞, gelu(x) → x and gelu'(x) → 1 for x → +∞.
template <class Real>
void check_tails() {
  const Host x = {-1e4, -100.0, -30.0, 30.0, 100.0, 1e4};
  ExecSpace space;
  auto d_x = to_device<Real>(x);
  auto out = to_device<Real>(nan_filled(x.size()));
  auto dinp = to_device<Real>(filled(x.size(), 1.0));
  gelu_forward(space, vec(out), cvec(d_x), static_cast<long>(x.size()));
  gelu_backward(space, vec(dinp), cvec(d_x), cvec(dinp), static_cast<long>(x.size()));
  const Host y = to_host(out), g = to_host(dinp);
  for (std::size_t i = 0; i < x.size(); ++i) {
    // Float's exp is clamped at e^88 (kernels/fast_math.hpp), so the negative tail is a denormal-
    // sized value (below 1e-20 even at x = -1e4) rather than an exact zero: both are zero in training.
    EXPECT_NEAR(y[i], x[i] < 0 ? 0.0 : x[i], 1e-20) << "gelu(" << x[i] << ")";
    EXPECT_NEAR(g[i], x[i] < 0 ? 0.0 : 1.0, 1e-20) << "gelu'(" << x[i] << ")";
  }
}

TEST(Gelu, TailsStayFinite) {
  check_tails<float>();
  check_tails<double>();
}

TEST(Gelu, BackwardInPlaceEqualsOutOfPlace) {
  const Host x = random_vector(n, 44, -4.0, 4.0);
  const Host r = random_vector(n, 45);
  ExecSpace space;
  auto d_x = to_device<double>(x);
  auto dout = to_device<double>(r);
  auto dinp = to_device<double>(nan_filled(n));
  gelu_backward(space, vec(dinp), cvec(d_x), cvec(dout), n);
  auto inplace = to_device<double>(r);
  gelu_backward(space, vec(inplace), cvec(d_x), cvec(inplace), n);
  EXPECT_TRUE(bitwise_equal(raw(inplace), raw(dinp)));
}

}  // namespace test_gelu
}  // namespace meshtrain::test

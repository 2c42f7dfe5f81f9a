// The router's product in fp32 (kernels/router_linear.hpp) against a naive double loop: the
// forward for every compute precision (the 16-bit ones on their kernel path, fp32 and fp64 on the
// GEMM's), the two backward products accumulating onto what the buffers held.
#include "kernels/router_linear.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain {
namespace test_router_linear {

using test::Host;

constexpr int N = 7, C = 13, E = 5;

// The inputs as Real rounds them, back in double: what the loops below must see.
template <class Real>
Host rounded(const Host& x) {
  return test::to_host(test::to_device<Real>(x));
}

template <class Real>
void expect_forward_matches_loop(double tol) {
  const Host x = rounded<Real>(test::random_vector(N * C, 1)), w = rounded<Real>(test::random_vector(E * C, 2));
  const auto dx = test::to_device<Real>(x), dw = test::to_device<Real>(w);
  Buffer<accum_t<Real>> logits("logits", N * E);
  router_logits_forward<Real>(ExecSpace(), logits, dx, dw, N, C, E);
  Host want(N * E, 0.0);
  for (int n = 0; n < N; ++n) {
    for (int e = 0; e < E; ++e) {
      for (int c = 0; c < C; ++c) want[n * E + e] += x[n * C + c] * w[e * C + c];
    }
  }
  test::expect_close(test::to_host(logits), want, tol, "logits");
}

TEST(RouterLinear, ForwardIsTheProductInTheAccumulationType) {
  expect_forward_matches_loop<double>(1e-13);
  expect_forward_matches_loop<float>(1e-5);
  // 16-bit inputs, fp32 sums: the logits are not rounded to 16 bits (that would miss by ~4e-3).
  expect_forward_matches_loop<bf16>(1e-5);
  expect_forward_matches_loop<fp16>(1e-5);
}

template <class Real>
void expect_backward_matches_loop(double tol) {
  const Host x = rounded<Real>(test::random_vector(N * C, 3)), w = rounded<Real>(test::random_vector(E * C, 4));
  const Host g = test::random_vector(N * E, 5);
  const Host dx0 = rounded<Real>(test::random_vector(N * C, 6)), dw0 = rounded<Real>(test::random_vector(E * C, 7));
  auto ddx = test::to_device<Real>(dx0), ddw = test::to_device<Real>(dw0);
  router_logits_backward<Real>(ExecSpace(), ddx, ddw, test::to_device<accum_t<Real>>(g), test::to_device<Real>(x),
                               test::to_device<Real>(w), N, C, E);
  Host want_dx = dx0, want_dw = dw0;
  for (int n = 0; n < N; ++n) {
    for (int e = 0; e < E; ++e) {
      for (int c = 0; c < C; ++c) {
        want_dx[n * C + c] += g[n * E + e] * w[e * C + c];
        want_dw[e * C + c] += g[n * E + e] * x[n * C + c];
      }
    }
  }
  test::expect_close(test::to_host(ddx), want_dx, tol, "dx");
  test::expect_close(test::to_host(ddw), want_dw, tol, "dw");
}

TEST(RouterLinear, BackwardAddsBothProducts) {
  expect_backward_matches_loop<double>(1e-13);
  expect_backward_matches_loop<float>(1e-5);
  // Rounded once to 16 bits at the store.
  expect_backward_matches_loop<bf16>(2e-2);
  expect_backward_matches_loop<fp16>(3e-3);
}

}  // namespace test_router_linear
}  // namespace meshtrain

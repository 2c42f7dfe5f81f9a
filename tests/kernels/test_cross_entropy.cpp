// Softmax cross-entropy against a hand-written log-sum-exp, its gradient against central
// differences, the in-place form against the out-of-place one, and the deterministic sums.
#include "kernels/cross_entropy.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_cross_entropy {

constexpr int N = 10, V = 11;
constexpr double grad_scale = 1.0 / N;

std::vector<std::int32_t> targets() { return {0, 10, 3, 3, 7, 1, 9, 5, 2, 10}; }

struct CrossEntropyResult {
  Host losses, dlogits;
};

CrossEntropyResult run(const Host& logits, const std::vector<std::int32_t>& tgt) {
  ExecSpace space;
  auto d_logits = to_device<double>(logits);
  auto d_tgt = to_device(tgt);
  auto losses = to_device<double>(nan_filled(N));
  auto dlogits = to_device<double>(nan_filled(N * V));
  softmax_cross_entropy(space, vec(losses), vec(dlogits), cvec(d_logits), cvec(d_tgt), N, V, grad_scale);
  return {to_host(losses), to_host(dlogits)};
}

TEST(CrossEntropy, LossMatchesLogSumExp) {
  // Large logits: exp without the max shift would overflow.
  Host logits = random_vector(N * V, 71, -5.0, 5.0);
  for (int i = 0; i < V; ++i) logits[i] += 800.0;
  const auto tgt = targets();
  Host want(N);
  for (int n = 0; n < N; ++n) {
    double m = logits[n * V];
    for (int v = 1; v < V; ++v) m = std::max(m, logits[n * V + v]);
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - m);
    want[n] = m + std::log(s) - logits[n * V + tgt[n]];
  }
  expect_close(run(logits, tgt).losses, want, 1e-13, "losses");
}

TEST(CrossEntropy, GradientMatchesFiniteDifferencesOfMeanLoss) {
  Host logits = random_vector(N * V, 72, -3.0, 3.0);
  const auto tgt = targets();
  auto loss = [&] {
    const Host l = run(logits, tgt).losses;
    double s = 0;
    for (double x : l) s += x;
    return s * grad_scale;
  };
  const Host num = numeric_gradient(logits, loss);
  expect_close(run(logits, tgt).dlogits, num, 1e-6, "dlogits");
}

TEST(CrossEntropy, InPlaceEqualsOutOfPlace) {
  const Host logits = random_vector(N * V, 73, -3.0, 3.0);
  const auto tgt = targets();
  ExecSpace space;
  auto d_logits = to_device<double>(logits);
  auto d_tgt = to_device(tgt);
  auto losses = to_device<double>(nan_filled(N));
  auto dlogits = to_device<double>(nan_filled(N * V));
  softmax_cross_entropy(space, vec(losses), vec(dlogits), cvec(d_logits), cvec(d_tgt), N, V, grad_scale);
  auto inplace_losses = to_device<double>(nan_filled(N));
  softmax_cross_entropy(space, vec(inplace_losses), vec(d_logits), cvec(d_logits), cvec(d_tgt), N, V, grad_scale);
  EXPECT_TRUE(bitwise_equal(raw(inplace_losses), raw(losses))) << "losses";
  EXPECT_TRUE(bitwise_equal(raw(d_logits), raw(dlogits))) << "dlogits";
}

TEST(Reductions, SumAndSquaredNormMatchLongDouble) {
  // Several chunks of the fixed-order reduction, the last one partial.
  const long n = 3 * kReduceChunk + 123;
  const Host x = random_vector(n, 74);
  long double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += static_cast<long double>(v) * v;
  }
  ExecSpace space;
  auto d_x = to_device<double>(x);
  EXPECT_NEAR(sum_reduce(space, cvec(d_x), n), static_cast<double>(sum), 1e-11);
  EXPECT_NEAR(squared_norm(space, vec(d_x), n), static_cast<double>(sq), 1e-9);
  auto f_x = to_device<float>(x);
  EXPECT_NEAR(sum_reduce(space, vec(f_x), n), static_cast<double>(sum), 1e-3);
  EXPECT_NEAR(squared_norm(space, cvec(f_x), n) / static_cast<double>(sq), 1.0, 1e-6);
}

}  // namespace test_cross_entropy
}  // namespace meshtrain::test

// Softmax cross-entropy against a hand-written log-sum-exp, its gradient against central
// differences, the in-place form against the out-of-place one, and the deterministic sums. Rows
// without loss (kNoLossTarget) against a naive loop, in the one-rank kernel and the
// vocabulary-parallel one on emulated ranks.
#include "kernels/cross_entropy.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

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

// ---- rows without loss (kNoLossTarget) --------------------------------------------------------

// Prompt tokens and padding carry no loss: the first row (whose target logit would sit before the
// logits), a run of three in the middle and the last row.
std::vector<std::int32_t> masked_targets() {
  auto tgt = targets();
  for (int n : {0, 4, 5, 6, N - 1}) tgt[n] = kNoLossTarget;
  return tgt;
}

// Loss and gradient by the definition, in double (N × V); a no-loss row is all 0.
CrossEntropyResult naive_cross_entropy(const Host& logits, const std::vector<std::int32_t>& tgt) {
  CrossEntropyResult r{Host(N, 0.0), Host(N * V, 0.0)};
  for (int n = 0; n < N; ++n) {
    if (tgt[n] < 0) continue;
    double m = logits[n * V];
    for (int v = 1; v < V; ++v) m = std::max(m, logits[n * V + v]);
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - m);
    r.losses[n] = m + std::log(s) - logits[n * V + tgt[n]];
    for (int v = 0; v < V; ++v)
      r.dlogits[n * V + v] = (std::exp(logits[n * V + v] - m) / s - (v == tgt[n] ? 1.0 : 0.0)) * grad_scale;
  }
  return r;
}

// The one-rank kernel on rows `stride` = V + 3 wide; the padding columns of dlogits (NaN before) must
// come back 0. Returns the losses and the N × V dlogits.
template <class Real>
CrossEntropyResult run_padded(const Host& logits, const std::vector<std::int32_t>& tgt) {
  constexpr int stride = V + 3;
  using A = accum_t<Real>;
  Host padded(N * stride, 1e4);  // padding takes no part
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) padded[n * stride + v] = logits[n * V + v];
  ExecSpace space;
  auto d_logits = to_device<Real>(padded);
  auto d_tgt = to_device(tgt);
  auto losses = to_device<A>(nan_filled(N));
  auto dlogits = to_device<Real>(nan_filled(N * stride));
  softmax_cross_entropy(space, vec(losses), vec(dlogits), cvec(d_logits), cvec(d_tgt), N, V, A(grad_scale), stride);
  const Host d = to_host(dlogits);
  CrossEntropyResult r{to_host(losses), Host(N * V)};
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < V; ++v) r.dlogits[n * V + v] = d[n * stride + v];
    for (int v = V; v < stride; ++v) EXPECT_EQ(d[n * stride + v], 0.0) << "padding column " << v << " of row " << n;
  }
  return r;
}

// The vocabulary-parallel kernels on `ranks` emulated tensor-parallel ranks, the vocabulary padded to
// ranks·Vl columns as the model pads it (Vl = ⌈V/ranks⌉ + 2): rank r holds columns r·Vl … r·Vl + Vl − 1,
// the real ones first (the last ranks only padding, or none). The all-reduces (max, then sum) are done
// here on the host. Every rank's losses must be the same; returns them and the dlogits gathered into
// N × V (padding columns must come back 0).
template <class Real>
CrossEntropyResult run_vocab_parallel(const Host& logits, const std::vector<std::int32_t>& tgt, int ranks) {
  using A = accum_t<Real>;
  const int Vl = (V + ranks - 1) / ranks + 2;
  ExecSpace space;
  auto d_tgt = to_device(tgt);
  std::vector<VocabColumns> cols;
  std::vector<Buffer<Real>> local;
  for (int r = 0; r < ranks; ++r) {
    const VocabColumns c{Vl, std::clamp(V - r * Vl, 0, Vl), r * Vl};
    Host padded(N * Vl, 1e4);  // padding takes no part
    for (int n = 0; n < N; ++n)
      for (int v = 0; v < c.valid; ++v) padded[n * Vl + v] = logits[n * V + c.first + v];
    cols.push_back(c);
    local.push_back(to_device<Real>(padded));
  }
  Host maxes(N, -std::numeric_limits<double>::infinity()), partials(2 * N, 0.0);
  for (int r = 0; r < ranks; ++r) {
    auto m = to_device<A>(nan_filled(N));
    vocab_parallel_row_max(space, vec(m), vec(local[r]), N, cols[r]);
    const Host h = to_host(m);
    for (int n = 0; n < N; ++n) maxes[n] = std::max(maxes[n], h[n]);
  }
  auto d_maxes = to_device<A>(maxes);
  for (int r = 0; r < ranks; ++r) {
    auto p = to_device<A>(nan_filled(2 * N));
    vocab_parallel_row_partials(space, vec(p), vec(local[r]), cvec(d_maxes), cvec(d_tgt), N, cols[r]);
    const Host h = to_host(p);
    for (int i = 0; i < 2 * N; ++i) partials[i] += h[i];
  }
  auto d_partials = to_device<A>(partials);
  CrossEntropyResult result{Host(), Host(N * V)};
  for (int r = 0; r < ranks; ++r) {
    auto losses = to_device<A>(nan_filled(N));
    vocab_parallel_finish(space, vec(losses), vec(local[r]), cvec(local[r]), cvec(d_maxes), cvec(d_partials),
                          cvec(d_tgt), N, cols[r], A(grad_scale));  // in place, as the model calls it
    const Host l = to_host(losses), d = to_host(local[r]);
    if (r == 0) result.losses = l;
    EXPECT_TRUE(bitwise_equal(l, result.losses)) << "losses of rank " << r << " of " << ranks;
    for (int n = 0; n < N; ++n) {
      for (int v = 0; v < cols[r].valid; ++v) result.dlogits[n * V + cols[r].first + v] = d[n * Vl + v];
      for (int v = cols[r].valid; v < Vl; ++v) EXPECT_EQ(d[n * Vl + v], 0.0) << "rank " << r << " padding " << v;
    }
  }
  return result;
}

// A no-loss row has loss 0 and dlogits 0 exactly; every other row has the bits of a run in which
// every row carries a loss; and all of it matches the naive loop.
void expect_no_loss_rows(const CrossEntropyResult& masked, const CrossEntropyResult& full, const Host& logits,
                         double tol, const std::string& what) {
  const auto tgt = masked_targets();
  for (int n = 0; n < N; ++n) {
    const bool no_loss = tgt[n] == kNoLossTarget;
    const Host want_row =
        no_loss ? Host(V, 0.0) : Host(full.dlogits.begin() + n * V, full.dlogits.begin() + (n + 1) * V);
    const Host got_row(masked.dlogits.begin() + n * V, masked.dlogits.begin() + (n + 1) * V);
    EXPECT_TRUE(bitwise_equal(got_row, want_row)) << what << ": dlogits of row " << n;
    EXPECT_TRUE(bitwise_equal(Host{masked.losses[n]}, Host{no_loss ? 0.0 : full.losses[n]}))
        << what << ": loss of row " << n << " is " << masked.losses[n];
  }
  const CrossEntropyResult naive = naive_cross_entropy(logits, tgt);
  expect_close(masked.losses, naive.losses, tol, what + " losses");
  expect_close(masked.dlogits, naive.dlogits, tol, what + " dlogits");
}

template <class Real>
class CrossEntropyNoLoss : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyNoLoss, DoubleAndFloat);

TYPED_TEST(CrossEntropyNoLoss, RowsAreZeroAndOtherRowsUnchanged) {
  using Real = TypeParam;
  const Host logits = random_vector(N * V, 75, -4.0, 4.0);
  const double tol = tolerance_for<Real>(1e-13, 1e-5);
  expect_no_loss_rows(run_padded<Real>(logits, masked_targets()), run_padded<Real>(logits, targets()), logits, tol,
                      "one rank");
}

TYPED_TEST(CrossEntropyNoLoss, VocabParallelRowsAreZeroOnEveryRank) {
  using Real = TypeParam;
  const Host logits = random_vector(N * V, 76, -4.0, 4.0);
  const double tol = tolerance_for<Real>(1e-13, 1e-5);
  for (int ranks : {1, 2, 3}) {
    expect_no_loss_rows(run_vocab_parallel<Real>(logits, masked_targets(), ranks),
                        run_vocab_parallel<Real>(logits, targets(), ranks), logits, tol,
                        "vocabulary-parallel on " + std::to_string(ranks) + " ranks");
  }
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

// The whole model's backward pass against central finite differences of its loss, in double.
#include "model/families/gpt2.hpp"
#include "model/init.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace meshtrain {
namespace test_gpt2_gradients {

struct Case {
  ModelConfig model;
  int batch;
};

class Gpt2GradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(Gpt2GradientTest, MatchesFiniteDifferences) {
  const Case c = GetParam();
  ExecSpace space;
  Gpt2<double> model(space, c.model, c.batch);
  const int N = c.batch * c.model.seq_len;

  // Random weights with non-trivial LayerNorm and bias values, so every gradient path is exercised.
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto w = Kokkos::create_mirror_view(model.weights());
  for (const TensorInfo& t : model.layout().tensors()) {
    const double base = t.init == InitKind::ones ? 1.0 : 0.0;
    const double scale = t.shape.size() >= 2 ? 0.2 : 0.1;
    for (std::size_t i = 0; i < t.numel; ++i) w(t.offset + i) = base + scale * normal(rng);
  }
  Kokkos::deep_copy(model.weights(), w);

  Buffer<int> inputs("inputs", N), targets("targets", N);
  auto hi = Kokkos::create_mirror_view(inputs);
  auto ht = Kokkos::create_mirror_view(targets);
  std::uniform_int_distribution<int> token(0, c.model.vocab - 1);
  for (int i = 0; i < N; ++i) {
    hi(i) = token(rng);
    ht(i) = token(rng);
  }
  Kokkos::deep_copy(inputs, hi);
  Kokkos::deep_copy(targets, ht);
  const CVec<int> in(inputs.data(), N), tg(targets.data(), N);

  model.zero_grads();
  model.forward(in, tg, 1.0 / N);
  model.backward(in);
  auto grads = Kokkos::create_mirror_view(model.grads());
  Kokkos::deep_copy(grads, model.grads());

  auto loss_at = [&](std::size_t index, double value) {
    w(index) = value;
    Kokkos::deep_copy(model.weights(), w);
    return model.forward(in, tg, 0.0);
  };
  const double h = 1e-5;
  std::uniform_int_distribution<std::size_t> pick;
  for (const TensorInfo& t : model.layout().tensors()) {
    // A few elements of every tensor (all of the small ones).
    const std::size_t samples = std::min<std::size_t>(t.numel, 6);
    for (std::size_t s = 0; s < samples; ++s) {
      const std::size_t i = t.offset + (samples == t.numel ? s : pick(rng) % t.numel);
      const double original = w(i);
      const double numeric = (loss_at(i, original + h) - loss_at(i, original - h)) / (2 * h);
      w(i) = original;
      const double analytic = grads(i);
      EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-5 * std::fabs(numeric)) << t.name << "[" << i - t.offset << "]";
    }
  }
  Kokkos::deep_copy(model.weights(), w);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Gpt2GradientTest,
                         ::testing::Values(Case{{2, 2, 8, 11, 5}, 2},   // L H C V T
                                           Case{{1, 3, 12, 7, 4}, 3},   // hs 4, odd vocab
                                           Case{{3, 1, 6, 5, 6}, 1}));  // one head, more layers

// Accumulating two micro-batches with scale 1/2 each equals the mean gradient of both together.
TEST(Gpt2Accumulation, TwoMicroBatchesEqualOneBatchOfTwo) {
  const ModelConfig m{2, 2, 8, 13, 5};
  ExecSpace space;
  Gpt2<double> single(space, m, 1), pair(space, m, 2);
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 0.1);
  auto w = Kokkos::create_mirror_view(single.weights());
  for (std::size_t i = 0; i < w.extent(0); ++i) w(i) = normal(rng);
  Kokkos::deep_copy(single.weights(), w);
  Kokkos::deep_copy(pair.weights(), w);

  const int T = m.seq_len;
  Buffer<int> tokens("tokens", 2 * T), labels("labels", 2 * T);
  auto ht = Kokkos::create_mirror_view(tokens);
  auto hl = Kokkos::create_mirror_view(labels);
  for (int i = 0; i < 2 * T; ++i) {
    ht(i) = int(rng() % m.vocab);
    hl(i) = int(rng() % m.vocab);
  }
  Kokkos::deep_copy(tokens, ht);
  Kokkos::deep_copy(labels, hl);

  pair.zero_grads();
  const double loss_pair =
      pair.forward(CVec<int>(tokens.data(), 2 * T), CVec<int>(labels.data(), 2 * T), 1.0 / (2 * T));
  pair.backward(CVec<int>(tokens.data(), 2 * T));

  single.zero_grads();
  double loss_sum = 0;
  for (int k = 0; k < 2; ++k) {
    const CVec<int> in(tokens.data() + k * T, T), tg(labels.data() + k * T, T);
    loss_sum += single.forward(in, tg, 1.0 / (2 * T));
    single.backward(in);
  }
  EXPECT_NEAR(loss_sum / 2, loss_pair, 1e-12);
  auto g1 = Kokkos::create_mirror_view(single.grads());
  auto g2 = Kokkos::create_mirror_view(pair.grads());
  Kokkos::deep_copy(g1, single.grads());
  Kokkos::deep_copy(g2, pair.grads());
  for (std::size_t i = 0; i < g1.extent(0); ++i) ASSERT_NEAR(g1(i), g2(i), 1e-12) << "element " << i;
}

}  // namespace test_gpt2_gradients
}  // namespace meshtrain

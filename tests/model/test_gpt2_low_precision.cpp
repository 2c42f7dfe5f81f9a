// Gpt2<bf16> and Gpt2<fp16> against Gpt2<float> holding the same weights (drawn, rounded to the
// 16-bit type, and given to both): the loss and every gradient tensor, and the GEMM workspace the
// 16-bit model allocates against what model/gemm_workspace.hpp announces.
//
// The bounds. Every activation the 16-bit model stores is rounded (relative error ≤ u = 2^-8 bf16,
// 2^-11 fp16), and each layer reads values that carry the errors of the layers below and adds its
// own roundings, so errors grow with depth; every sum and statistic runs in float (~1e-7). With 2
// layers the gradients measure 1-7·u normwise (max |error| / max |value| over a tensor; the test
// prints them) and we allow 24·u; a wrong gradient would be off by O(1), far outside. The loss is
// a mean over B·T rows whose errors (each ≲ u) mostly cancel: it measures ~0.03·u and we allow u.
//
// And the other way: the 16-bit gradients must differ from the float ones by at least u/64
// normwise. A model that silently kept float storage would agree to ~1e-7 and fail there.
#include "model/families/gpt2.hpp"
#include "model/gemm_workspace.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace meshtrain {
namespace test_gpt2_low_precision {

struct Run {
  double loss;
  std::vector<double> grads;
};

template <class Real>
Run run(const ModelConfig& m, int B, const std::vector<double>& weights, const std::vector<int>& in,
        const std::vector<int>& tg) {
  ExecSpace space;
  Gpt2<Real> model(space, m, B);
  const int N = B * m.seq_len;
  auto w = Kokkos::create_mirror_view(model.weights());
  for (std::size_t i = 0; i < weights.size(); ++i) w(i) = Real(weights[i]);
  Kokkos::deep_copy(model.weights(), w);
  Buffer<int> inputs("inputs", N), targets("targets", N);
  auto hi = Kokkos::create_mirror_view(inputs);
  auto ht = Kokkos::create_mirror_view(targets);
  for (int i = 0; i < N; ++i) {
    hi(i) = in[i];
    ht(i) = tg[i];
  }
  Kokkos::deep_copy(inputs, hi);
  Kokkos::deep_copy(targets, ht);
  const CVec<int> cin(inputs.data(), N), ctg(targets.data(), N);
  model.zero_grads();
  using Accum = typename Gpt2<Real>::Accum;
  static_assert(std::is_same_v<decltype(model.forward(cin, ctg, Accum(1))), accum_t<Real>>,
                "the loss comes back in float for 16-bit models");
  const double loss = model.forward(cin, ctg, Accum(1.0 / N));
  model.backward(cin);
  auto g = Kokkos::create_mirror_view(model.grads());
  Kokkos::deep_copy(g, model.grads());
  Run r{loss, std::vector<double>(g.extent(0))};
  for (std::size_t i = 0; i < r.grads.size(); ++i) r.grads[i] = double(accum_t<Real>(g(i)));
  return r;
}

// max |a − e| / max |e| over one tensor.
double normwise(const std::vector<double>& a, const std::vector<double>& e, std::size_t offset, std::size_t n) {
  double worst = 0, scale = 0;
  for (std::size_t i = offset; i < offset + n; ++i) {
    worst = std::max(worst, std::isnan(a[i]) ? INFINITY : std::fabs(a[i] - e[i]));
    scale = std::max(scale, std::fabs(e[i]));
  }
  return worst / scale;
}

template <class H>
class Gpt2LowPrecision : public ::testing::Test {};
using Halves = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(Gpt2LowPrecision, Halves);

TYPED_TEST(Gpt2LowPrecision, LossAndEveryGradientAgreeWithFloatWithinTheBound) {
  using H = TypeParam;
  const ModelConfig m{2, 3, 48, 61, 16};  // layers, heads, d_model, vocab, seq_len
  const int B = 3, N = B * m.seq_len;
  const ParameterLayout layout(m);

  // GPT-2-like weights (matrices σ 0.2 here so that activations are O(1)), rounded to H once.
  std::mt19937_64 rng(23);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> weights(layout.total());
  for (const TensorInfo& t : layout.tensors()) {
    const double base = t.init == InitKind::ones ? 1.0 : 0.0;
    const double scale = t.shape.size() >= 2 ? 0.2 : 0.1;
    for (std::size_t i = 0; i < t.numel; ++i) weights[t.offset + i] = float(H(base + scale * normal(rng)));
  }
  std::vector<int> in(N), tg(N);
  std::uniform_int_distribution<int> token(0, m.vocab - 1);
  for (int i = 0; i < N; ++i) {
    in[i] = token(rng);
    tg[i] = token(rng);
  }

  release_gemm_workspace();
  const Run h = run<H>(m, B, weights, in, tg);
  EXPECT_EQ(gemm_workspace_bytes(), (family_gemm_workspace_bytes<H, Gpt2Family>(m, B)))
      << "model/gemm_workspace.hpp is out of step";
  EXPECT_GT(gemm_workspace_bytes(), 0u);
  release_gemm_workspace();
  const Run f = run<float>(m, B, weights, in, tg);
  EXPECT_EQ(gemm_workspace_bytes(), 0u) << "float products need no workspace";

  const double u = unit_roundoff<H>();
  ASSERT_TRUE(std::isfinite(h.loss));
  const double loss_error = std::fabs(h.loss - f.loss) / std::fabs(f.loss);
  EXPECT_LE(loss_error, u) << "loss " << h.loss << " vs float " << f.loss;
  std::cout << precision_name<H>() << ": loss " << h.loss << " (float " << f.loss << "), relative error "
            << loss_error / u << " u\n";

  double worst = 0;
  for (const TensorInfo& t : layout.tensors()) {
    const double e = normwise(h.grads, f.grads, t.offset, t.numel);
    EXPECT_LE(e, 24 * u) << t.name << ": normwise error " << e / u << " u";
    worst = std::max(worst, e);
    std::cout << "  " << t.name << ": " << e / u << " u\n";
  }
  // The comparison has teeth: 16-bit storage shows in the results.
  EXPECT_GE(normwise(h.grads, f.grads, 0, h.grads.size()), u / 64) << "16-bit results equal float ones";
  EXPECT_GT(worst, 0.0);
}

}  // namespace test_gpt2_low_precision
}  // namespace meshtrain

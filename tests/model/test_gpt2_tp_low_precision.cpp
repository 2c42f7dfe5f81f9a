// Tensor parallelism for 16-bit models (the world is the tensor-parallel group: run with 2 and 4
// ranks): Gpt2<bf16> and Gpt2<fp16> split over the group against the same model on one rank, both
// holding the same rounded weights (drawn per tensor name and global element, so every layout draws
// the same values). The loss and every gradient element each rank holds are compared with the
// one-rank model's element at the same global index.
//
// The bounds. The two runs round at different places: under tensor parallelism each rank rounds its
// partial product (attention and MLP c_proj, the embedding, the input gradients of c_attn and c_fc)
// to the 16-bit type before the group sums the partials in fp32 and rounds again, where one rank
// rounds the whole product once. Each such sum thus carries a few u (u = 2^-8 bf16, 2^-11 fp16) more
// or less, and the layers above carry it on, as in test_gpt2_low_precision. The loss (a mean over
// B·T rows) is held to u relative, each gradient tensor to 24 u normwise (max |error| over the
// elements a rank holds / max |value| of the whole tensor). A missing or doubled sum over the group
// would be off by O(1) (a half or a whole of the value), far outside; the test prints what it measures.
#include "recompute_harness.hpp"

#include "parallel/comm.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace meshtrain {
namespace {

struct Run {
  double loss = 0;
  ParameterLayout layout;
  std::vector<double> grads;  // the flat gradient buffer, widened
};

template <class Real>
Run run(const ModelConfig& m, int B, Comm* tp) {
  ExecSpace space;
  Gpt2<Real> model(space, m, B, tp);
  test::fill_weights(model);
  const int N = B * m.seq_len;
  std::vector<int> in(N), tg(N);
  for (int i = 0; i < N; ++i) {
    in[i] = (7 * i + 3) % m.vocab;
    tg[i] = (11 * i + 5) % m.vocab;
  }
  Buffer<int> inputs("inputs", N), targets("targets", N);
  Kokkos::deep_copy(inputs, Kokkos::View<const int*, Kokkos::HostSpace>(in.data(), N));
  Kokkos::deep_copy(targets, Kokkos::View<const int*, Kokkos::HostSpace>(tg.data(), N));
  const CVec<int> cin(inputs.data(), N), ctg(targets.data(), N);
  model.zero_grads();
  using Accum = typename Gpt2<Real>::Accum;
  Run r{0, model.layout(), {}};
  r.loss = model.forward(cin, ctg, Accum(1.0 / N));
  model.backward(cin);
  space.fence();
  const std::vector<Real> g = test::to_host(CVec<Real>(model.grads()));
  r.grads.assign(g.begin(), g.end());
  for (std::size_t i = 0; i < g.size(); ++i) r.grads[i] = double(accum_t<Real>(g[i]));
  return r;
}

template <class H>
class Gpt2TensorParallelLowPrecision : public ::testing::Test {};
using Halves = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(Gpt2TensorParallelLowPrecision, Halves);

TYPED_TEST(Gpt2TensorParallelLowPrecision, LossAndGradientsMatchOneRank) {
  using H = TypeParam;
  const std::unique_ptr<Comm> tp = make_mpi_comm(MPI_COMM_WORLD);
  ASSERT_GT(tp->size(), 1) << "run under mpiexec with 2 or 4 ranks";
  const ModelConfig m{2, 4, 32, 13, 8};  // layers, heads, d_model, vocab (padded over the ranks), seq_len
  const int B = 2;
  const Run one = run<H>(m, B, nullptr);
  const Run split = run<H>(m, B, tp.get());
  const double u = unit_roundoff<H>();
  const std::string who =
      std::string(precision_name<H>()) + " tp " + std::to_string(tp->size()) + " rank " + std::to_string(tp->rank());

  ASSERT_TRUE(std::isfinite(split.loss)) << who;
  const double loss_error = std::fabs(split.loss - one.loss) / std::fabs(one.loss);
  EXPECT_LE(loss_error, u) << who << ": loss " << split.loss << " vs one rank " << one.loss;
  if (tp->rank() == 0) {
    std::cout << who << ": loss " << split.loss << " (one rank " << one.loss << "), " << loss_error / u << " u\n";
  }

  std::size_t compared = 0;
  for (const TensorInfo& t : split.layout.tensors()) {
    const TensorInfo& whole = one.layout.find(t.name);
    std::map<std::int64_t, double> reference;  // global index → the one-rank gradient
    double scale = 0;
    for (std::size_t i = 0; i < whole.numel; ++i) {
      const std::int64_t g = whole.global_index(i);
      if (g < 0) continue;
      reference[g] = one.grads[whole.offset + i];
      scale = std::max(scale, std::fabs(one.grads[whole.offset + i]));
    }
    double worst = 0;
    for (std::size_t i = 0; i < t.numel; ++i) {
      const std::int64_t g = t.global_index(i);
      if (g < 0) continue;
      const auto it = reference.find(g);
      ASSERT_NE(it, reference.end()) << who << ": " << t.name << " global element " << g;
      const double got = split.grads[t.offset + i];
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - it->second) : INFINITY);
      ++compared;
    }
    ASSERT_GT(scale, 0.0) << t.name << ": a zero gradient tests nothing";
    EXPECT_LE(worst / scale, 24 * u) << who << ": " << t.name << " normwise error " << worst / scale / u << " u";
    if (tp->rank() == 0) std::cout << "  " << t.name << ": " << worst / scale / u << " u\n";
  }
  EXPECT_GT(compared, 0u) << who;
}

}  // namespace
}  // namespace meshtrain

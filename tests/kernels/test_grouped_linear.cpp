// The experts' grouped linear layers through gemm_grouped: the forward against a double loop, the
// backward against central differences in double (dW accumulating, a weight shared by two groups,
// a group without rows, weights spaced wider than one matrix), bf16 through the host's float
// workspace against the double loop, float reruns bitwise equal, and the waves that keep a shared
// weight's products in group order.
#include "kernels/grouped_linear.hpp"

#include "kernel_test_utils.hpp"
#include "low_precision_utils.hpp"

#include <vector>

namespace meshtrain::test {
namespace test_grouped_linear {

constexpr int IC = 5, OC = 4, kWeights = 3, kRows = 9;
constexpr long kStride = OC * IC + 3;  // padding between the matrices, which nothing may touch
// Weight 1 serves two groups; weight 2's group is empty; the rows in group order.
const std::vector<RowGroup> kGroups = {{0, 3, 1}, {3, 0, 2}, {3, 4, 0}, {7, 2, 1}};

Host reference_forward(const Host& inp, const Host& w) {
  Host out(kRows * OC, 0.0);
  for (const RowGroup& g : kGroups)
    for (int r = g.begin; r < g.begin + g.rows; ++r)
      for (int o = 0; o < OC; ++o) {
        double acc = 0;
        for (int i = 0; i < IC; ++i) acc += inp[r * IC + i] * w[g.weight * kStride + o * IC + i];
        out[r * OC + o] = acc;
      }
  return out;
}

template <class Real>
Host run_forward(const Host& inp, const Host& w) {
  auto d_inp = to_device<Real>(inp), d_w = to_device<Real>(w);
  auto out = to_device<Real>(nan_filled(kRows * OC));
  grouped_linear_forward(ExecSpace{}, vec(out), cvec(d_inp), d_w.data(), kStride, kGroups, IC, OC);
  return to_host(out);
}

template <class Real>
std::pair<Host, Host> run_backward(const Host& dout, const Host& inp, const Host& w, const Host& dw0) {
  auto d_dout = to_device<Real>(dout), d_inp = to_device<Real>(inp), d_w = to_device<Real>(w);
  auto dinp = to_device<Real>(nan_filled(kRows * IC));  // written, not accumulated
  auto dw = to_device<Real>(dw0);
  grouped_linear_backward(ExecSpace{}, vec(dinp), dw.data(), kStride, cvec(d_dout), cvec(d_inp), d_w.data(), kGroups,
                          IC, OC);
  return {to_host(dinp), to_host(dw)};
}

template <class Real>
class GroupedLinear : public ::testing::Test {};
TYPED_TEST_SUITE(GroupedLinear, DoubleAndFloat);

TYPED_TEST(GroupedLinear, ForwardMatchesTheDoubleLoop) {
  const Host inp = random_vector(kRows * IC, 101), w = random_vector(kWeights * kStride, 102);
  expect_close(run_forward<TypeParam>(inp, w), reference_forward(inp, w), tolerance_for<TypeParam>(1e-13, 1e-5), "out");
}

TEST(GroupedLinear, BackwardMatchesFiniteDifferences) {
  Host inp = random_vector(kRows * IC, 103), w = random_vector(kWeights * kStride, 104);
  const Host dout = random_vector(kRows * OC, 105), dw0 = random_vector(kWeights * kStride, 106);
  const auto objective = [&] { return dot(run_forward<double>(inp, w), dout); };
  const Host dinp = numeric_gradient(inp, objective), dw = numeric_gradient(w, objective);
  const auto [got_dinp, got_dw] = run_backward<double>(dout, inp, w, dw0);
  expect_close(got_dinp, dinp, 1e-6, "dinp");
  expect_close(minus(got_dw, dw0), dw, 1e-6, "dW (+=)");
  for (long i = OC * IC; i < kStride; ++i) EXPECT_EQ(got_dw[i], dw0[i]) << "padding after weight 0, element " << i;
  for (long i = 2 * kStride; i < 2 * kStride + OC * IC; ++i) EXPECT_EQ(got_dw[i], dw0[i]) << "weight 2 has no rows";
}

TEST(GroupedLinear, Bf16GoesThroughTheFloatWorkspace) {
  const Host inp = rounded<bf16>(random_vector(kRows * IC, 107)),
             w = rounded<bf16>(random_vector(kWeights * kStride, 108));
  expect_within_ulps<bf16>(run_forward<bf16>(inp, w), reference_forward(inp, w), kOneUlp, "bf16 out");
}

TEST(GroupedLinear, FloatRerunsAreBitwiseEqual) {
  const Host inp = random_vector(kRows * IC, 109), w = random_vector(kWeights * kStride, 110);
  const Host dout = random_vector(kRows * OC, 111), dw0 = random_vector(kWeights * kStride, 112);
  const auto run = [&] {
    auto [dinp, dw] = run_backward<float>(dout, inp, w, dw0);
    return std::tuple{run_forward<float>(inp, w), dinp, dw};
  };
  const auto first = run(), second = run();
  EXPECT_TRUE(bitwise_equal(std::get<0>(first), std::get<0>(second))) << "out";
  EXPECT_TRUE(bitwise_equal(std::get<1>(first), std::get<1>(second))) << "dinp";
  EXPECT_TRUE(bitwise_equal(std::get<2>(first), std::get<2>(second))) << "dW";
}

TEST(GroupedLinear, SharedWeightsGoInWavesInGroupOrder) {
  const std::vector<RowGroup> groups = {{0, 2, 1}, {2, 1, 0}, {3, 4, 1}, {7, 0, 1}, {7, 3, 1}, {10, 1, 0}};
  EXPECT_EQ(detail::grouped_linear_waves(groups), (std::vector<int>{0, 0, 1, -1, 2, 1}));
}

}  // namespace test_grouped_linear
}  // namespace meshtrain::test

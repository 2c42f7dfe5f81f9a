// Rotary embedding against Hugging Face's formulation written out (x·cos + rotate_half(x)·sin over
// the whole head, with the frequencies from exp/log), the backward as its transpose and against
// central differences, the table against its closed form; with document segments, each document
// rotated as if it were a sequence of its own.
#include "kernels/rotary.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_rotary {

// A fused qkv row as LLaMA's: 3 query heads and 1 kv head rotated, the v head left alone.
constexpr int B = 2, T = 5, N = B * T, NH = 3, KV = 1, hs = 6, heads = NH + KV, row = (NH + 2 * KV) * hs;
constexpr double kTheta = 10000.0;

// x'[d] = x[d]·cos(angle_d) + rotate_half(x)[d]·sin(angle_d), rotate_half(x) = [−x2, x1], the
// angle of column d being that of d mod hs/2; row n at position position(n).
template <class Position>
Host rotary_reference(const Host& x, Position position) {
  Host y = x;
  const int half = hs / 2;
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < heads; ++h) {
      const int base = n * row + h * hs;
      for (int d = 0; d < hs; ++d) {
        const double frequency = std::exp(-std::log(kTheta) * (2.0 * (d % half)) / hs);
        const double angle = position(n) * frequency;
        const double rotated = d < half ? -x[base + d + half] : x[base + d - half];
        y[base + d] = x[base + d] * std::cos(angle) + rotated * std::sin(angle);
      }
    }
  return y;
}

template <class Real>
Host run_rotary(const Host& x, bool backward) {
  ExecSpace space;
  const auto table = make_rotary_table<accum_t<Real>>(T, hs, kTheta);
  auto d_x = to_device<Real>(x);
  if (backward)
    rotary_backward(space, vec(d_x), table, N, T, row, heads, hs);
  else
    rotary_forward(space, vec(d_x), table, N, T, row, heads, hs);
  return to_host(d_x);
}

template <class Real>
class Rotary : public ::testing::Test {};
TYPED_TEST_SUITE(Rotary, DoubleAndFloat);
template <class Real>
constexpr double kTol = tolerance_for<Real>(1e-13, 1e-5);

TYPED_TEST(Rotary, ForwardMatchesRotateHalfAndLeavesValuesAlone) {
  const Host x = random_vector(N * row, 71);
  const Host got = run_rotary<TypeParam>(x, false);
  const Host want = rotary_reference(x, [](int n) { return n % T; });
  expect_close(got, want, kTol<TypeParam>, "x'");
  for (int n = 0; n < N; ++n)
    for (int c = heads * hs; c < row; ++c)
      EXPECT_EQ(got[n * row + c], double(TypeParam(x[n * row + c]))) << "v column " << c << " of row " << n;
  for (int c = 0; c < heads * hs; ++c)  // position 0: no rotation
    EXPECT_NEAR(got[c], x[c], kTol<TypeParam>) << "column " << c << " at t = 0";
}

// ⟨R x, y⟩ = ⟨x, Rᵀ y⟩, and Rᵀ R = 1 (a rotation).
TYPED_TEST(Rotary, BackwardIsTheTransposeAndTheInverse) {
  const Host x = random_vector(N * row, 72), y = random_vector(N * row, 73);
  EXPECT_NEAR(dot(run_rotary<TypeParam>(x, false), y), dot(x, run_rotary<TypeParam>(y, true)), 100 * kTol<TypeParam>);
  ExecSpace space;
  const auto table = make_rotary_table<accum_t<TypeParam>>(T, hs, kTheta);
  auto d_x = to_device<TypeParam>(x);
  rotary_forward(space, vec(d_x), table, N, T, row, heads, hs);
  rotary_backward(space, vec(d_x), table, N, T, row, heads, hs);
  expect_close(to_host(d_x), x, kTol<TypeParam>, "Rᵀ R x");
}

TEST(Rotary, BackwardMatchesFiniteDifferences) {
  Host x = random_vector(N * row, 74);
  const Host r = random_vector(N * row, 75);
  const Host num = numeric_gradient(x, [&] { return dot(run_rotary<double>(x, false), r); });
  expect_close(run_rotary<double>(r, true), num, 1e-6, "dx");
}

// Sequence 0 holds documents [0, 2) and [2, 5), sequence 1 one document and an empty one: each row is
// rotated by its position in its document, forward and back, as a sequence of that document alone
// would be (the reference computes the positions from the offsets independently, by a linear scan).
TYPED_TEST(Rotary, PositionsRestartAtEachDocument) {
  const std::vector<int> offsets = {0, 2, 5, 0, 5, 5};
  constexpr int docs = 2;
  Buffer<int> d_offsets("offsets", offsets.size());
  Kokkos::deep_copy(d_offsets, Kokkos::View<const int*, HostSpace>(offsets.data(), offsets.size()));
  const AttentionSegments segments{CVec<int>(d_offsets), docs};
  const auto position = [&](int n) {
    const int b = n / T, t = n % T;
    int start = 0;
    for (int d = 0; d <= docs; ++d)
      if (offsets[std::size_t(b * (docs + 1) + d)] <= t) start = offsets[std::size_t(b * (docs + 1) + d)];
    return t - start;
  };
  ASSERT_EQ(position(3), 1);  // sequence 0, t 3: the second document's second row
  const Host x = random_vector(N * row, 76);
  ExecSpace space;
  const auto table = make_rotary_table<accum_t<TypeParam>>(T, hs, kTheta);
  auto d_x = to_device<TypeParam>(x);
  rotary_forward(space, vec(d_x), table, N, T, row, heads, hs, segments);
  expect_close(to_host(d_x), rotary_reference(x, position), kTol<TypeParam>, "x' by document");
  rotary_backward(space, vec(d_x), table, N, T, row, heads, hs, segments);
  expect_close(to_host(d_x), x, kTol<TypeParam>, "Rᵀ R x by document");
}

// cos(t·θ^(−2i/hs)) and sin of it, row t: frequency 1 in column 0, 1/θ^(2/hs) in column 1.
TEST(Rotary, TableHoldsTheAnglesOfEachPosition) {
  const int half = hs / 2;
  const auto table = make_rotary_table<double>(T, hs, kTheta);
  const Host cos = to_host(table.cos), sin = to_host(table.sin);
  ASSERT_EQ(cos.size(), std::size_t(T * half));
  for (int t = 0; t < T; ++t) {
    EXPECT_DOUBLE_EQ(cos[t * half], std::cos(double(t)));
    EXPECT_DOUBLE_EQ(sin[t * half], std::sin(double(t)));
    EXPECT_NEAR(sin[t * half + 1], std::sin(t / std::cbrt(kTheta)), 1e-15);  // θ^(−2/6) = 1/∛θ
  }
}

}  // namespace test_rotary
}  // namespace meshtrain::test

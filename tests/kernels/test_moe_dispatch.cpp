// Token dispatch: moe_assign against hand-counted cases and against the priority walk of
// moe_reference.hpp (capacity with and without drops, E = 3, 5, 8, k = 1, 2, 3, an expert that
// receives nothing), and padded to the capacity; permute and combine against their closed forms; their backwards
// against central differences in double; bf16 combine against the double loop; float reruns bitwise equal. The kept
// counts in int64 (the expert exchange's) equal the checked offsets' differences.
#include "kernels/moe_dispatch.hpp"

#include "kernel_test_utils.hpp"
#include "low_precision_utils.hpp"
#include "moe_reference.hpp"

namespace meshtrain::test {
namespace test_moe_dispatch {

Assignment run_assign(const Ints& expert, int N, int E, int k, int capacity, bool padded = false) {
  ExecSpace space;
  auto d_expert = to_device(expert);
  const int rows = padded ? E * capacity : N * k;
  auto slot = to_device(Ints(N * k, -7)), row_token = to_device(Ints(rows, -7));
  auto routed = to_device(Ints(E, -7)), offsets = to_device(Ints(E + 1, -7));
  Buffer<std::int64_t> kept("kept", std::size_t(E));
  Kokkos::deep_copy(kept, std::int64_t(-7));
  moe_assign(space, vec(slot), vec(row_token), vec(routed), vec(offsets), cvec(d_expert), N, E, k, capacity, padded,
             vec(kept));
  Assignment a{raw(slot), raw(row_token), raw(routed), raw(offsets)};
  if (!padded) a.row_token.resize(a.offsets[E]);
  // The expert exchange's counts (int64): each expert's rows, the offsets' differences, which the
  // callers compare with the hand counts and the priority walk.
  const std::vector<std::int64_t> kept_counts = raw(kept);
  for (int e = 0; e < E; ++e) EXPECT_EQ(kept_counts[std::size_t(e)], a.offsets[e + 1] - a.offsets[e]) << "kept " << e;
  return a;
}

void expect_assignment(const Assignment& actual, const Assignment& expected) {
  EXPECT_EQ(actual.slot, expected.slot) << "slot";
  EXPECT_EQ(actual.row_token, expected.row_token) << "row_token";
  EXPECT_EQ(actual.routed, expected.routed) << "routed";
  EXPECT_EQ(actual.offsets, expected.offsets) << "offsets";
}

// Three tokens, two choices each: expert[n] = {1, 0}, {2, 1}, {0, 2}. Every expert is one token's
// first choice and another's second, so capacity 1 drops every second choice, token 0's too,
// although token 0 comes before token 2, whose first choice takes expert 0.
const Ints kHandExperts = {1, 0, 2, 1, 0, 2};

TEST(MoeAssign, HandCountedRowsWithoutCapacity) {
  // expert 0: (2,0) then (0,1) → rows 0, 1; expert 1: (0,0), (1,1) → 2, 3; expert 2: (1,0), (2,1) → 4, 5.
  expect_assignment(run_assign(kHandExperts, 3, 3, 2, 0),
                    {{2, 1, 4, 3, 0, 5}, {2, 0, 0, 1, 1, 2}, {2, 2, 2}, {0, 2, 4, 6}});
}

TEST(MoeAssign, HandCountedFirstChoicesWinTheCapacity) {
  expect_assignment(run_assign(kHandExperts, 3, 3, 2, 1), {{1, -1, 2, -1, 0, -1}, {2, 0, 1}, {2, 2, 2}, {0, 1, 2, 3}});
}

TEST(MoeAssign, MatchesThePriorityWalk) {
  struct Case {
    int N, E, k, capacity, excluded;
    bool drops;
  };
  for (const Case& c : {Case{50, 3, 1, 0, -1, false}, Case{50, 3, 1, 12, -1, true}, Case{40, 5, 2, 12, 3, true},
                        Case{30, 5, 3, 0, 0, false}, Case{200, 8, 2, 40, 5, true}, Case{33, 5, 3, 25, -1, false}}) {
    SCOPED_TRACE(::testing::Message() << "N " << c.N << " E " << c.E << " k " << c.k << " capacity " << c.capacity);
    const Ints expert = random_experts(c.N, c.E, c.k, 70 + c.N, c.excluded);
    const Assignment want = reference_assign(expert, c.N, c.E, c.k, c.capacity);
    expect_assignment(run_assign(expert, c.N, c.E, c.k, c.capacity), want);
    if (c.excluded >= 0) {
      EXPECT_EQ(want.routed[c.excluded], 0);
    }
    EXPECT_EQ(want.offsets[c.E] < c.N * c.k, c.drops) << "the case is meant to drop assignments, or none";
  }
}

// The padded layout (model.pad_to_capacity) from the compact one: expert e's kept rows moved to start
// at e · capacity, the rest of its capacity padding rows (−1); routed and offsets (the kept rows' prefix
// sums) unchanged.
Assignment padded_layout(const Assignment& compact, const Ints& expert, int E, int capacity) {
  Assignment a = compact;
  a.row_token.assign(std::size_t(E * capacity), -1);
  for (std::size_t q = 0; q < a.slot.size(); ++q) {
    if (compact.slot[q] < 0) continue;
    const int e = expert[q];
    a.slot[q] = e * capacity + compact.slot[q] - compact.offsets[e];
    a.row_token[std::size_t(a.slot[q])] = compact.row_token[std::size_t(compact.slot[q])];
  }
  return a;
}

TEST(MoeAssign, PaddedToTheCapacityKeepsTheSameRowsAtFixedPlaces) {
  // Hand-counted: capacity 1 as above, each expert's one row at e; capacity 3 leaves a padding row each.
  expect_assignment(run_assign(kHandExperts, 3, 3, 2, 1, true),
                    {{1, -1, 2, -1, 0, -1}, {2, 0, 1}, {2, 2, 2}, {0, 1, 2, 3}});
  expect_assignment(run_assign(kHandExperts, 3, 3, 2, 3, true),
                    {{3, 1, 6, 4, 0, 7}, {2, 0, -1, 0, 1, -1, 1, 2, -1}, {2, 2, 2}, {0, 2, 4, 6}});
  struct Case {
    int N, E, k, capacity, excluded;
  };
  for (const Case& c : {Case{40, 5, 2, 12, 3}, Case{200, 8, 2, 40, 5}, Case{33, 5, 3, 25, -1}}) {
    SCOPED_TRACE(::testing::Message() << "N " << c.N << " E " << c.E << " k " << c.k << " capacity " << c.capacity);
    const Ints expert = random_experts(c.N, c.E, c.k, 70 + c.N, c.excluded);
    const Assignment want = padded_layout(reference_assign(expert, c.N, c.E, c.k, c.capacity), expert, c.E, c.capacity);
    expect_assignment(run_assign(expert, c.N, c.E, c.k, c.capacity, true), want);
  }
}

// The data of the gather tests: N tokens routed to 4 of the E experts (expert 2 gets none), 9
// assignments each on average, capacity 7: some are dropped.
constexpr int N = 12, E = 5, k = 3, C = 4, kCapacity = 7;

struct Routed {
  Assignment a = reference_assign(random_experts(N, E, k, 80, 2), N, E, k, kCapacity);
  int R = a.offsets[E];
};

Host reference_combine(const Host& ys, const Host& gate, const Ints& slot, const Host& out0, bool accumulate) {
  Host out(N * C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double sum = 0;
      for (int j = 0; j < k; ++j) {
        const int r = slot[n * k + j];
        if (r >= 0) sum += gate[n * k + j] * ys[r * C + c];
      }
      out[n * C + c] = (accumulate ? out0[n * C + c] : 0.0) + sum;
    }
  return out;
}

template <class Real>
Host run_combine(const Host& ys, const Host& gate, const Ints& slot, const Host& out0, bool accumulate) {
  auto d_ys = to_device<Real>(ys);
  auto d_gate = to_device<accum_t<Real>>(gate);
  auto d_slot = to_device(slot);
  auto out = to_device<Real>(accumulate ? out0 : nan_filled(N * C));
  moe_combine(ExecSpace{}, vec(out), cvec(d_ys), cvec(d_slot), cvec(d_gate), N, k, C, accumulate);
  return to_host(out);
}

template <class Real>
Host run_permute(const Host& x, const Ints& row_token, int R) {
  auto d_x = to_device<Real>(x);
  auto d_rows = to_device(row_token);
  auto xs = to_device<Real>(nan_filled(R * C));
  moe_permute(ExecSpace{}, vec(xs), cvec(d_x), cvec(d_rows), R, C);
  return to_host(xs);
}

template <class Real>
Host run_permute_backward(const Host& dxs, const Ints& slot, const Host& dx0, bool accumulate) {
  auto d_dxs = to_device<Real>(dxs);
  auto d_slot = to_device(slot);
  auto dx = to_device<Real>(accumulate ? dx0 : nan_filled(N * C));
  moe_permute_backward(ExecSpace{}, vec(dx), cvec(d_dxs), cvec(d_slot), N, k, C, accumulate);
  return to_host(dx);
}

template <class Real>
std::pair<Host, Host> run_combine_backward(const Host& dout, const Host& ys, const Host& gate, const Ints& slot,
                                           int R) {
  auto d_dout = to_device<Real>(dout), d_ys = to_device<Real>(ys);
  auto d_gate = to_device<accum_t<Real>>(gate);
  auto d_slot = to_device(slot);
  auto dys = to_device<Real>(nan_filled(R * C));
  auto dgate = to_device<accum_t<Real>>(nan_filled(N * k));
  moe_combine_backward(ExecSpace{}, vec(dys), vec(dgate), cvec(d_dout), cvec(d_ys), cvec(d_slot), cvec(d_gate), N, k,
                       C);
  return {to_host(dys), to_host(dgate)};
}

template <class Real>
class MoeGather : public ::testing::Test {};
TYPED_TEST_SUITE(MoeGather, DoubleAndFloat);
template <class Real>
constexpr double kTol = tolerance_for<Real>(1e-13, 1e-5);

TYPED_TEST(MoeGather, PermuteCopiesEachRowsToken) {
  const Routed r;
  const Host x = random_vector(N * C, 81);
  const Host xs = run_permute<TypeParam>(x, r.a.row_token, r.R);
  for (int row = 0; row < r.R; ++row)
    for (int c = 0; c < C; ++c)
      ASSERT_EQ(xs[row * C + c], double(TypeParam(x[r.a.row_token[row] * C + c]))) << "row " << row;
}

// Padded: the padding rows (row_token −1) come out zero, the kept rows as the compact layout's; the
// padding rows of a row gradient are zeroed, the others left alone.
TYPED_TEST(MoeGather, PaddingRowsAreZero) {
  const Routed r;
  const Ints expert = random_experts(N, E, k, 80, 2);
  const Assignment padded = padded_layout(r.a, expert, E, kCapacity);
  const int R = E * kCapacity;
  const Host x = random_vector(N * C, 81);
  const Host xs = run_permute<TypeParam>(x, padded.row_token, R);
  const Host drows = random_vector(R * C, 85);
  auto d_drows = to_device<TypeParam>(drows);
  auto d_tokens = to_device(padded.row_token);
  moe_zero_padding(ExecSpace{}, vec(d_drows), cvec(d_tokens), R, C);
  const Host zeroed = to_host(d_drows);
  for (int row = 0; row < R; ++row) {
    const int token = padded.row_token[std::size_t(row)];
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(xs[row * C + c], token < 0 ? 0.0 : double(TypeParam(x[token * C + c]))) << "row " << row;
      ASSERT_EQ(zeroed[row * C + c], token < 0 ? 0.0 : double(TypeParam(drows[row * C + c]))) << "row " << row;
    }
  }
}

TYPED_TEST(MoeGather, CombineMatchesTheClosedForm) {
  const Routed r;
  const Host ys = random_vector(r.R * C, 82), gate = random_vector(N * k, 83, 0.0, 1.0);
  const Host out0 = random_vector(N * C, 84);
  for (bool accumulate : {false, true}) {
    expect_close(run_combine<TypeParam>(ys, gate, r.a.slot, out0, accumulate),
                 reference_combine(ys, gate, r.a.slot, out0, accumulate), kTol<TypeParam>,
                 accumulate ? "out (+=)" : "out (=)");
  }
}

TEST(MoeGather, Bf16CombineRoundsTheFloatSumOnce) {
  const Routed r;
  const Host ys = rounded<bf16>(random_vector(r.R * C, 85)), out0 = rounded<bf16>(random_vector(N * C, 86));
  Host gate = random_vector(N * k, 87, 0.0, 1.0);
  for (double& g : gate) g = float(g);  // the gates are float (accum_t<bf16>)
  for (bool accumulate : {false, true}) {
    expect_within_ulps<bf16>(run_combine<bf16>(ys, gate, r.a.slot, out0, accumulate),
                             reference_combine(ys, gate, r.a.slot, out0, accumulate), kOneUlp, "bf16 combine");
  }
}

TEST(MoeGather, PermuteBackwardMatchesFiniteDifferences) {
  const Routed r;
  Host x = random_vector(N * C, 88);
  const Host w = random_vector(r.R * C, 89);
  const Host num = numeric_gradient(x, [&] { return dot(run_permute<double>(x, r.a.row_token, r.R), w); });
  expect_close(run_permute_backward<double>(w, r.a.slot, {}, false), num, 1e-6, "dx (=)");
  const Host dx0 = random_vector(N * C, 90);
  Host want(N * C);
  for (int i = 0; i < N * C; ++i) want[i] = dx0[i] + num[i];
  expect_close(run_permute_backward<double>(w, r.a.slot, dx0, true), want, 1e-6, "dx (+=)");
}

TEST(MoeGather, CombineBackwardMatchesFiniteDifferences) {
  const Routed r;
  Host ys = random_vector(r.R * C, 91), gate = random_vector(N * k, 92, 0.0, 1.0);
  const Host dout = random_vector(N * C, 93);
  const auto objective = [&] { return dot(run_combine<double>(ys, gate, r.a.slot, {}, false), dout); };
  const Host dys = numeric_gradient(ys, objective), dgate = numeric_gradient(gate, objective);
  const auto [got_dys, got_dgate] = run_combine_backward<double>(dout, ys, gate, r.a.slot, r.R);
  expect_close(got_dys, dys, 1e-6, "dys");
  expect_close(got_dgate, dgate, 1e-6, "dgate");
  for (int a = 0; a < N * k; ++a) {
    if (r.a.slot[a] < 0) {
      EXPECT_EQ(got_dgate[a], 0.0) << "a dropped assignment's gate gradient, assignment " << a;
    }
  }
}

TEST(MoeGather, FloatRerunsAreBitwiseEqual) {
  const Routed r;
  const Ints expert = random_experts(N, E, k, 80, 2);
  const Host ys = random_vector(r.R * C, 94), gate = random_vector(N * k, 95, 0.0, 1.0);
  const Host dout = random_vector(N * C, 96), out0 = random_vector(N * C, 97);
  const auto run = [&] {
    const Assignment a = run_assign(expert, N, E, k, kCapacity);
    const auto [dys, dgate] = run_combine_backward<float>(dout, ys, gate, a.slot, r.R);
    return std::tuple{a.slot, run_combine<float>(ys, gate, a.slot, out0, true), dys, dgate,
                      run_permute_backward<float>(ys, a.slot, out0, true)};
  };
  const auto first = run(), second = run();
  EXPECT_EQ(std::get<0>(first), std::get<0>(second)) << "slot";
  EXPECT_TRUE(bitwise_equal(std::get<1>(first), std::get<1>(second))) << "combine";
  EXPECT_TRUE(bitwise_equal(std::get<2>(first), std::get<2>(second))) << "dys";
  EXPECT_TRUE(bitwise_equal(std::get<3>(first), std::get<3>(second))) << "dgate";
  EXPECT_TRUE(bitwise_equal(std::get<4>(first), std::get<4>(second))) << "permute backward";
}

}  // namespace test_moe_dispatch
}  // namespace meshtrain::test

// The MoE router: softmax, top-k and gates against a double loop (top-k by a stable sort, ties
// included), the aux and z losses against their closed forms, the backward against central
// differences of Σ dgate·gate + aux_weight·aux + z_weight·z, float against double, bitwise reruns,
// and bf16 logits (the router computes in float) against the double loop; the routing counts summed
// beside the losses (routed and kept per expert, per block); a micro-batch's rows split over ranks
// (context parallelism) against the whole micro-batch.
#include "kernels/moe_router.hpp"

#include "kernel_test_utils.hpp"
#include "low_precision_utils.hpp"
#include "moe_reference.hpp"

#include <cmath>

namespace meshtrain::test {
namespace test_moe_router {

struct Shape {
  int N, E, k;
  bool normalize;
};
// E not a power of two, k = 1, 2, 3, gates normalised or not.
const Shape kShapes[] = {{6, 3, 1, true}, {7, 5, 2, true}, {5, 5, 3, false}, {9, 8, 3, true}, {4, 3, 2, false}};

struct Routing {
  Host probs, gate, lse;
  Ints expert;
};

Routing reference_router(const Host& z, const Shape& s) {
  Routing r{Host(s.N * s.E), Host(s.N * s.k), Host(s.N), {}};
  for (int n = 0; n < s.N; ++n) {
    const auto first = z.begin() + n * s.E;
    const double m = *std::max_element(first, first + s.E);
    double sum = 0;
    for (int e = 0; e < s.E; ++e) sum += std::exp(z[n * s.E + e] - m);
    Host p(s.E);
    for (int e = 0; e < s.E; ++e) p[e] = r.probs[n * s.E + e] = std::exp(z[n * s.E + e] - m) / sum;
    r.lse[n] = m + std::log(sum);
    const Ints top = top_k(p, s.k);
    double chosen = 0;
    for (int e : top) chosen += p[e];
    for (int j = 0; j < s.k; ++j) {
      r.expert.push_back(top[j]);
      r.gate[n * s.k + j] = s.normalize ? p[top[j]] / chosen : p[top[j]];
    }
  }
  return r;
}

template <class Real>
struct DeviceRouting {
  using A = accum_t<Real>;
  Buffer<A> probs, gate, lse;
  Buffer<int> expert;
};

template <class Real>
DeviceRouting<Real> route(const Host& z, const Shape& s) {
  using A = accum_t<Real>;
  ExecSpace space;
  auto logits = to_device<Real>(z);
  DeviceRouting<Real> d{to_device<A>(nan_filled(s.N * s.E)), to_device<A>(nan_filled(s.N * s.k)),
                        to_device<A>(nan_filled(s.N)), to_device(Ints(s.N * s.k, -7))};
  router_forward(space, vec(d.probs), vec(d.expert), vec(d.gate), vec(d.lse), cvec(logits), s.N, s.E, s.k, s.normalize);
  return d;
}

template <class Real>
Routing run_router(const Host& z, const Shape& s) {
  const auto d = route<Real>(z, s);
  return {to_host(d.probs), to_host(d.gate), to_host(d.lse), raw(d.expert)};
}

// Logits with ties: row 0 all equal (experts 0 … k−1), row 1 two equal maxima (the lower first).
Host tied_logits(const Shape& s, std::uint64_t seed) {
  Host z = random_vector(s.N * s.E, seed, -3.0, 3.0);
  for (int e = 0; e < s.E; ++e) z[e] = 0.5;
  z[s.E + s.E - 1] = z[s.E + 1] = 4.0;
  return z;
}

void expect_routing_close(const Routing& actual, const Routing& expected, double tol) {
  EXPECT_EQ(actual.expert, expected.expert);
  expect_close(actual.probs, expected.probs, tol, "probs");
  expect_close(actual.gate, expected.gate, tol, "gate");
  expect_close(actual.lse, expected.lse, tol, "lse");
}

template <class Real>
class MoeRouter : public ::testing::Test {};
TYPED_TEST_SUITE(MoeRouter, DoubleAndFloat);
template <class Real>
constexpr double kTol = tolerance_for<Real>(1e-13, 1e-5);

TYPED_TEST(MoeRouter, ForwardMatchesTheDoubleLoopTiesIncluded) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " E " << s.E << " k " << s.k);
    const Host z = tied_logits(s, 10 + s.E);
    const Routing r = run_router<TypeParam>(z, s);
    expect_routing_close(r, reference_router(z, s), kTol<TypeParam>);
    for (int j = 0; j < s.k; ++j) EXPECT_EQ(r.expert[j], j) << "all-equal row";
    EXPECT_EQ(r.expert[s.k], 1) << "of two equal maxima the lower expert comes first";
  }
}

TEST(MoeRouter, Bf16LogitsRouteInFloat) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " E " << s.E << " k " << s.k);
    const Host z = rounded<bf16>(tied_logits(s, 20 + s.E));
    expect_routing_close(run_router<bf16>(z, s), reference_router(z, s), 1e-5);
  }
}

// aux = E · Σ_e routed[e]/(N·k) · mean_n p[n,e], z = mean_n lse², on arbitrary inputs; N = 5000
// spans two row chunks of the column sums.
// moe_assign's counts for `routed` without a capacity: routed (E) | row offsets (E+1), on the device.
Buffer<int> counts_of(const Ints& routed) {
  Ints counts = routed;
  counts.push_back(0);
  for (int r : routed) counts.push_back(counts.back() + r);
  return to_device(counts);
}

template <class A>
RouterLosses losses_of(const Host& probs, const Host& lse, const Ints& routed, int N, int E, int k) {
  auto p = to_device<A>(probs), l = to_device<A>(lse);
  auto counts = counts_of(routed);
  return router_losses(ExecSpace{}, cvec(p), cvec(l), cvec(counts), N, E, k);
}

TEST(MoeRouter, LossesMatchTheirClosedForms) {
  for (const auto& [N, E, k] : {std::tuple{6, 3, 1}, std::tuple{5000, 5, 2}}) {
    const Host probs = random_vector(N * E, 31, 0.0, 1.0), lse = random_vector(N, 32, -2.0, 3.0);
    Ints routed(E);
    for (int e = 0; e < E; ++e) routed[e] = 3 * e + 1;
    double aux = 0, z = 0;
    for (int e = 0; e < E; ++e) {
      double column = 0;
      for (int n = 0; n < N; ++n) column += probs[n * E + e];
      aux += double(routed[e]) / (N * k) * column / N;
    }
    aux *= E;
    for (double v : lse) z += v * v / N;
    const RouterLosses got = losses_of<double>(probs, lse, routed, N, E, k);
    EXPECT_NEAR(got.aux, aux, 1e-12 * aux) << "N " << N;
    EXPECT_NEAR(got.z, z, 1e-12 * z) << "N " << N;
    const RouterLosses in_float = losses_of<float>(probs, lse, routed, N, E, k);
    EXPECT_NEAR(in_float.aux, aux, 1e-6 * aux) << "N " << N;
    EXPECT_NEAR(in_float.z, z, 1e-6 * z) << "N " << N;
  }
}

// The routing counts beside the losses: block 1 of 2 after two passes holds twice each expert's routed
// assignments and twice its kept rows (the offsets' differences, two dropped by a capacity of 4), and
// block 0 nothing; the losses sit in front of them.
TEST(MoeRouter, StatisticsSumTheRoutingCounts) {
  const int N = 6, E = 3, k = 2;
  const Ints counts = {5, 4, 3, 0, 4, 8, 11};  // routed | offsets: kept 4, 4, 3
  const Host probs = random_vector(N * E, 33, 0.0, 1.0), lse = random_vector(N, 34, -2.0, 3.0);
  auto p = to_device<double>(probs), l = to_device<double>(lse);
  auto c = to_device(counts);
  const std::size_t per_block = router_sums_per_block(E);
  ASSERT_EQ(per_block, 8u);
  Buffer<double> sums("sums", 2 * per_block);
  const CVec<int> routed = Kokkos::subview(cvec(c), std::pair<long, long>(0, E));
  for (int pass = 0; pass < 2; ++pass)
    add_router_statistics<double>(ExecSpace{}, cvec(p), cvec(l), cvec(c), routed, N, N, E, k, vec(sums), 1);
  const std::vector<double> got = raw(sums);
  for (std::size_t i = 0; i < per_block; ++i) EXPECT_EQ(got[i], 0.0) << "block 0, sum " << i;
  const RouterLosses one = losses_of<double>(probs, lse, {5, 4, 3}, N, E, k);
  EXPECT_NEAR(got[per_block], 2 * one.aux, 1e-12);
  EXPECT_NEAR(got[per_block + 1], 2 * one.z, 1e-12);
  const std::vector<double> want_counts = {10, 8, 6, 8, 8, 6};
  for (std::size_t i = 0; i < want_counts.size(); ++i) EXPECT_EQ(got[per_block + 2 + i], want_counts[i]) << i;
}

constexpr double kAuxWeight = 0.3, kZWeight = 0.2;

Ints routed_counts(const Ints& expert, int E) {
  Ints routed(E, 0);
  for (int e : expert) ++routed[e];
  return routed;
}

template <class Real>
Host run_backward(const DeviceRouting<Real>& d, const Host& dgate, const Ints& routed, const Shape& s,
                  long tokens = 0) {
  auto g = to_device<accum_t<Real>>(dgate);
  auto r = to_device(routed);
  auto dlogits = to_device<Real>(nan_filled(s.N * s.E));  // written, not accumulated
  router_backward(ExecSpace{}, vec(dlogits), cvec(g), cvec(d.probs), cvec(d.expert), cvec(d.lse), cvec(r), kAuxWeight,
                  kZWeight, s.N, tokens > 0 ? tokens : s.N, s.E, s.k, s.normalize);
  return to_host(dlogits);
}

// The objective through the forward kernels, with `routed` and the routing held fixed (the random
// logits keep every top-k choice far from a tie, and the check below sees that it holds).
double objective(const Host& z, const Host& dgate, const Ints& routed, const Ints& expert, const Shape& s) {
  const auto d = route<double>(z, s);
  EXPECT_EQ(raw(d.expert), expert) << "a perturbation changed the routing";
  const RouterLosses l = router_losses(ExecSpace{}, cvec(d.probs), cvec(d.lse), cvec(counts_of(routed)), s.N, s.E, s.k);
  return dot(to_host(d.gate), dgate) + kAuxWeight * l.aux + kZWeight * l.z;
}

TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << "N " << s.N << " E " << s.E << " k " << s.k);
    Host z = random_vector(s.N * s.E, 40 + s.E, -2.0, 2.0);
    const Host dgate = random_vector(s.N * s.k, 41);
    const auto d = route<double>(z, s);
    const Ints expert = raw(d.expert);
    const Ints routed = routed_counts(expert, s.E);
    const Host num = numeric_gradient(z, [&] { return objective(z, dgate, routed, expert, s); });
    expect_close(run_backward<double>(d, dgate, routed, s), num, 1e-6, "dlogits");
  }
}

TEST(MoeRouter, FloatBackwardMatchesDouble) {
  const Shape s{7, 5, 2, true};
  const Host z = random_vector(s.N * s.E, 50, -2.0, 2.0), dgate = random_vector(s.N * s.k, 51);
  const Ints routed = routed_counts(raw(route<double>(z, s).expert), s.E);
  expect_close(run_backward<float>(route<float>(z, s), dgate, routed, s),
               run_backward<double>(route<double>(z, s), dgate, routed, s), 1e-4, "dlogits");
}

TEST(MoeRouter, FloatRerunsAreBitwiseEqual) {
  const Shape s{64, 5, 2, true};
  const Host z = random_vector(s.N * s.E, 60, -2.0, 2.0), dgate = random_vector(s.N * s.k, 61);
  const auto run = [&] {
    const auto d = route<float>(z, s);
    const Ints routed = routed_counts(raw(d.expert), s.E);
    auto r = to_device(routed), counts = counts_of(routed);
    const RouterLosses l = router_losses(ExecSpace{}, cvec(d.probs), cvec(d.lse), cvec(counts), s.N, s.E, s.k);
    auto g = to_device<float>(dgate);
    auto dlogits = to_device<float>(nan_filled(s.N * s.E));
    router_backward(ExecSpace{}, vec(dlogits), cvec(g), cvec(d.probs), cvec(d.expert), cvec(d.lse), cvec(r), 0.1f,
                    0.01f, s.N, s.N, s.E, s.k, s.normalize);
    return std::tuple{raw(d.probs), raw(d.gate), raw(d.lse), raw(d.expert), l.aux, l.z, raw(dlogits)};
  };
  const auto first = run(), second = run();
  EXPECT_TRUE(bitwise_equal(std::get<0>(first), std::get<0>(second))) << "probs";
  EXPECT_TRUE(bitwise_equal(std::get<1>(first), std::get<1>(second))) << "gate";
  EXPECT_TRUE(bitwise_equal(std::get<2>(first), std::get<2>(second))) << "lse";
  EXPECT_EQ(std::get<3>(first), std::get<3>(second)) << "expert";
  EXPECT_EQ(std::get<4>(first), std::get<4>(second)) << "aux";
  EXPECT_EQ(std::get<5>(first), std::get<5>(second)) << "z";
  EXPECT_TRUE(bitwise_equal(std::get<6>(first), std::get<6>(second))) << "dlogits";
}

// Context parallelism: a micro-batch of 13 tokens split over three ranks' rows (5, 4, 4), each routing its own
// rows and given the micro-batch's routed counts and token count. Their aux and z losses sum to the whole
// micro-batch's, and each rank's dlogits are the whole's rows; with its own counts and tokens instead they
// are not (the split changes f and the means).
TEST(MoeRouter, AMicroBatchSplitOverRanksSumsToItsLosses) {
  const Shape whole{13, 5, 2, true};
  const Host z = random_vector(whole.N * whole.E, 70, -2.0, 2.0), dgate = random_vector(whole.N * whole.k, 71);
  const auto all = route<double>(z, whole);
  const Ints routed = routed_counts(raw(all.expert), whole.E);
  const RouterLosses want =
      router_losses(ExecSpace{}, cvec(all.probs), cvec(all.lse), cvec(counts_of(routed)), whole.N, whole.E, whole.k);
  const Host want_dlogits = run_backward<double>(all, dgate, routed, whole);
  const Buffer<int> group_routed = to_device(routed);
  double aux = 0, z_loss = 0, own_aux = 0;
  int first = 0;
  for (const int rows : {5, 4, 4}) {
    const Shape part{rows, whole.E, whole.k, whole.normalize};
    const Host zp(z.begin() + first * whole.E, z.begin() + (first + rows) * whole.E);
    const Host dgate_p(dgate.begin() + first * whole.k, dgate.begin() + (first + rows) * whole.k);
    const auto mine = route<double>(zp, part);
    const Ints own = routed_counts(raw(mine.expert), whole.E);
    const RouterLosses l = router_losses(ExecSpace{}, cvec(mine.probs), cvec(mine.lse), cvec(counts_of(own)), rows,
                                         whole.E, whole.k, cvec(group_routed), whole.N);
    aux += l.aux;
    z_loss += l.z;
    own_aux +=
        router_losses(ExecSpace{}, cvec(mine.probs), cvec(mine.lse), cvec(counts_of(own)), rows, whole.E, whole.k).aux;
    const Host dlogits = run_backward<double>(mine, dgate_p, routed, part, whole.N);
    const Host want_rows(want_dlogits.begin() + first * whole.E, want_dlogits.begin() + (first + rows) * whole.E);
    expect_close(dlogits, want_rows, 1e-12, "dlogits of rows from " + std::to_string(first));
    double largest = 0;
    for (const double v : minus(run_backward<double>(mine, dgate_p, own, part), want_rows)) {
      largest = std::max(largest, std::abs(v));
    }
    EXPECT_GT(largest, 1e-4) << "the rank's own counts and tokens give other gradients";
    first += rows;
  }
  EXPECT_NEAR(aux, want.aux, 1e-12 * want.aux);
  EXPECT_NEAR(z_loss, want.z, 1e-12 * want.z);
  EXPECT_GT(std::abs(own_aux / 3 - want.aux), 1e-3 * want.aux) << "the ranks' own losses are not the micro-batch's";
}

}  // namespace test_moe_router
}  // namespace meshtrain::test

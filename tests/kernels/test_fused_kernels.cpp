// The fused kernels against the separate kernels they replace, bitwise (in float and bf16: the
// same operations in the same order, each intermediate rounded as the separate kernels store it),
// the norms' one-sweep backward against the two-kernel composition it replaced (written here:
// a team per row for the input gradient, column_sums for the weights), and the fused forwards'
// gradients against central differences in double.
#include "kernels/bias.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/residual.hpp"
#include "kernels/rmsnorm.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_fused_kernels {

// Several chunks of rows with a short last one, several column blocks with a short last one.
constexpr int N = 2 * kColumnSumRows + 19, C = kColumnSumBlock + 11;

template <class Real>
void expect_bitwise(const Buffer<Real>& got, const Buffer<Real>& want, const std::string& what) {
  EXPECT_TRUE(bitwise_equal(raw(got), raw(want))) << what;
}

template <class Real>
void residual_layernorm_matches_separate_kernels(bool with_bias, bool in_place) {
  using A = accum_t<Real>;
  SCOPED_TRACE(std::string(with_bias ? "with bias" : "no bias") + (in_place ? ", in place" : ""));
  ExecSpace space;
  const Host a = random_vector(N * C, 1), b = random_vector(N * C, 2, -3.0, 3.0), pb = random_vector(C, 3);
  const Host w = random_vector(C, 4, 0.5, 1.5), lb = random_vector(C, 5);
  // separate: b += bias; residual = a + b; LayerNorm(residual)
  auto sep_b = to_device<Real>(b), sep_res = to_device<Real>(filled(N * C, 0)),
       sep_out = to_device<Real>(nan_filled(N * C));
  auto sep_mean = to_device<A>(nan_filled(N)), sep_rstd = to_device<A>(nan_filled(N));
  const auto d_a = to_device<Real>(a), d_pb = to_device<Real>(pb), d_w = to_device<Real>(w), d_lb = to_device<Real>(lb);
  if (with_bias) add_bias(space, vec(sep_b), cvec(d_pb), N, C);
  residual_forward(space, vec(sep_res), cvec(d_a), cvec(sep_b), long{N} * C);
  layernorm_forward(space, vec(sep_out), vec(sep_mean), vec(sep_rstd), cvec(sep_res), cvec(d_w), cvec(d_lb), N, C);
  // fused
  const auto d_b = to_device<Real>(b);
  auto res = in_place ? to_device<Real>(a) : to_device<Real>(nan_filled(N * C));
  auto out = to_device<Real>(nan_filled(N * C));
  auto mean = to_device<A>(nan_filled(N)), rstd = to_device<A>(nan_filled(N));
  residual_layernorm_forward(space, vec(res), vec(out), vec(mean), vec(rstd), in_place ? cvec(res) : cvec(d_a),
                             cvec(d_b), with_bias ? cvec(d_pb) : CVec<Real>(), cvec(d_w), cvec(d_lb), N, C);
  expect_bitwise(res, sep_res, "residual");
  expect_bitwise(out, sep_out, "out");
  expect_bitwise(mean, sep_mean, "mean");
  expect_bitwise(rstd, sep_rstd, "rstd");
}

TEST(FusedKernels, ResidualLayerNormBitwiseSeparateKernels) {
  for (bool with_bias : {true, false}) {
    for (bool in_place : {false, true}) {
      residual_layernorm_matches_separate_kernels<float>(with_bias, in_place);
      residual_layernorm_matches_separate_kernels<bf16>(with_bias, in_place);
    }
  }
}

template <class Real>
void residual_rmsnorm_matches_separate_kernels(bool in_place) {
  using A = accum_t<Real>;
  SCOPED_TRACE(in_place ? "in place" : "out of place");
  ExecSpace space;
  const Host a = random_vector(N * C, 11), b = random_vector(N * C, 12, -3.0, 3.0), w = random_vector(C, 13, 0.5, 1.5);
  const auto d_a = to_device<Real>(a), d_b = to_device<Real>(b), d_w = to_device<Real>(w);
  auto sep_res = to_device<Real>(filled(N * C, 0)), sep_out = to_device<Real>(nan_filled(N * C));
  auto sep_rstd = to_device<A>(nan_filled(N));
  residual_forward(space, vec(sep_res), cvec(d_a), cvec(d_b), long{N} * C);
  rmsnorm_forward(space, vec(sep_out), vec(sep_rstd), cvec(sep_res), cvec(d_w), N, C, 1e-5);
  auto res = in_place ? to_device<Real>(a) : to_device<Real>(nan_filled(N * C));
  auto out = to_device<Real>(nan_filled(N * C));
  auto rstd = to_device<A>(nan_filled(N));
  residual_rmsnorm_forward(space, vec(res), vec(out), vec(rstd), in_place ? cvec(res) : cvec(d_a), cvec(d_b), cvec(d_w),
                           N, C, 1e-5);
  expect_bitwise(res, sep_res, "residual");
  expect_bitwise(out, sep_out, "out");
  expect_bitwise(rstd, sep_rstd, "rstd");
}

TEST(FusedKernels, ResidualRmsNormBitwiseSeparateKernels) {
  for (bool in_place : {false, true}) {
    residual_rmsnorm_matches_separate_kernels<float>(in_place);
    residual_rmsnorm_matches_separate_kernels<bf16>(in_place);
  }
}

template <class Real>
void bias_residual_matches_separate_kernels() {
  ExecSpace space;
  const Host a = random_vector(N * C, 21), b = random_vector(N * C, 22, -3.0, 3.0), pb = random_vector(C, 23);
  const auto d_a = to_device<Real>(a), d_pb = to_device<Real>(pb);
  auto sep_b = to_device<Real>(b), sep_res = to_device<Real>(filled(N * C, 0));
  add_bias(space, vec(sep_b), cvec(d_pb), N, C);
  residual_forward(space, vec(sep_res), cvec(d_a), cvec(sep_b), long{N} * C);
  const auto d_b = to_device<Real>(b);
  auto res = to_device<Real>(nan_filled(N * C));
  residual_forward(space, vec(res), cvec(d_a), cvec(d_b), cvec(d_pb), N, C);
  expect_bitwise(res, sep_res, "residual");
}

TEST(FusedKernels, BiasResidualBitwiseSeparateKernels) {
  bias_residual_matches_separate_kernels<float>();
  bias_residual_matches_separate_kernels<bf16>();
}

template <class Real>
void bias_gelu_matches_separate_kernels() {
  ExecSpace space;
  const Host x = random_vector(N * C, 31, -4.0, 4.0), bias = random_vector(C, 32);
  const auto d_bias = to_device<Real>(bias);
  auto sep_pre = to_device<Real>(x), sep_out = to_device<Real>(nan_filled(N * C));
  add_bias(space, vec(sep_pre), cvec(d_bias), N, C);
  gelu_forward(space, vec(sep_out), cvec(sep_pre), long{N} * C);
  auto pre = to_device<Real>(x), out = to_device<Real>(nan_filled(N * C));
  bias_gelu_forward(space, vec(pre), vec(out), cvec(d_bias), N, C);
  expect_bitwise(pre, sep_pre, "pre-activation");
  expect_bitwise(out, sep_out, "out");
}

TEST(FusedKernels, BiasGeluBitwiseSeparateKernels) {
  bias_gelu_matches_separate_kernels<float>();
  bias_gelu_matches_separate_kernels<bf16>();
}

template <class Real>
void gelu_backward_bias_matches_separate_kernels(bool in_place) {
  SCOPED_TRACE(in_place ? "in place" : "out of place");
  ExecSpace space;
  const Host x = random_vector(N * C, 41, -4.0, 4.0), dout = random_vector(N * C, 42), db0 = random_vector(C, 43);
  const auto d_x = to_device<Real>(x), d_dout = to_device<Real>(dout);
  auto sep_dx = to_device<Real>(nan_filled(N * C)), sep_db = to_device<Real>(db0);
  gelu_backward(space, vec(sep_dx), cvec(d_x), cvec(d_dout), long{N} * C);
  bias_backward(space, vec(sep_db), vec(column_partials<Real>(N, C)), cvec(sep_dx), N, C);
  auto dx = in_place ? to_device<Real>(dout) : to_device<Real>(nan_filled(N * C));
  auto db = to_device<Real>(db0);
  gelu_backward_bias(space, vec(dx), vec(db), vec(column_partials<Real>(N, C)), cvec(d_x),
                     in_place ? cvec(dx) : cvec(d_dout), N, C);
  expect_bitwise(dx, sep_dx, "dinp");
  expect_bitwise(db, sep_db, "dbias");
}

TEST(FusedKernels, GeluBackwardBiasBitwiseSeparateKernels) {
  for (bool in_place : {false, true}) {
    gelu_backward_bias_matches_separate_kernels<float>(in_place);
    gelu_backward_bias_matches_separate_kernels<bf16>(in_place);
  }
}

// ---- the norms' backward against its two halves (the input's gradient, then the weights' column sums) -----
// The halves are what a zero-bubble pipeline runs apart (model/impl/deferrable_backward.hpp): the fused kernel
// adds the same terms in the same order, so the two agree bitwise.

template <class Real>
void layernorm_backward_two_kernels(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight, Vec<Real> dbias,
                                    Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight,
                                    CVec<accum_t<Real>> mean, CVec<accum_t<Real>> rstd, int rows, int cols) {
  layernorm_input_backward<Real>(space, dinp, dout, inp, weight, mean, rstd, rows, cols);
  layernorm_weight_backward<Real>(space, dweight, dbias, partials, dout, inp, mean, rstd, rows, cols);
}

template <class Real>
void rmsnorm_backward_two_kernels(const ExecSpace& space, Vec<Real> dinp, Vec<Real> dweight,
                                  Vec<accum_t<Real>> partials, CVec<Real> dout, CVec<Real> inp, CVec<Real> weight,
                                  CVec<accum_t<Real>> rstd, int rows, int cols) {
  rmsnorm_input_backward<Real>(space, dinp, dout, inp, weight, rstd, rows, cols);
  rmsnorm_weight_backward<Real>(space, dweight, partials, dout, inp, rstd, rows, cols);
}

// rows 100 is one chunk (the sums written straight to the gradients), the others several.
constexpr int kRowCounts[] = {N, 100, 3 * kColumnSumRows};

// With residual_bias: the composition runs bias_backward over dinp after the two kernels.
template <class Real>
void layernorm_backward_matches_two_kernels(int rows, bool residual_bias) {
  using A = accum_t<Real>;
  SCOPED_TRACE("rows " + std::to_string(rows) + (residual_bias ? ", with the residual's bias" : ""));
  ExecSpace space;
  const Host x = random_vector(rows * C, 51), w = random_vector(C, 52, 0.5, 1.5), dout = random_vector(rows * C, 53);
  const Host dx0 = random_vector(rows * C, 54), dw0 = random_vector(C, 55), db0 = random_vector(C, 56);
  const auto d_x = to_device<Real>(x), d_w = to_device<Real>(w), d_dout = to_device<Real>(dout);
  const auto mean = to_device<A>(random_vector(rows, 57)), rstd = to_device<A>(random_vector(rows, 58, 0.5, 2.0));
  auto want_dx = to_device<Real>(dx0), want_dw = to_device<Real>(dw0), want_db = to_device<Real>(db0);
  layernorm_backward_two_kernels<Real>(space, vec(want_dx), vec(want_dw), vec(want_db),
                                       vec(column_partials<Real>(rows, C, 2)), cvec(d_dout), cvec(d_x), cvec(d_w),
                                       cvec(mean), cvec(rstd), rows, C);
  const Host rb0 = random_vector(C, 59);
  auto want_rb = to_device<Real>(rb0);
  if (residual_bias) bias_backward(space, vec(want_rb), vec(column_partials<Real>(rows, C)), cvec(want_dx), rows, C);
  auto dx = to_device<Real>(dx0), dw = to_device<Real>(dw0), db = to_device<Real>(db0), rb = to_device<Real>(rb0);
  layernorm_backward(space, vec(dx), vec(dw), vec(db), vec(column_partials<Real>(rows, C, residual_bias ? 3 : 2)),
                     cvec(d_dout), cvec(d_x), cvec(d_w), cvec(mean), cvec(rstd), rows, C,
                     residual_bias ? vec(rb) : Vec<Real>());
  expect_bitwise(dx, want_dx, "dinp");
  expect_bitwise(dw, want_dw, "dweight");
  expect_bitwise(db, want_db, "dbias");
  expect_bitwise(rb, want_rb, "residual bias");
}

TEST(FusedKernels, LayerNormBackwardBitwiseTwoKernels) {
  for (int rows : kRowCounts) {
    for (bool residual_bias : {false, true}) {
      layernorm_backward_matches_two_kernels<float>(rows, residual_bias);
      layernorm_backward_matches_two_kernels<bf16>(rows, residual_bias);
      layernorm_backward_matches_two_kernels<double>(rows, residual_bias);
    }
  }
}

template <class Real>
void rmsnorm_backward_matches_two_kernels(int rows) {
  using A = accum_t<Real>;
  SCOPED_TRACE("rows " + std::to_string(rows));
  ExecSpace space;
  const Host x = random_vector(rows * C, 61), w = random_vector(C, 62, 0.5, 1.5), dout = random_vector(rows * C, 63);
  const Host dx0 = random_vector(rows * C, 64), dw0 = random_vector(C, 65);
  const auto d_x = to_device<Real>(x), d_w = to_device<Real>(w), d_dout = to_device<Real>(dout);
  const auto rstd = to_device<A>(random_vector(rows, 66, 0.5, 2.0));
  auto want_dx = to_device<Real>(dx0), want_dw = to_device<Real>(dw0);
  rmsnorm_backward_two_kernels<Real>(space, vec(want_dx), vec(want_dw), vec(column_partials<Real>(rows, C)),
                                     cvec(d_dout), cvec(d_x), cvec(d_w), cvec(rstd), rows, C);
  auto dx = to_device<Real>(dx0), dw = to_device<Real>(dw0);
  rmsnorm_backward(space, vec(dx), vec(dw), vec(column_partials<Real>(rows, C)), cvec(d_dout), cvec(d_x), cvec(d_w),
                   cvec(rstd), rows, C);
  expect_bitwise(dx, want_dx, "dinp");
  expect_bitwise(dw, want_dw, "dweight");
}

TEST(FusedKernels, RmsNormBackwardBitwiseTwoKernels) {
  for (int rows : kRowCounts) {
    rmsnorm_backward_matches_two_kernels<float>(rows);
    rmsnorm_backward_matches_two_kernels<bf16>(rows);
    rmsnorm_backward_matches_two_kernels<double>(rows);
  }
}

// ---- gradients of the fused forwards against central differences (double) --------------------

constexpr int Ns = 6, Cs = 9;

// loss = r · out + q · residual of residual_layernorm_forward(a, b, b_bias); backward: dresidual =
// q + LayerNorm's input gradient of r, da = db = dresidual, db_bias = Σ_n dresidual (the sum
// layernorm_backward's residual_bias adds).
TEST(FusedKernels, ResidualLayerNormGradientsMatchFiniteDifferences) {
  Host a = random_vector(Ns * Cs, 71), b = random_vector(Ns * Cs, 72), pb = random_vector(Cs, 73);
  Host w = random_vector(Cs, 74, 0.5, 1.5), lb = random_vector(Cs, 75);
  const Host r = random_vector(Ns * Cs, 76), q = random_vector(Ns * Cs, 77);
  ExecSpace space;
  struct Forward {
    Host residual, out, mean, rstd;
  };
  auto forward = [&] {
    auto res = to_device<double>(nan_filled(Ns * Cs)), out = to_device<double>(nan_filled(Ns * Cs));
    auto mean = to_device<double>(nan_filled(Ns)), rstd = to_device<double>(nan_filled(Ns));
    residual_layernorm_forward(space, vec(res), vec(out), vec(mean), vec(rstd), cvec(to_device<double>(a)),
                               cvec(to_device<double>(b)), cvec(to_device<double>(pb)), cvec(to_device<double>(w)),
                               cvec(to_device<double>(lb)), Ns, Cs);
    return Forward{to_host(res), to_host(out), to_host(mean), to_host(rstd)};
  };
  auto loss = [&] {
    const Forward f = forward();
    return dot(f.out, r) + dot(f.residual, q);
  };
  const Host num_a = numeric_gradient(a, loss), num_b = numeric_gradient(b, loss), num_pb = numeric_gradient(pb, loss);
  const Host num_w = numeric_gradient(w, loss), num_lb = numeric_gradient(lb, loss);
  const Forward f = forward();
  auto dres = to_device<double>(q);
  auto dw = to_device<double>(filled(Cs, 0)), dlb = to_device<double>(filled(Cs, 0));
  auto dpb = to_device<double>(filled(Cs, 0));
  layernorm_backward(space, vec(dres), vec(dw), vec(dlb), vec(column_partials<double>(Ns, Cs, 3)),
                     cvec(to_device<double>(r)), cvec(to_device<double>(f.residual)), cvec(to_device<double>(w)),
                     cvec(to_device<double>(f.mean)), cvec(to_device<double>(f.rstd)), Ns, Cs, vec(dpb));
  expect_close(to_host(dres), num_a, 1e-6, "da");
  expect_close(to_host(dres), num_b, 1e-6, "db");
  expect_close(to_host(dpb), num_pb, 1e-6, "db_bias");
  expect_close(to_host(dw), num_w, 1e-6, "dweight");
  expect_close(to_host(dlb), num_lb, 1e-6, "dbias");
}

TEST(FusedKernels, ResidualRmsNormGradientsMatchFiniteDifferences) {
  Host a = random_vector(Ns * Cs, 81), b = random_vector(Ns * Cs, 82), w = random_vector(Cs, 83, 0.5, 1.5);
  const Host r = random_vector(Ns * Cs, 84), q = random_vector(Ns * Cs, 85);
  ExecSpace space;
  struct Forward {
    Host residual, out, rstd;
  };
  auto forward = [&] {
    auto res = to_device<double>(nan_filled(Ns * Cs)), out = to_device<double>(nan_filled(Ns * Cs));
    auto rstd = to_device<double>(nan_filled(Ns));
    residual_rmsnorm_forward(space, vec(res), vec(out), vec(rstd), cvec(to_device<double>(a)),
                             cvec(to_device<double>(b)), cvec(to_device<double>(w)), Ns, Cs, 1e-5);
    return Forward{to_host(res), to_host(out), to_host(rstd)};
  };
  auto loss = [&] {
    const Forward f = forward();
    return dot(f.out, r) + dot(f.residual, q);
  };
  const Host num_a = numeric_gradient(a, loss), num_b = numeric_gradient(b, loss), num_w = numeric_gradient(w, loss);
  const Forward f = forward();
  auto dres = to_device<double>(q);
  auto dw = to_device<double>(filled(Cs, 0));
  rmsnorm_backward(space, vec(dres), vec(dw), vec(column_partials<double>(Ns, Cs)), cvec(to_device<double>(r)),
                   cvec(to_device<double>(f.residual)), cvec(to_device<double>(w)), cvec(to_device<double>(f.rstd)), Ns,
                   Cs);
  expect_close(to_host(dres), num_a, 1e-6, "da");
  expect_close(to_host(dres), num_b, 1e-6, "db");
  expect_close(to_host(dw), num_w, 1e-6, "dweight");
}

// loss = r · gelu(x + bias) + q · (x + bias) (the stored pre-activation); gelu_backward_bias of r
// gives dx and dbias of the first term, the second adds q and its column sums.
TEST(FusedKernels, BiasGeluGradientsMatchFiniteDifferences) {
  Host x = random_vector(Ns * Cs, 91, -3.0, 3.0), bias = random_vector(Cs, 92);
  const Host r = random_vector(Ns * Cs, 93), q = random_vector(Ns * Cs, 94);
  ExecSpace space;
  auto loss = [&] {
    auto pre = to_device<double>(x), out = to_device<double>(nan_filled(Ns * Cs));
    bias_gelu_forward(space, vec(pre), vec(out), cvec(to_device<double>(bias)), Ns, Cs);
    return dot(to_host(out), r) + dot(to_host(pre), q);
  };
  const Host num_x = numeric_gradient(x, loss), num_bias = numeric_gradient(bias, loss);
  auto pre = to_device<double>(x), out = to_device<double>(nan_filled(Ns * Cs));
  bias_gelu_forward(space, vec(pre), vec(out), cvec(to_device<double>(bias)), Ns, Cs);
  auto dx = to_device<double>(r);  // in place, as the model runs it
  auto dbias = to_device<double>(filled(Cs, 0));
  gelu_backward_bias(space, vec(dx), vec(dbias), vec(column_partials<double>(Ns, Cs)), cvec(pre), cvec(dx), Ns, Cs);
  Host got_dx = to_host(dx), got_dbias = to_host(dbias);
  for (int n = 0; n < Ns; ++n)
    for (int c = 0; c < Cs; ++c) {
      got_dx[n * Cs + c] += q[n * Cs + c];
      got_dbias[c] += q[n * Cs + c];
    }
  expect_close(got_dx, num_x, 1e-6, "dx");
  expect_close(got_dbias, num_bias, 1e-6, "dbias");
}

}  // namespace test_fused_kernels
}  // namespace meshtrain::test

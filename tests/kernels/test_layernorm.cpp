// LayerNorm against a two-pass reference, and every gradient against central differences.
#include "kernels/layernorm.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_layernorm {

constexpr int N = 10, C = 12;

struct LayerNormResult {
  Host out, mean, rstd;
};

LayerNormResult layernorm_reference(const Host& x, const Host& w, const Host& b, int rows, int cols) {
  LayerNormResult r{Host(rows * cols), Host(rows), Host(rows)};
  for (int n = 0; n < rows; ++n) {
    double mean = 0;
    for (int c = 0; c < cols; ++c) mean += x[n * cols + c];
    mean /= cols;
    double var = 0;
    for (int c = 0; c < cols; ++c) var += (x[n * cols + c] - mean) * (x[n * cols + c] - mean);
    var /= cols;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < cols; ++c) r.out[n * cols + c] = (x[n * cols + c] - mean) * rstd * w[c] + b[c];
    r.mean[n] = mean;
    r.rstd[n] = rstd;
  }
  return r;
}

LayerNormResult run_forward(const Host& x, const Host& w, const Host& b, int rows, int cols) {
  ExecSpace space;
  auto d_x = to_device<double>(x);
  auto d_w = to_device<double>(w);
  auto d_b = to_device<double>(b);
  auto out = to_device<double>(nan_filled(rows * cols));
  auto mean = to_device<double>(nan_filled(rows));
  auto rstd = to_device<double>(nan_filled(rows));
  layernorm_forward(space, vec(out), vec(mean), vec(rstd), cvec(d_x), cvec(d_w), cvec(d_b), rows, cols);
  return {to_host(out), to_host(mean), to_host(rstd)};
}

TEST(LayerNorm, ForwardMatchesTwoPassReference) {
  // Rows with a large common offset: a one-pass E[x²] − E[x]² variance would lose digits here.
  Host x = random_vector(N * C, 11);
  for (double& v : x) v += 100.0;
  const Host w = random_vector(C, 12, 0.5, 1.5);
  const Host b = random_vector(C, 13);
  const auto got = run_forward(x, w, b, N, C);
  const auto want = layernorm_reference(x, w, b, N, C);
  expect_close(got.out, want.out, 1e-11, "out");
  expect_close(got.mean, want.mean, 1e-14, "mean");
  expect_close(got.rstd, want.rstd, 1e-11, "rstd");
}

TEST(LayerNorm, BackwardAccumulatesFiniteDifferenceGradients) {
  Host x = random_vector(N * C, 21);
  Host w = random_vector(C, 22, 0.5, 1.5);
  Host b = random_vector(C, 23);
  const Host r = random_vector(N * C, 24);
  auto loss = [&] { return dot(run_forward(x, w, b, N, C).out, r); };
  const Host num_x = numeric_gradient(x, loss);
  const Host num_w = numeric_gradient(w, loss);
  const Host num_b = numeric_gradient(b, loss);

  const auto fwd = run_forward(x, w, b, N, C);
  const Host dx0 = random_vector(N * C, 25);
  const Host dw0 = random_vector(C, 26);
  const Host db0 = random_vector(C, 27);
  ExecSpace space;
  auto dx = to_device<double>(dx0);
  auto dw = to_device<double>(dw0);
  auto db = to_device<double>(db0);
  auto d_r = to_device<double>(r);
  auto d_x = to_device<double>(x);
  auto d_w = to_device<double>(w);
  auto d_mean = to_device<double>(fwd.mean);
  auto d_rstd = to_device<double>(fwd.rstd);
  layernorm_backward(space, vec(dx), vec(dw), vec(db), vec(column_partials<double>(N, C, 2)), cvec(d_r), cvec(d_x),
                     cvec(d_w), cvec(d_mean), cvec(d_rstd), N, C);
  expect_close(minus(to_host(dx), dx0), num_x, 1e-6, "dinp");
  expect_close(minus(to_host(dw), dw0), num_w, 1e-6, "dweight");
  expect_close(minus(to_host(db), db0), num_b, 1e-6, "dbias");
}

// More channels than one team's block: the parameter-gradient sweep must cover every channel.
TEST(LayerNorm, ParameterGradientsCoverSeveralColumnBlocks) {
  constexpr int Nw = 6, Cw = 2 * kColumnSumBlock + 5;
  const Host x = random_vector(Nw * Cw, 31);
  const Host w = random_vector(Cw, 32);
  const Host b = random_vector(Cw, 33);
  const Host dout = random_vector(Nw * Cw, 34);
  const auto ref = layernorm_reference(x, w, b, Nw, Cw);
  Host want_dw(Cw, 0.0), want_db(Cw, 0.0);
  for (int n = 0; n < Nw; ++n)
    for (int c = 0; c < Cw; ++c) {
      want_dw[c] += dout[n * Cw + c] * (x[n * Cw + c] - ref.mean[n]) * ref.rstd[n];
      want_db[c] += dout[n * Cw + c];
    }
  ExecSpace space;
  auto dx = to_device<double>(filled(Nw * Cw, 0.0));
  auto dw = to_device<double>(filled(Cw, 0.0));
  auto db = to_device<double>(filled(Cw, 0.0));
  auto d_dout = to_device<double>(dout);
  auto d_x = to_device<double>(x);
  auto d_w = to_device<double>(w);
  auto d_mean = to_device<double>(ref.mean);
  auto d_rstd = to_device<double>(ref.rstd);
  layernorm_backward(space, vec(dx), vec(dw), vec(db), vec(column_partials<double>(Nw, Cw, 2)), cvec(d_dout), cvec(d_x),
                     cvec(d_w), cvec(d_mean), cvec(d_rstd), Nw, Cw);
  expect_close(to_host(dw), want_dw, 1e-12, "dweight");
  expect_close(to_host(db), want_db, 1e-12, "dbias");
}

}  // namespace test_layernorm
}  // namespace meshtrain::test

// Embedding kernels against a naive lookup, and their gradients against central differences.
#include "kernels/encoder.hpp"

#include "kernel_test_utils.hpp"

namespace meshtrain::test {
namespace test_encoder {

constexpr int B = 2, T = 5, C = 12, V = 11;

// Tokens with repeats, so that dwte sums several rows into one.
std::vector<std::int32_t> tokens() { return {3, 7, 3, 0, 10, 7, 7, 1, 3, 5}; }

Host encoder_forward_reference(const std::vector<std::int32_t>& tok, const Host& wte, const Host& wpe) {
  Host out(B * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) out[(b * T + t) * C + c] = wte[tok[b * T + t] * C + c] + wpe[t * C + c];
  return out;
}

Host run_forward(const std::vector<std::int32_t>& tok, const Host& wte, const Host& wpe) {
  ExecSpace space;
  auto d_tok = to_device(tok);
  auto d_wte = to_device<double>(wte);
  auto d_wpe = to_device<double>(wpe);
  auto out = to_device<double>(nan_filled(B * T * C));
  encoder_forward(space, vec(out), cvec(d_tok), cvec(d_wte), cvec(d_wpe), B, T, C);
  return to_host(out);
}

TEST(Encoder, ForwardMatchesNaiveLookup) {
  const auto tok = tokens();
  const Host wte = random_vector(V * C, 1);
  const Host wpe = random_vector(T * C, 2);
  expect_close(run_forward(tok, wte, wpe), encoder_forward_reference(tok, wte, wpe), 1e-15, "encoder out");
}

TEST(Encoder, BackwardAccumulatesFiniteDifferenceGradients) {
  const auto tok = tokens();
  Host wte = random_vector(V * C, 3);
  Host wpe = random_vector(T * C, 4);
  const Host r = random_vector(B * T * C, 5);
  auto loss = [&] { return dot(run_forward(tok, wte, wpe), r); };
  const Host num_wte = numeric_gradient(wte, loss);
  const Host num_wpe = numeric_gradient(wpe, loss);

  ExecSpace space;
  const Host dwte0 = random_vector(V * C, 6);
  const Host dwpe0 = random_vector(T * C, 7);
  auto dwte = to_device<double>(dwte0);
  auto dwpe = to_device<double>(dwpe0);
  auto d_tok = to_device(tok);
  auto dout = to_device<double>(r);
  encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<double>(B, T * C)), vec(token_order(B * T)),
                   cvec(dout), cvec(d_tok), B, T, C, V);
  expect_close(minus(to_host(dwte), dwte0), num_wte, 1e-6, "dwte");
  expect_close(minus(to_host(dwpe), dwpe0), num_wpe, 1e-6, "dwpe");
}

// More channels than one team's block (and not a multiple of it): the sweep over column blocks
// must cover every channel once. Compared with naive sums.
TEST(Encoder, BackwardCoversSeveralColumnBlocks) {
  constexpr int Bw = 3, Tw = 4, Cw = 2 * kColumnSumBlock + 7, Vw = 5;
  const std::vector<std::int32_t> tok = {4, 0, 4, 2, 2, 2, 1, 4, 0, 3, 3, 4};
  const Host dout = random_vector(Bw * Tw * Cw, 8);
  Host want_wte(Vw * Cw, 0.5), want_wpe(Tw * Cw, -0.25);
  for (int n = 0; n < Bw * Tw; ++n)
    for (int c = 0; c < Cw; ++c) {
      want_wte[tok[n] * Cw + c] += dout[n * Cw + c];
      want_wpe[(n % Tw) * Cw + c] += dout[n * Cw + c];
    }
  ExecSpace space;
  auto dwte = to_device<double>(filled(Vw * Cw, 0.5));
  auto dwpe = to_device<double>(filled(Tw * Cw, -0.25));
  auto d_tok = to_device(tok);
  auto d_dout = to_device<double>(dout);
  encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<double>(Bw, Tw * Cw)), vec(token_order(Bw * Tw)),
                   cvec(d_dout), cvec(d_tok), Bw, Tw, Cw, Vw);
  expect_close(to_host(dwte), want_wte, 1e-14, "dwte");
  expect_close(to_host(dwpe), want_wpe, 1e-14, "dwpe");
}

}  // namespace test_encoder
}  // namespace meshtrain::test

// Embedding kernels against a naive lookup, and their gradients against central differences; with
// documents (packed sequences) the position table restarting at each document.
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

// ---- documents: positions restart at each document ---------------------------------------------

constexpr int Td = 7, docs = 3;
// Sequence 0: [0,3) [3,7) and an empty third document; sequence 1: [0,2) [2,5) [5,7).
const std::vector<int> offsets = {0, 3, 7, 7, 0, 2, 5, 7};
std::vector<std::int32_t> document_tokens() { return {3, 7, 3, 0, 10, 7, 7, 1, 3, 5, 3, 7, 2, 0}; }

// The row of wpe position n takes, by walking its sequence's offsets (not the kernels' bisection).
int position_in_document(int n) {
  const int b = n / Td, t = n % Td;
  int start = 0;
  for (int d = 0; d <= docs; ++d) {
    const int o = offsets[std::size_t(b * (docs + 1) + d)];
    if (o <= t) start = o;
  }
  return t - start;
}

Buffer<int> offsets_on_device(const std::vector<int>& host) {
  Buffer<int> buf("meshtrain::test::documents", host.size());
  auto mirror = Kokkos::create_mirror_view(buf);
  for (std::size_t i = 0; i < host.size(); ++i) mirror(i) = host[i];
  Kokkos::deep_copy(buf, mirror);
  return buf;
}

struct EncoderRun {
  Buffer<double> out, dwte, dwpe;
};

// Forward and backward in double with the given documents; dwte and dwpe start from dwte0 and dwpe0.
EncoderRun run_with(const AttentionSegments& documents, const std::vector<std::int32_t>& tok, const Host& wte,
                    const Host& wpe, const Host& dout, const Host& dwte0, const Host& dwpe0) {
  ExecSpace space;
  auto d_tok = to_device(tok);
  EncoderRun r{to_device<double>(nan_filled(B * Td * C)), to_device<double>(dwte0), to_device<double>(dwpe0)};
  encoder_forward(space, vec(r.out), cvec(d_tok), cvec(to_device<double>(wte)), cvec(to_device<double>(wpe)), B, Td, C,
                  {}, documents);
  encoder_backward(space, vec(r.dwte), vec(r.dwpe), vec(column_partials<double>(B, Td * C)), vec(token_order(B * Td)),
                   cvec(to_device<double>(dout)), cvec(d_tok), B, Td, C, V, {}, documents);
  return r;
}

TEST(EncoderDocuments, ForwardMatchesNaiveLookup) {
  const auto tok = document_tokens();
  const Host wte = random_vector(V * C, 11), wpe = random_vector(Td * C, 12);
  const auto seg = offsets_on_device(offsets);
  const EncoderRun r =
      run_with({cvec(seg), docs}, tok, wte, wpe, filled(B * Td * C, 0), filled(V * C, 0), filled(Td * C, 0));
  Host want(B * Td * C);
  for (int n = 0; n < B * Td; ++n)
    for (int c = 0; c < C; ++c) want[n * C + c] = wte[tok[n] * C + c] + wpe[position_in_document(n) * C + c];
  expect_close(to_host(r.out), want, 1e-15, "encoder out with documents");
}

TEST(EncoderDocuments, BackwardAccumulatesFiniteDifferenceGradients) {
  const auto tok = document_tokens();
  Host wte = random_vector(V * C, 13), wpe = random_vector(Td * C, 14);
  const Host r = random_vector(B * Td * C, 15), dwte0 = random_vector(V * C, 16), dwpe0 = random_vector(Td * C, 17);
  const auto seg = offsets_on_device(offsets);
  const AttentionSegments documents{cvec(seg), docs};
  const Host zero_wte = filled(V * C, 0), zero_wpe = filled(Td * C, 0);
  auto loss = [&] { return dot(to_host(run_with(documents, tok, wte, wpe, r, zero_wte, zero_wpe).out), r); };
  const Host num_wte = numeric_gradient(wte, loss);
  const Host num_wpe = numeric_gradient(wpe, loss);
  const EncoderRun got = run_with(documents, tok, wte, wpe, r, dwte0, dwpe0);
  expect_close(minus(to_host(got.dwte), dwte0), num_wte, 1e-6, "dwte with documents");
  expect_close(minus(to_host(got.dwpe), dwpe0), num_wpe, 1e-6, "dwpe with documents");
  // The rows of wpe past the longest document (sequence 0's [3,7), 4 positions) get nothing.
  const Host dwpe = to_host(got.dwpe);
  for (int q = 4; q < Td; ++q)
    for (int c = 0; c < C; ++c) EXPECT_EQ(dwpe[q * C + c], dwpe0[q * C + c]) << "dwpe[" << q << "," << c << "]";
  // dwte does not depend on the documents: the same bits as without them.
  const EncoderRun plain = run_with({}, tok, wte, wpe, r, dwte0, dwpe0);
  EXPECT_TRUE(bitwise_equal(raw(got.dwte), raw(plain.dwte))) << "dwte with and without documents";
}

// Many channels (several column blocks, the last one short) and a batch whose documents repeat: dwpe's
// sum by position within the document against the naive loop.
TEST(EncoderDocuments, BackwardCoversSeveralColumnBlocks) {
  constexpr int Bw = 4, Tw = 6, Cw = 2 * kColumnSumBlock + 7, Vw = 5, Dw = 2;
  const std::vector<int> offs = {0, 2, 6, 0, 6, 6, 0, 0, 6, 0, 3, 6};  // an empty first document in sequence 2
  std::vector<std::int32_t> tok(Bw * Tw);
  for (int n = 0; n < Bw * Tw; ++n) tok[n] = (n * 7) % Vw;
  const Host dout = random_vector(Bw * Tw * Cw, 18);
  Host want_wte(Vw * Cw, 0.5), want_wpe(Tw * Cw, -0.25);
  for (int n = 0; n < Bw * Tw; ++n) {
    const int b = n / Tw, t = n % Tw;
    const int start = t >= offs[b * (Dw + 1) + 1] ? offs[b * (Dw + 1) + 1] : 0;
    for (int c = 0; c < Cw; ++c) {
      want_wte[tok[n] * Cw + c] += dout[n * Cw + c];
      want_wpe[(t - start) * Cw + c] += dout[n * Cw + c];
    }
  }
  ExecSpace space;
  auto dwte = to_device<double>(filled(Vw * Cw, 0.5));
  auto dwpe = to_device<double>(filled(Tw * Cw, -0.25));
  const auto seg = offsets_on_device(offs);
  encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<double>(Bw, Tw * Cw)), vec(token_order(Bw * Tw)),
                   cvec(to_device<double>(dout)), cvec(to_device(tok)), Bw, Tw, Cw, Vw, {},
                   AttentionSegments{cvec(seg), Dw});
  expect_close(to_host(dwte), want_wte, 1e-14, "dwte");
  expect_close(to_host(dwpe), want_wpe, 1e-14, "dwpe with documents");
}

// docs = 0 is "no documents" even with offsets at hand: the same bits as a call without them.
TEST(EncoderDocuments, NoDocumentsIsBitwiseTheCallWithout) {
  const auto tok = document_tokens();
  const Host wte = random_vector(V * C, 19), wpe = random_vector(Td * C, 20), dout = random_vector(B * Td * C, 21);
  const Host dwte0 = random_vector(V * C, 22), dwpe0 = random_vector(Td * C, 23);
  const auto seg = offsets_on_device(offsets);
  const EncoderRun none = run_with({cvec(seg), 0}, tok, wte, wpe, dout, dwte0, dwpe0);
  ExecSpace space;
  auto d_tok = to_device(tok);
  auto out = to_device<double>(nan_filled(B * Td * C));
  auto dwte = to_device<double>(dwte0), dwpe = to_device<double>(dwpe0);
  encoder_forward(space, vec(out), cvec(d_tok), cvec(to_device<double>(wte)), cvec(to_device<double>(wpe)), B, Td, C);
  encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<double>(B, Td * C)), vec(token_order(B * Td)),
                   cvec(to_device<double>(dout)), cvec(d_tok), B, Td, C, V);
  EXPECT_TRUE(bitwise_equal(raw(none.out), raw(out))) << "out";
  EXPECT_TRUE(bitwise_equal(raw(none.dwte), raw(dwte))) << "dwte";
  EXPECT_TRUE(bitwise_equal(raw(none.dwpe), raw(dwpe))) << "dwpe";
  // And the documents do change dwpe (so the comparison above could have failed).
  const EncoderRun with = run_with({cvec(seg), docs}, tok, wte, wpe, dout, dwte0, dwpe0);
  EXPECT_FALSE(bitwise_equal(raw(with.dwpe), raw(dwpe))) << "dwpe with documents";
}

}  // namespace test_encoder
}  // namespace meshtrain::test

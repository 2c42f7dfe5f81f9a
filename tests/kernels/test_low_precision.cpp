// Every kernel in bf16 and fp16 against the same kernel in float, on the same inputs: the inputs are
// drawn, rounded to the 16-bit type once, and handed to both (float holds them exactly).
//
// Why the tolerances are what they are. A 16-bit kernel widens its inputs to float, computes as the
// float kernel does, and rounds each result once. On identical inputs it therefore returns the float
// kernel's result rounded to 16 bits: within half a 16-bit ulp of it, i.e. a relative error of at
// most the unit roundoff u (2^-8 bf16, 2^-11 fp16). We allow one whole ulp (kOneUlp): the float
// computations may differ in their last float bit (sgemm blocks a panel differently from the whole
// matrix), and a float value within a float ulp of a 16-bit rounding boundary may then round the
// other way. Per-row statistics (LayerNorm mean/rstd, losses, softmax sums) stay in float and must
// match the float kernel's to float accuracy. Where a kernel stores an intermediate in 16 bits and
// reads it again (attention's scores, probabilities and their gradients; a GEMM output that a bias
// is then added to; an embedding row that a repeated token adds to), each stored intermediate adds
// one more rounding; those checks state their bound where they make them.
#include "kernels/attention.hpp"
#include "kernels/bias.hpp"
#include "kernels/convert.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/encoder.hpp"
#include "kernels/gelu.hpp"
#include "kernels/gemm.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/matmul.hpp"
#include "kernels/residual.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

#include "kernel_test_utils.hpp"
#include "low_precision_utils.hpp"

#include <iostream>
#include <map>

namespace meshtrain::test {
namespace test_low_precision {

template <class H>
class LowPrecision : public ::testing::Test {};
using Halves = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(LowPrecision, Halves);

// The check itself must be able to fail: a value two ulps off, or a NaN, is reported.
TYPED_TEST(LowPrecision, TheUlpCheckCatchesAnError) {
  using H = TypeParam;
  const Host expected = rounded<H>(random_vector(50, 1));
  Host actual = expected;
  EXPECT_EQ(worst_ulps<H>(actual, expected), 0);
  actual[17] = float(H::from_bits(std::uint16_t(H(expected[17]).bits + 2)));
  EXPECT_EQ(worst_ulps<H>(actual, expected), 2);
  actual[17] = std::nan("");
  EXPECT_GT(worst_ulps<H>(actual, expected), kOneUlp);
}

// ---- elementwise and row kernels ------------------------------------------------------------

constexpr int B = 2, T = 5, C = 12, NH = 3, V = 11, N = B * T;

template <class Real>
std::map<std::string, Host> run_elementwise(const std::map<std::string, Host>& in) {
  ExecSpace space;
  std::map<std::string, Host> out;
  auto x = to_device<Real>(in.at("x")), y = to_device<Real>(in.at("y")), bias = to_device<Real>(in.at("bias"));
  auto r = to_device<Real>(filled(N * C, 0));
  residual_forward(space, vec(r), cvec(x), cvec(y), long{N} * C);
  out["residual"] = to_host(r);
  add_bias(space, vec(r), cvec(bias), N, C);
  out["add_bias"] = to_host(r);
  auto g = to_device<Real>(filled(N * C, 0));
  gelu_forward(space, vec(g), cvec(x), long{N} * C);
  out["gelu_forward"] = to_host(g);
  auto dg = to_device<Real>(in.at("y"));
  gelu_backward(space, vec(dg), cvec(x), cvec(dg), long{N} * C);  // in place
  out["gelu_backward_in_place"] = to_host(dg);
  auto db = to_device<Real>(in.at("bias"));
  bias_backward(space, vec(db), vec(column_partials<Real>(N, C)), cvec(y), N, C);
  out["bias_backward"] = to_host(db);
  return out;
}

TYPED_TEST(LowPrecision, ElementwiseKernelsRoundTheFloatResultOnce) {
  using H = TypeParam;
  const std::map<std::string, Host> in = {{"x", rounded<H>(random_vector(N * C, 2, -4, 4))},
                                          {"y", rounded<H>(random_vector(N * C, 3))},
                                          {"bias", rounded<H>(random_vector(C, 4))}};
  const auto f = run_elementwise<float>(in);
  const auto h = run_elementwise<H>(in);
  // add_bias adds to the stored residual: the float run's sum is of the unrounded residual, so it
  // is compared against the 16-bit run's own residual plus bias (one rounding) instead.
  for (const auto& [name, values] : f) {
    if (name == "add_bias") continue;
    expect_within_ulps<H>(h.at(name), values, kOneUlp, name);
  }
  Host expected(N * C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) expected[n * C + c] = float(h.at("residual")[n * C + c]) + float(in.at("bias")[c]);
  expect_within_ulps<H>(h.at("add_bias"), expected, kOneUlp, "add_bias");
}

template <class Real>
std::map<std::string, Host> run_layernorm(const std::map<std::string, Host>& in) {
  ExecSpace space;
  using A = accum_t<Real>;
  auto x = to_device<Real>(in.at("x")), w = to_device<Real>(in.at("w")), b = to_device<Real>(in.at("b"));
  auto out = to_device<Real>(nan_filled(N * C));
  auto mean = to_device<A>(nan_filled(N)), rstd = to_device<A>(nan_filled(N));
  layernorm_forward(space, vec(out), vec(mean), vec(rstd), cvec(x), cvec(w), cvec(b), N, C);
  auto dout = to_device<Real>(in.at("dout"));
  auto dinp = to_device<Real>(in.at("dinp0")), dw = to_device<Real>(in.at("dw0")), db = to_device<Real>(in.at("db0"));
  layernorm_backward(space, vec(dinp), vec(dw), vec(db), vec(column_partials<Real>(N, C, 2)), cvec(dout), cvec(x),
                     cvec(w), cvec(mean), cvec(rstd), N, C);
  return {{"out", to_host(out)},   {"mean", to_host(mean)},  {"rstd", to_host(rstd)},
          {"dinp", to_host(dinp)}, {"dweight", to_host(dw)}, {"dbias", to_host(db)}};
}

TYPED_TEST(LowPrecision, LayerNormComputesInFloatAndRoundsOnce) {
  using H = TypeParam;
  // A row mean far from zero (x around 3) makes the float statistics matter.
  const std::map<std::string, Host> in = {
      {"x", rounded<H>(random_vector(N * C, 5, 2, 4))}, {"w", rounded<H>(random_vector(C, 6, 0.5, 1.5))},
      {"b", rounded<H>(random_vector(C, 7))},           {"dout", rounded<H>(random_vector(N * C, 8))},
      {"dinp0", rounded<H>(random_vector(N * C, 9))},   {"dw0", rounded<H>(random_vector(C, 10))},
      {"db0", rounded<H>(random_vector(C, 11))}};
  const auto f = run_layernorm<float>(in);
  const auto h = run_layernorm<H>(in);
  // Statistics are float in both runs, computed the same way from the same values.
  expect_close(h.at("mean"), f.at("mean"), 1e-6, "mean");
  expect_close(h.at("rstd"), f.at("rstd"), 1e-6, "rstd");
  for (const char* name : {"out", "dinp", "dweight", "dbias"})
    expect_within_ulps<H>(h.at(name), f.at(name), kOneUlp, name);
}

template <class Real>
std::map<std::string, Host> run_encoder(const std::map<std::string, Host>& in, const std::vector<std::int32_t>& tok) {
  ExecSpace space;
  auto d_tok = to_device(tok);
  auto wte = to_device<Real>(in.at("wte")), wpe = to_device<Real>(in.at("wpe"));
  auto out = to_device<Real>(nan_filled(N * C));
  encoder_forward(space, vec(out), cvec(d_tok), cvec(wte), cvec(wpe), B, T, C);
  auto dwte = to_device<Real>(in.at("dwte0")), dwpe = to_device<Real>(in.at("dwpe0"));
  auto dout = to_device<Real>(in.at("dout"));
  encoder_backward(space, vec(dwte), vec(dwpe), vec(column_partials<Real>(B, T * C)), vec(token_order(B * T)),
                   cvec(dout), cvec(d_tok), B, T, C, V);
  return {{"out", to_host(out)}, {"dwte", to_host(dwte)}, {"dwpe", to_host(dwpe)}};
}

TYPED_TEST(LowPrecision, EncoderForwardAndBackward) {
  using H = TypeParam;
  const std::vector<std::int32_t> tok = {3, 7, 3, 0, 10, 7, 7, 1, 3, 7};  // 7 four times, 3 three times
  const std::map<std::string, Host> in = {{"wte", rounded<H>(random_vector(V * C, 12))},
                                          {"wpe", rounded<H>(random_vector(T * C, 13))},
                                          {"dwte0", rounded<H>(random_vector(V * C, 14))},
                                          {"dwpe0", rounded<H>(random_vector(T * C, 15))},
                                          {"dout", rounded<H>(random_vector(N * C, 16))}};
  const auto f = run_encoder<float>(in, tok);
  const auto h = run_encoder<H>(in, tok);
  expect_within_ulps<H>(h.at("out"), f.at("out"), kOneUlp, "out");
  expect_within_ulps<H>(h.at("dwpe"), f.at("dwpe"), kOneUlp, "dwpe");
  // dwte rounds after each occurrence of its token: with s_0 = dwte0 and s_j = s_{j−1} + dout_j the
  // stored value carries at most u·Σ_j |s_j| ≤ k·u·(|dwte0| + Σ_j |dout_j|) for k occurrences (the
  // standard bound for recursive summation), plus float's own negligible rounding.
  const Host& dwte = h.at("dwte");
  const double u = unit_roundoff<H>();
  for (int v = 0; v < V; ++v) {
    for (int c = 0; c < C; ++c) {
      double partial = in.at("dwte0")[v * C + c], bound = 0;
      for (int n = 0; n < N; ++n) {
        if (tok[n] != v) continue;
        partial += in.at("dout")[n * C + c];
        bound += std::fabs(partial);
      }
      bound = u * (bound + std::fabs(in.at("dwte0")[v * C + c])) + 1e-6;
      EXPECT_LE(std::fabs(dwte[v * C + c] - f.at("dwte")[v * C + c]), bound) << "dwte[" << v << "," << c << "]";
    }
  }
}

template <class Real>
std::map<std::string, Host> run_cross_entropy(const std::map<std::string, Host>& in,
                                              const std::vector<std::int32_t>& tgt) {
  ExecSpace space;
  using A = accum_t<Real>;
  auto d_tgt = to_device(tgt);
  auto logits = to_device<Real>(in.at("logits"));
  auto losses = to_device<A>(nan_filled(N));
  softmax_cross_entropy(space, vec(losses), vec(logits), cvec(logits), cvec(d_tgt), N, V, A(1.0 / N));  // in place
  std::map<std::string, Host> out = {{"losses", to_host(losses)}, {"dlogits", to_host(logits)}};
  // Vocabulary-parallel form on one rank, with 3 padding columns.
  const int Vl = V + 3;
  Host padded(N * Vl, 1e4);  // padding must take no part
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) padded[n * Vl + v] = in.at("logits")[n * V + v];
  auto vlogits = to_device<Real>(rounded<Real>(padded));
  auto maxes = to_device<A>(nan_filled(N)), partials = to_device<A>(nan_filled(2 * N)),
       vlosses = to_device<A>(nan_filled(N));
  const VocabColumns cols{Vl, V, 0};
  vocab_parallel_row_max(space, vec(maxes), vec(vlogits), N, cols);
  vocab_parallel_row_partials(space, vec(partials), vec(vlogits), cvec(maxes), cvec(d_tgt), N, cols);
  vocab_parallel_finish(space, vec(vlosses), vec(vlogits), cvec(vlogits), cvec(maxes), cvec(partials), cvec(d_tgt), N,
                        cols, A(1.0 / N));
  out["vp_losses"] = to_host(vlosses);
  out["vp_dlogits"] = to_host(vlogits);
  out["vp_partials"] = to_host(partials);
  return out;
}

TYPED_TEST(LowPrecision, CrossEntropyLossesInFloatGradientsRoundedOnce) {
  using H = TypeParam;
  const std::vector<std::int32_t> tgt = {0, 10, 3, 3, 7, 1, 9, 5, 2, 10};
  const std::map<std::string, Host> in = {{"logits", rounded<H>(random_vector(N * V, 17, -6, 6))}};
  const auto f = run_cross_entropy<float>(in, tgt);
  const auto h = run_cross_entropy<H>(in, tgt);
  for (const char* name : {"losses", "vp_losses", "vp_partials"}) expect_close(h.at(name), f.at(name), 1e-6, name);
  for (const char* name : {"dlogits", "vp_dlogits"}) expect_within_ulps<H>(h.at(name), f.at(name), kOneUlp, name);
}

// Rows without loss (kNoLossTarget: prompt tokens, padding) are 0 exactly in every precision, both
// forms, padding columns included; the other rows as above.
TYPED_TEST(LowPrecision, CrossEntropyNoLossRowsAreZero) {
  using H = TypeParam;
  const std::vector<std::int32_t> tgt = {kNoLossTarget, 10, 3, kNoLossTarget, kNoLossTarget, 1, 9, 5, 2, kNoLossTarget};
  const std::map<std::string, Host> in = {{"logits", rounded<H>(random_vector(N * V, 18, -6, 6))}};
  const auto f = run_cross_entropy<float>(in, tgt);
  const auto h = run_cross_entropy<H>(in, tgt);
  for (const char* name : {"losses", "vp_losses"}) expect_close(h.at(name), f.at(name), 1e-6, name);
  for (const char* name : {"dlogits", "vp_dlogits"}) expect_within_ulps<H>(h.at(name), f.at(name), kOneUlp, name);
  for (const auto* run : {&f, &h}) {
    for (int n = 0; n < N; ++n) {
      if (tgt[n] != kNoLossTarget) continue;
      EXPECT_EQ(run->at("losses")[n], 0.0) << "row " << n;
      EXPECT_EQ(run->at("vp_losses")[n], 0.0) << "row " << n;
      for (int v = 0; v < V; ++v) EXPECT_EQ(run->at("dlogits")[n * V + v], 0.0) << "row " << n;
      const int Vl = V + 3;
      for (int v = 0; v < Vl; ++v) EXPECT_EQ(run->at("vp_dlogits")[n * Vl + v], 0.0) << "row " << n << " (vp)";
    }
  }
}

// ---- GEMM ------------------------------------------------------------------------------------

template <class Real>
Host run_gemm(Trans ta, Trans tb, GemmShape s, float alpha, const Host& a, int lda, const Host& b, int ldb, float beta,
              const Host& c0, int ldc) {
  ExecSpace space;
  auto da = to_device<Real>(a), db = to_device<Real>(b), dc = to_device<Real>(c0);
  gemm<Real>(space, ta, tb, s, accum_t<Real>(alpha), da.data(), lda, db.data(), ldb, accum_t<Real>(beta), dc.data(),
             ldc);
  return to_host(dc);
}

// Every transpose pair, leading dimensions wider than the matrices, beta 0 (C holds NaN: it must not
// be read) and beta ≠ 0; and products of several row panels (n large enough that the workspace
// bound splits m = 150 into 64 + 64 + 22 rows).
TYPED_TEST(LowPrecision, GemmMatchesSgemmOnTheSameValues) {
  using H = TypeParam;
  for (const GemmShape s : {GemmShape{9, 7, 5}, GemmShape{150, 70000, 3}}) {
    for (Trans ta : {Trans::no, Trans::yes}) {
      for (Trans tb : {Trans::no, Trans::yes}) {
        const int lda = (ta == Trans::no ? s.k : s.m) + 2, ldb = (tb == Trans::no ? s.n : s.k) + 1, ldc = s.n + 3;
        const int rows_a = ta == Trans::no ? s.m : s.k, rows_b = tb == Trans::no ? s.k : s.n;
        const Host a = rounded<H>(random_vector(std::size_t(rows_a) * lda, 21));
        const Host b = rounded<H>(random_vector(std::size_t(rows_b) * ldb, 22));
        const Host c0 = rounded<H>(random_vector(std::size_t(s.m) * ldc, 23));
        const std::string what = "gemm " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                                 (ta == Trans::yes ? " Aᵀ" : " A") + (tb == Trans::yes ? "Bᵀ" : "B");
        expect_within_ulps<H>(run_gemm<H>(ta, tb, s, 0.5f, a, lda, b, ldb, 0.75f, c0, ldc),
                              run_gemm<float>(ta, tb, s, 0.5f, a, lda, b, ldb, 0.75f, c0, ldc), kOneUlp,
                              what + " beta 0.75");
        if (s.n > 1000) continue;  // the panel split is covered; spare the large beta-0 run
        const Host nan_c = nan_filled(c0.size());
        Host got = run_gemm<H>(ta, tb, s, 1.0f, a, lda, b, ldb, 0.0f, nan_c, ldc);
        Host want = run_gemm<float>(ta, tb, s, 1.0f, a, lda, b, ldb, 0.0f, c0, ldc);
        // Only the m × n block is written; the padding columns keep their NaN.
        for (int i = 0; i < s.m; ++i)
          for (int j = s.n; j < ldc; ++j) got[i * ldc + j] = want[i * ldc + j] = 0;
        expect_within_ulps<H>(got, want, kOneUlp, what + " beta 0");
      }
    }
  }
}

TYPED_TEST(LowPrecision, GemmWorkspaceIsSizedAsAnnouncedAndOnlyGrows) {
  using H = TypeParam;
  const GemmShape big{150, 70000, 3}, small{9, 7, 5};
  EXPECT_EQ(gemm_workspace_bytes_for<float>(big), 0u);
  EXPECT_EQ(gemm_workspace_bytes_for<double>(big), 0u);
  // op(B) whole (3 × 70000) plus panels of 64 rows of op(A) and C (the 16 MiB panel budget over
  // k + n = 70003 floats a row gives 59 rows; the floor is 64).
  EXPECT_EQ(gemm_workspace_bytes_for<H>(big), 4u * (3 * 70000 + 64 * (3 + 70000)));
  EXPECT_EQ(gemm_workspace_bytes_for<H>(small), 4u * (5 * 7 + 9 * (5 + 7)));
  release_gemm_workspace();
  EXPECT_EQ(gemm_workspace_bytes(), 0u);
  const Host a = rounded<H>(random_vector(9 * 5, 24)), b = rounded<H>(random_vector(5 * 7, 25));
  run_gemm<H>(Trans::no, Trans::no, small, 1, a, 5, b, 7, 0, filled(9 * 7, 0), 7);
  EXPECT_EQ(gemm_workspace_bytes(), gemm_workspace_bytes_for<H>(small));
  reserve_gemm_workspace(gemm_workspace_bytes_for<H>(big));
  EXPECT_EQ(gemm_workspace_bytes(), gemm_workspace_bytes_for<H>(big));
  run_gemm<H>(Trans::no, Trans::no, small, 1, a, 5, b, 7, 0, filled(9 * 7, 0), 7);
  EXPECT_EQ(gemm_workspace_bytes(), gemm_workspace_bytes_for<H>(big)) << "a smaller product must not shrink it";
  release_gemm_workspace();
}

template <class Real>
std::map<std::string, Host> run_matmul(const std::map<std::string, Host>& in, int IC, int OC) {
  ExecSpace space;
  auto x = to_device<Real>(in.at("x")), w = to_device<Real>(in.at("w")), b = to_device<Real>(in.at("b"));
  auto out = to_device<Real>(nan_filled(N * OC));
  matmul_forward<Real>(space, vec(out), cvec(x), cvec(w), cvec(b), N, IC, OC);
  auto dout = to_device<Real>(in.at("dout"));
  auto dinp = to_device<Real>(nan_filled(N * IC));
  auto dw = to_device<Real>(in.at("dw0")), db = to_device<Real>(in.at("db0"));
  matmul_backward<Real>(space, vec(dinp), vec(dw), vec(db), vec(column_partials<Real>(N, OC)), cvec(dout), cvec(x),
                        cvec(w), N, IC, OC);
  auto xw = to_device<Real>(nan_filled(N * OC));
  matmul_forward<Real>(space, vec(xw), cvec(x), cvec(w), CVec<Real>(), N, IC, OC);  // without the bias
  return {{"out", to_host(out)},
          {"xw", to_host(xw)},
          {"dinp", to_host(dinp)},
          {"dweight", to_host(dw)},
          {"dbias", to_host(db)}};
}

TYPED_TEST(LowPrecision, MatmulForwardAndBackward) {
  using H = TypeParam;
  const int IC = 16, OC = 24;
  const std::map<std::string, Host> in = {
      {"x", rounded<H>(random_vector(N * IC, 31))},    {"w", rounded<H>(random_vector(IC * OC, 32))},
      {"b", rounded<H>(random_vector(OC, 33))},        {"dout", rounded<H>(random_vector(N * OC, 34))},
      {"dw0", rounded<H>(random_vector(IC * OC, 35))}, {"db0", rounded<H>(random_vector(OC, 36))}};
  const auto f = run_matmul<float>(in, IC, OC);
  const auto h = run_matmul<H>(in, IC, OC);
  for (const char* name : {"xw", "dinp", "dweight", "dbias"})
    expect_within_ulps<H>(h.at(name), f.at(name), kOneUlp, name);
  // out = round(round(x·W) + b): two roundings, |error| ≤ u·|x·W| + u·|out| (+ the float slack).
  const double u = unit_roundoff<H>();
  for (int i = 0; i < N * OC; ++i) {
    const double bound = u * (std::fabs(f.at("xw")[i]) + std::fabs(f.at("out")[i])) * 1.01 + 1e-6;
    EXPECT_LE(std::fabs(h.at("out")[i] - f.at("out")[i]), bound) << "out[" << i << "]";
  }
}

// ---- attention -------------------------------------------------------------------------------

template <class Real>
std::map<std::string, Host> run_attention(const std::map<std::string, Host>& in) {
  ExecSpace space;
  auto qkv = to_device<Real>(in.at("qkv"));
  auto out = to_device<Real>(nan_filled(N * C)), att = to_device<Real>(nan_filled(B * NH * T * T));
  attention_forward(space, vec(out), vec(att), cvec(qkv), B, T, C, NH);
  auto dout = to_device<Real>(in.at("dout"));
  auto dqkv = to_device<Real>(nan_filled(N * 3 * C)), datt = to_device<Real>(nan_filled(B * NH * T * T));
  attention_backward(space, vec(dqkv), vec(datt), cvec(dout), cvec(qkv), cvec(att), B, T, C, NH);
  return {{"out", to_host(out)}, {"att", to_host(att)}, {"dqkv", to_host(dqkv)}};
}

// Attention stores the scores S, the probabilities P, dP and dS in 16 bits between its GEMMs and
// softmax kernels, so errors compound along the chain. With |q|, |k|, |v|, |dout| ≤ 1 and head size
// 4 (scale ½), |S| ≤ 2: rounding S moves each P by ≤ 2·|S|max·u relative, rounding P adds u, and
// O = P·V (a convex combination) inherits that ≤ (4 + 1 + 1)·u relative to max|V| ≤ 1. The
// backward goes through as many stored intermediates again (dP, dS and P once more): we hold every
// output to 8·u relative to its largest magnitude (normwise); measured, they stay under 1·u (the
// test prints them).
TYPED_TEST(LowPrecision, AttentionWithinTheChainOfRoundings) {
  using H = TypeParam;
  const std::map<std::string, Host> in = {{"qkv", rounded<H>(random_vector(N * 3 * C, 41))},
                                          {"dout", rounded<H>(random_vector(N * C, 42))}};
  const auto f = run_attention<float>(in);
  const auto h = run_attention<H>(in);
  const double u = unit_roundoff<H>();
  for (const char* name : {"out", "att", "dqkv"}) {
    expect_close_normwise(h.at(name), f.at(name), 8 * u, name);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < f.at(name).size(); ++i) {
      worst = std::max(worst, std::fabs(h.at(name)[i] - f.at(name)[i]));
      scale = std::max(scale, std::fabs(f.at(name)[i]));
    }
    std::cout << "attention " << name << " (" << precision_name<H>() << "): normwise error " << worst / scale / u
              << " u\n";
  }
}

// ---- reductions and conversions ---------------------------------------------------------------

TYPED_TEST(LowPrecision, SumsOf16BitValuesRunInDouble) {
  using H = TypeParam;
  ExecSpace space;
  const long n = 10000;  // more than two chunks
  const Host x = rounded<H>(random_vector(n, 51));
  auto d = to_device<H>(x);
  double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += v * v;
  }
  const float got = sum_reduce(space, vec(d), n);
  static_assert(std::is_same_v<decltype(sum_reduce(space, vec(d), n)), float>, "16-bit sums come back in float");
  EXPECT_FLOAT_EQ(got, float(sum));  // both sums in double: equal to a few double ulps
  EXPECT_NEAR(squared_norm(space, vec(d), n), sq, 1e-12 * sq);
}

TYPED_TEST(LowPrecision, ConvertAccumulateAndCountNonFinite) {
  using H = TypeParam;
  ExecSpace space;
  const long n = 1000;
  Host master = random_vector(n, 61, -3, 3);
  master[5] = 1e6;  // beyond fp16: +Inf there, finite in bf16
  auto d_master = to_device<float>(master);
  auto working = to_device<H>(filled(n, 0));
  convert<H, float>(space, vec(working), cvec(d_master), n);
  const Host w = to_host(working);
  for (long i = 0; i < n; ++i) ASSERT_EQ(H(w[i]).bits, H(float(master[i])).bits) << i;
  // Back to float exactly, and through double; the other 16-bit type through its float value.
  auto back = to_device<float>(nan_filled(n));
  convert<float, H>(space, vec(back), cvec(working), n);
  EXPECT_EQ(to_host(back), w);
  using Other = std::conditional_t<std::is_same_v<H, bf16>, fp16, bf16>;
  auto other = to_device<Other>(filled(n, 0));
  convert<Other, H>(space, vec(other), cvec(working), n);
  const Host o = to_host(other);
  for (long i = 0; i < n; ++i) ASSERT_EQ(Other(o[i]).bits, Other(float(w[i])).bits) << i;

  // acc += scale · g, in float, rounded once per element.
  const Host acc0 = random_vector(n, 62);
  auto acc = to_device<float>(acc0);
  accumulate_into<float, H>(space, vec(acc), cvec(working), 0.25f, n);
  const Host a = to_host(acc);
  for (long i = 0; i < n; ++i) ASSERT_EQ(float(a[i]), float(acc0[i]) + 0.25f * float(w[i])) << i;

  const long expected_nonfinite = std::is_same_v<H, fp16> ? 1 : 0;
  EXPECT_EQ(count_nonfinite(space, vec(working), n), expected_nonfinite);
  Host with_nan = w;
  with_nan[7] = std::nan("");
  with_nan[9] = -INFINITY;
  auto bad = to_device<H>(with_nan);
  EXPECT_EQ(count_nonfinite(space, vec(bad), n), expected_nonfinite + 2);
  EXPECT_EQ(count_nonfinite(space, vec(d_master), n), 0);
}

}  // namespace test_low_precision
}  // namespace meshtrain::test
